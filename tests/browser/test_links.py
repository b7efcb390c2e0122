"""End to end: a link names the view, another browser opens it.

A real ``streamlit run app.py`` and Debian's chromium (Playwright), as in every browser test. A
link made after choosing a layer and a model to compare with reopens both, with no warning in
the server's log; the flip matrix it then shows is screenshotted (``artifacts/``, and with
``GRADPICK_UPDATE_SCREENSHOTS=1`` ``assets/screenshots/flips.png``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from gradpick.ui import keys
from tests.serving import (
    APP_IDLE,
    ARTIFACTS,
    BOX_TEXT_JS,
    URL_HAS,
    cifar10_images,
    explorer_server,
    free_port,
    open_explorer,
    pick_by_text,
    screenshot,
    tab_button,
    wait_for_heatmaps,
    wait_healthy,
)

LOG_NAME = "e2e-links-server"
SERVER_LOG = ARTIFACTS / f"{LOG_NAME}.log"
BOX_CHOSEN_JS = f"""
(selector) => {{
  const box = document.querySelector(selector);
  return box !== null && ({BOX_TEXT_JS})(box).trim() !== '';
}}
"""
"""Whether the select box under ``selector`` shows anything yet."""
FLIPS = keys.selector(keys.COMPARE_FLIPS)
LINKS_CLIP = {"x": 0, "y": 0, "width": 1500, "height": 900}


def _flips(page: Any) -> dict[str, float]:
    """The flips chart's region with its title, for its screenshot."""
    flips = page.locator(FLIPS).bounding_box()
    clip = {"x": flips["x"] - 8, "y": flips["y"] - 40, "width": flips["width"] + 16}
    return {**clip, "height": flips["height"] + 48}


def _choose(page: Any, box: Any, typed: str, option: re.Pattern[str]) -> None:
    """Open a select box, type to narrow its options, click the one matching ``option``."""
    box.click()
    page.keyboard.type(typed)
    page.get_by_role("option", name=option).first.click()
    page.locator(APP_IDLE).wait_for()


@pytest.fixture(scope="module")
def local_url(
    tmp_path_factory: pytest.TempPathFactory, cifar_like_factory: Callable[[int], Path]
) -> Iterator[str]:
    """One local (not hosted) server for the module's tests: each opens its own sessions."""
    images, cache = cifar10_images(cifar_like_factory), tmp_path_factory.mktemp("cache")
    with explorer_server(images, cache, LOG_NAME, hosted=False) as running:
        yield running.url


def test_a_link_reopens_the_same_picks_and_maps_in_a_fresh_browser(
    browser: Any, local_url: str
) -> None:
    page = open_explorer(browser, local_url)
    pick_by_text(page, [2, 7])
    wait_for_heatmaps(page, [2, 7])
    page.wait_for_function(URL_HAS, arg="picks=2,7")
    link = page.url
    code = page.locator('[data-testid="stCode"]').filter(has_text="picks=")
    assert code.count() == 0  # drawn only once its popover is opened
    page.get_by_role("button", name="Link to this view").click()
    assert "picks=2%2C7" in code.first.inner_text()
    assert code.first.inner_text().strip() == link.replace(",", "%2C")
    screenshot(page, "links", docs=True, clip=LINKS_CLIP)
    page.keyboard.press("Escape")

    fresh = open_explorer(browser, link)  # a new context: no cookies, no session
    wait_for_heatmaps(fresh, [2, 7], ordered=True)
    assert "picks=2,7" in fresh.evaluate("decodeURIComponent(location.search)")
    fresh.context.close()
    page.context.close()


def test_a_link_made_at_a_layer_on_the_compare_tab_reopens_both(
    browser: Any, local_url: str
) -> None:
    page = open_explorer(browser, f"{local_url}/?picks=2,7&method=gradcam")
    wait_for_heatmaps(page, [2, 7])
    layer_box = page.locator('[data-testid="stSelectbox"]').filter(has_text="Layer").first
    assert "(automatic)" in layer_box.evaluate(BOX_TEXT_JS)
    _choose(page, layer_box, "layer2 ", re.compile(r"^layer2 · "))
    page.get_by_text("at layer layer2 (").wait_for()
    compare_box = page.locator(keys.selector(keys.COMPARE_WITH))
    _choose(page, compare_box, "tutorial", re.compile(r"^tutorial"))
    tab_button(page, "Compare").click()
    page.locator(f"{FLIPS} .js-plotly-plot").wait_for()
    for part in ("layer=layer2", "compare=tutorial", "tab=Compare", "seed=0"):
        page.wait_for_function(URL_HAS, arg=part)
    link = page.url
    page.context.close()

    opened_at = SERVER_LOG.stat().st_size
    fresh = open_explorer(browser, link)  # a new context: no cookies, no session
    fresh.locator(f"{FLIPS} .js-plotly-plot").wait_for()
    # The flips chart can be drawn before the sidebar's box shows its choice: read the box once
    # it shows one (a box still empty after the wait fails below with what it shows).
    compare_box = keys.selector(keys.COMPARE_WITH)
    with suppress(pytest.importorskip("playwright.sync_api").TimeoutError):
        fresh.wait_for_function(BOX_CHOSEN_JS, arg=compare_box, timeout=15_000)
    shown = fresh.locator(compare_box).evaluate(BOX_TEXT_JS)
    assert "tutorial" in shown, shown
    screenshot(
        fresh, "flips", docs=True, size={"width": 1400, "height": 1100}, settle_ms=1500, clip=_flips
    )
    tab_button(fresh, "Explore").click()
    wait_for_heatmaps(fresh, [2, 7], ordered=True)
    fresh.get_by_text("at layer layer2 (").wait_for()
    layer_box = fresh.locator('[data-testid="stSelectbox"]').filter(has_text="Layer").first
    shown = layer_box.evaluate(BOX_TEXT_JS)
    assert "layer2 · " in shown and "(automatic)" not in shown, shown
    with SERVER_LOG.open("rb") as log:
        log.seek(opened_at)
        logged = log.read().decode(errors="replace")
    assert "WARNING" not in logged, logged
    fresh.context.close()


def test_a_failing_maps_long_caption_leaves_it_the_size_of_the_others(
    browser: Any, tmp_path: Path
) -> None:
    """The page's style (``ui.start.PAGE_STYLE``) on maps drawn as the explorer draws them, one
    with a caption far longer than its picture, as a failing badge's reason makes it."""
    script = tmp_path / "maps.py"
    script.write_text(
        "import numpy as np, streamlit as st\n"
        "from gradpick.ui import keys, start\n"
        "st.markdown(start.PAGE_STYLE, unsafe_allow_html=True)\n"
        "strip = np.full((40, 130, 4), 200, np.uint8)\n"
        "with st.container(key=keys.HEATMAPS_CONTAINER):\n"
        "    st.image([strip] * 3, ['#1 cat', '#2 dog · fails: ' + 'a long reason ' * 8, '#3'])\n"
    )
    port = free_port()
    command = [sys.executable, "-m", "streamlit", "run", str(script), "--server.headless", "true"]
    command += ["--server.port", str(port), "--browser.gatherUsageStats", "false"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, server)
        page = browser.new_page()
        page.goto(url)
        images = page.locator(f"{keys.selector(keys.HEATMAPS_CONTAINER)} img")
        images.nth(2).wait_for()
        sizes = [images.nth(i).bounding_box() for i in range(3)]
        assert [(box["width"], box["height"]) for box in sizes] == [(130, 40)] * 3
        page.close()
    finally:
        server.terminate()
        server.wait(timeout=15)
