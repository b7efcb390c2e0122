"""The store benchmark's own parts without a browser: the memory it counts (the server's whole
process tree) and its targets by the store's size (the browser run itself is
``tests/browser/test_bench_store.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from gradpick.bench.explorer_store import MemoryPeak, Row, targets_for
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


def test_a_store_is_held_to_the_targets_of_its_size() -> None:
    """Up to 50,000 rows: first page 3 s, views and tabs 0.5 s; past that 5 s and 1 s; a click
    0.5 s at any size."""
    small, large = targets_for(50_000), targets_for(50_001)
    assert (small.first_page_ms, small.view_ms, small.click_ms) == (3000.0, 500.0, 500.0)
    assert (large.first_page_ms, large.view_ms, large.click_ms) == (5000.0, 1000.0, 500.0)
    assert targets_for(1_280_000) == large
