"""Integrated Gradients completeness: do a pick's attributions add up to what the model says?

Sundararajan et al., "Axiomatic Attribution for Deep Networks" (ICML 2017): the exact path
integral satisfies sum(IG(x)) = F(x) - F(baseline), where F is the explained logit. The
midpoint rule with ``steps`` points misses by an error that shrinks as the steps grow; this
module measures that error per picked image, and in automatic mode doubles the steps until it
is at most a tolerance. The reported error equals captum's ``return_convergence_delta`` for
``method='riemann_middle'`` and the same steps.

Any baseline image b works through the engine's constant one: IG of F from b to x equals IG of
F_b(z) = F(z + b) from 0 to z = x - b, the same path point by point.

Example::

    rows = completeness(model, images, [3, 7], baseline="blurred", steps="auto")
    [(row.steps, row.relative_error) for row in rows]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.trust.baselines import BASELINES, baseline_images
from gradpick.trust.engine import (
    MAX_STEPS,
    MethodSettings,
    attribute_maps,
    check_count,
    held_classes,
    logits_of,
    picked_images,
    served_view,
)

__all__ = [
    "Completeness",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_TOLERANCE",
    "FIRST_AUTO_STEPS",
    "check_baseline",
    "completeness",
    "steps_to_try",
]

DEFAULT_TOLERANCE = 0.05
DEFAULT_MAX_STEPS = 512
FIRST_AUTO_STEPS = 16
"""Automatic mode tries 16, 32, 64, ... steps up to its cap (the cap itself last)."""


@dataclass(frozen=True)
class Completeness:
    """One picked image: the attributions' sum against F(x) - F(baseline)."""

    index: int
    target_class: int
    baseline: str
    steps: int
    automatic: bool
    attribution_sum: float
    output: float
    """F(x): the explained logit at the image."""
    baseline_output: float
    """F(baseline): the explained logit at the baseline."""
    tolerance: float | None = None
    """The relative error automatic mode aimed at (None for fixed steps)."""

    @property
    def reached(self) -> bool:
        """Whether the error is within ``tolerance`` (True when there was none to reach)."""
        return self.tolerance is None or self.relative_error <= self.tolerance

    @property
    def verdict(self) -> str:
        """What this image's figure means, in words: a miss is reported, not raised, so one
        image that converges slowly keeps the other images' figures."""
        error = _percent(self.relative_error)
        if self.tolerance is None:
            return f"{error} error with {self.steps:,} fixed steps"
        if self.reached:
            return f"within {_percent(self.tolerance)} at {self.steps:,} steps"
        return (
            f"did not reach {_percent(self.tolerance)} within {self.steps:,} steps (still "
            f"{error}, F(x) - F(baseline) = {self.difference:.4g}): the path integral "
            "converges slowly here; more steps or another baseline may reach it"
        )

    @property
    def difference(self) -> float:
        """F(x) - F(baseline), what the attributions should add up to."""
        return self.output - self.baseline_output

    @property
    def delta(self) -> float:
        """sum - (F(x) - F(baseline)): captum's convergence delta."""
        return self.attribution_sum - self.difference

    @property
    def relative_error(self) -> float:
        """|delta| / |F(x) - F(baseline)| (infinite when the difference is 0 but delta is not)."""
        if self.difference == 0:
            return 0.0 if self.delta == 0 else math.inf
        return abs(self.delta) / abs(self.difference)


def _percent(share: float) -> str:
    """0.05 as '5%', 0.0005 as '0.05%': three significant digits, so small tolerances show."""
    return f"{100 * share:.3g}%" if math.isfinite(share) else "infinite"


class _Shifted(nn.Module):
    """F_b(z) = F(z + b) for one baseline image b, so IG from b is IG of F_b from 0."""

    offset: torch.Tensor

    def __init__(self, model: nn.Module, offset: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("offset", offset.detach().unsqueeze(0), persistent=False)

    def forward(self, shifted: torch.Tensor) -> torch.Tensor:
        return self.model(shifted + self.offset)


def _check_tolerance(tolerance: float) -> float:
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float):
        raise InputError(f"The tolerance must be a number; got {tolerance!r}.")
    if not (math.isfinite(tolerance) and 0 < tolerance < 1):
        raise InputError(
            f"The tolerance is a relative error: give a number between 0 and 1; got {tolerance!r}."
        )
    return float(tolerance)


def _auto_steps(cap: int) -> list[int]:
    tried = []
    steps = min(FIRST_AUTO_STEPS, cap)
    while steps < cap:
        tried.append(steps)
        steps *= 2
    return [*tried, cap]


def check_baseline(baseline: str) -> str:
    if baseline not in BASELINES:
        raise InputError(f"Unknown baseline '{baseline}'; use one of {', '.join(BASELINES)}.")
    return baseline


def steps_to_try(steps: int | str, tolerance: float, max_steps: int) -> list[int]:
    """The step counts to try in turn: just ``steps``, or for "auto" 16, 32, ... up to the cap."""
    if steps != "auto":
        return [check_count("Integrated Gradients steps", steps, MAX_STEPS)]
    _check_tolerance(tolerance)
    check_count("The most Integrated Gradients steps", max_steps, MAX_STEPS, least=2)
    return _auto_steps(max_steps)


def completeness(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    classes: int | Sequence[int] | torch.Tensor | None = None,
    baseline: str = "black",
    steps: int | Literal["auto"] = "auto",
    tolerance: float = DEFAULT_TOLERANCE,
    max_steps: int = DEFAULT_MAX_STEPS,
    seed: int = 0,
) -> list[Completeness]:
    """IG completeness of each of ``images[indices]`` for the logit of its held class.

    ``steps``: a fixed number of midpoint-rule points, or ``"auto"``: the fewest of 16, 32,
    64, ... (at most ``max_steps``) whose relative error is at most ``tolerance``, per image.
    An image that cannot reach the tolerance within the cap keeps its last figure, with
    ``reached`` False and a ``verdict`` that says so; the other images are unaffected.
    """
    check_baseline(baseline)
    automatic = steps == "auto"
    tried = steps_to_try(steps, tolerance, max_steps)
    served = served_view(model)
    held = held_classes(served, images, indices, classes)
    picked = picked_images(served, images, indices)
    references = baseline_images(picked, baseline, indices, seed)
    logits = logits_of(served, torch.cat([picked, references]))
    chosen = held.to(logits.device).repeat(2).unsqueeze(1)
    outputs = logits.gather(1, chosen).squeeze(1).cpu().double()
    count = len(indices)
    rows = []
    for position, index in enumerate(indices):
        shifted = _Shifted(served, references[position]).eval()
        path = (picked[position] - references[position]).unsqueeze(0)
        row = None
        for points in tried:
            maps = attribute_maps(
                shifted,
                path,
                [0],
                "integrated_gradients",
                held[position : position + 1],
                MethodSettings(steps=points),
            )
            row = Completeness(
                index=int(index),
                target_class=int(held[position]),
                baseline=baseline,
                steps=points,
                automatic=automatic,
                attribution_sum=float(maps.cpu().double().sum()),
                output=float(outputs[position]),
                baseline_output=float(outputs[count + position]),
                tolerance=tolerance if automatic else None,
            )
            if row.reached:
                break
        assert row is not None
        rows.append(row)
    return rows
