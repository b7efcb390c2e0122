"""The trust checks over any number of picks, a few at a time, as one report.

Every check is per pick (each map, curve, error and class drawn for one image and seeded by its
batch index, never by its position), so running ``run_checks`` on chunks of the picks and
joining the parts gives the report of one run over all of them, while a progress bar can move
and memory stays that of one chunk.

Example::

    report = run_checks_in_chunks(model, images, range(40), chunk=8)
    report.indices  # all 40
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from gradpick.trust.contrastive import ClassMaps
from gradpick.trust.engine import check_count
from gradpick.trust.faithfulness import Curves
from gradpick.trust.randomisation import RandomisationCurve, RandomisationStep
from gradpick.trust.report import CheckOptions, TrustReport, run_checks
from gradpick.trust.road import RoadCurves
from gradpick.trust.sensitivity import ClassSensitivity

__all__ = ["CHUNK", "join_reports", "run_checks_in_chunks"]

CHUNK = 8
"""Picks per chunk by default: about a second of checks each on a CPU, so the bar moves."""

Progress = Callable[[int, int], None]
"""``progress(done, total)`` over every chunk's randomisation steps together."""


def _cat(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat(list(parts))


def _randomisation(parts: Sequence[RandomisationCurve]) -> RandomisationCurve:
    first = parts[0]
    steps = tuple(
        RandomisationStep(
            layer=step.layer,
            randomised=step.randomised,
            spearman=_cat([part.steps[i].spearman for part in parts]),
            ssim=_cat([part.steps[i].ssim for part in parts]),
            maps=_cat([part.steps[i].maps for part in parts]),
        )
        for i, step in enumerate(first.steps)
    )
    return RandomisationCurve(first.method, first.mode, _cat([p.original for p in parts]), steps)


def _sensitivity(parts: Sequence[ClassSensitivity]) -> ClassSensitivity:
    return ClassSensitivity(
        method=parts[0].method,
        kind=parts[0].kind,
        indices=tuple(index for part in parts for index in part.indices),
        classes=_cat([part.classes for part in parts]),
        other_classes=_cat([part.other_classes for part in parts]),
        spearman=_cat([part.spearman for part in parts]),
        ssim=_cat([part.ssim for part in parts]),
        other_maps=_cat([part.other_maps for part in parts]),
    )


def _class_maps(parts: Sequence[ClassMaps]) -> ClassMaps:
    return ClassMaps(
        indices=tuple(index for part in parts for index in part.indices),
        top_classes=_cat([part.top_classes for part in parts]),
        top_probabilities=_cat([part.top_probabilities for part in parts]),
        top_maps=_cat([part.top_maps for part in parts]),
        contrast=_cat([part.contrast for part in parts]),
        contrast_values=_cat([part.contrast_values for part in parts]),
        contrast_maps=_cat([part.contrast_maps for part in parts]),
    )


def join_reports(parts: Sequence[TrustReport]) -> TrustReport:
    """The reports of consecutive chunks of picks (run with one set of options) as one."""
    first = parts[0]
    methods = list(first.randomisation)
    return TrustReport(
        indices=tuple(index for part in parts for index in part.indices),
        classes=_cat([part.classes for part in parts]),
        options=first.options,
        randomisation={m: _randomisation([p.randomisation[m] for p in parts]) for m in methods},
        # One run lists the rows baseline by baseline, each over every pick.
        completeness=[
            row
            for baseline in first.options.baselines
            for part in parts
            for row in part.completeness
            if row.baseline == baseline
        ],
        faithfulness={
            name: Curves(
                curve.fractions,
                _cat([part.faithfulness[name].deletion for part in parts]),
                _cat([part.faithfulness[name].insertion for part in parts]),
            )
            for name, curve in first.faithfulness.items()
        },
        class_maps=_class_maps([part.class_maps for part in parts]),
        class_sensitivity=[
            _sensitivity([part.class_sensitivity[i] for part in parts])
            for i in range(len(first.class_sensitivity))
        ],
        road={
            name: RoadCurves(
                curve.fractions,
                _cat([part.road[name].morf for part in parts]),
                _cat([part.road[name].lerf for part in parts]),
            )
            for name, curve in first.road.items()
        },
        noise_std=_cat([part.noise_std for part in parts]),
        milliseconds={
            check: sum(part.milliseconds[check] for part in parts) for check in first.milliseconds
        },
        class_names=first.class_names,
    )


def run_checks_in_chunks(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    classes: int | Sequence[int] | torch.Tensor | None = None,
    options: CheckOptions | None = None,
    progress: Progress | None = None,
    chunk: int = CHUNK,
    class_names: Sequence[str] = (),
) -> TrustReport:
    """``run_checks`` on ``images[indices]``, ``chunk`` picks at a time, joined into one report.

    ``classes``: one class for all picks, one per pick, or None (each pick's prediction).
    """
    check_count("The chunk size", chunk, None)
    indices = [int(index) for index in indices]
    held = None if classes is None else torch.as_tensor(classes).reshape(-1).to(torch.long)
    starts = list(range(0, len(indices), chunk)) or [0]
    parts = []
    for number, start in enumerate(starts):
        part_classes = held
        if held is not None and held.numel() > 1:
            part_classes = held[start : start + chunk]

        def advance(done: int, total: int, number: int = number) -> None:
            if progress is not None:
                progress(number * total + done, len(starts) * total)

        parts.append(
            run_checks(
                model,
                images,
                indices[start : start + chunk],
                part_classes,
                options,
                advance,
                class_names=class_names,
            )
        )
    return join_reports(parts)
