"""Turning attribution maps into pictures: numpy and PIL only, no plotting library.

Colour maps are small lookup tables interpolated between a handful of anchor colours (sampled
from matplotlib's perceptually uniform inferno and viridis, and a blue-white-red diverging map),
so rendering needs neither matplotlib nor a browser and is the same in the app, the PNG download
and the tests.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from gradpick.errors import InputError

__all__ = [
    "COLORMAPS",
    "DIVERGING",
    "DIVERGING_SIZE",
    "FONT_SIZE",
    "PANEL_GAP",
    "PANELS",
    "SEQUENTIAL_SIZE",
    "TITLE_HEIGHT",
    "as_hwc",
    "channel_maps",
    "colorize",
    "enlarge",
    "fit",
    "grid_png",
    "lookup_table",
    "overlay",
    "panel_factor",
    "saliency",
    "scale_limits",
]

_SEQUENTIAL_ANCHORS = {
    "inferno": (
        "#000004 #160b39 #420a68 #6a176e #932667 #bc3754 #dd513a #f37819 #fca50a #f6d746 #fcffa4"
    ),
    "viridis": (
        "#440154 #482475 #414487 #355f8d #2a788e #21918c #22a884 #44bf70 #7ad151 #bddf26 #fde725"
    ),
}
_DIVERGING_ANCHORS = (
    "#053061 #2166ac #4393c3 #92c5de #d1e5f0 #ffffff #fddbc7 #f4a582 #d6604d #b2182b #67001f"
)
"""Blue (negative) to white (zero) to red (positive); the white anchor sits exactly mid-way."""

COLORMAPS = tuple(_SEQUENTIAL_ANCHORS)
SEQUENTIAL_SIZE = 256
DIVERGING_SIZE = 257
"""Odd, so that zero lands exactly on the middle entry, which is pure white."""

PANEL_GAP = 4
"""Pixels between and around the panels of ``grid_png``."""
TITLE_HEIGHT = 16
"""Pixels of the text line above each row of ``grid_png``."""
FONT_SIZE = 11
PANELS = ("image", "saliency", "overlay")


def _lookup_table(anchors: str, size: int) -> np.ndarray:
    """uint8 [size, 3]: evenly spaced anchors joined by straight lines in RGB."""
    colours = np.array([[int(code[i : i + 2], 16) for i in (1, 3, 5)] for code in anchors.split()])
    positions = np.linspace(0.0, 1.0, len(colours))
    samples = np.linspace(0.0, 1.0, size)
    channels = [np.interp(samples, positions, colours[:, c]) for c in range(3)]
    return np.rint(np.stack(channels, axis=1)).astype(np.uint8)


_TABLES = {
    name: _lookup_table(anchors, SEQUENTIAL_SIZE) for name, anchors in _SEQUENTIAL_ANCHORS.items()
}
DIVERGING = _lookup_table(_DIVERGING_ANCHORS, DIVERGING_SIZE)


def lookup_table(cmap: str) -> np.ndarray:
    """The uint8 [256, 3] colours of a sequential map, darkest (0) to brightest (limit)."""
    if cmap not in _TABLES:
        raise InputError(f"Unknown colour map '{cmap}'; use one of {', '.join(COLORMAPS)}.")
    return _TABLES[cmap]


def saliency(maps: torch.Tensor) -> np.ndarray:
    """[k, C, H, W] signed maps -> float32 [k, H, W]: the largest |value| over channels."""
    if maps.dim() != 4:
        raise InputError(f"Maps must have shape [k, C, H, W]; got {tuple(maps.shape)}.")
    return maps.detach().abs().amax(dim=1).float().cpu().numpy()


def scale_limits(values: np.ndarray, shared: bool, percentile: float = 99.5) -> np.ndarray:
    """Upper colour limits [k] of k maps: the ``percentile`` of |value|, over all maps or each.

    A shared limit makes magnitudes comparable across images; a per-image one shows each image's
    structure. The percentile keeps a few extreme pixels from washing out the rest; where it is 0
    the maximum is used, and a limit is never 0 (a blank map stays blank, without dividing by 0).
    """
    if not 0.0 < percentile <= 100.0:
        raise InputError(f"The percentile must be in (0, 100]; got {percentile}.")
    magnitudes = np.abs(np.asarray(values, dtype=np.float64)).reshape(len(values), -1)
    if shared:
        magnitudes = np.broadcast_to(magnitudes.reshape(1, -1), (len(values), magnitudes.size))
    limits = np.percentile(magnitudes, percentile, axis=1)
    limits = np.where(limits > 0, limits, magnitudes.max(axis=1, initial=0.0))
    return np.maximum(limits, np.finfo(np.float32).tiny)


def colorize(
    values: np.ndarray, limit: float, cmap: str = "inferno", signed: bool = False
) -> np.ndarray:
    """[H, W] values -> uint8 [H, W, 3] colours.

    Unsigned: 0..limit along ``cmap`` (values outside clipped). Signed: -limit..limit along the
    blue-white-red diverging map with 0 white (``cmap`` is not used).
    """
    if not limit > 0:
        raise InputError(f"The colour limit must be positive; got {limit}.")
    scaled = np.asarray(values, dtype=np.float64) / limit
    if signed:
        table, position = DIVERGING, (np.clip(scaled, -1.0, 1.0) + 1.0) / 2.0
    else:
        table, position = lookup_table(cmap), np.clip(scaled, 0.0, 1.0)
    return table[np.rint(np.nan_to_num(position) * (len(table) - 1)).astype(np.intp)]


def as_hwc(image: np.ndarray | torch.Tensor) -> np.ndarray:
    """A uint8 RGB image [3, H, W] or [H, W, 3] as a numpy [H, W, 3] array."""
    array = image.detach().cpu().numpy() if isinstance(image, torch.Tensor) else np.asarray(image)
    if array.dtype != np.uint8:
        raise InputError(f"Images to render must be uint8, not {array.dtype}.")
    if array.ndim == 3 and array.shape[0] == 3 and array.shape[2] != 3:
        return np.ascontiguousarray(array.transpose(1, 2, 0))
    if array.ndim == 3 and array.shape[2] == 3:
        return array
    raise InputError(f"An image must have shape [3, H, W] or [H, W, 3]; got {array.shape}.")


def overlay(
    image: np.ndarray | torch.Tensor, heat_rgb: np.ndarray, alpha: float = 0.5
) -> np.ndarray:
    """The image blended with a heatmap of the same size: (1 - alpha) image + alpha heat."""
    if not 0.0 <= alpha <= 1.0:
        raise InputError(f"alpha must be between 0 and 1; got {alpha}.")
    base = as_hwc(image)
    if base.shape != heat_rgb.shape:
        raise InputError(f"Image {base.shape} and heatmap {heat_rgb.shape} differ in size.")
    blended = (1.0 - alpha) * base.astype(np.float64) + alpha * heat_rgb.astype(np.float64)
    return np.rint(blended).astype(np.uint8)


def _check_factor(factor: int) -> None:
    if isinstance(factor, bool) or not isinstance(factor, (int, np.integer)) or factor < 1:
        raise InputError(f"The enlargement factor must be a whole number >= 1; got {factor!r}.")


def enlarge(array: np.ndarray, factor: int) -> np.ndarray:
    """Nearest-neighbour upscaling of [H, W] or [H, W, 3] by a whole ``factor``: no blur."""
    _check_factor(factor)
    return np.repeat(np.repeat(array, factor, axis=0), factor, axis=1)


def fit(array: np.ndarray, side: int) -> np.ndarray:
    """A uint8 [H, W] or [H, W, 3] picture shown about ``side`` pixels high: enlarged by the
    largest whole factor that fits (no blur), or, when taller than ``side``, downsampled by
    averaging each output pixel's area, so a 224- or 512-pixel map stays legible on the page
    without dropping any input pixel's contribution. Exports use the full-size arrays."""
    height, width = array.shape[:2]
    if height <= side:
        return enlarge(array, max(1, side // height))
    size = (max(1, round(width * side / height)), side)
    return np.asarray(Image.fromarray(array).resize(size, Image.Resampling.BOX))


def panel_factor(height: int, side: int = 128) -> int:
    """The whole enlargement that brings ``height`` to about ``side`` pixels, never below 1."""
    return max(1, side // height)


def channel_maps(maps_one: torch.Tensor, limit: float) -> list[np.ndarray]:
    """One image's signed map per channel (R, G, B), each coloured on [-limit, limit]."""
    if maps_one.dim() != 3:
        raise InputError(
            f"One image's maps must have shape [C, H, W]; got {tuple(maps_one.shape)}."
        )
    values = maps_one.detach().double().cpu().numpy()
    return [colorize(channel, limit, signed=True) for channel in values]


def grid_png(
    images: np.ndarray | torch.Tensor,
    maps: torch.Tensor,
    titles: Sequence[str],
    shared_scale: bool = True,
    factor: int | None = None,
) -> bytes:
    """A PNG with one row per picked image: image | saliency heatmap | overlay, each titled.

    ``images`` are the uint8 [k, 3, H, W] originals and ``maps`` their [k, C, H, W] attributions;
    each row's title gets the heatmap's upper limit, so rows with a per-image scale can still be
    compared by number. Panels are enlarged by ``factor`` (default: a whole factor bringing small
    inputs to about 128 pixels; 1, full resolution, for inputs of 128 pixels and more).
    """
    if len(maps) == 0:
        raise InputError("No images to render: pick at least one.")
    if len(images) != len(maps) or len(titles) != len(maps):
        raise InputError(
            f"Got {len(images)} images, {len(maps)} maps and {len(titles)} titles; "
            "give one of each per picked image."
        )
    factor = panel_factor(int(maps.shape[2])) if factor is None else factor
    _check_factor(factor)
    heat = saliency(maps)
    limits = scale_limits(heat, shared=shared_scale)
    height, width = heat.shape[1] * factor, heat.shape[2] * factor
    row_height = TITLE_HEIGHT + height + PANEL_GAP
    canvas = Image.new(
        "RGB",
        (len(PANELS) * (width + PANEL_GAP) + PANEL_GAP, TITLE_HEIGHT + len(maps) * row_height),
        "white",
    )
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default(size=FONT_SIZE)
    for column, name in enumerate(PANELS):
        draw.text((PANEL_GAP + column * (width + PANEL_GAP), 1), name, fill="black", font=font)
    for row, (image, values, limit, title) in enumerate(
        zip(images, heat, limits, titles, strict=True)
    ):
        top = TITLE_HEIGHT + row * row_height
        label = f"{title}  |  heat scale 0 to {limit:.3g}"
        draw.text((PANEL_GAP, top + 1), label, fill="black", font=font)
        original = as_hwc(image)
        heat_rgb = colorize(values, float(limit))
        for column, panel in enumerate((original, heat_rgb, overlay(original, heat_rgb))):
            left = PANEL_GAP + column * (width + PANEL_GAP)
            canvas.paste(Image.fromarray(enlarge(panel, factor)), (left, top + TITLE_HEIGHT))
    buffer = io.BytesIO()
    canvas.save(buffer, format="PNG")
    return buffer.getvalue()
