"""Writer processes for the files kept beside a store (verdicts, named selections): several at
once, or one killed mid-write. ``code`` is a script taking ``PATH WRITER COUNT`` that writes
COUNT rows and, for a count over 10,000, prints each row's number once it is committed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def write_at_once(code: str, path: Path, writers: int, count: int) -> list[int]:
    """Run ``writers`` processes at the same time, each writing ``count`` rows; their exit codes."""
    running = [
        subprocess.Popen([sys.executable, "-c", code, str(path), str(w), str(count)], env=_env())
        for w in range(writers)
    ]
    return [process.wait(timeout=120) for process in running]


def kill_after(code: str, path: Path, committed: int) -> int:
    """Start one endless writer and SIGKILL it once it has said ``committed`` rows are committed;
    the last row number it confirmed."""
    writer = subprocess.Popen(
        [sys.executable, "-c", code, str(path), "0", "1000000"],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert writer.stdout is not None
    confirmed = -1
    deadline = time.monotonic() + 60
    while confirmed < committed and time.monotonic() < deadline:
        confirmed = int(writer.stdout.readline())
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    return confirmed
