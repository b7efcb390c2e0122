"""Deletion and insertion curves: does removing what a map ranks first hurt the model most?

Petsiuk et al., "RISE" (BMVC 2018). Pixels are removed (set to black) or revealed (on a blurred
copy of the image) in the order of |attribution|, largest first, in ``steps`` equal shares, and
the model's probability of the held class is read after each share; the same is done in a
random order, the reference a map must beat. A faithful map gives a low deletion area (the
probability falls at once) and a high insertion area. Every step is one forward of all picks,
all orders and both curves together.

Example::

    orders = {"gradient": attribution_order(maps)}
    curves = faithfulness(model, images, [3, 7], orders)
    curves["gradient"].deletion_auc, curves[RANDOM].deletion_auc
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.outputs.inference import probabilities_of
from gradpick.trust.baselines import BLUR_SIGMA, blurred, seeded_generator
from gradpick.trust.engine import (
    check_count,
    held_classes,
    logits_of,
    picked_images,
    saliency,
    served_view,
)

__all__ = [
    "Curves",
    "DEFAULT_STEPS",
    "INSERTION_START",
    "MAX_CURVE_STEPS",
    "RANDOM",
    "REMOVED",
    "attribution_order",
    "faithfulness",
    "random_order",
]

RANDOM = "random"
"""The name of the random-order curves among the results."""
DEFAULT_STEPS = 16
MAX_CURVE_STEPS = 1024
REMOVED = "black"
INSERTION_START = f"blurred image (Gaussian, sigma {BLUR_SIGMA:g} px)"


@dataclass(frozen=True)
class Curves:
    """Probabilities [k, steps + 1] of the held class after each share of pixels."""

    fractions: torch.Tensor
    """The share of pixels removed or revealed at each point [steps + 1], from 0 to 1."""
    deletion: torch.Tensor
    insertion: torch.Tensor

    @property
    def deletion_auc(self) -> torch.Tensor:
        """Area under each pick's deletion curve [k] (trapezoid rule; lower is better)."""
        return torch.trapezoid(self.deletion, self.fractions, dim=1)

    @property
    def insertion_auc(self) -> torch.Tensor:
        """Area under each pick's insertion curve [k] (higher is better)."""
        return torch.trapezoid(self.insertion, self.fractions, dim=1)


def attribution_order(maps: torch.Tensor) -> torch.Tensor:
    """Pixel positions [k, H * W], largest |attribution| (over channels) first; ties by position."""
    return saliency(maps).flatten(1).cpu().sort(dim=1, descending=True, stable=True).indices


def random_order(indices: Sequence[int], pixels: int, seed: int = 0) -> torch.Tensor:
    """A random pixel order per image [k, pixels], seeded by (seed, batch index)."""
    return torch.stack(
        [torch.randperm(pixels, generator=seeded_generator(seed, index)) for index in indices]
    )


def faithfulness(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    orders: Mapping[str, torch.Tensor],
    classes: int | Sequence[int] | torch.Tensor | None = None,
    steps: int = DEFAULT_STEPS,
    seed: int = 0,
    output: str = "softmax",
) -> dict[str, Curves]:
    """Deletion and insertion curves of ``images[indices]`` for each pixel order, plus random.

    ``orders`` maps a name (an attribution method) to pixel positions [k, H * W], most important
    first (``attribution_order``). ``classes``: the class whose probability is read (default:
    the model's prediction on the unchanged image); for a sigmoid model (``output``) its label's
    own sigmoid, never a softmax over labels that are not exclusive.
    """
    check_count("Deletion and insertion steps", steps, MAX_CURVE_STEPS)
    if RANDOM in orders:
        raise InputError(f"'{RANDOM}' names the random-order reference; rename that order.")
    served = served_view(model)
    held = held_classes(served, images, indices, classes)
    picked = picked_images(served, images, indices)
    count, _, height, width = picked.shape
    pixels = height * width
    named = {**orders, RANDOM: random_order(indices, pixels, seed)}
    for name, order in named.items():
        if tuple(order.shape) != (count, pixels):
            raise InputError(
                f"The '{name}' order must be [k, H * W] = [{count}, {pixels}]; got "
                f"{tuple(order.shape)}."
            )
    # rank[o, i, p]: when pixel p of pick i goes under order o (0: first).
    rank = torch.stack([order.argsort(dim=1) for order in named.values()]).to(picked.device)
    canvas = blurred(picked)
    chosen = held.to(picked.device).repeat(2 * len(named)).unsqueeze(1)
    fractions = torch.linspace(0, 1, steps + 1, dtype=torch.float64)
    probabilities = []
    for share in range(steps + 1):
        taken = (rank < round(share * pixels / steps)).view(len(named), count, 1, height, width)
        taken = taken.to(picked.dtype)
        deleted = picked * (1 - taken)  # removed pixels are black
        inserted = canvas * (1 - taken) + picked * taken
        batch = torch.cat([deleted, inserted]).reshape(-1, *picked.shape[1:])
        logits = logits_of(served, batch)
        scores = probabilities_of(logits, output)
        probabilities.append(scores.gather(1, chosen).squeeze(1).cpu().double())
    table = torch.stack(probabilities, dim=1).view(2, len(named), count, steps + 1)
    return {
        name: Curves(fractions, table[0, position], table[1, position])
        for position, name in enumerate(named)
    }
