"""What the evidence of a call is, where it is and how concentrated, as numbers that do not move
when the evidence moves.

A slice finder that clusters raw maps splits one cause into one slice per position (a patch at
the top left and the same patch at the bottom right are far apart as maps); one that clusters
embeddings or confusion cells never sees the evidence at all. Here each mapped image becomes a
row of translation-invariant descriptors of the map of its predicted class and of the pixels
under it (``DESCRIPTORS``):

* how concentrated the map is: ``concentration`` = 1 - H(m) / log(HW) for the map m normalised
  to sum 1 (1: one pixel holds everything; 0: flat), ``peak_share`` (the mass within the window
  around the maximum), ``top_size`` (the share of pixels that hold half the mass);
* where the peak is only as its distance from the centre (``peak_distance``, 0 at the centre,
  1 in a corner), not as coordinates;
* what the evidence looks like: mean red, green, blue, brightness (Rec. 601 luma), saturation
  ((max - min) / max) and texture (mean absolute Laplacian of the luma) of the evidence region,
  the peak window (the square of ``WINDOW_SHARE`` of the image that holds the most of the
  map's mass): what verification removes. A region of every pixel at half the map's maximum
  or more grows with a diffuse map, and the colour of a patch the map peaks on is then lost
  in the colours around it;
* the same brightness, saturation and texture over the whole image, so a change that has no
  place (a grayscale subgroup) is described too.

The maps are computed by any method of ``gradpick.attribution.METHODS`` for the predicted
class's logit, ``chunk_rows`` images at a time, so memory stays bounded whatever the number of
rows. Grad-CAM is the default: one forward and backward per image (10,000 rows in about a
minute on two CPU cores), where occlusion needs a forward per window position and image;
occlusion places a small planted cause more sharply, at 50 to 200 times the cost.

Example::

    maps = evidence_maps(model, images, predictions)
    table = descriptors(images, maps)  # [n, len(DESCRIPTORS)]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gradpick.attribution import build
from gradpick.errors import InputError
from gradpick.gradients.request import GradientRequest

__all__ = [
    "CHUNK_ROWS",
    "DESCRIPTORS",
    "METHOD",
    "descriptors",
    "evidence_maps",
    "peak_windows",
    "window_masks",
    "window_side",
]

METHOD = "gradcam"
"""The default attribution method of the maps (see the module's docstring for why)."""
CHUNK_ROWS = 256
"""Images mapped at once: a ResNet-20 chunk's activations take tens of megabytes."""
WINDOW_SHARE = 0.035
"""The peak window's area as a share of the image (6 x 6 pixels of a 32 x 32 image)."""
DESCRIPTORS = (
    "concentration",
    "peak_share",
    "top_size",
    "peak_distance",
    "region_red",
    "region_green",
    "region_blue",
    "region_brightness",
    "region_saturation",
    "region_texture",
    "image_brightness",
    "image_saturation",
    "image_texture",
)
"""The columns of ``descriptors``, in order."""
LUMA = (0.299, 0.587, 0.114)


def evidence_maps(
    model: nn.Module,
    images: torch.Tensor,
    classes: torch.Tensor,
    method: str = METHOD,
    settings: Mapping[str, Any] | None = None,
    layer: str | None = None,
    chunk_rows: int = CHUNK_ROWS,
) -> torch.Tensor:
    """Non-negative maps [n, H, W] (float32, on the CPU) of ``classes``' logits for ``images``
    [n, 3, H, W] (floats in [0, 1]), by ``method`` of the attribution registry; a signed map is
    taken by its absolute value averaged over channels (a class activation map is the same in
    every channel, so it is kept as it is)."""
    if images.ndim != 4 or classes.shape != (images.shape[0],):
        raise InputError(
            f"Evidence maps need images [n, 3, H, W] and one class per image; got "
            f"{tuple(images.shape)} and {tuple(classes.shape)}."
        )
    chosen = build(method, dict(settings or {}), layer=layer)
    out = torch.empty(images.shape[0], *images.shape[-2:], dtype=torch.float32)
    for start in range(0, images.shape[0], chunk_rows):
        part = images[start : start + chunk_rows]
        request = GradientRequest.build(
            model,
            part,
            list(range(part.shape[0])),
            target="logit",
            classes=classes[start : start + chunk_rows],
        )
        maps = chosen.attribute(request).maps.detach()
        out[start : start + part.shape[0]] = maps.abs().mean(dim=1).float().cpu()
    return out


def window_side(height: int, width: int) -> int:
    """The side of the square peak window: ``WINDOW_SHARE`` of the image, at least 2 pixels."""
    return max(2, min(height, width, round(math.sqrt(WINDOW_SHARE * height * width))))


def peak_windows(maps: torch.Tensor, side: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-left corners (rows, columns) [n] of the ``side`` x ``side`` window that holds the
    most of each map's mass (the first in reading order on ties): the peak as a region, so a
    plateau (a patch whose pixels all score alike) is covered whole, not cut at its corner."""
    count, height, width = maps.shape
    sums = F.avg_pool2d(maps.detach().double().unsqueeze(1), side, stride=1).squeeze(1)
    best = sums.reshape(count, -1).argmax(dim=1)
    columns_there = width - side + 1
    return best // columns_there, best % columns_there


def window_masks(
    size: tuple[int, int], rows: torch.Tensor, columns: torch.Tensor, side: int
) -> torch.Tensor:
    """bool [n, H, W]: each ``side`` x ``side`` window whose top-left corner is at ``rows`` and
    ``columns`` [n], in an image of ``size`` (H, W): the evidence region the descriptors read and
    the part verification removes."""
    height, width = size
    grid_rows = torch.arange(height).view(1, -1, 1)
    grid_columns = torch.arange(width).view(1, 1, -1)
    return (
        (grid_rows >= rows.view(-1, 1, 1))
        & (grid_rows < rows.view(-1, 1, 1) + side)
        & (grid_columns >= columns.view(-1, 1, 1))
        & (grid_columns < columns.view(-1, 1, 1) + side)
    )


def _luma(images: torch.Tensor) -> torch.Tensor:
    weights = torch.tensor(LUMA, dtype=images.dtype).view(1, 3, 1, 1)
    return (images * weights).sum(dim=1)


def _texture(luma: torch.Tensor) -> torch.Tensor:
    """|Laplacian| [n, H, W] of the luma (4-neighbour stencil, edges replicated)."""
    padded = F.pad(luma.unsqueeze(1), (1, 1, 1, 1), mode="replicate").squeeze(1)
    centre = padded[:, 1:-1, 1:-1]
    neighbours = padded[:, :-2, 1:-1] + padded[:, 2:, 1:-1] + padded[:, 1:-1, :-2]
    return (neighbours + padded[:, 1:-1, 2:] - 4 * centre).abs()


def _saturation(images: torch.Tensor) -> torch.Tensor:
    """(max - min) / max over the channels [n, H, W]; 0 where the pixel is black."""
    high, low = images.amax(dim=1), images.amin(dim=1)
    return torch.where(high > 0, (high - low) / high.clamp_min(1e-12), 0.0)


def descriptors(images: torch.Tensor, maps: torch.Tensor) -> np.ndarray:
    """The ``DESCRIPTORS`` [n, 13] (float64) of images [n, 3, H, W] in [0, 1] and their maps
    [n, H, W] (non-negative; see the module's docstring for each column)."""
    if (
        images.ndim != 4
        or images.shape[1] != 3
        or maps.shape != (images.shape[0], *images.shape[2:])
    ):
        raise InputError(
            f"Descriptors need RGB images [n, 3, H, W] and maps [n, H, W]; got "
            f"{tuple(images.shape)} and {tuple(maps.shape)}."
        )
    pixels = images.detach().to(torch.float64).cpu()
    strength = maps.detach().to(torch.float64).cpu().clamp_min(0)
    count, _, height, width = pixels.shape
    if count == 0:
        return np.zeros((0, len(DESCRIPTORS)))
    area = height * width
    flat = strength.reshape(count, -1)
    total = flat.sum(dim=1, keepdim=True)
    # A map that is zero everywhere says nothing: read it as flat.
    mass = torch.where(total > 0, flat / total.clamp_min(1e-300), 1.0 / area)
    entropy = -(mass * torch.log(mass.clamp_min(1e-300))).sum(dim=1)
    concentration = 1 - entropy / math.log(area)
    side = window_side(height, width)
    rows, columns = peak_windows(strength, side)
    window = window_masks((height, width), rows, columns, side)
    peak_share = (mass * window.reshape(count, -1)).sum(dim=1)
    ranked = torch.sort(mass, dim=1, descending=True).values.cumsum(dim=1)
    top_size = ((ranked < 0.5).sum(dim=1) + 1).double() / area
    peak = flat.argmax(dim=1)
    centre_row, centre_column = (height - 1) / 2, (width - 1) / 2
    distance = (
        torch.sqrt(
            (peak // width - centre_row).double() ** 2
            + (peak % width - centre_column).double() ** 2
        )
        / math.hypot(centre_row, centre_column)
        if area > 1
        else torch.zeros(count)
    )
    region = window.reshape(count, 1, -1).double()
    inside = region.sum(dim=2)

    def region_mean(values: torch.Tensor) -> torch.Tensor:
        return (values.reshape(count, 1, -1) * region).sum(dim=2).squeeze(1) / inside.squeeze(1)

    luma = _luma(pixels)
    saturation = _saturation(pixels)
    texture = _texture(luma)
    colour = (pixels.reshape(count, 3, -1) * region).sum(dim=2) / inside
    columns_out = [
        concentration,
        peak_share,
        top_size,
        distance,
        colour[:, 0],
        colour[:, 1],
        colour[:, 2],
        region_mean(luma),
        region_mean(saturation),
        region_mean(texture),
        luma.reshape(count, -1).mean(dim=1),
        saturation.reshape(count, -1).mean(dim=1),
        texture.reshape(count, -1).mean(dim=1),
    ]
    return torch.stack(columns_out, dim=1).numpy()
