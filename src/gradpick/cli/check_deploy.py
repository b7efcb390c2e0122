"""``gradpick check-deploy``: what the hosted demo's first visitor will wait for, and whether its
memory fits the host, checked before publishing.

It makes a fresh virtual environment from ``requirements.txt`` as Streamlit Community Cloud does
(``bench.deploy.hosted_environment``; ``--python`` reuses one made already, such as
``.venv-cpu``), serves ``app.py`` with a plain ``streamlit run`` in hosted mode, opens it in
Debian's chromium, clicks thumbnails, and prints the first page's and the clicks' times and the
server's peak memory against their targets. Exit status 0 when every target is met, 1 when one
is not.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from gradpick.bench import deploy
from gradpick.bench.explorer import default_app
from gradpick.bench.rows import markdown_table
from gradpick.cli.arguments import Commands, positive_int
from gradpick.data import CIFAR10_DIR_ENV
from gradpick.errors import InputError

__all__ = ["register"]


def register(commands: Commands) -> None:
    parser = commands.add_parser(
        "check-deploy",
        help="serve app.py as the hosted demo from a fresh environment and time its first visitor",
        description="Make a fresh virtual environment from requirements.txt (the local CPU torch "
        "wheel for torch), serve app.py there with a plain `streamlit run` in hosted mode, open "
        "it in chromium, click, and report the first page's and the clicks' times and the "
        "server's peak memory against the targets (first page ≤ 4 s, clicks' median ≤ 300 ms, "
        "worst ≤ 800 ms, memory < 1 GB). Reads $GRADPICK_CIFAR10_DIR.",
    )
    parser.add_argument(
        "--python",
        help="serve with this environment's Python instead of making a fresh one (e.g. "
        ".venv-cpu/bin/python, which `make test` makes the same way)",
    )
    parser.add_argument(
        "--keep", metavar="DIR", help="make the fresh environment in DIR and keep it"
    )
    parser.add_argument(
        "--torch",
        default=deploy.CPU_TORCH,
        help=f"the torch requirement installed in place of the host's (default {deploy.CPU_TORCH})",
    )
    parser.add_argument("--runs", type=positive_int, default=1, help="fresh servers (default 1)")
    parser.add_argument(
        "--clicks", type=positive_int, default=5, help="thumbnail clicks per run (default 5)"
    )
    parser.add_argument("--app", type=Path, help="the app to serve (default: the checkout's)")
    parser.set_defaults(handler=_cmd_check_deploy)


def _cmd_check_deploy(args: argparse.Namespace) -> int:
    app = (args.app or default_app()).resolve()
    if not app.is_file():
        raise InputError(f"{app}: no such app; run from the gradpick checkout or give --app.")
    if not (app.parent / "requirements.txt").is_file():
        raise InputError(f"{app.parent}: no requirements.txt beside the app.")
    cifar10 = os.environ.get(CIFAR10_DIR_ENV)
    if not cifar10:
        raise InputError(
            f"Set ${CIFAR10_DIR_ENV} to a CIFAR-10 folder (train/ and test/ trees): the host "
            "downloads CIFAR-10 on the first visit, this check serves a local copy."
        )
    chromium = shutil.which("chromium")
    if chromium is None:
        raise InputError("check-deploy drives Debian's chromium: apt-get install chromium.")
    with tempfile.TemporaryDirectory(prefix="gradpick-check-deploy-") as scratch:
        python = args.python
        if python is None:
            folder = Path(args.keep) if args.keep else Path(scratch) / "venv"
            print(f"check-deploy: making {folder} from requirements.txt", file=sys.stderr)
            python = deploy.hosted_environment(folder, app.parent, args.torch)
        elif not Path(python).is_file():
            raise InputError(f"--python {python}: no such file.")
        load_before = " ".join(f"{value:.2f}" for value in os.getloadavg())
        visits = deploy.first_visits(
            deploy.HOSTED,
            args.runs,
            args.clicks,
            chromium,
            app,
            {CIFAR10_DIR_ENV: cifar10},
            python,
            Path("artifacts"),
        )
    return _report(visits, python, load_before)


def _report(visits: list[deploy.Visit], python: str, load_before: str) -> int:
    """Print the table, the memory and the verdict; 0 when every target is met."""
    cells, met = [], []
    for name, samples, target, limit in deploy.rows(deploy.HOSTED, visits):
        within = bool(samples) and max(samples) <= limit
        met.append(within)
        shown = ", ".join(f"{ms:,.0f}" for ms in samples)
        cells.append([name.split(": ", 1)[1], shown, target, "yes" if within else "no"])
    print("\n".join(markdown_table(["step", "each run (ms)", "target", "met"], cells)))
    peak, fits = deploy.verdict(visits)
    met.append(fits)
    limit = deploy.HOSTED_MEMORY_LIMIT / 1e6
    print(f"\n- server's peak resident memory (VmHWM): {peak:,.0f} MB (target < {limit:,.0f} MB)")
    load_after = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"- served by {python}; load average {load_before} before, {load_after} after")
    print("- every target met" if all(met) else "- a target is NOT met")
    return 0 if all(met) else 1
