"""The explorer's gradients: exactly per-sample autograd, pictured without blur, exported intact."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradpick import attribution
from gradpick.data import CIFAR10_CLASSES, ImageBatch
from gradpick.errors import InputError
from gradpick.gradients.request import GradientRequest
from gradpick.runtime.measure import MemoryReport
from gradpick.share import export
from gradpick.show import render
from gradpick.ui import heatmaps
from gradpick.ui.heatmaps import HeatmapRequest

PICKED = [6, 1, 9]


@pytest.fixture
def batch() -> ImageBatch:
    generator = torch.Generator().manual_seed(5)
    images = torch.randint(0, 256, (12, 3, 32, 32), generator=generator, dtype=torch.uint8)
    labels = torch.randint(0, 10, (12,), generator=generator)
    return ImageBatch(
        images=images,
        labels=labels,
        class_names=CIFAR10_CLASSES,
        names=tuple(f"image_{40 + i}.png" for i in range(12)),
        positions=tuple(range(40, 52)),
        source="test",
    )


def _one_by_one(
    model: nn.Module, batch: ImageBatch, target: str, wanted: int | None = None
) -> torch.Tensor:
    """Reference: each picked image alone through plain autograd."""
    rows = []
    for index in PICKED:
        image = batch.float_images()[index : index + 1].requires_grad_(True)
        logits = model(image)
        if target == "loss":
            assert batch.labels is not None
            value = F.cross_entropy(logits, batch.labels[index : index + 1])
        else:
            chosen = int(logits.argmax()) if wanted is None else wanted
            value = logits[0, chosen]
        (gradient,) = torch.autograd.grad(value, image)
        rows.append(gradient[0])
    return torch.stack(rows)


@pytest.mark.parametrize("strategy", ["recompute", "summed", "retain_graph", "vmap"])
def test_loss_gradients_equal_per_sample_autograd(
    tiny_cnn: nn.Module, batch: ImageBatch, strategy: str
) -> None:
    result = heatmaps.compute(tiny_cnn, batch, PICKED, HeatmapRequest(strategy=strategy))
    torch.testing.assert_close(result.maps, _one_by_one(tiny_cnn, batch, "loss"))
    assert result.gradients.timing > 0


@pytest.mark.parametrize(("mode", "wanted"), [("predicted", None), ("class", 3)])
def test_logit_targets(tiny_cnn: nn.Module, batch: ImageBatch, mode: str, wanted: int) -> None:
    request = HeatmapRequest(target_mode=mode, target_class=3)
    result = heatmaps.compute(tiny_cnn, batch, PICKED, request)
    torch.testing.assert_close(result.maps, _one_by_one(tiny_cnn, batch, "logit", wanted))


def test_gradient_x_input_multiplies_by_the_image(tiny_cnn: nn.Module, batch: ImageBatch) -> None:
    result = heatmaps.compute(tiny_cnn, batch, PICKED, HeatmapRequest(method="gradient_x_input"))
    expected = _one_by_one(tiny_cnn, batch, "loss") * batch.float_images()[PICKED]
    torch.testing.assert_close(result.maps, expected)


def test_requests_that_cannot_be_answered_say_why(tiny_cnn: nn.Module, batch: ImageBatch) -> None:
    with pytest.raises(InputError, match="No images picked"):
        heatmaps.compute(tiny_cnn, batch, [], HeatmapRequest())
    unlabelled = ImageBatch(**{**batch.__dict__, "labels": None})
    with pytest.raises(InputError, match="no labels"):
        heatmaps.compute(tiny_cnn, unlabelled, PICKED, HeatmapRequest())
    with pytest.raises(InputError, match="Unknown target"):
        HeatmapRequest(target_mode="probability").engine_target()


def test_whole_batch_strategies_are_refused_beyond_the_memory_budget(
    tiny_cnn: nn.Module, batch: ImageBatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(heatmaps, "WHOLE_BATCH_BUDGET", 1000)
    with pytest.raises(InputError, match="recompute"):
        heatmaps.compute(tiny_cnn, batch, PICKED, HeatmapRequest(strategy="summed"))
    heatmaps.compute(tiny_cnn, batch, PICKED, HeatmapRequest(strategy="recompute"))


def test_step_memory_is_measured_and_labelled(tiny_cnn: nn.Module, batch: ImageBatch) -> None:
    memory = heatmaps.step_memory(tiny_cnn, batch, PICKED, HeatmapRequest())
    assert memory is not None
    assert memory.saved_for_backward.bytes and memory.saved_for_backward.bytes > 0
    assert "saved" in memory.saved_for_backward.counts
    assert "peak" in memory.peak.counts


@pytest.mark.parametrize("method", sorted(attribution.METHODS))
@pytest.mark.parametrize("mode", ["loss", "class"])
def test_the_picks_alone_give_the_maps_of_the_whole_batch(
    tiny_bn_cnn: nn.Module, batch: ImageBatch, method: str, mode: str
) -> None:
    """A click converts only its picks to floats, unless the strategy forwards the whole batch
    or the method is seeded by batch index: the maps and their batch indices are those of the
    engine given all N images at their batch indices."""
    request = HeatmapRequest(method=method, target_mode=mode, target_class=3)
    shown = heatmaps.compute(tiny_bn_cnn, batch, PICKED, request)
    target, classes = request.engine_target()
    built = attribution.build(method, {}, None)
    reference = built.attribute(
        GradientRequest.build(
            tiny_bn_cnn,
            batch.float_images(),
            PICKED,
            labels=batch.labels,
            target=target,
            classes=classes,
        )
    )
    assert shown.gradients.indices == tuple(PICKED)
    torch.testing.assert_close(shown.maps, reference.maps)
    torch.testing.assert_close(shown.gradients.gradients, reference.gradients.gradients)
    images, positions, labels = heatmaps.engine_images(batch, PICKED, whole=False)
    assert positions == [0, 1, 2] and images.dtype == torch.float32
    assert torch.equal(images, batch.float_images()[PICKED])
    assert batch.labels is not None and labels is not None
    assert torch.equal(labels, batch.labels[PICKED])
    assert heatmaps.engine_images(batch, PICKED, whole=True)[1] == PICKED


@pytest.mark.parametrize("strategy", ["recompute", "summed", "retain_graph"])
def test_step_memory_follows_the_number_of_picks_not_which_images(
    tiny_bn_cnn: nn.Module, batch: ImageBatch, strategy: str
) -> None:
    """The explorer measures a step's memory once per number of picks (``cache.step_memory``):
    other images of the batch, with other labels and predictions, must cost the same."""
    request = HeatmapRequest(strategy=strategy)
    first = heatmaps.step_memory(tiny_bn_cnn, batch, PICKED, request)
    other = [index for index in range(len(batch)) if index not in PICKED][: len(PICKED)]
    assert (
        batch.labels is not None and batch.labels[other].tolist() != batch.labels[PICKED].tolist()
    )
    again = heatmaps.step_memory(tiny_bn_cnn, batch, other, request)
    assert first is not None and first.saved_for_backward.bytes
    assert again == first
    fewer = heatmaps.step_memory(tiny_bn_cnn, batch, PICKED[:1], request)
    assert fewer is not None and fewer.saved_for_backward.bytes
    assert fewer.saved_for_backward.bytes < first.saved_for_backward.bytes


@pytest.mark.parametrize("shared", [True, False])
def test_tiles_are_enlarged_by_whole_pixels(batch: ImageBatch, shared: bool) -> None:
    maps = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    maps[1] *= 100  # one image with far larger gradients
    tiles = heatmaps.tiles(batch.images[PICKED], maps, shared_scale=shared)
    factor = heatmaps.DISPLAY_SIDE // 32
    limits = [tile.limit for tile in tiles]
    assert (len(set(limits)) == 1) == shared
    for tile, image, values in zip(tiles, batch.images[PICKED], maps, strict=True):
        assert tile.image.shape == (32 * factor, 32 * factor, 3)
        assert (tile.image[::factor, ::factor] == image.permute(1, 2, 0).numpy()).all()
        blocks = tile.heat.reshape(32, factor, 32, factor, 3)
        assert (blocks == blocks[:, :1, :, :1]).all()  # every 4x4 block is one pixel
        expected = render.colorize(render.saliency(values[None])[0], tile.limit)
        assert (tile.heat[::factor, ::factor] == expected).all()
        assert len(tile.channels) == 3


def test_strip_puts_panels_side_by_side_with_transparent_gaps(batch: ImageBatch) -> None:
    tile = heatmaps.tiles(batch.images[:1], torch.ones(1, 3, 32, 32), True)[0]
    full = heatmaps.strip(tile, gap=6)
    compact = heatmaps.strip(tile, compact=True, gap=6)
    side = heatmaps.DISPLAY_SIDE
    assert full.shape == (side, 6 * side + 5 * 6, 4)
    assert compact.shape == (side // 2, 3 * side // 2 + 2 * 6, 4)
    assert (compact[:, : side // 2, :3] == tile.image[::2, ::2]).all()
    assert (full[:, side : side + 6, 3] == 0).all()
    assert (full[:, :side, :3] == tile.image).all()


def test_map_strip_is_saliency_then_the_three_channels(batch: ImageBatch) -> None:
    maps = torch.linspace(-1, 1, 3 * 32 * 32).reshape(1, 3, 32, 32)
    tile = heatmaps.tiles(batch.images[:1], maps, True)[0]
    picture = heatmaps.map_strip(tile, gap=4)
    side = heatmaps.DISPLAY_SIDE
    assert picture.shape == (side, 4 * side + 3 * 4, 4)
    starts = [n * (side + 4) for n in range(4)]
    for start, panel in zip(starts, [tile.heat, *tile.channels], strict=True):
        assert (picture[:, start : start + side, :3] == panel).all()
        assert (picture[:, start : start + side, 3] == 255).all()
    assert (picture[:, side : side + 4, 3] == 0).all()


def test_tiles_of_224_pixel_inputs_are_averaged_down_for_the_page() -> None:
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (2, 3, 224, 224), dtype=torch.uint8, generator=generator)
    maps = torch.zeros(2, 3, 224, 224)
    maps[:, :, :112] = 1.0  # the top half is hot
    tiles = heatmaps.tiles(images, maps, shared_scale=True)
    for tile, image in zip(tiles, images, strict=True):
        side = heatmaps.DISPLAY_SIDE
        assert tile.image.shape == tile.heat.shape == (side, side, 3)
        assert all(channel.shape == (side, side, 3) for channel in tile.channels)
        assert tile.saliency.shape == (224, 224)  # the detailed view keeps every pixel
        mean = image.double().mean(dim=(1, 2)).numpy()
        assert np.allclose(tile.image.reshape(-1, 3).mean(axis=0), mean, atol=1.0)
        hot, cold = tile.heat[: side // 2 - 1], tile.heat[side // 2 + 1 :]
        assert (hot == hot[0, 0]).all() and (cold == cold[0, 0]).all()
        assert not (hot[0, 0] == cold[0, 0]).all()
    strip = heatmaps.strip(tiles[0])
    assert strip.shape == (side, 6 * side + 5 * 6, 4)


def test_colourbar_runs_from_low_to_high() -> None:
    bar = heatmaps.colourbar()
    table = render.lookup_table("inferno")
    assert (bar[0, 0] == table[0]).all() and (bar[0, -1] == table[-1]).all()
    signed = heatmaps.colourbar(signed=True)
    assert (signed[0, 0] == render.DIVERGING[0]).all()


def _export(
    result: attribution.Attribution,
    batch: ImageBatch,
    request: HeatmapRequest,
    memory: MemoryReport | None = None,
) -> export.Export:
    source = export.source_record(batch.source, len(batch))
    model = {"name": "tiny", "weights": "tiny:random"}
    return heatmaps.export_of(
        result, batch, PICKED, request, memory, model, source, {"colour_scale": "shared"}
    )


def test_exports_hold_the_same_numbers(tiny_cnn: nn.Module, batch: ImageBatch) -> None:
    result = heatmaps.compute(tiny_cnn, batch, PICKED, HeatmapRequest())
    exported = _export(result, batch, HeatmapRequest())
    arrays = np.load(io.BytesIO(export.npz_bytes(exported)), allow_pickle=False)
    assert arrays.files == list(export.ARRAYS)
    assert arrays["indices"].tolist() == PICKED
    assert arrays["positions"].tolist() == [batch.positions[i] for i in PICKED]
    assert arrays["names"].tolist() == [batch.names[i] for i in PICKED]
    np.testing.assert_array_equal(arrays["gradients"], result.gradients.gradients.numpy())
    np.testing.assert_array_equal(arrays["images"], batch.float_images()[PICKED].numpy())
    loaded = torch.load(io.BytesIO(export.pt_bytes(exported)), weights_only=True)
    assert torch.equal(loaded["channel_maps"], result.maps)
    assert torch.equal(loaded["maps"], result.maps.abs().amax(dim=1))  # as the heatmaps show
    assert loaded["indices"].tolist() == PICKED and loaded["target"] == "loss"
    assert loaded["names"] == [batch.names[i] for i in PICKED]


def test_a_layer_methods_download_holds_its_layer_maps_and_layer(
    tiny_cnn: nn.Module, batch: ImageBatch
) -> None:
    request = HeatmapRequest(target_mode="predicted", method="gradcam", layer="2")
    result = heatmaps.compute(tiny_cnn, batch, PICKED, request)
    exported = _export(result, batch, request)
    arrays = np.load(io.BytesIO(export.npz_bytes(exported)), allow_pickle=False)
    assert arrays.files == [*export.ARRAYS, *export.LAYER_ARRAYS]
    assert str(arrays["layer"]) == "2" and arrays["layer_maps"].shape == (len(PICKED), 8, 8)
    upsampled = torch.nn.functional.interpolate(
        torch.from_numpy(arrays["layer_maps"])[:, None], size=(32, 32), mode="bilinear"
    )[:, 0]
    np.testing.assert_allclose(arrays["maps"], upsampled.numpy(), rtol=1e-5, atol=1e-7)
    report = json.loads(export.metadata_json(exported))
    assert report["layer"] == {"name": "2", "grid": [8, 8]}
    assert report["explorer"]["request"]["layer"] == "2"


def test_report_says_what_was_asked_what_came_out_and_what_it_cost(
    tiny_cnn: nn.Module, batch: ImageBatch
) -> None:
    request = HeatmapRequest(target_mode="class", target_class=3)
    result = heatmaps.compute(tiny_cnn, batch, PICKED, request)
    memory = heatmaps.step_memory(tiny_cnn, batch, PICKED, request)
    decoded = json.loads(export.metadata_json(_export(result, batch, request, memory)))
    assert decoded["indices"] == PICKED and decoded["k"] == 3 and decoded["source"]["N"] == 12
    assert decoded["class_names"] == ["cat"] * 3
    assert decoded["quantity"] == "logit[cat]"
    assert decoded["strategy"] == "recompute"
    assert decoded["timing_ms"] > 0
    assert decoded["memory"]["saved_for_backward"]["bytes"] > 0
    assert {"torch", "streamlit", "plotly", "gradpick"} <= set(decoded["versions"])
    explorer = decoded["explorer"]
    assert explorer["target_mode"] == "class" and explorer["colour_scale"] == "shared"


def test_units_name_the_differentiated_quantity() -> None:
    assert heatmaps.unit(HeatmapRequest(), CIFAR10_CLASSES) == "d loss / d pixel"
    request = HeatmapRequest(target_mode="class", target_class=5, method="gradient_x_input")
    assert heatmaps.unit(request, CIFAR10_CLASSES) == "pixel × d logit[dog] / d pixel"


@pytest.mark.parametrize("method", attribution.METHOD_NAMES)
def test_every_registered_method_has_a_unit_and_runs_from_its_settings(
    tiny_cnn: nn.Module, batch: ImageBatch, method: str
) -> None:
    unit = heatmaps.unit(HeatmapRequest(method=method), CIFAR10_CLASSES)
    assert "loss" in unit and "{" not in unit
    shown = {
        parameter.name: parameter.shown[0]
        for parameter in attribution.get(method).parameters
        if parameter.shown is not None
    }
    request = HeatmapRequest(method=method, settings=tuple(shown.items()))
    result = heatmaps.compute(tiny_cnn, batch, PICKED, request)
    assert result.method == method
    assert {name: result.settings[name] for name in shown} == shown
