"""Time clicks on ``tools/floor_page.py``: how fast a Streamlit fragment rerun can settle here.

The explorer benchmark's own page actions (``gradpick.bench.pages``) on a page that holds only
what a click must change, with ``--extra`` unchanged elements of a ``--kind`` in the fragment and
``--sidebar`` widgets outside it: the floor under the explorer's click → settled figure, and
what each element a click reruns adds to it. Prints one line per setting.

    python tools/floor.py [--clicks 10] [--extra 0 30 60] [--kind caption] [--sidebar 0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from gradpick.bench import pages
from gradpick.bench.serving import CHROMIUM_ARGS, free_port, wait_healthy

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


def measure(extra: int, kind: str, sidebar: int, clicks: int) -> str:
    port = free_port()
    env = {
        **os.environ,
        "FLOOR_EXTRA": str(extra),
        "FLOOR_KIND": kind,
        "FLOOR_SIDEBAR": str(sidebar),
    }
    command = [sys.executable, "-m", "streamlit", "run", str(PAGE), "--server.headless=true"]
    server = subprocess.Popen(
        [*command, f"--server.port={port}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://localhost:{port}"
    try:
        wait_healthy(url, server)
        shown, settled, worked = asyncio.run(_clicks(url, clicks))
    finally:
        server.terminate()
        server.wait()
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
    arguments = parser.parse_args()
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
