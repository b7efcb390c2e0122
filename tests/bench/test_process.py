"""The one ``/proc`` reader of the benchmarks: this process's memory, a child's, and a gone one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gradpick.bench.process import descendants, live_kilobytes, status_kilobytes


def test_resident_memory_is_read_in_kilobytes_and_the_peak_is_at_least_the_current() -> None:
    ballast = bytearray(64 * 1024 * 1024)
    current = status_kilobytes("VmRSS")
    assert current > 64 * 1024 > 0
    assert status_kilobytes("VmHWM", os.getpid()) >= current
    del ballast


def test_an_absent_field_is_a_key_error_naming_the_file() -> None:
    with pytest.raises(KeyError, match=f"VmNone is not in /proc/{os.getpid()}/status"):
        status_kilobytes("VmNone", os.getpid())


def test_a_child_is_found_below_this_process_and_reads_zero_once_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = descendants(os.getpid())
        assert child.pid in found and "time.sleep(30)" in found[child.pid]
        assert live_kilobytes(child.pid, "VmRSS") > 0
    finally:
        child.kill()
        child.wait()
    assert child.pid not in descendants(os.getpid())
    assert live_kilobytes(child.pid, "VmRSS") == 0
