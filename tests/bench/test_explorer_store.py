"""The store benchmark's own parts without a browser: the memory it counts (the server's whole
process tree) and its targets (the browser run itself is ``tests/browser/test_bench_store.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from gradpick.bench.explorer_store import MemoryPeak, Row
from gradpick.bench.process import descendants, live_kilobytes

CHILD = "import time; block = bytearray(150 * 1024 * 1024); time.sleep(30)"
PARENT = (
    "import subprocess, sys, time; "
    f"child = subprocess.Popen([sys.executable, '-c', {CHILD!r}]); time.sleep(30)"
)


def test_the_peak_counts_the_processes_below_the_server() -> None:
    """A parent that holds little and a child that holds 150 MB: the tree's peak holds both."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT])
    try:
        with MemoryPeak(parent.pid, interval=0.05) as memory:
            deadline = time.monotonic() + 60  # a child that never starts fails, not hangs
            while memory.peak_kilobytes < 150 * 1024:
                assert time.monotonic() < deadline, "the child's memory was never counted"
                time.sleep(0.05)
        assert live_kilobytes(parent.pid, "VmRSS") < 150 * 1024  # the parent alone holds less
    finally:
        for pid in descendants(parent.pid):
            os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()


def test_a_row_is_held_to_its_median_and_notes_the_load_of_each_sample() -> None:
    row = Row("tab", limit_ms=500.0)
    for value in (100.0, 900.0, 300.0):
        row.add(value)
    assert (row.median, row.worst, row.met, len(row.loads)) == (300.0, 900.0, "yes", 3)
    assert Row("memory", unit="MB").met == ""
