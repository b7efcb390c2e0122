"""A plain ``streamlit run app.py`` (what Streamlit Community Cloud runs, no launcher): the
explorer's warm-up begins when the server starts, the server serves once the model and the
default batch are ready, and its first page run finds them so, in that order in the server's
log; the thumbnail grid stays where it was first drawn while the rest of the page comes, and
in the same place when the web font never arrives or the code of the elements above the grid
comes after it; the page then shows the batch and answers a pick."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gradpick import data
from gradpick.bench.pages import NO_PLACEHOLDER_JS
from gradpick.bench.serving import streamlit_server
from gradpick.ui import config, keys, warmup
from tests.serving import (
    ARTIFACTS,
    CHROMIUM_ARGS,
    LOAD_TIMEOUT_MS,
    REPO,
    VIEWPORT,
    chromium_executable,
    cifar10_images,
    heatmap_indices,
    page_errors,
    pick_by_text,
    wait_for_heatmaps,
)

BEGAN = f"{warmup.LOG_PREFIX} began (server start)"
READY = f"{warmup.LOG_PREFIX} imports, the default model and batch ready"
FIRST_RUN = f"{warmup.LOG_PREFIX} the first page run"

GRID_TOPS_JS = f"""
() => {{
  window.__gridTops = [];
  const look = () => {{
    const gd = document.querySelector('{keys.selector(keys.GRID_CHART)} .js-plotly-plot');
    if (!gd) return;
    const top = Math.round(gd.getBoundingClientRect().top + window.scrollY);
    const tops = window.__gridTops;
    if (tops[tops.length - 1] !== top) tops.push(top);
  }};
  new MutationObserver(look).observe(
    document, {{childList: true, subtree: true, attributes: true, characterData: true}});
}}
"""
"""Keeps ``window.__gridTops``: each new position of the thumbnail grid's top on the page, read
after every change to the page from the grid's first appearance on."""
SETTLED_FIRST_PAGE_JS = f"""
() => document.querySelector('[data-test-script-state="notRunning"]')
  && document.body.innerText.includes('Images N') && ({NO_PLACEHOLDER_JS})()
"""
"""The first run over and every element drawn by its own code, not a placeholder."""
LATE_CODE = ("/Metric.", "/ButtonGroup.")
"""The browser code of the kinds of element above the grid that the sidebar does not load (a
metric, the rows of tabs), by the start of its file's name."""


def _grid_tops_when_late(browser: Any, url: str) -> list[int]:
    """Each place the thumbnail grid's top took in a new page of ``url`` until its first run
    settled, where the web font never arrives (the fallback font throughout) and the code of
    ``LATE_CODE`` arrives only once the grid is on the page, as on a busy browser."""
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(f"({GRID_TOPS_JS})();")
    page = context.new_page()
    page.set_default_timeout(LOAD_TIMEOUT_MS)
    held: list[Any] = []

    def hold(route: Any) -> None:
        if any(name in route.request.url for name in LATE_CODE):
            held.append(route)
        else:
            route.continue_()

    page.route("**/static/media/SourceSans*", lambda route: route.abort())
    page.route("**/static/js/*.js", hold)
    page.goto(url)
    page.wait_for_selector(f"{keys.selector(keys.GRID_CHART)} .js-plotly-plot", state="attached")
    assert len(held) == len(LATE_CODE), [route.request.url for route in held]
    for route in held:
        route.continue_()
    page.wait_for_function(SETTLED_FIRST_PAGE_JS, timeout=LOAD_TIMEOUT_MS)
    tops: list[int] = page.evaluate("window.__gridTops")
    context.close()
    return tops


def _lines(log: Path) -> list[str]:
    return log.read_text(errors="replace").splitlines()


def _index(lines: list[str], start: str) -> int:
    found = [number for number, line in enumerate(lines) if line.startswith(start)]
    assert len(found) == 1, (start, lines)
    return found[0]


def _wait_for_line(log: Path, start: str, timeout: float = 240) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = _lines(log)
        if any(line.startswith(start) for line in lines):
            return lines
        time.sleep(0.2)
    raise AssertionError(f"no {start!r} in the server's log: {_lines(log)}")


@pytest.mark.parametrize("hosted", [False, True])
def test_a_plain_streamlit_run_warms_up_at_server_start_before_the_first_page(
    cifar_like_factory: Callable[[int], Path], tmp_path: Path, hosted: bool
) -> None:
    chromium = chromium_executable()
    from playwright.sync_api import sync_playwright

    env = {
        data.CIFAR10_DIR_ENV: str(cifar10_images(cifar_like_factory)),
        "GRADPICK_CACHE_DIR": str(tmp_path),
        config.HOSTED_ENV: "1" if hosted else "0",
        "OMP_NUM_THREADS": "1",
    }
    log = ARTIFACTS / f"e2e-plain-server{'-hosted' if hosted else ''}.log"
    with streamlit_server(REPO / "app.py", env, log, launcher=False) as server:
        # Healthy, and no browser has asked for a page yet: the start-up hook's page part is done.
        at_healthy = _lines(log)
        assert BEGAN in at_healthy and any(line.startswith(READY) for line in at_healthy)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport=VIEWPORT)
            context.add_init_script(f"({GRID_TOPS_JS})();")
            page = context.new_page()
            page.set_default_timeout(LOAD_TIMEOUT_MS)
            page.goto(server.url)
            page.wait_for_function(SETTLED_FIRST_PAGE_JS, timeout=LOAD_TIMEOUT_MS)
            tops = page.evaluate("window.__gridTops")
            # One place (a pixel's rounding aside): a thumbnail is about 57 px tall, and the
            # metrics and link drawn late had moved the grid 47-74 px under the pointer.
            assert tops and max(tops) - min(tops) <= 2, tops
            assert page_errors(page).count() == 0
            pick_by_text(page, [3])
            wait_for_heatmaps(page, [3])
            assert heatmap_indices(page) == [3]
            # A metric's line was 6 px shorter in the fallback font, and the placeholders of
            # the metrics and the rows of tabs 36 px shorter and 8 px taller than they.
            assert _grid_tops_when_late(browser, server.url) == tops[-1:]
            browser.close()
        lines = _wait_for_line(log, FIRST_RUN)
    began, ready, first = _index(lines, BEGAN), _index(lines, READY), _index(lines, FIRST_RUN)
    assert began < ready < first
    assert lines[first] == f"{FIRST_RUN} found the model and batch ready"
    assert not any("began (first page run)" in line or "failed" in line for line in lines)
