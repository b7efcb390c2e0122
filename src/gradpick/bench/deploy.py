"""What a server's first visitor waits for, per way of serving the explorer: ``make run``'s
launcher, a plain ``streamlit run app.py`` (what Streamlit Community Cloud runs), and that plain
server in hosted mode from an environment made from ``requirements.txt`` (the wheel installed,
CPU-only torch). ``gradpick bench --explorer`` adds these rows to its table and
``gradpick check-deploy`` runs the hosted one.

Each run starts a fresh server with an empty cache folder, waits for its health check, starts
the browser, and opens the page as a new visitor: the first page is timed from the request to
the page's last change (a DOM mutation or a plotly redraw) before ``QUIET_MS`` without one,
thumbnails and the page's last section shown, no element waiting for its code
(``pages.NO_PLACEHOLDER_JS``) and the script run over; then every click on a
thumbnail, the first one included, until the page settled again (the pointer rests on the
thumbnail until plotly's hover found it before the click; that wait is not timed). After the
clicks, the server process's peak resident memory (``VmHWM``) is read. Targets: the first page
settled ≤ 4 s in every run; the clicks' median ≤ 300 ms in every run and the worst ≤ 800 ms; a
hosted server's peak memory < 1 GB.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradpick.bench.pages import (
    NO_PLACEHOLDER_JS,
    PAGE_SIZE,
    TEXT_JS,
    THUMBNAILS_JS,
    WATCH_CHANGES_JS,
    click_until_settled,
    settled,
    thumbnail,
    wait,
)
from gradpick.bench.serving import CHROMIUM_ARGS, LOAD_TIMEOUT_MS, VIEWPORT, streamlit_server
from gradpick.data import CACHE_DIR_ENV
from gradpick.units import MB

__all__ = [
    "CLICK_MEDIAN_LIMIT_MS",
    "CLICK_WORST_LIMIT_MS",
    "COMPLETE_PAGE_TEXT",
    "FIRST_PAGE_LIMIT_MS",
    "HOSTED",
    "HOSTED_MEMORY_LIMIT",
    "LAUNCHER",
    "PLAIN",
    "Served",
    "Visit",
    "CPU_TORCH",
    "cpu_python",
    "every_server",
    "hosted_environment",
    "requirement_pins",
    "first_visits",
    "picks",
    "rows",
    "verdict",
]

FIRST_PAGE_LIMIT_MS = 4000.0
CLICK_MEDIAN_LIMIT_MS = 300.0
CLICK_WORST_LIMIT_MS = 800.0
COMPLETE_PAGE_TEXT = "Gradients of the picked images"
"""The last section of the page's Explore tab: its first page is complete once it shows."""
HOSTED_MEMORY_LIMIT = 1000 * MB
"""The hosted server's peak resident memory must stay under this: Streamlit Community Cloud
stops an app over its resource limits, and 1 GB is the explorer's budget for the default flow
(the load test holds it to 600 MB, the smallest tier)."""


CPU_TORCH = "torch==2.13.0"
"""The CPU-only torch this machine holds as a wheel (the Makefile's ``CPU_TORCH``): it stands in
for the host's ``torch==...+cpu`` from PyTorch's CPU index, which only the host can reach."""


@dataclass(frozen=True)
class Served:
    """A way of serving the explorer."""

    name: str
    launcher: bool
    """``python -m gradpick.ui.launch`` (``make run``), else a plain ``streamlit run``."""
    hosted: bool = False
    """``GRADPICK_HOSTED=1``, and the server runs the installed wheel (no ``PYTHONPATH``)."""
    log: str = "plain"
    """Its servers' logs are ``first-visit-<log>-<run>.log``."""


LAUNCHER = Served("make run (launcher)", launcher=True, log="launcher")
PLAIN = Served("plain streamlit run app.py", launcher=False)
HOSTED = Served(
    "hosted: plain streamlit run, wheel, CPU torch", launcher=False, hosted=True, log="hosted"
)


@dataclass(frozen=True)
class Visit:
    """One fresh server's first visitor: milliseconds, and the server's peak memory in bytes."""

    first_page_ms: float
    clicks_ms: list[float]
    peak_bytes: int


def picks(clicks: int) -> list[int]:
    """The thumbnails clicked, spread over the page's grid."""
    return [(7 * number + 3) % PAGE_SIZE for number in range(clicks)]


def cpu_python(checkout: Path) -> str | None:
    """The hosted environment's Python: ``$GRADPICK_SERVER_PYTHON`` (set by the Makefile),
    else ``.venv-cpu`` of the checkout when made (``make test`` makes it); None if neither."""
    named = os.environ.get("GRADPICK_SERVER_PYTHON")
    if named and Path(named).is_file():
        return named
    beside = checkout / ".venv-cpu" / "bin" / "python"
    return str(beside) if beside.is_file() else None


async def _visit(chromium: str, url: str, clicked: Sequence[int]) -> tuple[float, list[float]]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser: Any = await playwright.chromium.launch(
            executable_path=chromium, args=CHROMIUM_ARGS
        )
        context = await browser.new_context(viewport=VIEWPORT)
        page = await context.new_page()
        page.set_default_timeout(LOAD_TIMEOUT_MS)
        await page.add_init_script(f"({WATCH_CHANGES_JS})();")  # from the first mutation on
        loop = asyncio.get_running_loop()
        asked = loop.time()
        await page.goto(url)
        await wait(page, THUMBNAILS_JS)
        # The whole page, not a first run that a second one completes after a quiet gap.
        await wait(page, TEXT_JS, COMPLETE_PAGE_TEXT)
        await wait(page, NO_PLACEHOLDER_JS)  # no placeholder left to grow under the thumbnails
        first = (await settled(page) - asked) * 1000
        clicks = []
        for index in clicked:
            point = await thumbnail(page, index)
            clicks.append((await click_until_settled(page, point, [index]))[1])
        await browser.close()
    return first, clicks


def first_visits(
    served: Served,
    runs: int,
    clicks: int,
    chromium: str,
    app: Path,
    env: Mapping[str, str | None],
    python: str = sys.executable,
    log_dir: Path = Path("artifacts"),
) -> list[Visit]:
    """``runs`` fresh servers served as ``served`` with ``env`` over this environment, each
    with its own empty cache folder, and each one's first visitor (see the module docstring).
    A hosted server runs ``python`` with no ``PYTHONPATH``, so it imports the installed wheel."""
    visits = []
    for run in range(runs):
        with tempfile.TemporaryDirectory(prefix="gradpick-first-visit-") as cache:
            over: dict[str, str | None] = {**env, CACHE_DIR_ENV: cache}
            if served.hosted:
                over |= {"GRADPICK_HOSTED": "1", "PYTHONPATH": None}
            log = log_dir / f"first-visit-{served.log}-{run}.log"
            with streamlit_server(app, over, log, python, launcher=served.launcher) as server:
                first, times = asyncio.run(_visit(chromium, server.url, picks(clicks)))
                visits.append(Visit(first, times, server.memory_bytes("VmHWM")))
    return visits


def rows(served: Served, visits: Sequence[Visit]) -> list[tuple[str, list[float], str, float]]:
    """The table's rows for ``visits``: (name, samples in ms, target, limit on the worst
    sample in ms); every target is held in every run (the median's row holds each run's)."""
    if not visits:
        return []
    name = served.name
    worst = f"≤ {CLICK_WORST_LIMIT_MS:,.0f} ms"
    return [
        (
            f"{name}: first page settled (from the request)",
            [visit.first_page_ms for visit in visits],
            f"each ≤ {FIRST_PAGE_LIMIT_MS / 1000:.0f} s",
            FIRST_PAGE_LIMIT_MS,
        ),
        (
            f"{name}: first click → page settled",
            [visit.clicks_ms[0] for visit in visits if visit.clicks_ms],
            f"each {worst}",
            CLICK_WORST_LIMIT_MS,
        ),
        (
            f"{name}: click → page settled, each run's median",
            [statistics.median(visit.clicks_ms) for visit in visits if visit.clicks_ms],
            f"each ≤ {CLICK_MEDIAN_LIMIT_MS:,.0f} ms",
            CLICK_MEDIAN_LIMIT_MS,
        ),
        (
            f"{name}: click → page settled, every click (first included)",
            [ms for visit in visits for ms in visit.clicks_ms],
            f"worst {worst}",
            CLICK_WORST_LIMIT_MS,
        ),
    ]


def verdict(visits: Sequence[Visit]) -> tuple[float, bool]:
    """The hosted server's peak resident memory over ``visits`` in MB, and whether it stayed
    under ``HOSTED_MEMORY_LIMIT``."""
    peak = max(visit.peak_bytes for visit in visits)
    return peak / MB, peak < HOSTED_MEMORY_LIMIT


def every_server(
    runs: int,
    clicks: int,
    chromium: str,
    app: Path,
    env: Mapping[str, str | None],
    hosted_python: str | None = None,
    log_dir: Path = Path("artifacts"),
) -> tuple[list[tuple[str, list[float], str, float]], dict[str, float], list[str]]:
    """``first_visits`` for the launcher, the plain server and the hosted one (its Python:
    ``hosted_python``, else ``cpu_python``): their ``rows``, each server's peak memory in MB
    (named for the report), and what failed. ``runs`` 0: nothing."""
    table: list[tuple[str, list[float], str, float]] = []
    memory: dict[str, float] = {}
    failed: list[str] = []
    limit = f"{HOSTED_MEMORY_LIMIT / MB:,.0f}"
    for served in (LAUNCHER, PLAIN, HOSTED) if runs else ():
        python = (hosted_python or cpu_python(app.parent)) if served.hosted else sys.executable
        if python is None:
            failed.append(f"{served.name}: no hosted environment (make .venv-cpu/.installed)")
            continue
        print(f"explorer bench: first visits, {served.name}", file=sys.stderr, flush=True)
        try:
            visits = first_visits(served, runs, clicks, chromium, app, env, python, log_dir)
        except Exception as error:  # a timeout or a server that died: say which, go on
            failed.append(f"{served.name}: {type(error).__name__}: {str(error).splitlines()[0]}")
            continue
        table += rows(served, visits)
        target = f"target < {limit}" if served.hosted else "no target"
        memory[f"{served.name}: server's peak resident memory, MB ({target})"] = verdict(visits)[0]
    return table, memory, failed


def requirement_pins(text: str) -> list[str]:
    """The requirements of ``requirements.txt``'s ``text`` installed from the package index:
    every requirement line but torch and torchvision (PyTorch's CPU index is the host's: the
    local CPU wheel, ``CPU_TORCH``, stands in, and the app needs torchvision only to download
    CIFAR-10) and the checkout's own ``.[app]`` line (installed by itself, its pins being
    these); options such as ``--extra-index-url`` are left out."""
    pins = []
    for line in text.splitlines():
        requirement = line.split("#")[0].strip()
        if not requirement or not requirement[0].isalpha():
            continue
        if re.match(r"torch(vision)?\b", requirement):
            continue
        pins.append(requirement)
    return pins


def hosted_environment(folder: Path, checkout: Path, torch: str = CPU_TORCH) -> str:
    """A fresh virtual environment in ``folder`` made as the host makes it: ``torch``, the pins
    of the checkout's ``requirements.txt`` (``requirement_pins``), then the checkout itself as
    a wheel (not editable; without a stale ``build/`` folder, which would put deleted files in
    it). Returns its Python; a failed step raises CalledProcessError."""
    pins = requirement_pins((checkout / "requirements.txt").read_text())
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = str(folder / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, torch, *pins], check=True)
    shutil.rmtree(checkout / "build", ignore_errors=True)
    subprocess.run([*pip, "--no-deps", "--force-reinstall", str(checkout)], check=True)
    return python
