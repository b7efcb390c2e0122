"""``python -m gradpick.ui.launch app.py [streamlit options] [-- app options]``: ``make run``'s
server, with its start-up work done before it serves a page.

The work is ``gradpick.ui.warmup``'s, the same that a plain ``streamlit run app.py`` starts at
server start: here it runs first, in the server's own process, profiler included, and then the
same arguments go to Streamlit's ``run`` command in that process, whose start-up hook finds the
work done. The server answers its health check only once this is done, so nothing that waits
for a healthy server waits longer.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gradpick.ui import warmup

__all__ = ["launch"]


def launch(argv: Sequence[str]) -> None:
    """``warmup.start`` in this thread, then ``streamlit run`` with ``argv`` (the script,
    Streamlit's options, and the app's own after ``--``) in this process."""
    from streamlit.web import cli

    args = list(argv)
    app_args = args[args.index("--") + 1 :] if "--" in args else []
    done = warmup.start(app_args, origin=warmup.LAUNCHER, background=False)
    print(
        f"gradpick: imports and the default model ready in {done.page_ms or 0:,.0f} ms", flush=True
    )
    cli.main(args=["run", *args], prog_name="streamlit")


if __name__ == "__main__":
    launch(sys.argv[1:] or ["app.py"])
