"""Settings of the process itself, applied once: the allocator's (the explorer's server keeps
freed memory for reuse, or in hosted mode returns it promptly; the inference benchmark's memory
runs return it), and the explorer's server freezes what it loaded and lets its launcher's
OpenMP threads go before it serves."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
import threading

__all__ = [
    "MMAP_THRESHOLD",
    "REUSE_MMAP_THRESHOLD",
    "REUSE_TRIM_THRESHOLD",
    "apply_memory_policy",
    "freeze_first_run_leftovers",
    "freeze_loaded_objects",
    "keep_freed_memory_for_reuse",
    "release_openmp_threads",
    "return_freed_memory_promptly",
]

MMAP_THRESHOLD = 128 * 1024
"""glibc's own starting value: blocks at least this large are mmap-ed, and unmapped when freed."""
REUSE_MMAP_THRESHOLD = 32 * 1024 * 1024
"""glibc's largest on 64-bit: smaller blocks come from the heap and go back to it when freed."""
REUSE_TRIM_THRESHOLD = 256 * 1024 * 1024
"""How much free memory the heap's top may hold before glibc hands it back to the system."""
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_OMP_PAUSE_SOFT = 1
_APPLIED: list[tuple[str, bool]] = []
"""The allocator policy this process took (the first asked for), and whether glibc took it."""
_FROZEN: list[int] = []
_LEFTOVERS_FROZEN: list[int] = []
_LOCK = threading.Lock()


def freeze_loaded_objects() -> int:
    """Leave every object alive now (torch, plotly, pandas and the app's modules, the served
    model) out of the garbage collector's future passes, once per process; returns how many
    were frozen by the first call.

    Streamlit runs a full collection (``gc.collect(2)``) after every script run, fragment reruns
    included, holding the GIL while it walks every tracked object: about 80-90 ms with the
    explorer's ~275,000 objects on this project's machine. The server's event loop cannot send
    the click's remaining elements meanwhile, so each click's page waited for it. Frozen objects
    are still freed as usual when their last reference goes; only cycles among them would stay,
    and module-level objects make none worth collecting. See ``gc.freeze``.
    """
    return _freeze_once(_FROZEN)


def freeze_first_run_leftovers() -> int:
    """Freeze what the first page run leaves alive, as it ends, once per process; returns how
    many objects the collector tracked then (the first call's count, again on later calls).

    The first page run makes tens of thousands of long-lived objects that
    ``freeze_loaded_objects`` came too early to see: modules imported on first use, Streamlit's
    and plotly's lazily built tables, the session's state and the caches' first entries.
    Streamlit's full collection after every later run walked them all: about 50,000 objects
    and 15-20 ms of every click on this project's machine, against about 4,000 objects and 2 ms
    once they are frozen. The collection here replaces the one Streamlit runs as the run ends,
    so the first page pays nothing extra. Frozen objects are still freed by reference counting;
    only a cycle among them (of a session that later ends) would stay, once per process.
    """
    return _freeze_once(_LEFTOVERS_FROZEN)


def _freeze_once(done: list[int]) -> int:
    """Collect, then freeze every object alive, unless ``done`` records that this freeze ran;
    returns how many objects the collector tracked when it did (kept in ``done``)."""
    with _LOCK:
        if not done:
            gc.collect()  # what is garbage now is freed, not frozen
            done.append(len(gc.get_objects()))
            gc.freeze()
        return done[0]


def release_openmp_threads() -> bool:
    """End the calling thread's idle OpenMP worker threads (OpenMP 5.0's
    ``omp_pause_resource_all``, soft); the next parallel step on this thread starts new ones.
    Returns whether the OpenMP runtime torch loaded did so.

    torch's CPU kernels run on the OpenMP team of the thread that calls them, and a team lives
    as long as its thread. The explorer's launcher infers on the main thread, which then serves
    for good; each page run infers on a thread of its own. With the launcher's team alive,
    libgomp counts more of its threads than cores and has its workers sleep between parallel
    steps instead of spinning: 1,000 images inferred in a thread then ran at 1,580-1,970 img/s,
    and mostly at 1,850-2,170 once the launcher's team was gone (ResNet-20, two cores).
    """
    try:
        pause = ctypes.CDLL(None).omp_pause_resource_all
    except (OSError, TypeError, AttributeError):  # no process-wide lookup (Windows), no OpenMP
        return False  # runtime loaded, or one before OpenMP 5.0
    return bool(pause(_OMP_PAUSE_SOFT) == 0)


def return_freed_memory_promptly() -> bool:
    """Keep large freed blocks (inference activations, float copies of a batch) out of the
    server's resident memory. Returns whether the setting took effect.

    glibc raises its mmap threshold every time a large mmap-ed block is freed (up to 32 MB), so
    after the first inference the same buffers come from the heap, and stay resident once freed:
    about 80 MB more on the hosted demo's smallest memory tier. Fixing the threshold turns that
    adjustment off. Only glibc (Linux) has it; elsewhere this does nothing.

    The page applies it in hosted mode only: every activation buffer then comes from fresh,
    page-faulted memory, which costs inference about 40% of its speed (ResNet-20 on one core:
    582 img/s with glibc's default, 342 img/s with the threshold fixed).
    """
    return _apply("prompt", ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD),))


def keep_freed_memory_for_reuse() -> bool:
    """Serve blocks under 32 MB (a batch's activations) from the heap, and keep up to 256 MB
    freed at its top for the next batch instead of handing it back; one heap for every thread.
    Returns whether the setting took effect (glibc only, like ``return_freed_memory_promptly``;
    the first policy a process asks for is the one it keeps, and it must be asked for before
    the process starts threads that allocate).

    With glibc's default, each freed block at the heap's top beyond the trim threshold (twice a
    threshold it raises as blocks are freed) goes back to the system, and the next batch
    page-faults it in again, zeroed. How often depends on where small, long-lived objects lie
    in the heap, so one process infers steadily at about 1,250 img/s and the next at 1,550 or
    2,000 (ResNet-20, 1,000 CIFAR images, two cores; the same with address randomisation off).
    With both thresholds fixed every process ran at 1,900-2,050 img/s; either alone did not
    (mmap alone 1,050-1,200, trim alone about 600). The cost is resident memory: what the
    largest batch freed stays, up to 256 MB above what is in use.

    The thresholds are the main heap's: glibc gives other threads heaps of their own, mapped
    64 MB at a time and unmapped as they empty, and every page run is a thread of its own. So
    every thread shares the main heap (``M_ARENA_MAX`` 1): batches inferred in threads of their
    own faulted in 43,000-51,000 of their 98,000 pages again with a heap per thread, 4,000-12,000
    with one; 1,000 images inferred at 1,600-1,950 img/s, and at 1,925-2,080 as on the main
    thread. The threads that allocate much (page runs, the OpenMP workers) mostly take turns.
    """
    return _apply(
        "reuse",
        (
            (_M_MMAP_THRESHOLD, REUSE_MMAP_THRESHOLD),
            (_M_TRIM_THRESHOLD, REUSE_TRIM_THRESHOLD),
            (_M_ARENA_MAX, 1),
        ),
    )


def apply_memory_policy(hosted: bool) -> bool:
    """The explorer server's allocator policy: memory returned promptly where a hosted demo's
    memory is small, kept for reuse (speed) on the user's own machine."""
    return return_freed_memory_promptly() if hosted else keep_freed_memory_for_reuse()


def _apply(policy: str, settings: tuple[tuple[int, int], ...]) -> bool:
    """Whether ``policy`` is this process's: applied now if none was yet, with each of its
    ``(option, value)`` settings, and taken by glibc."""
    with _LOCK:
        if not _APPLIED:
            taken = all([_mallopt(option, value) for option, value in settings])
            _APPLIED.append((policy, taken))
        applied, taken = _APPLIED[0]
        return taken and applied == policy


def _mallopt(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # a libc without mallopt, such as musl's
        return False
    return bool(mallopt(option, value))
