"""ROAD: remove pixels in a map's order and fill them from their neighbours, not with black.

Rong et al., "A Consistent and Efficient Evaluation Strategy for Attribution Methods" (ICML
2022). Black or blurred pixels (the deletion curves) are far from the data, so the model's drop
measures the shock of the fill as much as the pixels' importance, and the fill's shape leaks
which pixels went. ROAD removes the most relevant (MoRF) or the least relevant (LeRF) share of
pixels and fills them by noisy linear imputation: each removed pixel is the weighted mean of
its 8 neighbours (direct ones weight 1/6, diagonal ones 1/12, over the neighbours inside the
image), which couples all removed pixels into one sparse linear system, solved here per
channel by conjugate gradients on the stencil (the system is symmetric positive definite while
any pixel is kept); then Gaussian noise is added to the filled pixels. A faithful map gives a
low MoRF area and a high LeRF area: their gap (LeRF - MoRF) is the verdict.

The noise is drawn per pick from a CPU generator seeded by (seed, batch index), the same for
every method and both orders, so methods differ only by the pixels they rank. Every share is
one forward of all picks, all methods and both orders together.

Example::

    orders = {"gradient": attribution_order(maps)}
    curves = road(model, images, [3, 7], orders)
    curves["gradient"].lerf_auc - curves["gradient"].morf_auc
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gradpick.errors import InputError
from gradpick.outputs.inference import probabilities_of
from gradpick.trust.baselines import seeded_generator
from gradpick.trust.engine import held_classes, logits_of, picked_images, served_view

__all__ = [
    "DIAGONAL_WEIGHT",
    "DIRECT_WEIGHT",
    "ROAD_NOISE",
    "ROAD_SHARES",
    "RoadCurves",
    "check_noise",
    "check_shares",
    "impute",
    "road",
]

DIRECT_WEIGHT = 1 / 6
DIAGONAL_WEIGHT = 1 / 12
ROAD_SHARES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
"""Shares of pixels removed: the paper's 10% to 90%, and the unchanged image at 0."""
ROAD_NOISE = 0.01
"""Standard deviation of the noise added to filled pixels, in the images' own units (the
reference implementation's default, tleemann/road_evaluation, as in pytorch-grad-cam)."""
SOLVE_TOLERANCE = 1e-10
"""Conjugate gradients stop when every system's residual is this small relative to its
right-hand side (in float64)."""


@dataclass(frozen=True)
class RoadCurves:
    """Probabilities [k, shares] of the held class with each share of pixels removed."""

    fractions: torch.Tensor
    """The share of pixels removed at each point [shares]."""
    morf: torch.Tensor
    """Most relevant pixels removed first."""
    lerf: torch.Tensor
    """Least relevant pixels removed first."""

    @property
    def morf_auc(self) -> torch.Tensor:
        """Area under each pick's MoRF curve [k] (trapezoid rule; lower is better)."""
        return torch.trapezoid(self.morf, self.fractions, dim=1)

    @property
    def lerf_auc(self) -> torch.Tensor:
        """Area under each pick's LeRF curve [k] (higher is better)."""
        return torch.trapezoid(self.lerf, self.fractions, dim=1)

    @property
    def gap(self) -> torch.Tensor:
        """LeRF area - MoRF area [k]: positive when the map ranks the pixels that matter first."""
        return self.lerf_auc - self.morf_auc


def check_shares(shares: Sequence[float]) -> tuple[float, ...]:
    """Increasing shares in [0, 1), at least two (a share of 1 leaves nothing to fill from)."""
    values = tuple(shares)
    if (
        len(values) < 2
        or any(isinstance(value, bool) or not isinstance(value, int | float) for value in values)
        or not all(math.isfinite(value) and 0 <= value < 1 for value in values)
        or any(later <= earlier for earlier, later in zip(values, values[1:], strict=False))
    ):
        raise InputError(
            "ROAD shares are the fractions of pixels removed: give at least two increasing "
            f"numbers from 0 up to (not including) 1; got {list(values)!r}."
        )
    return tuple(float(value) for value in values)


def check_noise(noise: float) -> float:
    """A standard deviation of at least 0 for the filled pixels' noise."""
    if (
        isinstance(noise, bool)
        or not isinstance(noise, int | float)
        or not (math.isfinite(noise) and noise >= 0)
    ):
        raise InputError(f"ROAD's noise must be a standard deviation of at least 0; got {noise!r}.")
    return float(noise)


NEIGHBOURS = tuple(
    (dy, dx, DIRECT_WEIGHT if dy == 0 or dx == 0 else DIAGONAL_WEIGHT)
    for dy in (-1, 0, 1)
    for dx in (-1, 0, 1)
    if (dy, dx) != (0, 0)
)
"""The 8 neighbours (row offset, column offset, weight)."""


def _neighbours(field: torch.Tensor) -> torch.Tensor:
    """The weighted sum of each pixel's neighbours inside the image, [n, 1, H, W].

    Shifted slices of a zero-padded copy (in float64 on the CPU no slower than a 3 x 3
    convolution), with the weights written out as the paper gives them.
    """
    height, width = field.shape[-2:]
    padded = F.pad(field, (1, 1, 1, 1))
    total = torch.zeros_like(field)
    for dy, dx, weight in NEIGHBOURS:
        total.add_(padded[..., 1 + dy : 1 + dy + height, 1 + dx : 1 + dx + width], alpha=weight)
    return total


def _dot(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Per-system inner products [n, 1, 1, 1] of fields [n, 1, H, W], as one batched product."""
    count = first.shape[0]
    return torch.bmm(first.reshape(count, 1, -1), second.reshape(count, -1, 1)).view(-1, 1, 1, 1)


def _ratio(top: torch.Tensor, bottom: torch.Tensor) -> torch.Tensor:
    """top / bottom where bottom > 0, else 0 (a system already solved takes no more steps)."""
    return torch.where(bottom > 0, top / bottom.clamp_min(torch.finfo(bottom.dtype).tiny), 0.0)


def _conjugate_gradients(
    operator: Callable[[torch.Tensor], torch.Tensor], right: torch.Tensor, most: int
) -> torch.Tensor:
    """Solve operator(x) = right for a batch of symmetric positive definite systems.

    Each system has its own step sizes; all stop when every residual is within
    ``SOLVE_TOLERANCE`` of its right-hand side, or after ``most`` steps (exact arithmetic needs
    at most as many as there are unknowns). Updates are in place: this is the hot loop of ROAD.
    """
    solution = torch.zeros_like(right)
    residual = right.clone()
    direction = residual.clone()
    squared = _dot(residual, residual)
    limit = (SOLVE_TOLERANCE**2) * squared
    for _ in range(most):
        if bool((squared <= limit).all()):
            break
        product = operator(direction)
        step = _ratio(squared, _dot(direction, product))
        solution.addcmul_(step, direction)
        residual.addcmul_(step, product, value=-1)
        following = _dot(residual, residual)
        direction.mul_(_ratio(following, squared)).add_(residual)
        squared = following
    return solution


def impute(images: torch.Tensor, removed: torch.Tensor) -> torch.Tensor:
    """``images`` [n, C, H, W] with the ``removed`` [n, H, W] pixels linearly imputed (no noise).

    Each removed pixel x_i solves (sum_j w_ij) x_i - sum_j w_ij x_j = 0 over its neighbours j
    inside the image, known or removed: one system per image and channel, solved together by
    conjugate gradients in float64 (on the CPU for MPS, which has no float64).
    """
    if removed.shape != (images.shape[0], *images.shape[2:]):
        raise InputError(
            f"The removed pixels must be [n, H, W] for images {tuple(images.shape)}; got "
            f"{tuple(removed.shape)}."
        )
    home, dtype = images.device, images.dtype
    device = torch.device("cpu") if home.type == "mps" else home
    count, channels, height, width = images.shape
    values = images.detach().to(device, torch.float64).reshape(-1, 1, height, width)
    unknown = removed.to(device).repeat_interleave(channels, dim=0).unsqueeze(1)
    unknown = unknown.to(torch.float64)
    weight = _neighbours(torch.ones(1, 1, height, width, dtype=torch.float64, device=device))

    def operator(field: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(_neighbours(field).neg_(), weight, field).mul_(unknown)

    known = values * (1 - unknown)
    right = _neighbours(known).mul_(unknown)
    most = int(unknown.flatten(1).sum(dim=1).max().item())
    solution = _conjugate_gradients(operator, right, most)
    filled = known + solution
    return filled.view(count, channels, height, width).to(home, dtype)


def _noise(indices: Sequence[int], shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Standard normal draws [k, *shape] per pick, seeded by (seed, batch index)."""
    return torch.stack(
        [
            torch.randn(shape, generator=seeded_generator(seed, index), dtype=torch.float64)
            for index in indices
        ]
    )


def road(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    orders: Mapping[str, torch.Tensor],
    classes: int | Sequence[int] | torch.Tensor | None = None,
    shares: Sequence[float] = ROAD_SHARES,
    noise: float = ROAD_NOISE,
    seed: int = 0,
    seeds: Sequence[int] | None = None,
    output: str = "softmax",
) -> dict[str, RoadCurves]:
    """MoRF and LeRF curves of ``images[indices]`` for each pixel order.

    ``orders`` maps a name (an attribution method) to pixel positions [k, H * W], most important
    first (``faithfulness.attribution_order``). At share s the first (MoRF) or last (LeRF)
    round(s * H * W) positions are removed and imputed. ``classes``: the class whose
    probability is read (default: the model's prediction on the unchanged image). ``noise``:
    the standard deviation added to the filled pixels (0 for plain linear imputation).
    ``seeds``: the batch index each pick's noise is seeded by, when ``images`` holds the picks
    alone (default: ``indices``). ``output``: the model's output kind; a sigmoid model's label
    is read by its own sigmoid.
    """
    fractions = check_shares(shares)
    noise = check_noise(noise)
    served = served_view(model)
    held = held_classes(served, images, indices, classes)
    picked = picked_images(served, images, indices)
    count, channels, height, width = picked.shape
    pixels = height * width
    for name, order in orders.items():
        if tuple(order.shape) != (count, pixels):
            raise InputError(
                f"The '{name}' order must be [k, H * W] = [{count}, {pixels}]; got "
                f"{tuple(order.shape)}."
            )
    # rank[o, i, p]: when pixel p of pick i goes under order o (0: first).
    rank = torch.stack([order.argsort(dim=1) for order in orders.values()]).to(picked.device)
    seeded_by = indices if seeds is None else seeds
    draws = _noise(seeded_by, (len(fractions), channels, height, width), seed).to(picked.device)
    chosen = held.to(picked.device).repeat(2 * len(orders)).unsqueeze(1)
    tiled = picked.repeat(2 * len(orders), 1, 1, 1)
    probabilities = []
    for position, share in enumerate(fractions):
        taken = round(share * pixels)
        morf = rank < taken
        lerf = rank >= pixels - taken
        removed = torch.stack([morf, lerf]).view(-1, height, width)
        filled = impute(tiled, removed)
        jitter = (noise * draws[:, position]).to(picked.dtype).repeat(2 * len(orders), 1, 1, 1)
        batch = filled + jitter * removed.unsqueeze(1).to(picked.dtype)
        logits = logits_of(served, batch)
        scores = probabilities_of(logits, output)
        probabilities.append(scores.gather(1, chosen).squeeze(1).cpu().double())
    table = torch.stack(probabilities, dim=1).view(2, len(orders), count, len(fractions))
    steps = torch.tensor(fractions, dtype=torch.float64)
    return {
        name: RoadCurves(steps, table[0, position], table[1, position])
        for position, name in enumerate(orders)
    }
