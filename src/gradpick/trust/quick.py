"""Cheap checks of the maps a user is looking at, cheap enough to run with every click.

Per pick and method, a verdict (``passes`` / ``weak`` / ``fails``) with its figure and a one-line
meaning, from checks that cost about one gradient pass of the picks each:

* **class**: the map against the same method's map of the runner-up class (the most likely
  class other than the explained one), by the Spearman rank correlation of |map| (Sixt et al.
  2020; the Trust tab's class sensitivity, against the runner-up only). A map that barely
  changes with the class explains the image, not the class.
* **randomised**: the map against the map of a copy of the model whose last parametrised layer
  is re-initialised (seeded; the Trust tab's first cascade step, Adebayo et al. 2018). The copy
  is made once per served model and kept (``randomised_copy``); the served model is never
  touched.
* **completeness** (Integrated Gradients only): |sum of the attributions - (F(x) - F(b))| /
  |F(x) - F(b)|, from the shown result and one forward of the baseline.
* **ROAD** (three shares): the mean gap LeRF - MoRF of the held class's probability (it
  imputes pixels by a linear solve, so it is the slowest).

Every check but completeness (free) runs only when its expected cost fits in the time budget
left (``budget_s``); one that does not is named in a "Trust tab" badge instead, since the full
checks are there.

Thresholds (``THRESHOLDS``): Spearman below 0.7 passes, 0.7 to 0.9 is weak, 0.9 and above fails
(the Trust tab flags class-insensitive maps at the same 0.9); completeness within 5 % passes
(``gradpick check``'s default tolerance), up to 25 % is weak; a ROAD gap of at least 0.1 passes,
a positive one is weak, none fails. A constant map (a ReLU'd class map of no evidence) has no
order: its Spearman is NaN and its verdict weak.

Example::

    checks = quick_checks(model, images, [3, 7], "gradient", "logit", classes)
    [(pick.index, pick.verdict, pick.reason) for pick in checks.picks]
"""

from __future__ import annotations

import copy
import math
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gradpick import attribution
from gradpick.attribution import Attribution
from gradpick.gradients.request import GradientRequest
from gradpick.outputs.inference import call_model
from gradpick.trust.engine import MethodSettings, logits_of, picked_images, saliency, served_view
from gradpick.trust.faithfulness import attribution_order
from gradpick.trust.metrics import spearman
from gradpick.trust.randomisation import randomisable_layers, randomise_layer
from gradpick.trust.road import road
from gradpick.trust.sensitivity import INSENSITIVE_SPEARMAN

__all__ = [
    "BUDGET_SHARE",
    "CHECKS",
    "DEFAULT_BUDGET_S",
    "FAILS",
    "NOT_RUN",
    "PASSES",
    "QUICK_ROAD_SHARES",
    "ROAD_GUESS_S",
    "SKIPPED_NAMES",
    "THRESHOLDS",
    "VERDICTS",
    "WEAK",
    "Badge",
    "PickBadges",
    "QuickChecks",
    "quick_checks",
    "randomised_copy",
    "verdict_of",
]

PASSES, WEAK, FAILS, NOT_RUN = "passes", "weak", "fails", "not run"
VERDICTS = (PASSES, WEAK, FAILS)
"""From best to worst; a pick's verdict is its worst badge's."""
CHECKS = ("class", "randomised", "completeness", "road")
THRESHOLDS: dict[str, tuple[float, float]] = {
    "class": (0.7, INSENSITIVE_SPEARMAN),
    "randomised": (0.7, INSENSITIVE_SPEARMAN),
    "completeness": (0.05, 0.25),
    "road": (0.1, 0.0),
}
"""(passes up to, fails from) per check: below the first passes, from the second fails for the
Spearman and completeness figures (lower is better); for ROAD's gap (higher is better) at
least the first passes and at most the second fails."""
QUICK_ROAD_SHARES = (0.1, 0.5, 0.9)
DEFAULT_BUDGET_S = 0.1
"""Seconds all the checks of one call may take when the caller gives no budget: a check runs
only when its expected cost (the shown map's own time for a map, or the class check's own
time once it ran; ROAD's measured time per pick) fits in what is left of it."""
BUDGET_SHARE = 0.5
"""An explorer click's badges may take at most this share of the click's server time before
them (``gradpick bench --badges`` and ``--explorer`` measure it)."""
SKIPPED_NAMES = {"class": "class", "randomised": "randomisation", "road": "ROAD"}
ROAD_GUESS_S = 0.5
"""Seconds per pick ROAD is assumed to cost until it has been measured once for an image size."""

_road_cost: dict[tuple[int, ...], float] = {}
"""Measured ROAD seconds per pick by image shape (C, H, W): the imputation dominates."""
_copies: weakref.WeakKeyDictionary[nn.Module, nn.Module] = weakref.WeakKeyDictionary()
_copies_lock = threading.Lock()


@dataclass(frozen=True)
class Badge:
    check: str
    verdict: str
    figure: float | None
    """The check's number (None: the check did not run)."""
    label: str
    """A few words with the figure, e.g. 'class ρ 0.42'."""
    meaning: str
    """One line: what the figure says about this map."""


@dataclass(frozen=True)
class PickBadges:
    index: int
    badges: tuple[Badge, ...]

    @property
    def verdict(self) -> str:
        """The worst verdict of the checks that ran (``passes`` when none ran)."""
        ran = [badge.verdict for badge in self.badges if badge.verdict in VERDICTS]
        return max(ran, key=VERDICTS.index, default=PASSES)

    @property
    def reason(self) -> str:
        """The meaning of the first badge with the worst verdict."""
        worst = [badge for badge in self.badges if badge.verdict == self.verdict]
        return worst[0].meaning if worst else ""


@dataclass(frozen=True)
class QuickChecks:
    method: str
    picks: tuple[PickBadges, ...]
    milliseconds: float
    skipped: tuple[str, ...]
    """The checks left out because they did not fit in the time budget."""
    check_ms: tuple[tuple[str, float], ...] = ()
    """Each check that ran, with its own milliseconds (the runner-up's logits included in
    the class check's), in the order they ran."""


def verdict_of(check: str, figure: float) -> str:
    """``passes``, ``weak`` or ``fails`` for a check's figure (``THRESHOLDS``); NaN is weak."""
    if math.isnan(figure):
        return WEAK
    good, bad = THRESHOLDS[check]
    if check == "road":
        return PASSES if figure >= good else FAILS if figure <= bad else WEAK
    return PASSES if figure < good else FAILS if figure >= bad else WEAK


def randomised_copy(model: nn.Module, example: torch.Tensor) -> nn.Module:
    """A frozen eval() deep copy of ``model`` with its last parametrised layer re-initialised.

    Made once per model (and kept while the model lives) under a lock, so sessions sharing a
    served model share its copy, which is only ever read; ``example`` (one image) finds the
    layer the forward runs last. The layer is redrawn as the Trust tab's randomisation test
    redraws its first layer with seed 0 (``randomise_layer(layer, 0, 0)``).
    """
    with _copies_lock:
        found = _copies.get(model)
        if found is not None:
            return found
        trial = copy.deepcopy(model).eval()
        trial.requires_grad_(False)
        names = randomisable_layers(trial, example)
        if names:
            last = names[-1]
            layer = trial if last == type(trial).__name__ else trial.get_submodule(last)
            randomise_layer(layer, 0, 0)
        _copies[model] = trial
        return trial


def _maps(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    method: str,
    target: str,
    classes: torch.Tensor,
    settings: MethodSettings,
) -> torch.Tensor:
    """The method's maps of ``target`` for ``classes`` (the label of a loss, else the logit)."""
    labels = torch.zeros(len(images), dtype=torch.long)  # the engine takes one per image
    labels[torch.tensor(list(indices), dtype=torch.long)] = classes
    request = GradientRequest.build(
        model, images, list(indices), labels=labels, target=target, classes=classes
    )
    chosen = attribution.build(method, settings.of(method), settings.layer_of(method))
    return chosen.attribute(request).maps


def _rho(own_saliency: torch.Tensor, other: torch.Tensor) -> list[float]:
    return [float(value) for value in spearman(own_saliency, saliency(other))]


def _spearman_badge(check: str, figure: float) -> Badge:
    verdict = verdict_of(check, figure)
    other = "the runner-up class" if check == "class" else "a randomised last layer"
    if math.isnan(figure):
        meaning = "the map is constant, so it has no order to compare"
    elif verdict == FAILS:
        meaning = (
            "barely changes when asked about the runner-up class: it explains the image, "
            "not the class"
            if check == "class"
            else "barely changes when the last layer's weights are random: it ignores them"
        )
    elif verdict == WEAK:
        meaning = f"partly the same as the map for {other}"
    else:
        meaning = f"differs from the map for {other}, as it should"
    name = "class" if check == "class" else "randomised"
    return Badge(
        check, verdict, figure, f"{name} ρ {figure:.2f}", f"Spearman {figure:.2f}: {meaning}"
    )


def _completeness(
    model: nn.Module, shown: Attribution, target: str, classes: torch.Tensor
) -> list[float]:
    """IG's relative completeness error per pick, from the shown result and one forward."""
    plain = shown.gradients
    baseline = torch.full_like(shown.maps[:1], float(shown.settings["baseline"]))
    with torch.no_grad():
        logits = call_model(model, baseline).expand(len(classes), -1)
        held = classes.to(logits.device)
        if target == "loss":
            at_baseline = F.cross_entropy(logits, held, reduction="none")
        else:
            at_baseline = logits.gather(1, held.unsqueeze(1)).squeeze(1)
    difference = plain.target_values.double() - at_baseline.cpu().double()
    scale = 1.0 if plain.reduction == "sum" else float(len(classes))
    totals = shown.maps.detach().flatten(1).sum(dim=1).cpu().double() * scale
    errors = []
    for total, expected in zip(totals.tolist(), difference.tolist(), strict=True):
        if expected == 0:  # as Completeness.relative_error: exact only when the sum is 0 too
            errors.append(0.0 if total == 0 else math.inf)
        else:
            errors.append(abs(total - expected) / abs(expected))
    return errors


def _completeness_badge(error: float) -> Badge:
    verdict = verdict_of("completeness", error)
    meaning = (
        "the attributions add up to F(x) − F(baseline)"
        if verdict == PASSES
        else "the attributions do not add up to F(x) − F(baseline): more path steps needed"
    )
    return Badge(
        "completeness", verdict, error, f"sum error {error:.0%}", f"{error:.1%}: {meaning}"
    )


def _road_badges(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    maps: torch.Tensor,
    classes: torch.Tensor,
    seeds: Sequence[int] | None,
) -> list[Badge]:
    """ROAD's mean gap LeRF - MoRF at ``QUICK_ROAD_SHARES``, per pick."""
    started = time.perf_counter()
    orders = {"map": attribution_order(maps)}
    curves = road(model, images, indices, orders, classes, QUICK_ROAD_SHARES, seeds=seeds)["map"]
    _road_cost[tuple(images.shape[1:])] = (time.perf_counter() - started) / len(indices)
    badges = []
    for gap in (curves.lerf - curves.morf).mean(dim=1).tolist():
        verdict = verdict_of("road", gap)
        meaning = (
            "removing its top pixels hurts the class more than removing its bottom ones"
            if verdict != FAILS
            else "removing its top pixels hurts the class no more than removing its bottom ones"
        )
        badges.append(Badge("road", verdict, gap, f"ROAD gap {gap:+.2f}", f"{gap:+.2f}: {meaning}"))
    return badges


def quick_checks(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    method: str,
    target: str,
    classes: torch.Tensor,
    settings: MethodSettings | None = None,
    shown: Attribution | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    logits: torch.Tensor | None = None,
    seeds: Sequence[int] | None = None,
) -> QuickChecks:
    """The badges of ``method``'s maps of ``images[indices]``.

    ``target`` and ``classes`` are what the maps explain (``'loss'`` with each pick's label, or
    ``'logit'`` of each pick's class: ``GradientResult.classes``); ``shown``: the maps already
    computed for them (else computed here, outside the budget). ``budget_s``: seconds the
    checks may take; one runs only when its expected cost fits in what is left. ``logits``:
    the model's logits of the picks [k, classes] when known (the explorer's inference), else
    one forward finds each pick's runner-up class. ``seeds``: each pick's batch index when
    ``images`` holds the picks alone (ROAD's noise is seeded by it; default: ``indices``).
    """
    started = time.perf_counter()
    settings = settings or MethodSettings()
    indices = [int(index) for index in indices]
    served = served_view(model)
    held = classes.to(torch.long).cpu()
    picked = picked_images(served, images, indices)
    map_cost = 0.0 if shown is None else shown.milliseconds / 1000
    road_cost = _road_cost.get(tuple(images.shape[1:]), ROAD_GUESS_S) * len(indices)
    own = shown.maps if shown is not None else None
    if own is None:
        own = _maps(served, images, indices, method, target, held, settings)
    own_saliency = saliency(own)

    def fits(cost: float) -> bool:
        return time.perf_counter() - started + cost <= budget_s

    columns: list[list[Badge]] = []
    skipped: list[str] = []
    timed: list[tuple[str, float]] = []

    def ran(check: str, badges: list[Badge], since: float) -> None:
        columns.append(badges)
        timed.append((check, (time.perf_counter() - since) * 1000))

    if fits(map_cost):
        before = time.perf_counter()
        others = (logits_of(served, picked) if logits is None else logits).detach().cpu().double()
        others[torch.arange(len(indices)), held] = -torch.inf
        against = _maps(served, images, indices, method, target, others.argmax(dim=1), settings)
        ran("class", [_spearman_badge("class", rho) for rho in _rho(own_saliency, against)], before)
        map_cost = max(map_cost, timed[-1][1] / 1000)  # what a map check really took
    else:
        skipped.append("class")
    if fits(map_cost):
        before = time.perf_counter()
        trial = randomised_copy(model, picked[:1])
        randomised = _maps(trial, images, indices, method, target, held, settings)
        ran(
            "randomised",
            [_spearman_badge("randomised", rho) for rho in _rho(own_saliency, randomised)],
            before,
        )
    else:
        skipped.append("randomised")
    if method == "integrated_gradients" and shown is not None:
        before = time.perf_counter()
        errors = _completeness(served, shown, target, held)
        ran("completeness", [_completeness_badge(error) for error in errors], before)
    if fits(road_cost):
        before = time.perf_counter()
        ran("road", _road_badges(served, images, indices, own, held, seeds), before)
    else:
        skipped.append("road")
    if skipped:
        names = ", ".join(SKIPPED_NAMES[check] for check in skipped)
        note = Badge(
            "skipped",
            NOT_RUN,
            None,
            f"{names}: Trust tab",
            f"{names} did not fit in this click's time budget ({budget_s * 1000:,.0f} ms): "
            "the full checks are in the Trust tab",
        )
        columns.append([note] * len(indices))
    picks = tuple(
        PickBadges(index, tuple(column[position] for column in columns))
        for position, index in enumerate(indices)
    )
    milliseconds = (time.perf_counter() - started) * 1000
    return QuickChecks(method, picks, milliseconds, tuple(skipped), tuple(timed))
