"""Settings of the process itself, applied once: the explorer's first page in hosted mode and
the inference benchmark's memory runs ask for them, and the explorer's server freezes what it
loaded before it serves."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
import threading

__all__ = ["MMAP_THRESHOLD", "freeze_loaded_objects", "return_freed_memory_promptly"]

MMAP_THRESHOLD = 128 * 1024
"""glibc's own starting value: blocks at least this large are mmap-ed, and unmapped when freed."""
_M_MMAP_THRESHOLD = -3
_APPLIED: list[bool] = []
_FROZEN: list[int] = []
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
    with _LOCK:
        if not _FROZEN:
            gc.collect()  # what is garbage now is freed, not frozen
            _FROZEN.append(len(gc.get_objects()))
            gc.freeze()
        return _FROZEN[0]


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
    with _LOCK:
        if not _APPLIED:
            _APPLIED.append(_set_mmap_threshold(MMAP_THRESHOLD))
        return _APPLIED[0]


def _set_mmap_threshold(size: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # a libc without mallopt, such as musl's
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, size))
