"""Hover thumbnails: every image in its atlas cell, and the script configured for its charts."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
from PIL import Image

from gradpick.ui.browser import hover


def _decoded(jpeg: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB")).astype(int)


def _flat_images(count: int, side: int) -> np.ndarray:
    """Images of one colour each, different for every image (JPEG keeps flat cells exact)."""
    colours = np.stack(
        [
            np.arange(count) * 37 % 256,
            np.arange(count) * 91 % 256,
            255 - np.arange(count) * 13 % 256,
        ],
        axis=1,
    )
    return np.broadcast_to(colours[:, :, None, None], (count, 3, side, side)).astype(np.uint8)


@pytest.mark.parametrize(
    ("count", "height", "side"), [(10, 32, 32), (10, 128, 64), (3000, 128, 32)]
)
def test_cell_side_never_upscales_and_shrinks_for_large_batches(
    count: int, height: int, side: int
) -> None:
    assert hover.cell_side(count, height) == side


@pytest.mark.parametrize("height", [32, 96])
def test_image_i_fills_row_i_over_columns_column_i_mod_columns(height: int) -> None:
    images = _flat_images(11, height)
    layout = hover.atlas(images)
    side = hover.cell_side(11, height)
    assert (layout.columns, layout.side) == (math.ceil(math.sqrt(11)), side)
    sheet = _decoded(layout.jpeg)
    assert sheet.shape == (3 * side, 4 * side, 3)
    for index, image in enumerate(images):
        row, column = divmod(index, layout.columns)
        centre = sheet[row * side + side // 2, column * side + side // 2]
        assert np.abs(centre - image[:, 0, 0].astype(int)).max() <= 6, index


def test_the_script_names_its_charts_the_atlas_and_its_layout() -> None:
    layout = hover.Atlas(b"", columns=7, side=32)
    html = hover.script([".st-key-scatter_chart"], "http://host/media/a.jpg", layout)
    assert "__CONFIG__" not in html
    config = json.loads(html.split("const config = ", 1)[1].split(";\n", 1)[0])
    # The thumbnail is a cell of the atlas as a background: one cell, its pixels kept sharp.
    assert "background-repeat: no-repeat" in config.pop("tipStyle")
    assert config == {
        "charts": [".st-key-scatter_chart"],
        "atlas": "http://host/media/a.jpg",
        "columns": 7,
        "indices": None,
        "display": hover.DISPLAY_SIDE,
        "tip": hover.TIP_ID,
    }


def test_an_atlas_of_a_sample_names_the_batch_index_of_each_cell() -> None:
    """A sampled scatter's atlas holds only the drawn images: cell i is batch index indices[i],
    and the script looks the hovered point's index up there."""
    images = _flat_images(5, 32)
    layout = hover.atlas(images, [3, 10, 11, 40, 41])
    assert layout.indices == (3, 10, 11, 40, 41)
    sheet = _decoded(layout.jpeg)
    for cell, image in enumerate(images):
        row, column = divmod(cell, layout.columns)
        centre = sheet[row * 32 + 16, column * 32 + 16]
        assert np.abs(centre - image[:, 0, 0].astype(int)).max() <= 6, cell
    html = hover.script([".st-key-scatter_chart"], "u", layout)
    config = json.loads(html.split("const config = ", 1)[1].split(";\n", 1)[0])
    assert config["indices"] == [3, 10, 11, 40, 41]
    assert "config.indices.indexOf(index)" in html
