"""Every gradient strategy side by side: cost, memory, and agreement with a hand-written floor.

The floor is the least work the task allows: one forward and one backward of exactly the k
picked images, written out by hand with nothing around it. Each strategy's row says how far it
is from that floor in wall time and how far its gradients are from the floor's.

Timings are medians of runs with memory measurement off, interleaved across strategies so that a
busy machine slows all of them alike; memory comes from one extra run with measurement on, so
the profiler's overhead never reaches a timing.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from gradpick.errors import InputError
from gradpick.gradients import engine as gradients
from gradpick.gradients.request import GradientRequest
from gradpick.gradients.strategies import NAMES, get
from gradpick.runtime import measure
from gradpick.runtime.measure import MemoryReport, Stopwatch

__all__ = [
    "CAPTUM",
    "FLOOR",
    "INTERACTIVE_MIN_SECONDS",
    "MAX_ROUNDS",
    "MAX_RUNS_PER_ROUND",
    "MIN_MEASURED_SECONDS",
    "NOT_MEASURED",
    "ROUND_SECONDS",
    "captum_unavailable_reason",
    "Classes",
    "compare",
    "compare_strategies",
    "floor_gradients",
    "Indices",
    "interleaved_medians",
    "Runner",
    "StrategyRun",
]

FLOOR = "floor"
CAPTUM = "captum"
NOT_MEASURED = "not measured"

Indices = Sequence[int] | torch.Tensor
Classes = int | Sequence[int] | torch.Tensor | None
Runner = Callable[[bool], tuple[torch.Tensor, MemoryReport | None]]
"""Runs one row once; the flag turns memory measurement on. Returns (gradients, memory)."""


@dataclass(frozen=True)
class StrategyRun:
    """One row of a comparison."""

    name: str
    milliseconds: float
    saved_bytes: int | None
    peak_bytes: int | None
    peak_counts: str
    max_abs_difference: float


def floor_gradients(request: GradientRequest) -> torch.Tensor:
    """The yardstick: d target_j / d image_j by one plain forward+backward of the picked images.

    No chunking or bookkeeping, on purpose: this is what a careful user would write by hand
    (on arguments already checked), so it is the cost every strategy is compared with.
    """
    picked = request.picked_images.detach().requires_grad_(True)
    logits = request.model(picked)
    labels = None if request.labels is None else request.labels[request.indices].to(logits.device)
    if request.target == "loss":
        assert labels is not None  # the request's validation insists on labels
        total = F.cross_entropy(logits, labels, reduction="sum")
    else:
        if request.classes is not None:
            chosen = request.classes.to(logits.device)
        elif request.target == "bce" and labels is not None and labels.dim() == 1:
            chosen = labels  # each image's own label
        else:
            chosen = logits.detach().argmax(dim=1)
        chosen_logits = logits.gather(1, chosen.unsqueeze(1)).squeeze(1)
        total = chosen_logits.sum()
        if request.target == "bce":  # -t log σ(z) - (1 - t) log(1 - σ(z)), t: label present
            assert labels is not None
            rows = torch.arange(len(chosen), device=logits.device)
            present = labels[rows, chosen] if labels.dim() == 2 else (labels == chosen).long()
            truth = present.to(logits.dtype)
            bce = -truth * F.logsigmoid(chosen_logits) - (1 - truth) * F.logsigmoid(-chosen_logits)
            total = bce.sum()
        if request.versus is not None:
            total = total - logits.gather(1, request.versus.to(logits.device).unsqueeze(1)).sum()
    (gradients,) = torch.autograd.grad(total, picked)
    return gradients


def captum_unavailable_reason(target: str) -> str | None:
    """Why a captum Saliency row cannot be offered, or None when it can.

    Saliency attributes a model output (a logit), so it has no counterpart of the loss target;
    captum itself is a test/benchmark extra, not a runtime dependency.
    """
    if target != "logit":
        return "captum's Saliency attributes logits, so it is offered for target='logit' only"
    try:
        import captum.attr  # noqa: F401
    except ImportError:
        return "captum is not installed (pip install 'gradpick[test]')"
    return None


MIN_MEASURED_SECONDS = 0.5
"""Each call is timed until this much of its own time was measured: a median of a few
millisecond-long runs is mostly noise, a median of hundreds is not."""
INTERACTIVE_MIN_SECONDS = 0.1
"""What the explorer's comparison measures per call: enough for a steady median there, quick
enough for a click (the benchmark measures longer)."""
ROUND_SECONDS = 0.05
"""A cheap call runs several times per round, about this long, so cheap calls that are compared
with each other (gradpick and the floor) alternate often while a busy machine drifts."""
MAX_RUNS_PER_ROUND = 100
MAX_ROUNDS = 200


def interleaved_medians(
    calls: dict[str, Callable[[], object]],
    device: torch.device,
    repeats: int,
    min_seconds: float = MIN_MEASURED_SECONDS,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Median wall time (ms, device synchronised) of each call, over at least ``repeats`` runs
    and at least ``min_seconds`` of its own measured time (up to ``MAX_ROUNDS`` rounds), read
    from ``clock`` (seconds).

    Calls take turns in rounds, so a machine that gets busier or quieter part-way through
    shifts all of them alike instead of favouring whichever ran first; within a round a call
    runs about ``ROUND_SECONDS`` long (at least once, at most ``MAX_RUNS_PER_ROUND`` times). A
    call leaves the rounds once it has enough. One warm-up run of each call comes first.
    """
    if repeats < 1:
        raise InputError(f"repeats must be at least 1; got {repeats}.")
    # The warm-up run is not measured (first-call costs such as lazy initialisation are not the
    # cost), only used to size the rounds; it can only overestimate, which means fewer runs.
    calibration = {name: _timed(call, device, clock) for name, call in calls.items()}
    runs_per_round = {
        name: max(1, min(MAX_RUNS_PER_ROUND, int(ROUND_SECONDS * 1000 / max(ms, 1e-3))))
        for name, ms in calibration.items()
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    active = list(calls)
    for _ in range(MAX_ROUNDS):
        for name in active:
            times[name].extend(
                _timed(calls[name], device, clock) for _ in range(runs_per_round[name])
            )
        active = [
            name
            for name in active
            if len(times[name]) < repeats or sum(times[name]) < min_seconds * 1000
        ]
        if not active:
            break
    return {name: statistics.median(values) for name, values in times.items()}


def _timed(call: Callable[[], object], device: torch.device, clock: Callable[[], float]) -> float:
    with Stopwatch(device, clock) as watch:
        call()
    return watch.milliseconds


def _measured(function: Callable[[], torch.Tensor], device: torch.device) -> Runner:
    """A runner for a plain function, measured with the same instruments as input_gradients."""

    def run(measure_memory: bool) -> tuple[torch.Tensor, MemoryReport | None]:
        with measure.measure_memory(device, enabled=measure_memory) as reports:
            gradients = function()
        return gradients, reports[0] if reports else None

    return run


def _strategy_runner(request: GradientRequest) -> Runner:
    def run(measure_memory: bool) -> tuple[torch.Tensor, MemoryReport | None]:
        result = gradients.compute(request.but(measure_memory=measure_memory))
        return result.gradients, result.memory

    return run


def _captum_saliency(request: GradientRequest, classes: torch.Tensor) -> Callable[[], torch.Tensor]:
    from captum.attr import Saliency

    targets = classes.to(request.images.device)

    def attribute() -> torch.Tensor:
        picked = request.picked_images.detach().requires_grad_(True)
        saliency: torch.Tensor = Saliency(request.model).attribute(
            picked, target=targets, abs=False
        )
        return saliency

    return attribute


def compare(
    request: GradientRequest,
    strategies: Sequence[str] = NAMES,
    repeats: int = 3,
    include_floor: bool = True,
    include_captum: bool = False,
    min_seconds: float = INTERACTIVE_MIN_SECONDS,
) -> list[StrategyRun]:
    """Time each strategy (and the floor, and captum's Saliency) on the request's picks.

    Rows come in the order: floor, the strategies as given, captum. ``milliseconds`` is the
    median over ``repeats`` of the engine call on the built request (validation happens once,
    when the request is built, as it does for a click in the explorer); the memory columns come
    from one extra run with measurement on, when ``request.measure_memory`` is set. The captum
    row is left out, with a warning, when ``captum_unavailable_reason`` gives a reason.
    """
    # Every row, the floor and captum included, takes the images on the run device, as a
    # careful user would put them there before timing anything.
    request = request.but(images=request.images.to(request.device))
    # Warms the model up and resolves the classes (the predicted ones when none are given)
    # for captum's explicit targets.
    reference = gradients.compute(request.but(measure_memory=False))

    runners: dict[str, Runner] = {}
    if include_floor:
        runners[FLOOR] = _measured(lambda: floor_gradients(request), request.device)
    for strategy in strategies:
        runners[strategy] = _strategy_runner(request.but(strategy=get(strategy).name))
    if include_captum:
        reason = captum_unavailable_reason(request.target)
        if reason is None:
            runners[CAPTUM] = _measured(
                _captum_saliency(request, reference.classes), request.device
            )
        else:
            warnings.warn(f"captum row skipped: {reason}", stacklevel=2)

    floor = floor_gradients(request)
    differences = {
        name: float((run(False)[0] - floor).abs().max()) for name, run in runners.items()
    }
    medians = interleaved_medians(
        {name: partial(run, False) for name, run in runners.items()},
        request.device,
        repeats,
        min_seconds,
    )

    rows = []
    for name, run in runners.items():
        memory = run(True)[1] if request.measure_memory else None
        rows.append(
            StrategyRun(
                name=name,
                milliseconds=medians[name],
                saved_bytes=None if memory is None else memory.saved_for_backward.bytes,
                peak_bytes=None if memory is None else memory.peak.bytes,
                peak_counts=NOT_MEASURED if memory is None else memory.peak.counts,
                max_abs_difference=differences[name],
            )
        )
    return rows


def compare_strategies(
    model: nn.Module,
    images: torch.Tensor,
    indices: Indices,
    labels: Sequence[int] | torch.Tensor | None = None,
    target: str = "loss",
    classes: Classes = None,
    strategies: Sequence[str] = NAMES,
    repeats: int = 3,
    measure_memory: bool = True,
    include_floor: bool = True,
    include_captum: bool = False,
    device: str | torch.device | None = None,
    min_seconds: float = INTERACTIVE_MIN_SECONDS,
) -> list[StrategyRun]:
    """``compare`` of a request built from these arguments."""
    request = GradientRequest.build(
        model,
        images,
        indices,
        labels,
        target,
        classes,
        device=device,
        measure_memory=measure_memory,
    )
    return compare(request, strategies, repeats, include_floor, include_captum, min_seconds)
