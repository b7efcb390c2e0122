"""Settings of the process itself, applied once: the explorer's first page in hosted mode and
the inference benchmark's memory runs ask for them."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading

__all__ = ["MMAP_THRESHOLD", "return_freed_memory_promptly"]

MMAP_THRESHOLD = 128 * 1024
"""glibc's own starting value: blocks at least this large are mmap-ed, and unmapped when freed."""
_M_MMAP_THRESHOLD = -3
_APPLIED: list[bool] = []
_LOCK = threading.Lock()


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
