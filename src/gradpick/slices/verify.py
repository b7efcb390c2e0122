"""Is a slice's evidence its cause? Remove it, and remove the same area elsewhere.

A cluster of errors with similar maps may still be a coincidence of the descriptors. The test
is an intervention: for each error of the slice, the window around its map's peak (the peak
window of ``gradpick.slices.features``) is removed and filled by ROAD's noisy linear
imputation (``gradpick.trust.road.impute``, Rong et al., ICML 2022: filled from the neighbours,
not black, so the fill itself is not a shock to the model), and the model predicts again. The
control removes a window of the same size at ``RANDOM_DRAWS`` uniformly random positions of
the same images. Removing the cause of a systematic failure changes the prediction on most of
the slice; removing as much image elsewhere changes few.

The slice is *verified* when the evidence removal changes predictions at least ``RATIO`` times
as often as the random control (a faithful map's peak alone does 2 to 5 times) and the
difference is significant: a one-sided Fisher exact
test on the 2 x 2 table (evidence or random removal; changed or not), p < ``SIGNIFICANCE``.
Never on an absolute rate: an error of a low-margin image flips under almost any removal, and
so does its control.

A cause without a place (the image's colour: a grayscale subgroup) has no window to remove.
A slice whose images are clearly greyer or more colourful than the rest of its class is also
tested by changing that property (``colour_interventions``): correctly called images of the
slice's label get the slice's colour saturation (``saturated``), and the test counts how often
they are then called what the slice's errors are called; the control gives the same change to
correctly called images of the other classes. A model that fails on the slice *because* of its
colour turns the recoloured images of that class into its errors; a colour change that confuses
the model about everything (grey images look like airplanes and ships to many models) moves
the control as much. This test is judged on the odds ratio, the effect Fisher's test tests:
its control is other images, which the colour change may move often, and a ratio of rates
cannot exceed 1 / (the control's rate) (x5 at most when greying calls a fifth of the other
classes' images airplane, however surely it turns the slice's class), where the odds ratio
has no ceiling. The removal's control is the same images, where a high rate means fragile
calls that any removal flips, and there the ratio of rates keeps its ceiling on purpose. The
same threshold (``RATIO``) and Fisher test decide, at half the significance level when a
slice gets both tests (Bonferroni).

Example::

    changed, control = interventions(model, images, maps, predictions)
    effect = judged(changed, control)
    effect.verified, effect.ratio, effect.p_value
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.outputs.inference import infer
from gradpick.slices.features import LUMA, peak_windows, window_masks, window_side
from gradpick.trust.road import ROAD_NOISE, impute

__all__ = [
    "RANDOM_DRAWS",
    "RATIO",
    "SIGNIFICANCE",
    "Effect",
    "colour_interventions",
    "fisher_greater",
    "interventions",
    "judged",
    "odds_ratio",
    "saturated",
]

RANDOM_DRAWS = 4
"""Random windows per image in the control."""
RATIO = 8.0
"""How many times as often the evidence removal must change the prediction as the control.
Chosen on the benchmark's planting seed 0 (``gradpick bench-slices``): removing the peak of a
faithful map changes a low-margin error 2 to 5 times as often as a random removal on any
model (the clean shipped model's slices reach 4.1), a planted shortcut's 15 times. The
colour test's odds ratio meets the same threshold: 46 to 53 for the planted grayscale birds on
seeds 0 and 1 (their ratio of rates 6.3 to 8.1, as the sample drawn fell), 4.5 at most for the
other slices of both models with their label's images greyed whole."""
SIGNIFICANCE = 0.01
"""The largest p-value of a verified slice."""


@dataclass(frozen=True)
class Effect:
    """What removing a slice's evidence did, against removing the same area at random."""

    evidence_change: float
    """Share of the slice's tested errors whose prediction changed with the evidence removed."""
    random_change: float
    """Share of the random removals (images x draws) that changed the prediction."""
    ratio: float
    """evidence_change / random_change (infinite when the control changed nothing)."""
    p_value: float
    """One-sided Fisher exact test that the evidence removal changes more often."""
    tested: int
    """Images tested."""
    verified: bool
    odds_ratio: float = 1.0
    """The odds of a change with the evidence removed over the control's odds (infinite when
    the control never changed or the evidence removal always did)."""
    statistic: str = "ratio"
    """Which of the two decided ``verified``: ``"ratio"`` (of rates) or ``"odds_ratio"``."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (an infinite ratio as None)."""
        values = asdict(self)
        for name in ("ratio", "odds_ratio"):
            values[name] = getattr(self, name) if math.isfinite(getattr(self, name)) else None
        return values


def _removed(
    images: torch.Tensor, hidden: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """ROAD's fill: linear imputation from the neighbours plus ``ROAD_NOISE`` on the filled
    pixels, kept in [0, 1]."""
    filled = impute(images, hidden)
    noise = torch.randn(filled.shape, generator=generator, dtype=torch.float64).to(filled)
    filled = filled + ROAD_NOISE * noise * hidden.unsqueeze(1).to(filled)
    return filled.clamp(0, 1)


def interventions(
    model: nn.Module,
    images: torch.Tensor,
    maps: torch.Tensor,
    predictions: torch.Tensor,
    draws: int = RANDOM_DRAWS,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Whether each prediction changed with its peak window removed [n] (bool), and with a
    window of the same size removed at each of ``draws`` random positions [n, draws]."""
    if images.ndim != 4 or maps.shape != (images.shape[0], *images.shape[2:]):
        raise InputError(
            f"Interventions need images [n, 3, H, W] with maps [n, H, W]; got "
            f"{tuple(images.shape)} and {tuple(maps.shape)}."
        )
    count, _, height, width = images.shape
    if count == 0:
        return np.zeros(0, dtype=bool), np.zeros((0, draws), dtype=bool)
    side = window_side(height, width)
    generator = torch.Generator().manual_seed(seed)
    rows, columns = peak_windows(maps, side)
    random_rows = torch.randint(0, height - side + 1, (draws, count), generator=generator)
    random_columns = torch.randint(0, width - side + 1, (draws, count), generator=generator)
    hidden = torch.cat(
        [
            window_masks((height, width), rows, columns, side),
            window_masks((height, width), random_rows.flatten(), random_columns.flatten(), side),
        ]
    )
    tiled = images.repeat(1 + draws, 1, 1, 1)
    called = infer(model, _removed(tiled, hidden, generator)).predictions
    changed = (called != predictions.repeat(1 + draws)).numpy()
    return changed[:count], changed[count:].reshape(draws, count).T.copy()


def saturated(images: torch.Tensor, factor: float) -> torch.Tensor:
    """Images [n, 3, H, W] in [0, 1] with their colour scaled by ``factor`` about each pixel's
    luma (Rec. 601): 0 is grayscale, 1 leaves them, above 1 is more colourful (kept in
    [0, 1]). Brightness stays: the luma of a pixel is unchanged wherever no channel clips."""
    if images.ndim != 4 or images.shape[1] != 3 or factor < 0:
        raise InputError(
            f"Recolouring needs RGB images [n, 3, H, W] and a factor >= 0; got "
            f"{tuple(images.shape)} and {factor}."
        )
    weights = torch.tensor(LUMA, dtype=images.dtype, device=images.device).view(1, 3, 1, 1)
    luma = (images * weights).sum(dim=1, keepdim=True)
    return (luma + factor * (images - luma)).clamp(0, 1)


def colour_interventions(
    model: nn.Module, treated: torch.Tensor, control: torch.Tensor, target: int, factor: float
) -> tuple[np.ndarray, np.ndarray]:
    """Whether each ``treated`` image [n, 3, H, W] (correctly called images of the slice's
    label) is called ``target`` (what the slice's errors are called) once ``saturated`` by
    ``factor`` [n], and the same for the ``control`` images (of other classes) [m, 1]."""
    if treated.ndim != 4 or control.ndim != 4:
        raise InputError(
            f"Colour interventions need images [n, 3, H, W]; got {tuple(treated.shape)} and "
            f"{tuple(control.shape)}."
        )
    both = torch.cat([treated, control])
    if both.shape[0] == 0:
        return np.zeros(0, dtype=bool), np.zeros((0, 1), dtype=bool)
    called = infer(model, saturated(both, factor)).predictions.numpy() == target
    return called[: len(treated)], called[len(treated) :, None].copy()


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_greater(changed: int, tested: int, control_changed: int, control_tested: int) -> float:
    """One-sided Fisher exact p-value that the first group changes more often than the second:
    P(X >= changed) for X hypergeometric with the table's margins."""
    total = tested + control_tested
    changes = changed + control_changed
    if tested == 0 or changes == 0:
        return 1.0
    denominator = _log_choose(total, changes)
    top = min(tested, changes)
    terms = [
        _log_choose(tested, x) + _log_choose(control_tested, changes - x) - denominator
        for x in range(changed, top + 1)
        if changes - x <= control_tested
    ]
    if not terms:
        return 1.0
    peak = max(terms)
    return float(min(1.0, math.exp(peak) * sum(math.exp(t - peak) for t in terms)))


def odds_ratio(share: float, control_share: float) -> float:
    """(p / (1 - p)) / (q / (1 - q)) of two shares in [0, 1]: 1 when they are equal (both 0 or
    both 1 included), infinite when the first is 1 or the second 0 (and they differ), 0 when
    the first is 0 or the second 1."""
    if share == control_share:
        return 1.0
    if share >= 1 or control_share <= 0:
        return math.inf
    if share <= 0 or control_share >= 1:
        return 0.0
    return (share / (1 - share)) / (control_share / (1 - control_share))


def judged(
    changed: np.ndarray,
    control: np.ndarray,
    ratio: float = RATIO,
    alpha: float = SIGNIFICANCE,
    on_odds: bool = False,
) -> Effect:
    """The effect of the evidence removal against its control (see the module's docstring):
    verified when the ratio of rates (``on_odds``: the odds ratio) reaches ``ratio`` and the
    Fisher test's p-value is under ``alpha``."""
    tested = int(len(changed))
    hits, control_hits = int(np.sum(changed)), int(np.sum(control))
    evidence_change = hits / tested if tested else 0.0
    random_change = control_hits / control.size if control.size else 0.0
    if random_change > 0:
        times = evidence_change / random_change
    else:
        times = math.inf if evidence_change > 0 else 0.0
    odds = odds_ratio(evidence_change, random_change)
    p_value = fisher_greater(hits, tested, control_hits, int(control.size))
    decisive = odds if on_odds else times
    return Effect(
        evidence_change=evidence_change,
        random_change=random_change,
        ratio=times,
        p_value=p_value,
        tested=tested,
        verified=bool(tested > 0 and decisive >= ratio and p_value < alpha),
        odds_ratio=odds,
        statistic="odds_ratio" if on_odds else "ratio",
    )
