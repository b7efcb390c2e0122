"""Where and how the work runs: devices, honest timing and memory, process settings, versions.

``devices`` chooses cuda, mps or cpu and says why; ``measure`` synchronises before every clock
read and says what each memory figure counts; ``process`` holds the process-wide tuning (the
allocator, OpenMP threads) in one place; ``versions`` records the libraries beside results.
Names resolve on first use (``gradpick._lazy``), so importing the package runs none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradpick._lazy import lazy_exports

if TYPE_CHECKING:
    from gradpick.runtime.devices import resolve_device, synchronize
    from gradpick.runtime.measure import MemoryReport, Stopwatch, measure_memory
    from gradpick.runtime.process import apply_memory_policy
    from gradpick.runtime.versions import library_versions

__all__ = [
    "MemoryReport",
    "Stopwatch",
    "apply_memory_policy",
    "library_versions",
    "measure_memory",
    "resolve_device",
    "synchronize",
]

__getattr__, __dir__ = lazy_exports(__name__)
