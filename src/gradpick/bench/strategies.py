"""The strategy benchmark behind ``gradpick bench``: what each way to picked gradients costs.

For each model, batch size N and number of picked images k it times every strategy against the
floor (a hand-written forward+backward of just the k images) and captum's Saliency, the peer to
beat; ``recompute`` with memory measurement on gets its own row, so that instrument's cost is
visible. Inference of the N images, which happens once before any picking, is timed on its own
rows next to a direct model call over the same pre-stacked batches.

The strategies that pay for all N (``summed``, ``retain_graph``) grow with N and k; a row whose
estimated time exceeds a budget is skipped and says how long it would have taken, so the full
grid stays a few minutes. Images are seeded random pixels: the benchmark is about cost, and
every strategy's gradients are checked against the floor's on the same images.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gradpick import units
from gradpick.bench.rows import markdown_table as rows_table
from gradpick.errors import InputError
from gradpick.gradients import strategies
from gradpick.gradients.engine import input_gradients
from gradpick.gradients.timing import (
    CAPTUM,
    FLOOR,
    MAX_RUNS_PER_ROUND,
    MIN_MEASURED_SECONDS,
    captum_unavailable_reason,
    compare_strategies,
    interleaved_medians,
)
from gradpick.models import shipped as models
from gradpick.outputs.inference import infer
from gradpick.runtime.devices import resolve_device
from gradpick.runtime.versions import library_versions

__all__ = [
    "CAPTUM_LABEL",
    "DIRECT",
    "INFER",
    "INFERENCE_TARGET",
    "QUICK",
    "RECOMPUTE_MEASURED",
    "RECOMPUTE_TARGET",
    "TARGET",
    "BenchConfig",
    "BenchReport",
    "BenchRow",
    "judge",
    "markdown_table",
    "report_text",
    "run_benchmark",
    "Verdict",
]

TARGET = "logit"
"""The predicted class's logit: the target captum's Saliency can be compared on."""

RECOMPUTE_MEASURED = "recompute (measure_memory=True)"
INFER = "inference: gradpick.outputs.inference"
DIRECT = "inference: direct model call"
CAPTUM_LABEL = "captum Saliency"
RECOMPUTE_TARGET = 1.25
INFERENCE_TARGET = 0.9


@dataclass(frozen=True)
class BenchConfig:
    models: tuple[str, ...] = ("tutorial", "resnet20")
    sizes: tuple[int, ...] = (256, 1024, 4096)
    picks: tuple[int, ...] = (1, 4, 16, 64)
    repeats: int = 5
    device: str = "auto"
    row_budget_seconds: float = 20.0
    """An expensive row estimated to take longer than this (all its runs) is skipped."""
    batch_size: int = 500
    seed: int = 0
    min_seconds: float = MIN_MEASURED_SECONDS
    """Each timed call is repeated until this much of its own time was measured."""
    threads: int | None = None
    """torch intra-op threads for the run (None: leave torch's setting). One thread is the
    steady choice on a machine whose cores are busy with other work: two threads that wait on
    each other there turn a millisecond step into a hundred."""


QUICK = BenchConfig(
    sizes=(256, 512),
    picks=(1, 16),
    repeats=3,
    row_budget_seconds=1.5,
    min_seconds=0.25,
    threads=1,
)


@dataclass(frozen=True)
class BenchRow:
    model: str
    n: int
    k: int | None
    strategy: str
    milliseconds: float | None
    ratio_to_floor: float | None = None
    saved_bytes: int | None = None
    peak_bytes: int | None = None
    max_abs_difference: float | None = None
    throughput_vs_direct: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Verdict:
    """The benchmark's targets, each None when the grid held no row to judge it by."""

    recompute_over_floor: float | None
    recompute_saved_bytes_constant: bool | None
    inference_over_direct: float | None

    def lines(self) -> list[str]:
        def judged(ok: bool | None) -> str:
            return "n/a" if ok is None else "PASS" if ok else "FAIL"

        ratio = self.recompute_over_floor
        inference = self.inference_over_direct
        saved = self.recompute_saved_bytes_constant
        return [
            f"- recompute / floor time, worst over the grid: "
            f"{'n/a' if ratio is None else f'{ratio:.2f}x'} (target <= {RECOMPUTE_TARGET}x): "
            f"{judged(None if ratio is None else ratio <= RECOMPUTE_TARGET)}",
            f"- recompute saved-for-backward bytes identical for every N at each k: "
            f"{judged(saved)}",
            f"- gradpick.outputs.inference / direct model call throughput, worst: "
            f"{'n/a' if inference is None else f'{inference:.2f}x'} "
            f"(target >= {INFERENCE_TARGET}x): "
            f"{judged(None if inference is None else inference >= INFERENCE_TARGET)}",
        ]


@dataclass(frozen=True)
class BenchReport:
    config: BenchConfig
    environment: dict[str, Any]
    weights: dict[str, str]
    rows: list[BenchRow]
    verdict: Verdict = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", judge(self.rows))

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config),
            "environment": self.environment,
            "weights": self.weights,
            "target": TARGET,
            "rows": [asdict(row) for row in self.rows],
            "verdict": asdict(self.verdict),
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), indent=2) + "\n")


def judge(rows: list[BenchRow]) -> Verdict:
    """Check the targets: recompute near the floor and flat in N, inference near a direct call."""
    recompute = [row for row in rows if row.strategy == "recompute"]
    ratios = [row.ratio_to_floor for row in recompute if row.ratio_to_floor is not None]
    saved_by_pick: dict[tuple[str, int | None], set[int | None]] = {}
    for row in recompute:
        saved_by_pick.setdefault((row.model, row.k), set()).add(row.saved_bytes)
    compared = [values for values in saved_by_pick.values() if values != {None}]
    inference = [row.throughput_vs_direct for row in rows if row.throughput_vs_direct is not None]
    return Verdict(
        recompute_over_floor=max(ratios) if ratios else None,
        recompute_saved_bytes_constant=all(len(values) == 1 for values in compared)
        if compared
        else None,
        inference_over_direct=min(inference) if inference else None,
    )


def _megabytes(value: int | None) -> str:
    megabytes = units.megabytes(value)
    return "" if megabytes is None else f"{megabytes:.2f}"


def markdown_table(rows: list[BenchRow]) -> str:
    saved, peak = f"saved-for-backward {units.UNIT}", f"peak {units.UNIT}"
    columns = ["model", "N", "k", "strategy", "median ms", "x floor", saved, peak, "note"]
    cells = [
        [
            row.model,
            row.n,
            "" if row.k is None else row.k,
            row.strategy,
            "" if row.milliseconds is None else f"{row.milliseconds:.2f}",
            "" if row.ratio_to_floor is None else f"{row.ratio_to_floor:.2f}",
            _megabytes(row.saved_bytes),
            _megabytes(row.peak_bytes),
            row.note,
        ]
        for row in rows
    ]
    right = {"N", "k", "median ms", "x floor", saved, peak}
    return "\n".join(rows_table(columns, cells, right))


def _environment(device: torch.device) -> dict[str, Any]:
    return {
        **library_versions(),
        "platform": platform.platform(),
        "device": str(device),
        "threads": torch.get_num_threads(),
    }


def _model(name: str, device: torch.device, seed: int) -> tuple[nn.Module, str]:
    """Shipped weights when they exist, else a seeded random initialisation (cost is the same)."""
    if name in models.shipped_models():
        card = models.model_card(name) or {}
        return models.load(name, device=device), f"shipped ({card.get('sha256', 'no card')})"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = models.build(name)
    return models.freeze(model).to(device), f"random initialisation (seed {seed})"


def _inference_rows(
    name: str, model: nn.Module, images: torch.Tensor, config: BenchConfig, device: torch.device
) -> tuple[list[BenchRow], float]:
    """gradpick.outputs.inference against calling the model on the same pre-stacked batches.

    Also returns the direct call's forward time per image, the cost model's starting point.
    """
    batches = list(images.split(config.batch_size))

    def direct() -> None:
        with torch.inference_mode():
            for batch in batches:
                model(batch)

    def through_infer() -> None:
        infer(model, images, batch_size=config.batch_size, device=device)

    with torch.inference_mode():  # lazy initialisation only; the median absorbs the rest
        model(batches[0][:2])
    medians = interleaved_medians(
        {DIRECT: direct, INFER: through_infer}, device, config.repeats, config.min_seconds
    )
    n = int(images.shape[0])
    throughput = medians[DIRECT] / medians[INFER]
    rows = [
        BenchRow(
            name,
            n,
            None,
            DIRECT,
            medians[DIRECT],
            note=f"{n / medians[DIRECT] * 1000:,.0f} images/s",
        ),
        BenchRow(
            name,
            n,
            None,
            INFER,
            medians[INFER],
            throughput_vs_direct=throughput,
            note=f"{n / medians[INFER] * 1000:,.0f} images/s, {throughput:.2f}x direct throughput",
        ),
    ]
    return rows, medians[DIRECT] / n


def _cell_rows(
    name: str,
    model: nn.Module,
    images: torch.Tensor,
    k: int,
    config: BenchConfig,
    device: torch.device,
    costs: strategies.CostModel,
) -> list[BenchRow]:
    n = int(images.shape[0])
    generator = torch.Generator().manual_seed(config.seed + 7919 * n + k)
    indices = torch.randperm(n, generator=generator)[:k].tolist()
    runs_per_row = config.repeats + 3  # a floor check, a warm-up, the repeats, a memory run
    skipped = {
        strategy: f"skipped: {estimate.describe()}"
        for strategy, estimate in costs.over_budget(
            n, k, runs_per_row, config.row_budget_seconds
        ).items()
    }
    captum_reason = captum_unavailable_reason(TARGET)
    runs = compare_strategies(
        model,
        images,
        indices,
        target=TARGET,
        strategies=[strategy for strategy in strategies.NAMES if strategy not in skipped],
        repeats=config.repeats,
        include_captum=captum_reason is None,
        min_seconds=config.min_seconds,
    )
    by_name = {run.name: run for run in runs}
    floor_ms = by_name[FLOOR].milliseconds
    measured_ms = interleaved_medians(
        {
            RECOMPUTE_MEASURED: lambda: input_gradients(
                model, images, indices, target=TARGET, measure_memory=True
            )
        },
        device,
        config.repeats,
        config.min_seconds,
    )[RECOMPUTE_MEASURED]

    def row(label: str, milliseconds: float, run_name: str, note: str = "") -> BenchRow:
        run = by_name[run_name]
        return BenchRow(
            name,
            n,
            k,
            label,
            milliseconds,
            ratio_to_floor=milliseconds / floor_ms,
            saved_bytes=run.saved_bytes,
            peak_bytes=run.peak_bytes,
            max_abs_difference=run.max_abs_difference,
            note=note,
        )

    rows = [row(FLOOR, floor_ms, FLOOR)]
    for strategy in strategies.NAMES:
        if strategy in skipped:
            rows.append(BenchRow(name, n, k, strategy, None, note=skipped[strategy]))
            continue
        milliseconds = by_name[strategy].milliseconds
        if strategy in strategies.budgeted():
            costs.observe(strategy, n, k, milliseconds)
        rows.append(row(strategy, milliseconds, strategy))
        if strategy == "recompute":
            overhead = f"measuring memory adds {measured_ms - milliseconds:,.1f} ms"
            rows.append(row(RECOMPUTE_MEASURED, measured_ms, strategy, overhead))
    if captum_reason is None:
        rows.append(row(CAPTUM_LABEL, by_name[CAPTUM].milliseconds, CAPTUM))
    else:
        rows.append(BenchRow(name, n, k, CAPTUM_LABEL, None, note=f"skipped: {captum_reason}"))
    return rows


def _check(config: BenchConfig) -> None:
    unknown = [name for name in config.models if name not in models.ARCHITECTURES]
    if unknown:
        raise InputError(
            f"Unknown model '{unknown[0]}'; choose from {', '.join(models.ARCHITECTURES)}."
        )
    for label, values in (("N", config.sizes), ("k", config.picks)):
        if not values or min(values) < 1:
            raise InputError(f"Every {label} must be at least 1; got {list(values)}.")
    if config.repeats < 1:
        raise InputError(f"repeats must be at least 1; got {config.repeats}.")
    if config.threads is not None and config.threads < 1:
        raise InputError(f"threads must be at least 1; got {config.threads}.")


def run_benchmark(
    config: BenchConfig, progress: Callable[[str], None] | None = None
) -> BenchReport:
    """Run the grid; ``progress`` receives one line per step (the full grid takes minutes)."""
    _check(config)
    previous_threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    try:
        return _run_grid(config, progress)
    finally:
        torch.set_num_threads(previous_threads)


def _run_grid(config: BenchConfig, progress: Callable[[str], None] | None) -> BenchReport:
    device = resolve_device(config.device)
    generator = torch.Generator().manual_seed(config.seed)
    pixels = torch.rand(max(config.sizes), 3, 32, 32, generator=generator).to(device)
    rows: list[BenchRow] = []
    weights: dict[str, str] = {}
    for name in config.models:
        model, weights[name] = _model(name, device, config.seed)
        costs: strategies.CostModel | None = None
        for n in sorted(config.sizes):
            images = pixels[:n]
            if progress:
                progress(f"{name} N={n}: inference")
            inference, forward_ms_per_image = _inference_rows(name, model, images, config, device)
            rows.extend(inference)
            costs = costs or strategies.CostModel(forward_ms_per_image)
            for k in sorted(config.picks):
                if k > n:
                    continue
                if progress:
                    progress(f"{name} N={n} k={k}: gradients")
                rows.extend(_cell_rows(name, model, images, k, config, device, costs))
    return BenchReport(config, _environment(device), weights, rows)


def report_text(report: BenchReport) -> str:
    """What ``gradpick bench`` prints: a header, the markdown table and the verdict."""
    environment = report.environment
    lines = [
        f"Gradients of the predicted class's logit on {environment['device']} "
        f"({environment['threads']} threads), seeded random images; "
        f"median of at least {report.config.repeats} runs and {report.config.min_seconds} s "
        "of each call's own time; calls take turns in rounds (a cheap call up to "
        f"{MAX_RUNS_PER_ROUND} times a round); {units.UNIT_NOTE}.",
        *(f"- {name}: {weights}" for name, weights in report.weights.items()),
        "",
        markdown_table(report.rows),
        "",
        "Verdict:",
        *report.verdict.lines(),
    ]
    return "\n".join(lines)
