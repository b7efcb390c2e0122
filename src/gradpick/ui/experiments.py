"""The Strategies tab's experiments, run on the picked images (no Streamlit).

Each function measures one part of the comparison on this machine: what
every strategy costs (and that they agree), how the cost grows with k and with N, why the naive
loop fails, that ``reduction="mean"`` scales by 1/k, and that training-mode BatchNorm couples
the samples of a batch.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from torch import nn

from gradpick import units
from gradpick.data import ImageBatch
from gradpick.errors import SelectionError
from gradpick.gradients import engine as gradients
from gradpick.gradients import strategies
from gradpick.gradients import timing as compare
from gradpick.gradients.engine import LeakageReport
from gradpick.gradients.request import GradientRequest
from gradpick.gradients.timing import StrategyRun
from gradpick.ui.heatmaps import (
    WHOLE_BATCH_BUDGET,
    HeatmapRequest,
    whole_batch_bytes,
)

__all__ = [
    "AGREEMENT",
    "LEAKAGE_MODEL",
    "MAX_COMPARED",
    "REPEATS",
    "SWEEP_BUDGET_SECONDS",
    "SWEEP_K",
    "SWEEP_N",
    "TIME_BUDGET_SECONDS",
    "affordable_strategies",
    "Agreement",
    "agreement",
    "compare_all",
    "Comparison",
    "leakage",
    "mean_scaling",
    "MeanScaling",
    "naive_loop",
    "NaiveLoop",
    "run_comparison",
    "run_table",
    "Setup",
    "sweep",
    "sweep_series",
    "SweepPoint",
    "SweepSeries",
]

REPEATS = 3
TIME_BUDGET_SECONDS = 20.0
"""A strategy estimated to take longer (all its runs together) is skipped, and says so."""
MAX_COMPARED = 16
"""At most this many picked images enter the comparisons (the naive loop's cost grows with k)."""
SWEEP_BUDGET_SECONDS = 5.0
SWEEP_K = (1, 4, 16)
SWEEP_N = (256, 1000)
AGREEMENT = 1e-4
"""Largest |difference| from the floor still called agreement (float32 rounding)."""
LEAKAGE_MODEL = "resnet20"
"""The model whose training-mode BatchNorm shows the cross-sample leakage."""


@dataclass(frozen=True)
class Setup:
    """The common arguments of every experiment: images, labels and target of one batch."""

    images: torch.Tensor
    labels: torch.Tensor | None
    indices: list[int]
    target: str
    classes: int | None
    forward_ms_per_image: float
    """The model's inference time per image here, for estimating what a run will cost."""

    @classmethod
    def of(
        cls,
        batch: ImageBatch,
        indices: Sequence[int],
        request: HeatmapRequest,
        forward_ms_per_image: float,
    ) -> Setup:
        if not indices:
            raise SelectionError("No images picked: pick at least one image to compare on.")
        target, classes = request.engine_target()
        picked = list(indices)[:MAX_COMPARED]
        return cls(
            batch.float_images(), batch.labels, picked, target, classes, forward_ms_per_image
        )

    def request(self, model: nn.Module, measure_memory: bool = False) -> GradientRequest:
        """The engine's request for these picks on ``model`` (validated here, once)."""
        return GradientRequest.build(
            model,
            self.images,
            self.indices,
            self.labels,
            self.target,
            self.classes,
            measure_memory=measure_memory,
        )

    def with_batch(self, size: int, picked: int) -> Setup:
        """The first ``size`` images with the first ``picked`` of them picked (for sweeps)."""
        labels = None if self.labels is None else self.labels[:size]
        return replace(self, images=self.images[:size], labels=labels, indices=list(range(picked)))


def affordable_strategies(
    model: nn.Module,
    setup: Setup,
    repeats: int = REPEATS,
    budget_seconds: float = TIME_BUDGET_SECONDS,
) -> tuple[list[str], dict[str, str]]:
    """The strategies that fit the memory and time budgets, and why each other one was skipped.

    Only the whole-batch strategies can exceed them; their time is estimated from the forward
    time per image with the registry's cost model (``gradpick.gradients.strategies.CostModel``).
    """
    n, k = len(setup.images), len(setup.indices)
    needed = whole_batch_bytes(model, setup.images)
    runs = repeats + 2  # compare_strategies also checks against the floor and measures memory
    slow = strategies.CostModel(setup.forward_ms_per_image).over_budget(n, k, runs, budget_seconds)
    skipped = {
        name: f"takes targets {' and '.join(strategies.get(name).targets)}, not {setup.target}"
        for name in strategies.NAMES
        if setup.target not in strategies.get(name).targets
    }
    for name in strategies.whole_batch():
        if needed > WHOLE_BATCH_BUDGET:
            skipped[name] = (
                f"would keep about {units.format_bytes(needed, 1, 'GB')} of activations "
                f"for {n:,} images"
            )
        elif name in slow:
            skipped[name] = (
                f"{slow[name].describe()} here; pick fewer images or a smaller batch to time it"
            )
    return [name for name in strategies.NAMES if name not in skipped], skipped


def compare_all(
    model: nn.Module,
    setup: Setup,
    repeats: int = REPEATS,
    budget_seconds: float = TIME_BUDGET_SECONDS,
) -> list[StrategyRun]:
    """Every affordable strategy and the floor on the picked images, with memory."""
    strategies, _ = affordable_strategies(model, setup, repeats, budget_seconds)
    return compare.compare(setup.request(model, measure_memory=True), strategies, repeats)


@dataclass(frozen=True)
class SweepPoint:
    strategy: str
    k: int
    n: int
    milliseconds: float
    peak_bytes: int | None


def sweep(
    model: nn.Module,
    setup: Setup,
    ks: Sequence[int] = SWEEP_K,
    ns: Sequence[int] = SWEEP_N,
    progress: Callable[[int, int], None] | None = None,
) -> list[SweepPoint]:
    """Time and peak memory against k (at the largest N) and against N (at the largest k).

    The first k of the first N images are picked, sizes capped at the batch. Each point is one
    ``compare_strategies`` call with a single timed repeat, and a strategy estimated to take
    longer than ``SWEEP_BUDGET_SECONDS`` there is left out, so the sweep stays quick.
    """
    largest_n = min(max(ns), len(setup.images))
    n_values = sorted({min(n, len(setup.images)) for n in ns})
    k_values = [k for k in ks if k <= largest_n]
    largest_k = max(k_values)
    grid = [(k, largest_n) for k in k_values] + [(largest_k, n) for n in n_values if n != largest_n]
    points = []
    for step, (k, n) in enumerate(grid):
        runs = compare_all(model, setup.with_batch(n, k), 1, SWEEP_BUDGET_SECONDS)
        points += [SweepPoint(run.name, k, n, run.milliseconds, run.peak_bytes) for run in runs]
        if progress is not None:
            progress(step + 1, len(grid))
    return points


@dataclass(frozen=True)
class SweepSeries:
    """One sweep direction: per strategy, (x values, times in ms, peak bytes), at ``fixed``."""

    fixed: int
    """The largest N (for the series against k) or the largest k (against N)."""
    lines: dict[str, tuple[list[int], list[float], list[int | None]]]


def sweep_series(points: Sequence[SweepPoint]) -> tuple[SweepSeries, SweepSeries]:
    """The sweep's points as lines against k (at the largest N) and against N (at the largest k)."""
    largest_n = max(point.n for point in points)
    largest_k = max(point.k for point in points)
    against_k, against_n = SweepSeries(largest_n, {}), SweepSeries(largest_k, {})
    for point in sorted(points, key=lambda p: (p.k, p.n)):
        for series, x, wanted in (
            (against_k, point.k, point.n == largest_n),
            (against_n, point.n, point.k == largest_k),
        ):
            if wanted:
                xs, times, peaks = series.lines.setdefault(point.strategy, ([], [], []))
                xs.append(x)
                times.append(point.milliseconds)
                peaks.append(point.peak_bytes)
    return against_k, against_n


def run_table(runs: Sequence[StrategyRun]) -> dict[str, list[object]]:
    """The comparison's table, column by column: time against the floor, memory in MB, and
    each row's largest difference from the floor's gradients."""

    def megabytes(count: int | None) -> float | None:
        value = units.megabytes(count)
        return None if value is None else round(value, 2)

    floor = next((run.milliseconds for run in runs if run.name == compare.FLOOR), None)
    return {
        "strategy": [run.name for run in runs],
        "time (ms)": [round(run.milliseconds, 2) for run in runs],
        "× floor": [None if not floor else round(run.milliseconds / floor, 2) for run in runs],
        f"saved for backward ({units.UNIT})": [megabytes(run.saved_bytes) for run in runs],
        f"peak ({units.UNIT})": [megabytes(run.peak_bytes) for run in runs],
        "max |difference| from floor": [run.max_abs_difference for run in runs],
    }


@dataclass(frozen=True)
class NaiveLoop:
    """The naive loop: one forward of all N, then a backward per index."""

    error: str | None
    milliseconds: float


def naive_loop(model: nn.Module, setup: Setup) -> NaiveLoop:
    started = time.perf_counter()
    error = gradients.naive_loop(setup.request(model))
    return NaiveLoop(None if error is None else str(error), (time.perf_counter() - started) * 1e3)


@dataclass(frozen=True)
class MeanScaling:
    k: int
    ratio: float
    """max |mean-reduced gradient| / max |sum-reduced gradient|; 1/k when they agree."""
    max_deviation: float
    """max |mean - sum / k|: zero up to rounding."""


def mean_scaling(model: nn.Module, setup: Setup) -> MeanScaling:
    request = setup.request(model)
    summed = gradients.compute(request).gradients
    mean = gradients.compute(request.but(reduction="mean")).gradients
    k = len(setup.indices)
    return MeanScaling(
        k=k,
        ratio=float(mean.abs().max() / summed.abs().max().clamp_min(1e-30)),
        max_deviation=float((mean - summed / k).abs().max()),
    )


def leakage(model: nn.Module, setup: Setup) -> tuple[LeakageReport, LeakageReport]:
    """Cross-sample leakage of the model as served (eval) and of a train-mode deep copy.

    The served model is shared by every session, so it is never switched to training mode:
    the copy is.
    """
    if len(set(setup.indices)) < 2:
        raise SelectionError("The leakage check needs at least two different picked images.")
    request = setup.request(model)
    training = copy.deepcopy(model).train()
    return gradients.leakage(request), gradients.leakage(request.but(model=training))


@dataclass(frozen=True)
class Agreement:
    """Whether every row of a comparison gives the floor's gradients, up to float32 rounding."""

    worst: float
    """The largest |difference| from the floor over all rows."""

    @property
    def agrees(self) -> bool:
        return self.worst <= AGREEMENT


def agreement(runs: Sequence[StrategyRun]) -> Agreement:
    return Agreement(max(run.max_abs_difference for run in runs))


@dataclass(frozen=True)
class Comparison:
    """One run of the Strategies tab's experiments, with what it was run on (``key``)."""

    key: tuple[object, ...]
    runs: list[StrategyRun]
    skipped: dict[str, str]
    naive: NaiveLoop
    mean: MeanScaling
    leakage: tuple[LeakageReport, LeakageReport] | None
    """None when fewer than two different images were picked."""

    @property
    def agreement(self) -> Agreement:
        return agreement(self.runs)


def run_comparison(
    model: nn.Module,
    setup: Setup,
    key: tuple[object, ...],
    leakage_model: Callable[[], nn.Module],
) -> Comparison:
    """Every experiment of the Strategies tab on ``setup``'s picks.

    ``leakage_model`` gives the model whose BatchNorm shows the leakage (``LEAKAGE_MODEL``);
    it is only asked for when two different images are picked.
    """
    _, skipped = affordable_strategies(model, setup)
    coupled = None
    if len(set(setup.indices)) >= 2:
        coupled = leakage(leakage_model(), setup)
    return Comparison(
        key=key,
        runs=compare_all(model, setup),
        skipped=skipped,
        naive=naive_loop(model, setup),
        mean=mean_scaling(model, setup),
        leakage=coupled,
    )
