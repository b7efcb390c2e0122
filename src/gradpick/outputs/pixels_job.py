"""The background job that keeps a store's pixels, as the server starts it: ``python -m
gradpick.outputs.pixels_job SERVER JOB.json`` (``gradpick.outputs.pixels``).

It yields the CPU to everything else on the machine before it imports torch (seconds of a core),
then runs ``pixels.main(JOB.json)``, and it ends with the server whose process id it is given.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

__all__ = ["AUTOGROUP", "PARENT_POLL_S", "yield_the_cpu"]

AUTOGROUP = Path("/proc/self/autogroup")
"""Linux's scheduling group of this process's session (with ``CONFIG_SCHED_AUTOGROUP``)."""
PARENT_POLL_S = 0.5
"""How often the job looks whether the server that started it is still there."""


def yield_the_cpu(server: int) -> None:
    """The lowest CPU priority against everything else on the machine, and an end with the
    ``server`` process that started the job.

    ``os.nice`` ranks a process only inside its session's scheduling group on Linux (an
    autogroup): a browser, in sessions of its own, shared the two cores equally with the job
    at nice 19, and a 50,000-row store's first page showed its thumbnails 8.5 s after it was
    asked for beside the job, against 3.8 s without it. So the job runs in a session of its own
    (``pixels._start_job``), whose group it sets to nice 19 too. Out of the server's session, a
    Ctrl-C on the server no longer reaches it: it interrupts itself once the server is gone (or
    at once, when the server went before it got here), as that Ctrl-C did, and what it was
    writing is removed (``pixels.keep`` renames its file only when complete)."""
    with contextlib.suppress(OSError):
        os.nice(19)
    with contextlib.suppress(OSError):
        AUTOGROUP.write_text("19")

    def end_with_the_server() -> None:
        while os.getppid() == server:
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=end_with_the_server, daemon=True).start()


if __name__ == "__main__":
    yield_the_cpu(int(sys.argv[1]))
    from gradpick.outputs import pixels  # torch: imported at the lowest priority

    pixels.main(sys.argv[2])
