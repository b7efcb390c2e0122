"""Honest timing and memory readouts.

Timing synchronises the device before each clock read, so queued GPU work is counted. Memory
figures always carry a label saying exactly what they count, because "memory" means different
things on different devices:

* saved for backward: bytes of the tensors autograd keeps for the backward pass, each storage
  counted once (``torch.autograd.graph.saved_tensors_hooks``); comparable across devices.
* peak: on CUDA, the peak bytes allocated by PyTorch's caching allocator during the step (reset
  before, read after); on CPU, the peak of live tensor bytes allocated during the step, from the
  PyTorch profiler's memory events. Both are process-wide instruments, so one lock serialises
  measured steps across threads (Streamlit sessions).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any

import torch

from gradpick import units
from gradpick.runtime.devices import synchronize

__all__ = [
    "CPU_PEAK_LABEL",
    "CUDA_PEAK_LABEL",
    "KINETO_LOG_LEVEL_ENV",
    "KINETO_QUIET",
    "MEASUREMENT_LOCK",
    "SAVED_LABEL",
    "UNCOUNTED_SAVED_LABEL",
    "UNTRACKED_PEAK_LABEL",
    "measure_memory",
    "MemoryFigure",
    "MemoryReport",
    "PeakMemory",
    "SavedTensorCounter",
    "Stopwatch",
    "profiler_ready",
    "profiler_warming",
    "warm_profiler",
]

KINETO_LOG_LEVEL_ENV = "KINETO_LOG_LEVEL"
KINETO_QUIET = "6"
"""Above kineto's highest message level (5, its start/stop trace lines): it logs nothing."""
MEASUREMENT_LOCK = threading.Lock()
"""Serialises steps that read process-wide memory counters (profiler, CUDA peak stats)."""


class Stopwatch:
    """Wall time of a block in milliseconds, with the device synchronised at both ends.

    ``clock`` (seconds) is ``time.perf_counter`` unless a test drives a fake one.
    """

    def __init__(
        self, device: torch.device, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.device = device
        self.milliseconds = 0.0
        self._clock = clock
        self._start = 0.0

    def __enter__(self) -> Stopwatch:
        synchronize(self.device)
        self._start = self._clock()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        synchronize(self.device)
        self.milliseconds = (self._clock() - self._start) * 1000.0


@dataclass(frozen=True)
class MemoryFigure:
    """A byte count and a sentence saying what it counts."""

    bytes: int | None
    counts: str

    @property
    def megabytes(self) -> float | None:
        return units.megabytes(self.bytes)


@dataclass(frozen=True)
class MemoryReport:
    """Memory of one gradient step: what autograd saved, and the peak during the step."""

    saved_for_backward: MemoryFigure
    peak: MemoryFigure

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


SAVED_LABEL = "bytes of tensors saved by autograd for backward (each storage counted once)"
CUDA_PEAK_LABEL = "peak bytes allocated on {device} by PyTorch during the step (reset before)"
CPU_PEAK_LABEL = "peak live tensor bytes allocated on the CPU during the step (profiler events)"
UNTRACKED_PEAK_LABEL = "peak not tracked on {device}"
UNCOUNTED_SAVED_LABEL = "not observable: torch.func transforms (vmap) do not run saved-tensor hooks"


class SavedTensorCounter:
    """Counts bytes autograd saves for backward inside ``track()``, each storage once.

    The hooks are thread-local, so concurrent sessions do not see each other's tensors.
    """

    def __init__(self) -> None:
        self._storages: dict[tuple[str, int], int] = {}

    @property
    def bytes(self) -> int:
        return sum(self._storages.values())

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        self._storages[(str(tensor.device), storage.data_ptr())] = storage.nbytes()
        return tensor

    @staticmethod
    def _unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    @contextmanager
    def track(self) -> Iterator[SavedTensorCounter]:
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            yield self


def _cpu_peak_bytes(profile: torch.autograd.profiler.profile) -> int:
    """Peak of the running sum of allocations and frees recorded by the profiler.

    Each op's own (self) bytes only: an op's total includes its children's, which would count
    every nested allocation once per enclosing op.
    """
    events = [
        (event.time_range.start, event.self_cpu_memory_usage)
        for event in profile.function_events or ()
        if event.self_cpu_memory_usage != 0
    ]
    live = peak = 0
    for _, change in sorted(events, key=lambda item: item[0]):
        live += change
        peak = max(peak, live)
    return peak


_profiler_used = threading.Event()
"""Set once the CPU memory profiler has run in this process."""


def profiler_ready() -> bool:
    """Whether the CPU memory profiler has run in this process, so its set-up is paid."""
    return _profiler_used.is_set()


_profiler_warming = threading.Event()
"""Set while ``warm_profiler`` sets the profiler up (or waits to)."""


def profiler_warming() -> bool:
    """Whether ``warm_profiler`` is setting the CPU memory profiler up in another thread: a
    measurement now would wait seconds for it (it holds ``MEASUREMENT_LOCK`` meanwhile)."""
    return _profiler_warming.is_set()


def warm_profiler() -> float:
    """Run the CPU memory profiler once over nothing, unless it ran already; returns
    milliseconds.

    Its first use in a process sets up the profiler's library (kineto): about 0.1 s of one core
    on the project's 2-core machine (1.4 s through ``torch.profiler.profile``, which also
    imported torch's compiler stack), against 1 ms for every later use. The explorer's warm-up
    pays it once the first page's needs are met, and a click meanwhile skips its memory readout
    rather than wait (``profiler_warming``)."""
    started = time.perf_counter()
    if not profiler_ready():
        _profiler_warming.set()
        try:
            with MEASUREMENT_LOCK, PeakMemory(torch.device("cpu")).track():
                pass
        finally:
            _profiler_warming.clear()
    return (time.perf_counter() - started) * 1000


class PeakMemory:
    """Peak memory of a block on the given device; see the module docstring for what it counts."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.figure = MemoryFigure(None, UNTRACKED_PEAK_LABEL.format(device=device))

    @contextmanager
    def track(self) -> Iterator[PeakMemory]:
        if self.device.type == "cuda":
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            baseline = torch.cuda.memory_allocated(self.device)
            yield self
            synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device) - baseline
            self.figure = MemoryFigure(peak, CUDA_PEAK_LABEL.format(device=self.device))
        elif self.device.type == "cpu":
            # The profiler's library (kineto) probes for GPUs even when asked for CPU events only,
            # and logs the failed probe ("gpuGetDeviceCount failed") and every start and stop to
            # stderr; it reads its log level when first used. A level set by the user is kept.
            os.environ.setdefault(KINETO_LOG_LEVEL_ENV, KINETO_QUIET)
            # The autograd profiler that ``torch.profiler.profile`` wraps, called directly: the
            # wrapper's first start looks ``torch._inductor`` up, which imports it with torch's
            # compiler stack (dynamo, sympy; ~900 modules, 1.4 s of one core holding the GIL).
            with torch.autograd.profiler.profile(
                use_cpu=True, profile_memory=True, use_kineto=True
            ) as profile:
                _profiler_used.set()
                yield self
            self.figure = MemoryFigure(_cpu_peak_bytes(profile), CPU_PEAK_LABEL)
        else:
            yield self


@contextmanager
def measure_memory(
    device: torch.device, enabled: bool = True, count_saved: bool = True
) -> Iterator[list[MemoryReport]]:
    """Collect a MemoryReport for the block into the yielded list (left empty when disabled).

    ``count_saved=False`` skips the saved-tensor hooks, for code that cannot run under them.
    """
    reports: list[MemoryReport] = []
    if not enabled:
        yield reports
        return
    with MEASUREMENT_LOCK:
        saved = SavedTensorCounter()
        peak = PeakMemory(device)
        with peak.track(), saved.track() if count_saved else nullcontext():
            yield reports
        saved_figure = (
            MemoryFigure(saved.bytes, SAVED_LABEL)
            if count_saved
            else MemoryFigure(None, UNCOUNTED_SAVED_LABEL)
        )
        reports.append(MemoryReport(saved_figure, peak.figure))
