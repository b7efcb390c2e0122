"""``gradpick bench-distributed``: the same images through one process and through Ray Data.

Each phase runs in a fresh process so that each peak resident set is its own; while Ray runs, a
sampler reads the memory of the Ray processes below the driver (``gradpick.bench.process``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gradpick.bench.process import descendants, live_kilobytes
from gradpick.bench.rows import markdown_table
from gradpick.models import shipped as models
from gradpick.models.spec import InputSpec
from gradpick.outputs.distributed import (
    ClusterOptions,
    ImageReader,
    ModelRecipe,
    Row,
    _blocks,
    _check_rows,
    import_ray,
    infer_batch,
    infer_on_ray,
)
from gradpick.outputs.store_format import StoreWriter

__all__ = ["BenchRow", "bench_table", "benchmark"]


class _MemorySampler:
    """Samples the Ray processes below this one every ``interval`` s while a run goes on.

    Workers (``ray::MapWorker`` actors) are reported by their own peak resident set (VmHWM,
    read at each sample, so growth in a worker's last interval before it exits is missed);
    Ray's own processes (GCS, raylet with the object store, idle workers) by the peak of their
    summed current resident sets (VmRSS), since they are not the model's cost.
    """

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.worker_peaks: dict[int, int] = {}
        self.system_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            system = 0
            for pid, command in descendants(os.getpid()).items():
                if "MapWorker" in command:
                    peak = live_kilobytes(pid, "VmHWM")
                    self.worker_peaks[pid] = max(self.worker_peaks.get(pid, 0), peak)
                else:
                    system += live_kilobytes(pid, "VmRSS")
            self.system_peak = max(self.system_peak, system)


@dataclass(frozen=True)
class BenchRow:
    """One engine's run over the same images."""

    engine: str
    layout: str
    """Which cores did the work, e.g. '1 process, 2 torch threads'."""
    cores: int
    images: int
    seconds: float
    driver_peak_mb: float
    worker_peak_mb: float | None = None
    system_peak_mb: float | None = None
    startup_seconds: float | None = None

    @property
    def images_per_second(self) -> float:
        return self.images / max(self.seconds, 1e-9)


def _bench_in_process(
    recipe: ModelRecipe,
    rows: Sequence[Row],
    root: str,
    spec: InputSpec,
    out: Path,
    threads: int,
    batch_size: int,
) -> BenchRow:
    """The single-process baseline: the same ``infer_batch`` over the same batches, no Ray."""
    torch.set_num_threads(threads)
    started = time.perf_counter()
    model = models.freeze(recipe())
    reader = ImageReader(root)
    device = torch.device("cpu")
    with StoreWriter(out, {}) as writer:
        for block in _blocks(rows, batch_size):
            writer.write(infer_batch(model, spec, reader, block, device))
    seconds = time.perf_counter() - started
    return BenchRow(
        "in-process",
        f"1 process, {threads} torch thread(s)",
        threads,
        len(rows),
        seconds,
        live_kilobytes(os.getpid(), "VmHWM") / 1e3,
    )


def _bench_ray(
    recipe: ModelRecipe,
    rows: Sequence[Row],
    root: str,
    spec: InputSpec,
    out: Path,
    workers: int,
    batch_size: int,
) -> BenchRow:
    started = time.perf_counter()
    options = ClusterOptions(workers=workers, batch_size=batch_size)
    with _MemorySampler() as sampler:
        run = infer_on_ray(recipe, rows, root, spec, {}, out, options)
    total = time.perf_counter() - started
    return BenchRow(
        "ray",
        f"{workers} worker(s) x 1 CPU on {run.cluster}",
        workers,
        run.rows,
        run.seconds,
        live_kilobytes(os.getpid(), "VmHWM") / 1e3,
        max(sampler.worker_peaks.values(), default=0) / 1e3,
        sampler.system_peak / 1e3,
        total - run.seconds,
    )


def _in_child(function: Callable[..., BenchRow], *args: Any) -> BenchRow:
    """Run one benchmark phase in a fresh process, so each peak resident set is its own."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(function, args)


def benchmark(
    recipe: ModelRecipe,
    rows: Sequence[Row],
    root: str | Path,
    spec: InputSpec,
    scratch: Path,
    workers: int = 2,
    batch_size: int = 500,
) -> list[BenchRow]:
    """The same images through one process and through Ray on a local instance, each phase in
    its own process.

    Rows: one process with one torch thread (what each Ray worker has), one process with
    ``workers`` threads (the same cores as Ray's ``workers`` single-CPU workers), then Ray.
    """
    _check_rows(rows)
    import_ray()
    results = [
        _in_child(
            _bench_in_process,
            recipe,
            rows,
            str(root),
            spec,
            scratch / f"in-process-{threads}",
            threads,
            batch_size,
        )
        for threads in sorted({1, workers})
    ]
    results.append(
        _in_child(_bench_ray, recipe, rows, str(root), spec, scratch / "ray", workers, batch_size)
    )
    return results


def bench_table(rows: Sequence[BenchRow]) -> str:
    """The benchmark as a markdown table, with what each memory figure counts.

    Throughput is compared with the in-process row on the same cores (the last in-process row)
    and, per worker, with one process on one core: Ray's efficiency is its throughput over
    ``workers`` times that of one single-threaded process.
    """
    local = [row for row in rows if row.engine == "in-process"]
    same_cores, one_core = local[-1].images_per_second, local[0].images_per_second

    def figure(value: float | None, digits: int = 0) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    cells = [
        [
            row.engine,
            row.layout,
            f"{row.images:,}",
            f"{row.seconds:,.1f}",
            f"{row.images_per_second:,.0f}",
            f"{row.images_per_second / same_cores:.2f}x",
            f"{row.images_per_second / row.cores / one_core:.2f}",
            f"{row.driver_peak_mb:,.0f}",
            figure(row.worker_peak_mb),
            figure(row.system_peak_mb),
            figure(row.startup_seconds, 1),
        ]
        for row in rows
    ]
    columns = ["engine", "cores", "images", "wall s", "images/s", "vs in-process, same cores"]
    columns += ["per core vs 1 thread", "driver peak MB", "worker peak MB", "Ray processes MB"]
    columns += ["Ray start, check, stop s"]
    lines = markdown_table(columns, cells, right=columns[4:])
    lines += [
        "",
        "wall s: model load(s), reading and preparing every image, inference and the "
        "published store (Ray: from the first block to the checked store, actors' start "
        "included; the last column: ray.init, the check that the cluster reads the source, "
        "and shutdown). per core: images/s per core used, over the one-thread process's. "
        "driver peak: VmHWM of the process that ran the engine. worker peak: the largest VmHWM "
        "of a Ray model worker. Ray processes: peak of the summed VmRSS of Ray's other "
        "processes (GCS, raylet with the object store, idle workers).",
    ]
    return "\n".join(lines)
