"""A plain ``streamlit run app.py`` (what Streamlit Community Cloud runs, no launcher): the
explorer's warm-up begins when the server starts, before any visitor, and the first page run
finds the model and the default batch ready from it (or waits for them), in that order in the
server's log; the page then shows the batch and answers a pick."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gradpick import data
from gradpick.bench.serving import streamlit_server
from gradpick.ui import config, warmup
from tests.serving import (
    ARTIFACTS,
    CHROMIUM_ARGS,
    REPO,
    chromium_executable,
    cifar10_images,
    heatmap_indices,
    open_explorer,
    page_errors,
    pick_by_text,
    wait_for_heatmaps,
)

BEGAN = f"{warmup.LOG_PREFIX} began (server start)"
READY = f"{warmup.LOG_PREFIX} imports, the default model and batch ready"
FIRST_RUN = f"{warmup.LOG_PREFIX} the first page run"


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
        # Healthy, and no browser has asked for a page yet: the start-up hook ran already.
        assert BEGAN in _lines(log)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            page = open_explorer(browser, server.url)
            assert page_errors(page).count() == 0
            pick_by_text(page, [3])
            wait_for_heatmaps(page, [3])
            assert heatmap_indices(page) == [3]
            browser.close()
        lines = _wait_for_line(log, FIRST_RUN)
    began, ready, first = _index(lines, BEGAN), _index(lines, READY), _index(lines, FIRST_RUN)
    assert began < ready < first
    assert not any("began (first page run)" in line or "failed" in line for line in lines)
