"""How alike two attribution maps are: Spearman rank correlation and SSIM, per picked image.

Both take batches [k, H, W] and return one value per row, so a whole pick is compared at once.
They compute in float64 on the CPU (MPS has no float64; k maps are small).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from gradpick.errors import InputError

__all__ = [
    "SSIM_K1",
    "SSIM_K2",
    "SSIM_RADIUS",
    "SSIM_SIGMA",
    "ranks",
    "spearman",
    "ssim",
]

SSIM_SIGMA = 1.5
SSIM_RADIUS = 5
"""The Gaussian window of Wang et al. (2004): sigma 1.5, 11 x 11 pixels."""
SSIM_K1, SSIM_K2 = 0.01, 0.03


def _pairs(first: torch.Tensor, second: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if first.shape != second.shape or first.dim() < 2:
        raise InputError(
            f"Compare maps of one shape [k, ...]; got {tuple(first.shape)} and "
            f"{tuple(second.shape)}."
        )
    return first.detach().flatten(1).cpu().double(), second.detach().flatten(1).cpu().double()


def ranks(values: torch.Tensor) -> torch.Tensor:
    """1-based ranks along dim 1 of [k, n]; tied values share their mean rank (as scipy does)."""
    ordered = values.sort(dim=1).values
    below = torch.searchsorted(ordered, values, right=False)
    up_to = torch.searchsorted(ordered, values, right=True)
    return (below + up_to + 1).double() / 2


def spearman(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Spearman's rank correlation of each row pair [k]: the Pearson correlation of the ranks.

    NaN for a row where either map is constant (its ranks have no spread), since a constant map
    has no order to agree or disagree with.
    """
    a, b = (ranks(values) for values in _pairs(first, second))
    a = a - a.mean(dim=1, keepdim=True)
    b = b - b.mean(dim=1, keepdim=True)
    spread = (a.square().sum(dim=1) * b.square().sum(dim=1)).sqrt()
    return torch.where(spread > 0, (a * b).sum(dim=1) / spread, math.nan)


def _gaussian_window(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    offsets = torch.arange(-SSIM_RADIUS, SSIM_RADIUS + 1, dtype=dtype, device=device)
    line = torch.exp(-(offsets**2) / (2 * SSIM_SIGMA**2))
    line = line / line.sum()
    return torch.outer(line, line).view(1, 1, *line.shape, *line.shape)


def ssim(first: torch.Tensor, second: torch.Tensor, data_range: float = 1.0) -> torch.Tensor:
    """Mean structural similarity of each pair of maps [k, H, W] (Wang et al., 2004).

    Local means, variances and covariance come from an 11 x 11 Gaussian window (sigma 1.5,
    population moments), averaged over the positions where the window fits inside the map:
    ``skimage.metrics.structural_similarity(a, b, data_range=..., gaussian_weights=True,
    sigma=1.5, use_sample_covariance=False)``. 1 for identical maps.
    """
    if first.dim() != 3 or first.shape != second.shape:
        raise InputError(
            f"SSIM compares maps [k, H, W] of one shape; got {tuple(first.shape)} and "
            f"{tuple(second.shape)}."
        )
    size = 2 * SSIM_RADIUS + 1
    if min(first.shape[1:]) < size:
        raise InputError(f"SSIM needs maps of at least {size} x {size} pixels.")
    a = first.detach().cpu().double().unsqueeze(1)
    b = second.detach().cpu().double().unsqueeze(1)
    window = _gaussian_window(a.dtype, a.device)

    def local(values: torch.Tensor) -> torch.Tensor:
        return F.conv2d(values, window)

    mean_a, mean_b = local(a), local(b)
    var_a = local(a * a) - mean_a**2
    var_b = local(b * b) - mean_b**2
    covariance = local(a * b) - mean_a * mean_b
    c1, c2 = (SSIM_K1 * data_range) ** 2, (SSIM_K2 * data_range) ** 2
    index = ((2 * mean_a * mean_b + c1) * (2 * covariance + c2)) / (
        (mean_a**2 + mean_b**2 + c1) * (var_a + var_b + c2)
    )
    return index.flatten(1).mean(dim=1)
