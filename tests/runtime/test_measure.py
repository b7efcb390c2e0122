"""Timing and memory readouts: synchronised clocks, storages counted once, labelled figures."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from gradpick.gradients.engine import input_gradients
from gradpick.runtime import measure
from gradpick.runtime.measure import (
    CPU_PEAK_LABEL,
    MEASUREMENT_LOCK,
    SAVED_LABEL,
    MemoryFigure,
    SavedTensorCounter,
    Stopwatch,
    measure_memory,
)

CPU = torch.device("cpu")


def test_stopwatch_measures_a_sleep() -> None:
    """At least the sleep, and no more than a clock read around the whole block."""
    outer = time.perf_counter()
    with Stopwatch(CPU) as watch:
        time.sleep(0.05)
    around = (time.perf_counter() - outer) * 1000
    assert 50.0 <= watch.milliseconds <= around


def test_stopwatch_synchronises_before_each_clock_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A synchronise that waits (as for queued GPU kernels) on exit is inside the measured time."""
    calls: list[torch.device] = []

    def slow_synchronize(device: torch.device) -> None:
        calls.append(device)
        if len(calls) == 2:
            time.sleep(0.05)

    monkeypatch.setattr(measure, "synchronize", slow_synchronize)
    with Stopwatch(CPU) as watch:
        pass
    assert calls == [CPU, CPU]
    assert watch.milliseconds >= 50.0


def test_a_tensor_saved_twice_is_counted_once() -> None:
    x = torch.rand(4, 5, requires_grad=True)
    with SavedTensorCounter().track() as counter:
        x * x  # mul saves both operands: the same storage twice
    assert counter.bytes == 4 * 5 * 4


def test_saved_bytes_match_a_hand_count_for_x_times_w() -> None:
    x = torch.rand(4, 5, requires_grad=True)
    w = torch.rand(4, 5, dtype=torch.float64)
    with SavedTensorCounter().track() as counter:
        x * w  # d/dx needs w only: 20 float64 values
    assert counter.bytes == 20 * 8

    w.requires_grad_(True)
    with SavedTensorCounter().track() as both:
        x * w  # now d/dw needs x too: 20 float32 values more
    assert both.bytes == 20 * 8 + 20 * 4


def test_views_of_one_storage_count_that_storage_once() -> None:
    x = torch.rand(6, 5, requires_grad=True)
    base = x * 1.0  # a fresh 120-byte storage
    with SavedTensorCounter().track() as counter:
        base[:3] * base[3:]
    assert counter.bytes == 6 * 5 * 4


def test_nothing_is_counted_outside_track() -> None:
    counter = SavedTensorCounter()
    x = torch.rand(3, requires_grad=True)
    x * x
    with counter.track():
        pass
    x * x
    assert counter.bytes == 0


def test_saved_tensor_hooks_do_not_see_other_threads() -> None:
    counter = SavedTensorCounter()
    tracking, done = threading.Event(), threading.Event()

    def track() -> None:
        with counter.track():
            tracking.set()
            done.wait(timeout=10)

    thread = threading.Thread(target=track)
    thread.start()
    tracking.wait(timeout=10)
    x = torch.rand(100, requires_grad=True)
    x * x
    done.set()
    thread.join()
    assert counter.bytes == 0


def test_measure_memory_yields_one_labelled_report() -> None:
    with measure_memory(CPU) as reports:
        assert MEASUREMENT_LOCK.locked()
        x = torch.rand(1000, requires_grad=True)
        (x * x).sum()
    assert not MEASUREMENT_LOCK.locked()
    (report,) = reports
    assert report.saved_for_backward == MemoryFigure(4000, SAVED_LABEL)
    assert report.peak.counts == CPU_PEAK_LABEL
    assert report.peak.bytes is not None and report.peak.bytes >= 4000
    assert report.as_dict()["saved_for_backward"] == {"bytes": 4000, "counts": SAVED_LABEL}
    assert report.saved_for_backward.megabytes == pytest.approx(0.004)


def test_disabled_measurement_reports_nothing() -> None:
    with measure_memory(CPU, enabled=False) as reports:
        assert not MEASUREMENT_LOCK.locked()
    assert reports == []


def test_a_figure_that_cannot_be_observed_says_so() -> None:
    with measure_memory(CPU, count_saved=False) as reports:
        x = torch.rand(10, requires_grad=True)
        x * x
    (report,) = reports
    assert report.saved_for_backward.bytes is None
    assert report.saved_for_backward.megabytes is None
    assert "not observable" in report.saved_for_backward.counts


def _saved_bytes(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, strategy: str
) -> int:
    result = input_gradients(
        model, images, [5, 2, 7, 2], labels=labels, strategy=strategy, measure_memory=True
    )
    assert result.memory is not None
    assert result.memory.saved_for_backward.counts == SAVED_LABEL
    assert result.memory.peak.bytes is not None and result.memory.peak.bytes > 0
    bytes_saved = result.memory.saved_for_backward.bytes
    assert bytes_saved is not None
    return bytes_saved


def test_recompute_saves_the_same_bytes_whatever_the_batch_size(tiny_cnn: nn.Module) -> None:
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(64, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (64,), generator=generator)

    # Own storages (not views of the 64): a saved view keeps its whole storage alive.
    batches = {n: (images[:n].clone(), labels[:n]) for n in (8, 64)}
    recompute = [_saved_bytes(tiny_cnn, *batches[n], "recompute") for n in (8, 64)]
    summed = [_saved_bytes(tiny_cnn, *batches[n], "summed") for n in (8, 64)]

    assert recompute[0] == recompute[1]
    assert summed[1] > 4 * summed[0] > 4 * recompute[0]
    # and it is what a hand-made forward of the four picked images saves:
    picked = images[[5, 2, 7, 2]].clone().requires_grad_(True)
    with SavedTensorCounter().track() as counter:
        tiny_cnn(picked)
    assert recompute[0] == pytest.approx(counter.bytes, rel=0.05)


def test_vmap_says_its_saved_bytes_are_not_observable(
    tiny_cnn: nn.Module, random_batch: Any
) -> None:
    result = input_gradients(
        tiny_cnn, random_batch.images, [1], random_batch.labels, strategy="vmap",
        measure_memory=True,
    )  # fmt: skip
    assert result.memory is not None
    assert result.memory.saved_for_backward.bytes is None
    assert "vmap" in result.memory.saved_for_backward.counts


def test_a_cpu_memory_measurement_prints_nothing() -> None:
    """The CPU peak comes from the profiler, whose GPU probe otherwise writes errors such as
    'gpuGetDeviceCount failed with code 35' to stderr on a machine without a GPU."""
    code = (
        "import torch\n"
        "from gradpick.runtime.measure import measure_memory\n"
        "with measure_memory(torch.device('cpu')) as reports:\n"
        "    (torch.ones(1000, requires_grad=True) * 2).sum().backward()\n"
        "assert reports[0].peak.bytes is not None\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "KINETO_LOG_LEVEL"}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(measure.__file__).parents[2]), env.get("PYTHONPATH", "")]
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and done.stdout == ""


def test_warming_the_profiler_runs_it_once_and_a_measured_step_counts_as_warm() -> None:
    """In a fresh process (this one may have profiled already): cold, warmed, then a no-op."""
    probe = (
        "from gradpick.runtime import measure\n"
        "cold = measure.profiler_ready()\n"
        "measure.warm_profiler()\n"
        "print(cold, measure.profiler_ready())\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["False", "True"]
    assert "gpuGetDeviceCount" not in run.stderr  # the profiler's GPU probe stays quiet
    measured = (
        "import torch\nfrom gradpick.runtime import measure\n"
        "with measure.PeakMemory(torch.device('cpu')).track():\n    torch.ones(4).sum()\n"
        "print(measure.profiler_ready())\n"
    )
    run = subprocess.run([sys.executable, "-c", measured], capture_output=True, text=True)
    assert run.stdout.split() == ["True"]


def test_the_cpu_peak_is_the_most_tensor_bytes_live_at_once() -> None:
    """4 MB and 2 MB live together, then 4 MB freed and 1 MB made: a peak of 6,000,000 bytes
    by hand, and the same from ``torch.profiler.profile``'s events of the same block."""

    def block() -> None:
        first = torch.empty(1000, 1000)  # float32: 4,000,000 bytes
        second = torch.empty(500, 1000)  # 2,000,000
        del first
        third = torch.ones(250, 1000)  # 1,000,000, while the 2,000,000 still lives
        del second, third

    peak = measure.PeakMemory(torch.device("cpu"))
    with peak.track():
        block()
    assert peak.figure.bytes == 6_000_000
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as reference:
        block()
    changes = sorted(
        (event.time_range.start, event.self_cpu_memory_usage)
        for event in reference.events()
        if event.self_cpu_memory_usage
    )
    running = [sum(change for _, change in changes[: i + 1]) for i in range(len(changes))]
    assert max(running) == peak.figure.bytes


def test_setting_the_profiler_up_imports_no_compiler() -> None:
    """``torch.profiler.profile``'s first start imports torch's compiler stack (dynamo, inductor,
    sympy: ~900 modules, over a second holding the GIL beside the explorer's first page); the
    autograd profiler it wraps, which ``PeakMemory`` calls, needs none of it."""
    probe = (
        "import sys\nfrom gradpick.runtime import measure\nmeasure.warm_profiler()\n"
        "print(sorted({'torch._inductor', 'torch._dynamo', 'sympy'} & set(sys.modules)))\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"


def test_a_measurement_can_tell_the_profiler_is_being_set_up_in_another_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``warm_profiler`` holds the measurement lock for seconds on its first use: while it does
    (held here at the lock), ``profiler_warming`` says so, and once it is done, not."""
    monkeypatch.setattr(measure, "_profiler_used", threading.Event())  # as if never profiled
    assert not measure.profiler_warming()
    with measure.MEASUREMENT_LOCK:
        warming = threading.Thread(target=measure.warm_profiler)
        warming.start()
        while warming.is_alive() and not measure.profiler_warming():
            warming.join(0.01)
        assert measure.profiler_warming()
    warming.join(120)
    assert not warming.is_alive()
    assert not measure.profiler_warming() and measure.profiler_ready()
