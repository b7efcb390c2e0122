"""Cheap checks of the maps a user is looking at, cheap enough to run with every click.

Per pick and method, a verdict (``passes`` / ``weak`` / ``fails``) with its figure and a line
saying what was measured and what it means, from checks that cost about one map of the picks
each:

* **class**: the map against the same method's map of the runner-up class (the most likely
  class other than the explained one), by the Spearman rank correlation of |map| (Sixt et al.
  2020). A map that barely changes with the class explains the image, not the class.
* **randomised**: the map against the map of a copy of the model whose weights from the output
  down to the map's own layer are redrawn (cascading randomisation, Adebayo et al. 2018). That
  layer is the layer method's layer, or for the input-gradient methods the model's automatic
  layer (its last spatial one): what feeds a layer map is the weights above its layer (d target
  / d A) and the layer's own (A), so a map that survives their loss does not show what the
  model learned. The copy is made once per served model and layer, and kept
  (``randomised_copy``); the served model is never touched.
* **completeness** (Integrated Gradients only): |sum of the attributions - (F(x) - F(b))| /
  |F(x) - F(b)|, from the shown result and one forward of the baseline.
* **ROAD** (three shares): the mean gap LeRF - MoRF of the held class's probability (it
  imputes pixels by a linear solve, so it is the slowest).

Thresholds are per method family (``family_of``) and check (``THRESHOLDS``), chosen by
``gradpick bench-badges`` on half of a set of known-good maps (trained models' maps of correctly
classified images) and known-bad ones (the image's edges, a centre blob, a re-initialised
model's maps) and reported on the other half (``docs/guide/trust.md``). A constant map has no
order: its Spearman is NaN and its verdict weak.

Every check but completeness (free) runs only when its expected cost fits in the time budget
left (``budget_s``); one that does not is named in a "not run" badge instead, and the page
offers to run it (``budget_s=math.inf``). Making the randomised copy counts in the randomised
check's cost until it is made (a copy made on a thread of its own would slow the next click's
maps instead).

Example::

    checks = quick_checks(model, images, [3, 7], "gradient", "logit", classes)
    [(pick.index, pick.verdict, pick.reason) for pick in checks.picks]
    verdict_rows(checks)  # one dict per pick and check, as ``gradpick check --json`` writes
"""

from __future__ import annotations

import copy
import math
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gradpick import attribution
from gradpick.attribution import Attribution
from gradpick.errors import InputError
from gradpick.gradients import layers
from gradpick.gradients.request import GradientRequest
from gradpick.outputs.inference import call_model
from gradpick.trust.engine import MethodSettings, logits_of, picked_images, saliency, served_view
from gradpick.trust.faithfulness import attribution_order
from gradpick.trust.metrics import spearman
from gradpick.trust.randomisation import randomise_layer
from gradpick.trust.road import road

__all__ = [
    "BUDGET_SHARE",
    "CHECKS",
    "DEFAULT_BUDGET_S",
    "FAILS",
    "FAMILIES",
    "NOT_RUN",
    "PASSES",
    "QUICK_ROAD_SHARES",
    "ROAD_GUESS_S",
    "SKIPPED_NAMES",
    "THRESHOLDS",
    "VERDICTS",
    "VERDICT_WORDS",
    "WEAK",
    "Badge",
    "MapOf",
    "PickBadges",
    "QuickChecks",
    "cascade_layers",
    "family_of",
    "quick_checks",
    "randomised_copy",
    "verdict_of",
    "verdict_rows",
]

PASSES, WEAK, FAILS, NOT_RUN = "passes", "weak", "fails", "not run"
VERDICTS = (PASSES, WEAK, FAILS)
"""From best to worst; a pick's verdict is its worst badge's."""
VERDICT_WORDS = {PASSES: "pass", WEAK: "weak", FAILS: "fail", NOT_RUN: "not_run"}
"""The verdicts as ``gradpick check --json`` writes them."""
CHECKS = ("class", "randomised", "completeness", "road")
FAMILIES: dict[str, tuple[str, ...]] = {
    "input gradient": ("gradient", "smoothgrad", "integrated_gradients"),
    "gradient × input": ("gradient_x_input",),
    "layer": ("gradcam", "hirescam", "xgradcam"),
    "positive-gradient layer": ("gradcam_plus_plus", "layercam"),
    "Score-CAM": ("scorecam",),
}
"""Methods whose maps behave alike under the checks, so share thresholds: the layer methods
that weigh the activation by its signed gradient, those that keep its positive part only
(whose maps of two classes are much more alike), and Score-CAM (weights from forwards of
masked images, no gradient)."""
THRESHOLDS: dict[str, dict[str, tuple[float, float]]] = {
    "input gradient": {
        "class": (0.91, math.inf),
        "randomised": (0.5, 0.75),
        "completeness": (0.05, math.inf),
    },
    "gradient × input": {"class": (0.98, math.inf), "randomised": (0.64, 0.8)},
    "layer": {"class": (0.51, math.inf), "randomised": (0.58, 0.68)},
    "positive-gradient layer": {"class": (0.93, math.inf), "randomised": (0.72, 0.87)},
    "Score-CAM": {"class": (0.96, math.inf), "randomised": (0.85, 0.89)},
    "any": {"road": (0.1, 0.0)},
}
"""(weak from, fails from) per family and check, from ``gradpick bench-badges`` (the shipped
ResNet-20 and a 224-px ResNet-18): a Spearman figure below the first passes and from the second
fails (lower is better). The class check is weak-only: good maps of two classes come close to
one another (the gradient's to 0.99), so it warns and the randomised check fails the bad maps.
Completeness passes within ``gradpick check``'s 5 % tolerance and is otherwise weak, failing
only when F(x) equals F(baseline) and the sum does not: the calibration found most good IG maps
of the loss at the default 32 steps off by more than 25 %. ROAD's gap (higher is better; not
calibrated, too slow at 224 px) passes at the first or above and fails at the second or below."""
QUICK_ROAD_SHARES = (0.1, 0.5, 0.9)
DEFAULT_BUDGET_S = 0.1
"""Seconds all the checks of one call may take when the caller gives no budget."""
BUDGET_SHARE = 0.5
"""An explorer click's badges may take at most this share of the click's server time before
them (``gradpick bench-badges --budget`` measures it on big models)."""
SKIPPED_NAMES = {"class": "class", "randomised": "randomisation", "road": "ROAD"}
ROAD_GUESS_S = 0.5
"""Seconds per pick ROAD is assumed to cost at 32 x 32 pixels until measured for an image size;
more pixels cost proportionally more (a linear solve over them)."""
COPY_GUESS_BYTES_PER_S = 2e8
"""How fast a randomised copy is made (deep copy and redraw), per byte of parameters, until
one has been made and timed."""
COPIES_PER_MODEL = 2
"""Randomised copies kept per served model (one per layer asked about, the latest ones); a
copy for the automatic layer is kept under its name too, so every method shares it."""

MapOf = Callable[[nn.Module, torch.Tensor], torch.Tensor]
"""(model, classes [k]) -> the picks' maps [k, C, H, W]: how a check recomputes the map."""

_road_cost: dict[tuple[int, ...], float] = {}
"""Measured ROAD seconds per pick by image shape (C, H, W): the imputation dominates."""
_copy_rate: list[float] = []
"""Measured bytes of parameters per second of making a randomised copy."""
_copies: weakref.WeakKeyDictionary[nn.Module, dict[str, nn.Module]] = weakref.WeakKeyDictionary()
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
    """What was measured and what it means for this map (the hover text)."""


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


def family_of(method: str) -> str:
    """The method's family in ``THRESHOLDS`` (an unregistered method: 'input gradient')."""
    return next(
        (family for family, members in FAMILIES.items() if method in members), "input gradient"
    )


def verdict_of(check: str, figure: float, method: str = "gradient") -> str:
    """``passes``, ``weak`` or ``fails`` for a check's figure on ``method``'s map
    (``THRESHOLDS``); NaN is weak."""
    if math.isnan(figure):
        return WEAK
    weak, bad = THRESHOLDS[family_of(method)].get(check) or THRESHOLDS["any"][check]
    if check == "road":
        return PASSES if figure >= weak else FAILS if figure <= bad else WEAK
    return PASSES if figure < weak else FAILS if figure >= bad else WEAK


def verdict_rows(checks: QuickChecks) -> list[dict[str, Any]]:
    """One row per pick and check: ``index``, ``method``, ``check``, ``value`` (None when it did
    not run or is not a number), ``verdict`` (``pass``, ``weak``, ``fail`` or ``not_run``) and
    ``reason``; a check left out by the budget gets a ``not_run`` row of its own."""
    rows = []
    for pick in checks.picks:
        for badge in pick.badges:
            names = [badge.check] if badge.check != "skipped" else list(checks.skipped)
            for check in names:
                value = badge.figure
                rows.append(
                    {
                        "index": pick.index,
                        "method": checks.method,
                        "check": check,
                        "value": None if value is None or not math.isfinite(value) else value,
                        "verdict": VERDICT_WORDS[badge.verdict],
                        "reason": badge.meaning,
                    }
                )
    return rows


# ----------------------------------------------------------------------------- the copies


def _forward_order(model: nn.Module, example: torch.Tensor) -> list[nn.Module]:
    """Every module in the order a forward of ``example`` first enters it."""
    seen: list[nn.Module] = []

    def record(module: nn.Module, *_: object) -> None:
        if not any(module is other for other in seen):
            seen.append(module)

    hooks = [module.register_forward_pre_hook(record) for module in model.modules()]
    try:
        with torch.no_grad():
            call_model(model, example)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def _own_parameters(module: nn.Module) -> bool:
    return any(True for _ in module.parameters(recurse=False))


def _map_layer(model: nn.Module, example: torch.Tensor, layer: str | None) -> str | None:
    """The layer a cascade goes down to: ``layer``, else the automatic one (None: none)."""
    if layer is not None:
        return layer
    try:
        return layers.resolve(model, None, example).name
    except InputError:  # no spatial layer: the cascade is the last parametrised layer alone
        return None


def cascade_layers(model: nn.Module, example: torch.Tensor, layer: str | None) -> list[nn.Module]:
    """The modules with parameters of their own that feed a map at ``layer`` (a dotted name in
    the user's model; None: the automatic layer), from the output down: every one the forward
    enters at or after ``layer`` (the layer's own included), and when the layer holds none, the
    last one before it (what makes its activation)."""
    order = _forward_order(model, example)
    owning = [module for module in order if _own_parameters(module)]
    name = _map_layer(model, example, layer)
    if name is None:
        return owning[-1:]
    inner, _ = layers.user_model(model)
    chosen = inner.get_submodule(name)
    start = next(position for position, module in enumerate(order) if module is chosen)
    after = [module for module in order[start:] if _own_parameters(module)]
    inside = {id(module) for module in chosen.modules()}
    if not any(id(module) in inside for module in after):
        before = [module for module in order[:start] if _own_parameters(module)]
        after = before[-1:] + after
    return list(reversed(after))


def _make_copy(model: nn.Module, example: torch.Tensor, layer: str | None) -> nn.Module:
    """A frozen eval() deep copy of ``model`` with ``cascade_layers`` redrawn as the Trust
    tab's cascade redraws them: the i-th from the output by ``randomise_layer(layer, 0, i)``."""
    started = time.perf_counter()
    trial = copy.deepcopy(model).eval()
    trial.requires_grad_(False)
    for position, module in enumerate(cascade_layers(trial, example, layer)):
        randomise_layer(module, 0, position)
    took = time.perf_counter() - started
    _copy_rate.append(_parameter_bytes(model) / max(took, 1e-6))
    return trial


def _parameter_bytes(model: nn.Module) -> int:
    return sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())


def _copy_key(layer: str | None) -> str:
    return "" if layer is None else layer


def _cached_copy(model: nn.Module, layer: str | None) -> nn.Module | None:
    with _copies_lock:
        return _copies.get(model, {}).get(_copy_key(layer))


def _keep(model: nn.Module, names: Sequence[str | None], trial: nn.Module) -> nn.Module:
    """Keep ``trial`` under each of ``names`` (the layer asked for and the one it resolved to)."""
    with _copies_lock:
        kept = _copies.setdefault(model, {})
        found = kept.setdefault(_copy_key(names[0]), trial)
        for name in names[1:]:
            kept[_copy_key(name)] = found
        while len(set(map(id, kept.values()))) > COPIES_PER_MODEL:
            del kept[next(iter(kept))]
        return found


def randomised_copy(model: nn.Module, example: torch.Tensor, layer: str | None = None) -> nn.Module:
    """``model`` with the weights from the output down to ``layer`` random (``cascade_layers``).

    Made once per model and layer (and kept while the model lives), so sessions sharing a
    served model share its copies, which are only ever read; ``example`` (one image) finds the
    order the forward runs the layers in.
    """
    found = _cached_copy(model, layer)
    if found is not None:
        return found
    name = _map_layer(model, example, layer)  # the automatic layer, by its name
    found = _cached_copy(model, name)
    if found is None:
        found = _make_copy(model, example, name)
    return _keep(model, [name, layer], found)


def _copy_cost_s(model: nn.Module, layer: str | None) -> float:
    """Seconds a randomised copy still costs: none when made, else its bytes at the rate."""
    if _cached_copy(model, layer) is not None:
        return 0.0
    rate = _copy_rate[-1] if _copy_rate else COPY_GUESS_BYTES_PER_S
    return _parameter_bytes(model) / rate


# ----------------------------------------------------------------------------- the badges


def _attribution(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    method: str,
    target: str,
    classes: torch.Tensor,
    settings: MethodSettings,
) -> Attribution:
    """The method's maps of ``target`` for ``classes`` (the label of a loss, else the logit)."""
    labels = torch.zeros(len(images), dtype=torch.long)  # the engine takes one per image
    labels[torch.tensor(list(indices), dtype=torch.long)] = classes
    request = GradientRequest.build(
        model, images, list(indices), labels=labels, target=target, classes=classes
    )
    chosen = attribution.build(method, settings.of(method), settings.layer_of(method))
    return chosen.attribute(request)


def _rho(own_saliency: torch.Tensor, other: torch.Tensor) -> list[tuple[float, bool]]:
    """Spearman of each pick's |map| with the other map's, and whether the other map is blank
    (constant: a ReLU'd map with nothing for its class) while this one is not: the two share
    no order then, and the figure is 0 (Spearman itself is undefined for a constant)."""
    theirs = saliency(other)
    flat_own, flat_theirs = own_saliency.flatten(1), theirs.flatten(1)
    blank = (flat_theirs == flat_theirs[:, :1]).all(dim=1) & ~(flat_own == flat_own[:, :1]).all(
        dim=1
    )
    rhos = spearman(own_saliency, theirs)
    return [
        (0.0 if empty else float(rho), bool(empty)) for rho, empty in zip(rhos, blank, strict=True)
    ]


CAVEAT = {
    "gradient × input": (
        " Gradient × input is mostly the image itself (each pixel times its gradient): this "
        "badge can tell a map that is the image alone, not whether the model's part of it is "
        "right; read the gradient's badge for that."
    ),
}
"""What a family's badge cannot tell, added to every one of its Spearman badges."""


def _spearman_badge(
    check: str, figure: float, method: str = "gradient", down_to: str = "", blank: bool = False
) -> Badge:
    """A class or randomisation badge: the figure measured, then what it means. ``blank``: the
    map compared with is constant while this one is not (the figure is 0)."""
    verdict = verdict_of(check, figure, method)
    if check == "class":
        measured = (
            f"Spearman ρ {figure:.2f} between this map and the same method's map for the "
            "runner-up class"
        )
        meaning = {
            PASSES: "the map changes with the class asked about, as a map of the class should.",
            WEAK: "the map changes only partly with the class: much of it is common to both "
            "classes.",
            FAILS: "the map barely changes with the class asked about: it shows the image or "
            "what both classes share, not evidence for this class.",
        }[verdict]
        label = f"class ρ {figure:.2f}"
    else:
        where = f" down to {down_to}" if down_to else ""
        measured = (
            f"Spearman ρ {figure:.2f} between this map and the map after the model's weights "
            f"from the output{where} were redrawn at random"
        )
        meaning = {
            PASSES: "the map depends on the trained weights that feed it, as it should.",
            WEAK: "the map depends only partly on the trained weights that feed it.",
            FAILS: "the map barely changes when the weights that feed it are random: it shows "
            "the image or the architecture, not what the model learned.",
        }[verdict]
        label = f"randomised ρ {figure:.2f}"
    if blank:
        other = "runner-up class" if check == "class" else "randomised model"
        measured = f"The map for the {other} is blank (nothing for the class)"
        label = f"{check} ρ 0 (blank)"
        meaning = "this map shares no order with it (ρ taken as 0), as it should."
    elif math.isnan(figure):
        meaning = "the map is constant (nothing for the class), so it has no order to compare."
    caveat = CAVEAT.get(family_of(method), "")
    return Badge(check, verdict, figure, label, f"{measured}: {meaning}{caveat}")


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
        elif target == "bce":  # each pick's label, present (as ``_attribution`` asks for it)
            at_baseline = F.softplus(-logits.gather(1, held.unsqueeze(1)).squeeze(1))
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
    verdict = verdict_of("completeness", error, "integrated_gradients")
    meaning = (
        "the attributions add up to F(x) − F(baseline)"
        if verdict == PASSES
        else "the attributions do not add up to F(x) − F(baseline): more path steps needed"
    )
    return Badge(
        "completeness",
        verdict,
        error,
        f"sum error {error:.0%}",
        f"{error:.1%} between the sum of the attributions and F(x) − F(baseline): {meaning}",
    )


def _road_badges(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    maps: torch.Tensor,
    classes: torch.Tensor,
    seeds: Sequence[int] | None,
    output: str = "softmax",
) -> list[Badge]:
    """ROAD's mean gap LeRF - MoRF at ``QUICK_ROAD_SHARES``, per pick (a sigmoid model's label
    read by its own sigmoid, ``output``)."""
    started = time.perf_counter()
    orders = {"map": attribution_order(maps)}
    curves = road(
        model, images, indices, orders, classes, QUICK_ROAD_SHARES, seeds=seeds, output=output
    )["map"]
    _road_cost[tuple(images.shape[1:])] = (time.perf_counter() - started) / len(indices)
    badges = []
    for gap in (curves.lerf - curves.morf).mean(dim=1).tolist():
        verdict = verdict_of("road", gap)
        meaning = (
            "removing its top pixels hurts the class more than removing its bottom ones"
            if verdict != FAILS
            else "removing its top pixels hurts the class no more than removing its bottom ones"
        )
        badges.append(
            Badge(
                "road",
                verdict,
                gap,
                f"ROAD gap {gap:+.2f}",
                f"{gap:+.2f} (class probability with the bottom pixels removed minus with the "
                f"top ones, by ROAD): {meaning}",
            )
        )
    return badges


def _road_guess_s(shape: tuple[int, ...]) -> float:
    """ROAD's seconds per pick for images of ``shape``: measured, else scaled by pixels."""
    measured = _road_cost.get(shape)
    return measured if measured is not None else ROAD_GUESS_S * shape[-1] * shape[-2] / 1024


def _skipped_badge(skipped: Sequence[str], budget_s: float) -> Badge:
    names = ", ".join(SKIPPED_NAMES[check] for check in skipped)
    return Badge(
        "skipped",
        NOT_RUN,
        None,
        names,
        f"{names} did not fit in this click's time budget ({budget_s * 1000:,.0f} ms): "
        "run them with the button below the badges, or see the full checks in the Trust tab",
    )


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
    map_of: MapOf | None = None,
    checks: Sequence[str] = CHECKS,
    output: str = "softmax",
) -> QuickChecks:
    """The badges of ``method``'s maps of ``images[indices]``.

    ``target`` and ``classes`` are what the maps explain (``'loss'`` with each pick's label, or
    ``'logit'`` of each pick's class: ``GradientResult.classes``); ``shown``: the maps already
    computed for them (else computed here, outside the budget). ``budget_s``: seconds the
    checks may take; one runs only when its expected cost fits in what is left. ``logits``:
    the model's logits of the picks [k, classes] when known (the explorer's inference), else
    one forward finds each pick's runner-up class. ``seeds``: each pick's batch index when
    ``images`` holds the picks alone (ROAD's noise is seeded by it; default: ``indices``).
    ``map_of``: how the maps are made, in place of ``method`` (whose thresholds and layer
    still apply): the calibration's known-bad maps. ``checks``: those of ``CHECKS`` to run.
    ``output``: the model's output kind (``'loss'`` is then ``'bce'`` for a sigmoid model, and
    ROAD reads each label's own sigmoid).
    """
    started = time.perf_counter()
    settings = settings or MethodSettings()
    indices = [int(index) for index in indices]
    served = served_view(model)
    held = classes.to(torch.long).cpu()
    picked = picked_images(served, images, indices)
    if map_of is None:

        def map_of(chosen: nn.Module, asked: torch.Tensor) -> torch.Tensor:
            return _attribution(chosen, images, indices, method, target, asked, settings).maps

        if shown is None:  # made here, outside the budget, as a caller would have
            shown = _attribution(served, images, indices, method, target, held, settings)
            shown = replace(shown, milliseconds=0.0)
    map_cost = 0.0 if shown is None else shown.milliseconds / 1000
    road_cost = _road_guess_s(tuple(images.shape[1:])) * len(indices)
    own = shown.maps if shown is not None else map_of(served, held)
    own_saliency = saliency(own)
    layer = settings.layer_of(method)  # None: the automatic one, found only when needed

    def fits(cost: float) -> bool:
        return time.perf_counter() - started + cost <= budget_s

    columns: list[list[Badge]] = []
    skipped: list[str] = []
    timed: list[tuple[str, float]] = []

    def ran(check: str, badges: list[Badge], since: float) -> None:
        columns.append(badges)
        timed.append((check, (time.perf_counter() - since) * 1000))

    if "class" in checks and fits(map_cost):
        before = time.perf_counter()
        others = (logits_of(served, picked) if logits is None else logits).detach().cpu().double()
        others[torch.arange(len(indices)), held] = -torch.inf
        against = map_of(served, others.argmax(dim=1))
        badges = [
            _spearman_badge("class", rho, method, blank=blank)
            for rho, blank in _rho(own_saliency, against)
        ]
        ran("class", badges, before)
        map_cost = max(map_cost, timed[-1][1] / 1000)  # what a map check really took
    elif "class" in checks:
        skipped.append("class")
    if "randomised" in checks:
        copy_cost = _copy_cost_s(model, layer)
        if fits(map_cost + copy_cost):
            before = time.perf_counter()
            trial = randomised_copy(model, picked[:1], layer)
            down_to = _map_layer(served, picked[:1], layer)  # probed by the copy already
            rhos = _rho(own_saliency, map_of(trial, held))
            ran(
                "randomised",
                [
                    _spearman_badge("randomised", rho, method, down_to or "", blank)
                    for rho, blank in rhos
                ],
                before,
            )
        else:
            skipped.append("randomised")
    if "completeness" in checks and method == "integrated_gradients" and shown is not None:
        before = time.perf_counter()
        errors = _completeness(served, shown, target, held)
        ran("completeness", [_completeness_badge(error) for error in errors], before)
    if "road" in checks and fits(road_cost):
        before = time.perf_counter()
        ran("road", _road_badges(served, images, indices, own, held, seeds, output), before)
    elif "road" in checks:
        skipped.append("road")
    if skipped:
        columns.append([_skipped_badge(skipped, budget_s)] * len(indices))
    picks = tuple(
        PickBadges(index, tuple(column[position] for column in columns))
        for position, index in enumerate(indices)
    )
    milliseconds = (time.perf_counter() - started) * 1000
    return QuickChecks(method, picks, milliseconds, tuple(skipped), tuple(timed))
