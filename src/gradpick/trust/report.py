"""All trust checks on one pick, and their JSON report (what ``gradpick check`` writes).

``run_checks`` runs the randomisation test, IG completeness, the deletion and insertion
curves, ROAD, the class maps and class sensitivity on ``images[indices]`` with one set of
options; ``report_dict`` turns the result into plain JSON values (NaN becomes null), its fields
documented in the README's "Trust checks" section and docs/trust-fields.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from gradpick.attribution import LAYER_METHODS, IntegratedGradients
from gradpick.errors import InputError
from gradpick.outputs.inference import check_output
from gradpick.runtime.devices import device_for
from gradpick.runtime.measure import Stopwatch
from gradpick.show.html import class_name
from gradpick.show.notebook import trust_html
from gradpick.trust.baselines import BASELINES, BLUR_SIGMA
from gradpick.trust.completeness import (
    DEFAULT_MAX_STEPS,
    DEFAULT_TOLERANCE,
    Completeness,
    check_baseline,
    completeness,
    steps_to_try,
)
from gradpick.trust.contrastive import DEFAULT_TOP, ClassMaps, class_maps
from gradpick.trust.engine import (
    METHODS,
    MethodSettings,
    check_count,
    check_methods,
    held_classes,
    noise_std,
    served_view,
)
from gradpick.trust.faithfulness import (
    DEFAULT_STEPS,
    INSERTION_START,
    MAX_CURVE_STEPS,
    RANDOM,
    REMOVED,
    Curves,
    attribution_order,
    faithfulness,
)
from gradpick.trust.randomisation import (
    Progress,
    RandomisationCurve,
    check_mode,
    randomisation_test,
)
from gradpick.trust.road import (
    DIAGONAL_WEIGHT,
    DIRECT_WEIGHT,
    ROAD_NOISE,
    ROAD_SHARES,
    RoadCurves,
    check_noise,
    check_shares,
    road,
)
from gradpick.trust.sensitivity import (
    INSENSITIVE_SPEARMAN,
    KINDS,
    ClassSensitivity,
    class_sensitivity,
)

__all__ = [
    "CheckOptions",
    "TrustReport",
    "mean_and_std",
    "report_dict",
    "run_checks",
]

IG = IntegratedGradients.name
"""The one method the completeness check applies to."""


@dataclass(frozen=True)
class CheckOptions:
    """What every check is run with; the defaults are ``gradpick check``'s."""

    methods: tuple[str, ...] = METHODS
    settings: MethodSettings = field(default_factory=MethodSettings)
    randomisation: str = "cascade"
    layers: int | None = None
    """Randomise only this many layers from the output (None: all)."""
    baselines: tuple[str, ...] = BASELINES
    ig_steps: int | Literal["auto"] = "auto"
    tolerance: float = DEFAULT_TOLERANCE
    max_steps: int = DEFAULT_MAX_STEPS
    deletion_steps: int = DEFAULT_STEPS
    top: int = DEFAULT_TOP
    road_shares: tuple[float, ...] = ROAD_SHARES
    """Shares of pixels ROAD removes, increasing, from 0 up to (not including) 1."""
    road_noise: float = ROAD_NOISE
    """Standard deviation of the noise ROAD adds to the filled pixels (images' units)."""
    seed: int = 0
    output: str = "softmax"
    """The model's output kind: a sigmoid (multi-label) model's held label is read by its own
    sigmoid in the deletion, insertion and ROAD curves and the top labels, not by a softmax."""

    def __post_init__(self) -> None:
        """Refuse bad options before any check runs, with the checks' own messages."""
        object.__setattr__(self, "methods", check_methods(self.methods))
        check_mode(self.randomisation)
        if self.layers is not None:
            check_count("The number of layers to randomise", self.layers, None)
        if not self.baselines:
            raise InputError(f"Choose at least one baseline: {', '.join(BASELINES)}.")
        for baseline in self.baselines:
            check_baseline(baseline)
        steps_to_try(self.ig_steps, self.tolerance, self.max_steps)
        check_count("Deletion and insertion steps", self.deletion_steps, MAX_CURVE_STEPS)
        check_count("The number of top classes", self.top, None)
        object.__setattr__(self, "road_shares", check_shares(self.road_shares))
        object.__setattr__(self, "road_noise", check_noise(self.road_noise))
        check_output(self.output)


@dataclass(frozen=True)
class TrustReport:
    indices: tuple[int, ...]
    classes: torch.Tensor
    """The class each pick is explained for [k] (the model's prediction unless given)."""
    options: CheckOptions
    randomisation: dict[str, RandomisationCurve]
    completeness: list[Completeness]
    faithfulness: dict[str, Curves]
    class_maps: ClassMaps
    class_sensitivity: list[ClassSensitivity]
    """One row per method and kind of other class (runner-up, random)."""
    road: dict[str, RoadCurves]
    """MoRF and LeRF curves under noisy linear imputation, by method."""
    noise_std: torch.Tensor
    """SmoothGrad's noise standard deviation for each pick [k]: noise x (max - min)."""
    milliseconds: dict[str, float]
    """Wall time of each check, device synchronised."""
    class_names: tuple[str, ...] = ()
    """The model's class names, for the displays (empty: classes by number)."""

    def __repr__(self) -> str:
        """One line, not the tensors: a notebook cell ending in a report stays short."""
        layer = self.options.settings.layer or "automatic"
        at = f" (layer methods at {layer})" if _any_layer_method(self.options.methods) else ""
        classes = ", ".join(
            class_name(self.class_names, int(c), "class {}") for c in self.classes[:5]
        )
        more = ", ..." if len(self.indices) > 5 else ""
        return (
            f"TrustReport({len(self.indices)} picks explained as {classes}{more}; methods "
            f"{', '.join(self.options.methods)}{at}; checks {', '.join(self.milliseconds)})"
        )

    def _repr_html_(self) -> str:
        """Jupyter shows the maps and the summary tables (``gradpick.show.notebook``)."""
        layer = self.options.settings.layer or "the automatic layer"
        return trust_html(
            self, report_dict(self), layer if _any_layer_method(self.options.methods) else None
        )


def run_checks(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    classes: int | Sequence[int] | torch.Tensor | None = None,
    options: CheckOptions | None = None,
    progress: Progress | None = None,
    stage: Callable[[str], None] | None = None,
    class_names: Sequence[str] = (),
) -> TrustReport:
    """Every trust check on ``images[indices]``; ``progress`` follows the randomisation steps,
    and ``stage`` is told each check's name as it starts (a long run says where it is);
    ``class_names`` name the classes in the report's displays."""
    options = options or CheckOptions()
    announce = stage or (lambda name: None)
    indices = [int(index) for index in indices]
    served = served_view(model)
    held = held_classes(served, images, indices, classes)
    times: dict[str, float] = {}
    device = device_for(served, None)
    announce("randomisation")
    with Stopwatch(device) as watch:
        curves = randomisation_test(
            served,
            images,
            indices,
            options.methods,
            held,
            options.settings,
            options.randomisation,
            options.layers,
            options.seed,
            progress,
        )
    times["randomisation"] = watch.milliseconds
    if IG in options.methods:
        announce("completeness")
    with Stopwatch(device) as watch:
        # Completeness is a property of Integrated Gradients alone: asked of other methods,
        # it would check a map nobody looks at.
        rows = [
            row
            for baseline in options.baselines
            for row in completeness(
                served,
                images,
                indices,
                held,
                baseline,
                options.ig_steps,
                options.tolerance,
                options.max_steps,
                options.seed,
            )
            if IG in options.methods
        ]
    if rows:
        times["completeness"] = watch.milliseconds
    announce("faithfulness")
    with Stopwatch(device) as watch:
        orders = {method: attribution_order(curve.original) for method, curve in curves.items()}
        faithful = faithfulness(
            served,
            images,
            indices,
            orders,
            held,
            options.deletion_steps,
            options.seed,
            output=options.output,
        )
    times["faithfulness"] = watch.milliseconds
    announce("ROAD")
    with Stopwatch(device) as watch:
        imputed = road(
            served,
            images,
            indices,
            orders,
            held,
            options.road_shares,
            options.road_noise,
            options.seed,
            output=options.output,
        )
    times["road"] = watch.milliseconds
    announce("class maps")
    with Stopwatch(device) as watch:
        maps = class_maps(served, images, indices, options.top, output=options.output)
    times["class_maps"] = watch.milliseconds
    announce("class sensitivity")
    with Stopwatch(device) as watch:
        sensitivity = class_sensitivity(
            served,
            images,
            indices,
            options.methods,
            held,
            options.settings,
            options.seed,
            held_maps={method: curve.original for method, curve in curves.items()},
        )
    times["class_sensitivity"] = watch.milliseconds
    return TrustReport(
        indices=tuple(indices),
        classes=held,
        options=options,
        randomisation=curves,
        completeness=rows,
        faithfulness=faithful,
        class_maps=maps,
        class_sensitivity=sensitivity,
        road=imputed,
        noise_std=noise_std(images, indices, options.settings),
        milliseconds=times,
        class_names=tuple(class_names),
    )


def _any_layer_method(methods: Sequence[str]) -> bool:
    return any(method in LAYER_METHODS for method in methods)


def _number(value: float) -> float | None:
    return None if not math.isfinite(value) else float(value)


def _numbers(values: torch.Tensor) -> list[float | None]:
    return [_number(float(value)) for value in values.flatten().tolist()]


def mean_and_std(values: torch.Tensor) -> tuple[float | None, float | None]:
    """Mean and standard deviation over the picks, leaving out undefined (NaN) values."""
    finite = values[torch.isfinite(values)].cpu().double()
    if finite.numel() == 0:
        return None, None
    std = float(finite.std(unbiased=False)) if finite.numel() > 1 else 0.0
    return float(finite.mean()), std


def _spread(values: torch.Tensor) -> dict[str, float | None]:
    mean, std = mean_and_std(values)
    return {"mean": mean, "std": std}


def _randomisation_dict(curve: RandomisationCurve) -> dict[str, Any]:
    return {
        "mode": curve.mode,
        "steps": [
            {
                "layer": step.layer,
                "randomised_layers": len(step.randomised),
                "spearman": _spread(step.spearman),
                "ssim": _spread(step.ssim),
                "spearman_per_image": _numbers(step.spearman),
                "ssim_per_image": _numbers(step.ssim),
            }
            for step in curve.steps
        ],
    }


def _completeness_dict(row: Completeness) -> dict[str, Any]:
    return {
        "index": row.index,
        "class": row.target_class,
        "baseline": row.baseline,
        "steps": row.steps,
        "automatic": row.automatic,
        "attribution_sum": row.attribution_sum,
        "output": row.output,
        "baseline_output": row.baseline_output,
        "difference": row.difference,
        "delta": row.delta,
        "relative_error": _number(row.relative_error),
        "tolerance": row.tolerance,
        "reached": row.reached,
        "verdict": row.verdict,
    }


def _faithfulness_dict(curves: dict[str, Curves], steps: int) -> dict[str, Any]:
    reference = curves[RANDOM]

    def one(name: str) -> dict[str, Any]:
        curve = curves[name]
        return {
            "deletion_auc": _spread(curve.deletion_auc),
            "insertion_auc": _spread(curve.insertion_auc),
            "random_deletion_auc": _spread(reference.deletion_auc),
            "random_insertion_auc": _spread(reference.insertion_auc),
            "deletion_auc_per_image": _numbers(curve.deletion_auc),
            "insertion_auc_per_image": _numbers(curve.insertion_auc),
            "deletion_curve": _numbers(curve.deletion.mean(dim=0)),
            "insertion_curve": _numbers(curve.insertion.mean(dim=0)),
        }

    return {
        "steps": steps,
        "fractions": _numbers(reference.fractions),
        "removed_pixels": REMOVED,
        "insertion_start": INSERTION_START,
        "random_order": {
            "deletion_curve": _numbers(reference.deletion.mean(dim=0)),
            "insertion_curve": _numbers(reference.insertion.mean(dim=0)),
        },
        "methods": {name: one(name) for name in curves if name != RANDOM},
    }


def _class_maps_dict(maps: ClassMaps) -> dict[str, Any]:
    return {
        "top_classes": maps.top_classes.tolist(),
        "top_probabilities": maps.top_probabilities.tolist(),
        "contrast": maps.contrast.tolist(),
        "contrast_values": maps.contrast_values.tolist(),
    }


def _class_sensitivity_rows(rows: list[ClassSensitivity]) -> list[dict[str, Any]]:
    return [
        {
            "index": index,
            "method": row.method,
            "kind": row.kind,
            "class": held,
            "other_class": other,
            "spearman": _number(spearman),
            "ssim": _number(similarity),
            "insensitive": flagged,
        }
        for row in rows
        for index, held, other, spearman, similarity, flagged in zip(
            row.indices,
            row.classes.tolist(),
            row.other_classes.tolist(),
            row.spearman.tolist(),
            row.ssim.tolist(),
            row.insensitive.tolist(),
            strict=True,
        )
    ]


def _road_dict(curves: dict[str, RoadCurves], noise: float) -> dict[str, Any]:
    def one(curve: RoadCurves) -> dict[str, Any]:
        return {
            "morf_auc": _spread(curve.morf_auc),
            "lerf_auc": _spread(curve.lerf_auc),
            "gap": _spread(curve.gap),
            "morf_auc_per_image": _numbers(curve.morf_auc),
            "lerf_auc_per_image": _numbers(curve.lerf_auc),
            "gap_per_image": _numbers(curve.gap),
            "morf_curve": _numbers(curve.morf.mean(dim=0)),
            "lerf_curve": _numbers(curve.lerf.mean(dim=0)),
            "morf_curve_per_image": [_numbers(row) for row in curve.morf],
            "lerf_curve_per_image": [_numbers(row) for row in curve.lerf],
        }

    fractions = next(iter(curves.values())).fractions
    return {
        "fractions": _numbers(fractions),
        "imputation": (
            f"noisy linear: 8 neighbours, direct {DIRECT_WEIGHT:.4g}, diagonal "
            f"{DIAGONAL_WEIGHT:.4g}, Gaussian noise std {noise:g}"
        ),
        "methods": {name: one(curve) for name, curve in curves.items()},
    }


def report_dict(report: TrustReport) -> dict[str, Any]:
    """The report as JSON values; the maps themselves stay out (see the explorer's Trust tab)."""
    options = report.options
    return {
        "indices": list(report.indices),
        "classes": report.classes.tolist(),
        "settings": {
            "methods": list(options.methods),
            "smoothgrad": {
                "samples": options.settings.samples,
                "noise_fraction_of_range": options.settings.noise,
                "noise_std_per_image": report.noise_std.tolist(),
                "seed": options.settings.seed,
            },
            "integrated_gradients_steps": options.settings.steps,
            "randomisation": {"mode": options.randomisation, "layers": options.layers},
            "completeness": {
                "baselines": list(options.baselines),
                "steps": options.ig_steps,
                "tolerance": options.tolerance,
                "max_steps": options.max_steps,
                "blur_sigma": BLUR_SIGMA,
            },
            "top_classes": options.top,
            "class_sensitivity": {
                "kinds": list(KINDS),
                "insensitive_spearman": INSENSITIVE_SPEARMAN,
            },
            "road": {"shares": list(options.road_shares), "noise_std": options.road_noise},
            "seed": options.seed,
        },
        "randomisation": {
            method: _randomisation_dict(curve) for method, curve in report.randomisation.items()
        },
        "completeness": [_completeness_dict(row) for row in report.completeness],
        "faithfulness": _faithfulness_dict(report.faithfulness, options.deletion_steps),
        "road": _road_dict(report.road, options.road_noise),
        "class_maps": _class_maps_dict(report.class_maps),
        "class_sensitivity": _class_sensitivity_rows(report.class_sensitivity),
        "milliseconds": dict(report.milliseconds),
    }
