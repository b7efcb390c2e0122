"""Time clicks on ``tools/floor_page.py``: how fast a Streamlit fragment rerun can settle here.

The explorer benchmark's own page actions (``gradpick.bench.pages``) on a page that holds only
what a click must change, with ``--extra`` unchanged elements of a ``--kind`` in the fragment and
``--sidebar`` widgets outside it: the floor under the explorer's click → settled figure, and
what each element a click reruns adds to it. Prints one line per setting.

``--first-page RUNS`` times instead a first visit (a fresh browser context each, as a new
visitor's: nothing cached) to the page with its chart and with the sheet as a plain image, from
the request to the sheet shown and to the page's last change: what Streamlit's plotly bundle
alone adds to any first page with a chart.

    python tools/floor.py [--clicks 10] [--extra 0 30 60] [--kind caption] [--sidebar 0]
    python tools/floor.py --first-page 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gradpick.bench import pages
from gradpick.bench.serving import CHROMIUM_ARGS, VIEWPORT, free_port, wait_healthy

PAGE = Path(__file__).with_name("floor_page.py")


async def _clicks(url: str, clicks: int) -> tuple[list[float], list[float], list[float]]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS
        )
        page = (await pages.open_session(browser, url)).page
        work = await pages.browser_work(page)
        shown, settled, worked = [], [], []
        for number in range(clicks):
            index = (7 * number + 3) % 100  # the explorer benchmark's picks
            point = await pages.thumbnail(page, index)
            before = await work()
            first, last = await pages.click_until_settled(page, point, [index])
            shown.append(first)
            settled.append(last)
            worked.append(await work() - before)
        await browser.close()
    return shown, settled, worked


SHEET_SHOWN = {
    "plotly": ".js-plotly-plot .main-svg image",
    "image": '[data-testid="stImage"] img',
}
"""Per way of drawing the sheet, what shows it."""


async def _first_visits(url: str, grid: str, runs: int) -> tuple[list[float], list[float]]:
    """``runs`` first visits, each in a fresh context: ms from the request to the sheet shown
    and to the page's last change (the server's own first run is made before them)."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS
        )
        shown, settled = [], []
        for number in range(runs + 1):
            context = await browser.new_context(viewport=VIEWPORT)
            page = await context.new_page()
            asked = time.monotonic()
            await page.goto(url)
            await page.wait_for_selector(SHEET_SHOWN[grid], timeout=pages.LOAD_TIMEOUT_MS)
            first = time.monotonic()
            await page.evaluate(pages.WATCH_CHANGES_JS)
            last = await pages.settled(page)
            await context.close()
            if number:  # the first visit made the server's first script run
                shown.append((first - asked) * 1000)
                settled.append((max(first, last) - asked) * 1000)
        await browser.close()
    return shown, settled


@contextmanager
def _served(env: dict[str, str]) -> Iterator[str]:
    """The floor page on a plain Streamlit server with ``env``; its URL."""
    port = free_port()
    command = [sys.executable, "-m", "streamlit", "run", str(PAGE), "--server.headless=true"]
    server = subprocess.Popen(
        [*command, f"--server.port={port}"],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://localhost:{port}"
    try:
        wait_healthy(url, server)
        yield url
    finally:
        server.terminate()
        server.wait()


def first_page(grid: str, runs: int) -> str:
    with _served({"FLOOR_GRID": grid}) as url:
        shown, settled = asyncio.run(_first_visits(url, grid, runs))
    return (
        f"| {grid} | {runs} | {statistics.median(shown):,.0f} / {max(shown):,.0f} | "
        f"{statistics.median(settled):,.0f} / {max(settled):,.0f} | "
        f"{os.getloadavg()[0]:.2f} |"
    )


def measure(extra: int, kind: str, sidebar: int, clicks: int) -> str:
    env = {"FLOOR_EXTRA": str(extra), "FLOOR_KIND": kind, "FLOOR_SIDEBAR": str(sidebar)}
    with _served(env) as url:
        shown, settled, worked = asyncio.run(_clicks(url, clicks))
    return (
        f"| {extra} {kind} | {sidebar} | {statistics.median(settled):,.0f} / {max(settled):,.0f} | "
        f"{statistics.median(shown):,.0f} | {statistics.median(worked):,.0f} | "
        f"{os.getloadavg()[0]:.2f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clicks", type=int, default=10)
    parser.add_argument("--extra", type=int, nargs="+", default=[0, 30, 60])
    parser.add_argument(
        "--kind", choices=["caption", "metric", "download", "popover"], default="caption"
    )
    parser.add_argument("--sidebar", type=int, default=0)
    parser.add_argument("--first-page", type=int, metavar="RUNS", default=0)
    arguments = parser.parse_args()
    if arguments.first_page:
        print(
            "| the sheet drawn as | first visits | sheet shown, median / worst (ms) | "
            "last change, median / worst (ms) | load |"
        )
        print("|---|---:|---:|---:|---:|")
        for grid in ("plotly", "image", "plotly", "image"):  # alternated against drift
            print(first_page(grid, arguments.first_page), flush=True)
        return 0
    print(
        "| unchanged elements in the fragment | sidebar widgets | click → settled, median / "
        "worst (ms) | first paint, median (ms) | browser work per click, median (ms) | load |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for extra in arguments.extra:
        print(measure(extra, arguments.kind, arguments.sidebar, arguments.clicks), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
