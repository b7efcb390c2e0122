"""Reference images an explanation is measured against: black, uniform noise, blurred.

Integrated Gradients integrates from one of them to the image; the insertion curve starts from
the blurred one. Noise is drawn on the CPU from a generator seeded by (seed, batch index), so an
image gets the same baseline on every device and whichever other images are picked with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from gradpick.errors import InputError

__all__ = [
    "BASELINES",
    "BLUR_SIGMA",
    "baseline_images",
    "blurred",
    "seeded_generator",
]

BASELINES = ("black", "uniform_noise", "blurred")
BLUR_SIGMA = 2.0
"""Standard deviation in pixels of the Gaussian blur (a 32 x 32 image keeps its coarse shapes)."""


def seeded_generator(seed: int, index: int) -> torch.Generator:
    """A CPU generator for one image, independent of its position in the pick."""
    state = int(np.random.SeedSequence((seed, index)).generate_state(1)[0])
    return torch.Generator().manual_seed(state)


def blurred(images: torch.Tensor, sigma: float = BLUR_SIGMA) -> torch.Tensor:
    """Each channel of [k, C, H, W] blurred by a separable Gaussian; edges replicated."""
    if not (math.isfinite(sigma) and sigma > 0):
        raise InputError(f"The blur's sigma must be a positive number of pixels; got {sigma!r}.")
    radius = max(1, math.ceil(3 * sigma))
    offsets = torch.arange(-radius, radius + 1, dtype=images.dtype, device=images.device)
    line = torch.exp(-(offsets**2) / (2 * sigma**2))
    line = line / line.sum()
    channels = images.shape[1]
    rows = line.view(1, 1, 1, -1).expand(channels, 1, 1, -1)
    columns = line.view(1, 1, -1, 1).expand(channels, 1, -1, 1)
    padded = F.pad(images, (radius, radius, radius, radius), mode="replicate")
    return F.conv2d(F.conv2d(padded, rows, groups=channels), columns, groups=channels)


def baseline_images(
    images: torch.Tensor, kind: str, indices: Sequence[int], seed: int = 0
) -> torch.Tensor:
    """The ``kind`` baseline of each picked image [k, C, H, W] (``images`` are the picks).

    ``black``: zeros; ``uniform_noise``: independent U(0, 1) pixels; ``blurred``: the image
    under a Gaussian blur of ``BLUR_SIGMA`` pixels.
    """
    if kind == "black":
        return torch.zeros_like(images)
    if kind == "uniform_noise":
        draws = [
            torch.rand(image.shape, generator=seeded_generator(seed, index), dtype=images.dtype)
            for image, index in zip(images, indices, strict=True)
        ]
        return torch.stack(draws).to(images.device)
    if kind == "blurred":
        return blurred(images)
    raise InputError(f"Unknown baseline '{kind}'; use one of {', '.join(BASELINES)}.")
