"""A thumbnail of the image under the mouse in the scatter and feature-space views.

Streamlit reports no hover events and plotly's hover labels hold only text, so the thumbnail is
drawn in the browser: every image of the batch sits in one atlas (a JPEG served by URL, fetched
once per batch), and a small script in a hidden ``st.iframe`` (same origin as the page, as
Streamlit gives it) listens to the chart's ``plotly_hover`` events, reads the hovered point's
batch index from its ``customdata`` and shows that cell of the atlas beside the mouse. The
script only listens: it changes no chart and sends nothing to the server, so picking works as
before, and when the view is closed its iframe goes and takes its listeners with it.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from gradpick.ui.browser.frame import page_script

__all__ = ["DISPLAY_SIDE", "TIP_ID", "Atlas", "atlas", "cell_side", "script"]

DISPLAY_SIDE = 96
"""The thumbnail's side on the page, in CSS pixels."""
TIP_ID = "gradpick-hover-thumbnail"
"""The id of the thumbnail's element in the page (what the browser tests look for)."""
LARGE_BATCH = 2_500
"""Above this many images the atlas keeps 32-pixel cells, else 64: 10,000 images at 32 pixels
are a 3,200-pixel square, about a megabyte of JPEG."""


@dataclass(frozen=True)
class Atlas:
    """Every image of a batch in one JPEG, ``columns`` cells of ``side`` pixels to a row."""

    jpeg: bytes
    columns: int
    side: int
    indices: tuple[int, ...] | None = None
    """The batch index of each cell when the atlas holds a sample of the batch (the images a
    sampled scatter draws); None: cell i is image i."""


def cell_side(count: int, height: int) -> int:
    """The atlas cell of ``count`` images ``height`` pixels tall: never upscaled."""
    return min(height, 32 if count > LARGE_BATCH else 64)


def atlas(images: np.ndarray, indices: Sequence[int] | None = None) -> Atlas:
    """The atlas of uint8 [n, 3, H, W] ``images`` (box-filtered down to square ``cell_side``
    cells), image i in row i // columns, column i % columns of a near-square grid;
    ``indices``: the batch index of each image, when they are a sample of the batch."""
    count, _, height, width = images.shape
    side = cell_side(count, height)
    columns = max(1, math.ceil(math.sqrt(count)))
    rows = math.ceil(count / columns)
    sheet = np.zeros((rows * side, columns * side, 3), dtype=np.uint8)
    for index, image in enumerate(images):
        pixels = image.transpose(1, 2, 0)
        if (height, width) != (side, side):
            cell = Image.fromarray(pixels).resize((side, side), Image.Resampling.BOX)
            pixels = np.asarray(cell)
        top, left = (index // columns) * side, (index % columns) * side
        sheet[top : top + side, left : left + side] = pixels
    buffer = io.BytesIO()
    Image.fromarray(sheet).save(buffer, format="JPEG", quality=90)
    kept = None if indices is None else tuple(int(i) for i in indices)
    return Atlas(buffer.getvalue(), columns, side, kept)


_BODY = """
  const attached = new Map();
  const show = (event) => {
    const point = event.points && event.points[0];
    if (!point || point.customdata === undefined || !event.event) return;
    const index = Number(point.customdata);
    const cell = config.indices === null ? index : config.indices.indexOf(index);
    if (cell < 0) return;
    const size = config.display;
    const element = tip();
    element.dataset.index = String(index);
    element.style.width = size + 'px';
    element.style.height = size + 'px';
    element.style.backgroundImage = 'url("' + config.atlas + '")';
    element.style.backgroundSize = (config.columns * size) + 'px auto';
    element.style.backgroundPosition = (-(cell % config.columns) * size) + 'px '
      + (-Math.floor(cell / config.columns) * size) + 'px';
    // Below and to the left of the mouse: plotly's label opens to its right.
    const left = event.event.clientX - 16 - size;
    element.style.left = (left < 4 ? event.event.clientX + 16 : left) + 'px';
    element.style.top = (event.event.clientY + 16) + 'px';
    element.style.display = 'block';
  };
  const attach = () => {
    for (const selector of config.charts) {
      const chart = page.querySelector(selector + ' .js-plotly-plot');
      if (!chart || !chart.on || attached.get(selector) === chart) continue;
      chart.on('plotly_hover', show);
      chart.on('plotly_unhover', hide);
      attached.set(selector, chart);
    }
  };
  attach();
  const timer = setInterval(attach, 500);
  window.addEventListener('pagehide', () => {
    clearInterval(timer);
    hide();
    for (const chart of attached.values()) {
      chart.removeListener('plotly_hover', show);
      chart.removeListener('plotly_unhover', hide);
    }
  });"""
_TIP_STYLE = (
    "border: 2px solid white; box-shadow: 0 1px 6px rgba(0,0,0,.5); "
    "image-rendering: pixelated; background-repeat: no-repeat;"
)


def script(chart_selectors: list[str], atlas_url: str, layout: Atlas) -> str:
    """The iframe's HTML: the listener for the charts at ``chart_selectors`` (CSS selectors of
    their containers) showing cells of the atlas at ``atlas_url``."""
    config = {
        "charts": chart_selectors,
        "atlas": atlas_url,
        "columns": layout.columns,
        "indices": None if layout.indices is None else list(layout.indices),
        "display": DISPLAY_SIDE,
        "tip": TIP_ID,
        "tipStyle": _TIP_STYLE,
    }
    return page_script(_BODY, config)
