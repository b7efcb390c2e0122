"""Layer maps in the explorer through AppTest: the layer select box with the automatic layer
marked, Grad-CAM drawn over the image, a strategy layer maps cannot run refused with the picks
kept, the Strategies tab's note, and the pictures themselves (no Streamlit)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gradpick import attribution
from gradpick.gradients import layers
from gradpick.models import shipped as models
from gradpick.show import render
from gradpick.ui import heatmaps, keys, layer_select
from tests.app.test_app import TUTORIAL, metrics, no_errors, open_app, select


def layer_box(app):
    return next(box for box in app.selectbox if box.label == "Layer")


def test_gradcam_offers_the_spatial_layers_with_the_automatic_one_marked(generated: Path) -> None:
    app = select(open_app(**TUTORIAL, method="gradcam"), keys.SCATTER_CHART, [2, 5])
    no_errors(app)
    box = layer_box(app)
    found = layers.probe(models.build("tutorial").eval(), (32, 32))
    assert box.value == found.automatic == "pool"
    assert box.options == [layer_select.label(layer, found.automatic) for layer in found.layers]
    assert "pool · 16 × 5 × 5 (automatic)" in box.options
    captions = [caption.value for caption in app.caption]
    assert any("Grad-CAM at layer pool (5 × 5 grid" in c for c in captions), captions
    assert metrics(app)["Grad-CAM"].endswith("ms")

    box.set_value("conv2").run()
    no_errors(app)
    captions = [caption.value for caption in app.caption]
    assert any("Grad-CAM at layer conv2 (10 × 10 grid" in c for c in captions), captions


def test_an_input_gradient_method_shows_no_layer_box(generated: Path) -> None:
    app = select(open_app(**TUTORIAL), keys.SCATTER_CHART, [2])
    no_errors(app)
    assert all(box.label != "Layer" for box in app.selectbox)


def test_a_whole_batch_strategy_is_refused_clearly_and_the_picks_stay(generated: Path) -> None:
    app = select(
        open_app(**TUTORIAL, method="layercam", strategy="summed"), keys.SCATTER_CHART, [3, 4]
    )
    assert not app.exception
    errors = [error.value for error in app.error]
    assert any("run strategy recompute" in error and "not 'summed'" in error for error in errors)
    assert app.session_state[keys.PICKED] == [3, 4]
    app.sidebar.selectbox(key=keys.STRATEGY).set_value("recompute").run()
    no_errors(app)
    assert app.session_state[keys.PICKED] == [3, 4]


def test_the_strategies_tab_says_layer_maps_run_recompute(generated: Path) -> None:
    app = select(open_app("Strategies", **TUTORIAL, method="hirescam"), keys.SCATTER_CHART, [1])
    shown = [info.value for info in app.info]
    assert any("HiResCAM's layer gradients run strategy recompute only" in i for i in shown)


def test_a_layer_maps_tiles_overlay_its_upsampled_map_on_the_image() -> None:
    model = models.build("tutorial").eval()
    images = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8)
    result = attribution.attribute(
        model, images.float() / 255, [0, 2], target="logit", method="gradcam", layer="conv2"
    )
    assert result.layer_maps is not None
    tiles = heatmaps.tiles(images[[0, 2]], result.maps, shared_scale=False)
    upsampled = torch.nn.functional.interpolate(
        result.layer_maps[:, None], size=(32, 32), mode="bilinear", align_corners=False
    )[:, 0]
    for tile, image, values in zip(tiles, images[[0, 2]], upsampled, strict=True):
        np.testing.assert_allclose(tile.saliency, values.numpy(), rtol=1e-6, atol=1e-7)
        heat = render.colorize(tile.saliency, tile.limit)
        expected = render.fit(render.overlay(render.as_hwc(image), heat), heatmaps.DISPLAY_SIDE)
        np.testing.assert_array_equal(tile.overlay, expected)
