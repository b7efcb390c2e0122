"""A Python that has imported torch and gradpick once, and forks a fresh child for each run.

The docs' blocks each run as their own process; most of such a process's CPU is importing torch
and gradpick (about 2.6 s each on this project's 2-core machine, for 24 blocks and the
``gradpick`` commands inside them). ``serve`` imports them once and listens on a Unix socket;
``run`` (a plain Python that imports nothing heavy) hands it its arguments, working folder,
environment and its own stdin, stdout and stderr, and exits with the forked child's status. The
child runs the script or module as ``python`` would (``__main__``, ``sys.argv``, its folder
first on ``sys.path``) with nothing else of the server's: fresh globals, the caller's folder,
environment and files. The server never runs torch itself, so no thread pool is forked.

    python tests/warm_python.py serve SOCKET
    python tests/warm_python.py run SOCKET script.py ARG...
    python tests/warm_python.py run SOCKET -m gradpick ARG...
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from typing import Any

__all__ = ["PRELOADED", "main"]

PRELOADED = (
    "numpy",
    "PIL.Image",
    "torch",
    "torchvision",
    "gradpick.attribution",
    "gradpick.cli",
    "gradpick.data",
    "gradpick.models.zoo",
    "gradpick.outputs.inference",
)
"""What every block or command imports anyway; nothing here reads the caller's environment at
import time (the server starts with the same environment the blocks get)."""
_MESSAGE_BYTES = 1 << 20


def _serve(path: str) -> None:
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the system
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    while True:
        connection, _ = listener.accept()
        message, fds, _, _ = socket.recv_fds(connection, _MESSAGE_BYTES, 3)
        if os.fork() == 0:
            listener.close()
            _child(connection, json.loads(message), fds)
        for fd in fds:
            os.close(fd)
        connection.close()


def _child(connection: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """Become the caller's process: its files, folder, environment and arguments; run; exit."""
    import runpy
    import traceback

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stdin, never closed
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    arguments: list[str] = request["argv"]
    code = 0
    try:
        if arguments[0] == "-m":
            sys.argv = [arguments[1], *arguments[2:]]
            sys.path[0] = request["cwd"]
            runpy.run_module(arguments[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(arguments)
            sys.path[0] = os.path.dirname(os.path.abspath(arguments[0]))
            runpy.run_path(arguments[0], run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if not isinstance(exit_.code, int | None):
            print(exit_.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    connection.sendall(str(code).encode())
    os._exit(code)


def _run(path: str, arguments: list[str]) -> int:
    """Hand this process's files and arguments to the server; its child's exit status."""
    request = {"argv": arguments, "cwd": os.getcwd(), "env": dict(os.environ)}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(path)
        socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
        answer = b""
        while chunk := connection.recv(16):
            answer += chunk
    return int(answer) if answer else 1  # no answer: the child was killed


def main(argv: list[str]) -> int:
    role, path, *arguments = argv
    if role == "serve":
        _serve(path)
        return 0
    return _run(path, arguments)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
