"""Heatmap rendering: colour tables, scales, enlargement, overlays and the PNG grid."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from gradpick.errors import InputError
from gradpick.show.render import (
    COLORMAPS,
    DIVERGING,
    PANEL_GAP,
    PANELS,
    TITLE_HEIGHT,
    as_hwc,
    channel_maps,
    colorize,
    enlarge,
    fit,
    grid_png,
    lookup_table,
    overlay,
    saliency,
    scale_limits,
)


def _luminance(colours: np.ndarray) -> np.ndarray:
    return colours.astype(np.float64) @ np.array([0.2126, 0.7152, 0.0722])


@pytest.fixture
def maps() -> torch.Tensor:
    return torch.randn(3, 3, 6, 5, generator=torch.Generator().manual_seed(0))


@pytest.fixture
def images() -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (3, 3, 6, 5), generator=generator, dtype=torch.uint8)


def test_saliency_is_the_largest_magnitude_over_channels(maps):
    values = saliency(maps)
    assert values.shape == (3, 6, 5) and values.dtype == np.float32
    for k in range(3):
        for y in range(6):
            for x in range(5):
                assert values[k, y, x] == max(abs(float(c)) for c in maps[k, :, y, x])


def test_saliency_rejects_the_wrong_shape():
    with pytest.raises(InputError, match=r"\[k, C, H, W\]"):
        saliency(torch.zeros(3, 6, 5))


@pytest.mark.parametrize("cmap", COLORMAPS)
def test_sequential_ramps_brighten_monotonically(cmap):
    table = lookup_table(cmap)
    assert table.shape == (256, 3) and table.dtype == np.uint8
    lightness = _luminance(table)
    assert np.all(np.diff(lightness[::8]) > 0)  # brighter at every step of the ramp ...
    assert np.all(np.diff(lightness) > -1.0)  # ... up to rounding each entry to whole levels
    assert _luminance(table[-1]) - _luminance(table[0]) > 150


def test_diverging_map_is_blue_white_red():
    assert DIVERGING.shape[0] % 2 == 1
    middle = DIVERGING.shape[0] // 2
    assert DIVERGING[middle].tolist() == [255, 255, 255]
    blue, red = DIVERGING[0].astype(int), DIVERGING[-1].astype(int)
    assert blue[2] > blue[0] and red[0] > red[2]
    # Lightness falls away from white on both sides.
    assert np.all(np.diff(_luminance(DIVERGING[: middle + 1 : 8])) > 0)
    assert np.all(np.diff(_luminance(DIVERGING[middle::8])) < 0)


def test_colorize_sequential_clips_and_maps_ends():
    table = lookup_table("viridis")
    values = np.array([[-1.0, 0.0, 1.0], [2.0, 4.0, 9.0]])
    colours = colorize(values, limit=4.0, cmap="viridis")
    assert colours.shape == (2, 3, 3) and colours.dtype == np.uint8
    assert colours[0, 0].tolist() == colours[0, 1].tolist() == table[0].tolist()
    assert colours[1, 1].tolist() == colours[1, 2].tolist() == table[-1].tolist()
    assert colours[1, 0].tolist() == table[128].tolist()  # 2 / 4 of the way: entry 127.5 -> 128
    assert _luminance(colours[0, 2]) < _luminance(colours[1, 0]) < _luminance(colours[1, 1])


def test_colorize_signed_centres_zero_on_white():
    colours = colorize(np.array([[-3.0, -1.0, 0.0, 1.0, 3.0]]), limit=2.0, signed=True)
    assert colours[0, 2].tolist() == [255, 255, 255]
    assert colours[0, 0].tolist() == DIVERGING[0].tolist()
    assert colours[0, 4].tolist() == DIVERGING[-1].tolist()
    negative, positive = colours[0, 1].astype(int), colours[0, 3].astype(int)
    assert negative[2] > negative[0] and positive[0] > positive[2]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"limit": 0.0}, "limit must be positive"),
        ({"limit": 1.0, "cmap": "jet"}, "Unknown colour map 'jet'"),
    ],
)
def test_colorize_rejects_bad_arguments(arguments, message):
    with pytest.raises(InputError, match=message):
        colorize(np.zeros((2, 2)), **arguments)


def test_scale_limits_shared_and_per_image():
    values = np.stack([np.full((4, 4), 1.0), np.full((4, 4), 10.0), np.zeros((4, 4))])
    values[1, 0, 0] = -20.0
    per_image = scale_limits(values, shared=False, percentile=100.0)
    np.testing.assert_array_equal(per_image[:2], [1.0, 20.0])
    assert 0 < per_image[2] < 1e-30  # a blank map gets a tiny positive limit, never 0
    shared = scale_limits(values, shared=True, percentile=100.0)
    np.testing.assert_array_equal(shared, [20.0, 20.0, 20.0])


def test_scale_limits_percentile_ignores_a_few_outliers():
    values = np.ones((2, 20, 20))
    values[0, 0, 0] = 1000.0  # 1 pixel in 400: above the 99th percentile
    np.testing.assert_allclose(scale_limits(values, shared=False, percentile=99.0), [1.0, 1.0])
    assert scale_limits(values, shared=False, percentile=100.0)[0] == 1000.0


def test_scale_limits_falls_back_to_the_maximum_of_a_sparse_map():
    values = np.zeros((1, 20, 20))
    values[0, 3, 4] = 0.5  # the 99.5th percentile is 0, the map is not blank
    assert scale_limits(values, shared=False)[0] == 0.5


def test_scale_limits_rejects_a_bad_percentile():
    with pytest.raises(InputError, match="percentile"):
        scale_limits(np.ones((1, 2, 2)), shared=True, percentile=0.0)


@pytest.mark.parametrize("shape", [(3, 4), (3, 4, 3)])
def test_enlarge_is_nearest_neighbour(shape):
    array = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    large = enlarge(array, 3)
    assert large.shape == (9, 12, *shape[2:]) and large.dtype == np.uint8
    for y in range(9):
        for x in range(12):
            assert np.array_equal(large[y, x], array[y // 3, x // 3])
    assert set(np.unique(large)) == set(np.unique(array))  # no blended values


@pytest.mark.parametrize("factor", [0, 1.5, True])
def test_enlarge_rejects_a_bad_factor(factor):
    with pytest.raises(InputError, match="factor"):
        enlarge(np.zeros((2, 2)), factor)


def test_as_hwc_accepts_both_layouts(images):
    chw = images[0]
    hwc = as_hwc(chw)
    assert hwc.shape == (6, 5, 3)
    assert np.array_equal(as_hwc(hwc), hwc)
    assert np.array_equal(hwc[2, 3], chw[:, 2, 3].numpy())
    with pytest.raises(InputError, match="uint8"):
        as_hwc(chw.float())
    with pytest.raises(InputError, match=r"\[3, H, W\] or \[H, W, 3\]"):
        as_hwc(np.zeros((4, 6, 5), dtype=np.uint8))


def test_overlay_blends_image_and_heat(images):
    image = images[0]
    heat = np.full((6, 5, 3), 200, dtype=np.uint8)
    mixed = overlay(image, heat, alpha=0.25)
    assert mixed.shape == (6, 5, 3) and mixed.dtype == np.uint8
    expected = np.rint(0.75 * as_hwc(image).astype(float) + 0.25 * 200).astype(np.uint8)
    assert np.array_equal(mixed, expected)
    assert np.array_equal(overlay(image, heat, alpha=0.0), as_hwc(image))
    assert np.array_equal(overlay(image.numpy(), heat, alpha=1.0), heat)
    with pytest.raises(InputError, match="differ in size"):
        overlay(image, heat[:3])
    with pytest.raises(InputError, match="alpha"):
        overlay(image, heat, alpha=1.5)


def test_channel_maps_are_signed_per_channel(maps):
    coloured = channel_maps(maps[0], limit=1.0)
    assert len(coloured) == 3
    for channel, picture in enumerate(coloured):
        assert picture.shape == (6, 5, 3) and picture.dtype == np.uint8
        assert np.array_equal(picture, colorize(maps[0, channel].numpy(), 1.0, signed=True))
    with pytest.raises(InputError, match=r"\[C, H, W\]"):
        channel_maps(maps, limit=1.0)


def test_grid_png_has_one_row_per_image_with_the_panels(images, maps):
    factor = 4
    png = grid_png(images, maps, ["cat 0.91", "dog 0.40", "ship 0.77"], factor=factor)
    picture = Image.open(io.BytesIO(png))
    assert picture.format == "PNG" and picture.mode == "RGB"
    width, height = 5 * factor, 6 * factor
    row_height = TITLE_HEIGHT + height + PANEL_GAP
    assert picture.size == (
        len(PANELS) * (width + PANEL_GAP) + PANEL_GAP,
        TITLE_HEIGHT + 3 * row_height,
    )
    pixels = np.asarray(picture)
    heat = saliency(maps)
    limits = scale_limits(heat, shared=True)
    for row in range(3):
        top = TITLE_HEIGHT + row * row_height + TITLE_HEIGHT
        lefts = [PANEL_GAP + column * (width + PANEL_GAP) for column in range(3)]
        original = as_hwc(images[row])
        heat_rgb = colorize(heat[row], float(limits[row]))
        expected = [original, heat_rgb, overlay(original, heat_rgb)]
        for left, panel in zip(lefts, expected, strict=True):
            shown = pixels[top : top + height, left : left + width]
            assert np.array_equal(shown, enlarge(panel, factor))
        title_band = pixels[top - TITLE_HEIGHT : top, :]
        assert (title_band < 128).any()  # the title text was drawn


def test_grid_png_shared_scale_compares_magnitudes(images, maps):
    scaled = maps.clone()
    scaled[1] *= 0.01  # a much weaker map
    factor = 1
    row_height = TITLE_HEIGHT + 6 + PANEL_GAP
    left = PANEL_GAP + 5 + PANEL_GAP  # the saliency panel

    def heat_panel(png: bytes, row: int) -> np.ndarray:
        top = TITLE_HEIGHT + row * row_height + TITLE_HEIGHT
        return np.asarray(Image.open(io.BytesIO(png)))[top : top + 6, left : left + 5]

    titles = ["a", "b", "c"]
    shared = grid_png(images, scaled, titles, shared_scale=True, factor=factor)
    separate = grid_png(images, scaled, titles, shared_scale=False, factor=factor)
    # On the shared scale the weak map is nearly black; on its own scale it is as bright as
    # the strong ones.
    weak_shared = _luminance(heat_panel(shared, 1)).mean()
    assert weak_shared < 0.1 * _luminance(heat_panel(shared, 0)).mean()
    assert weak_shared < 0.1 * _luminance(heat_panel(separate, 1)).mean()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"titles": ["only one"]}, "give one of each per picked image"),
        ({"factor": 0}, "factor"),
    ],
)
def test_grid_png_rejects_bad_input(images, maps, arguments, message):
    options = {"titles": ["a", "b", "c"], **arguments}
    with pytest.raises(InputError, match=message):
        grid_png(images, maps, **options)


def test_grid_png_rejects_an_empty_pick():
    with pytest.raises(InputError, match="No images to render"):
        grid_png(torch.zeros(0, 3, 4, 4, dtype=torch.uint8), torch.zeros(0, 3, 4, 4), [])


@pytest.mark.parametrize(("side", "factor"), [(32, 4), (64, 2), (224, 1), (512, 1)])
def test_the_grid_export_keeps_every_pixel_and_enlarges_small_inputs(side, factor):
    images = torch.randint(0, 256, (1, 3, side, side), dtype=torch.uint8)
    maps = torch.rand(1, 3, side, side)
    picture = Image.open(io.BytesIO(grid_png(images, maps, ["a"])))
    assert picture.size[0] == len(PANELS) * (side * factor + PANEL_GAP) + PANEL_GAP


def test_fit_enlarges_by_whole_pixels_or_averages_down():
    small = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert np.array_equal(fit(small, 10), enlarge(small, 3))
    large = np.zeros((256, 128, 3), dtype=np.uint8)
    large[:, 64:] = 200
    shown = fit(large, 128)
    assert shown.shape == (128, 64, 3)
    assert (shown[:, :32] == 0).all() and (shown[:, 32:] == 200).all()
