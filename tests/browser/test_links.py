"""End to end: a link names the view, another browser opens it, a hosted page refuses a folder.

A real ``streamlit run app.py`` and Debian's chromium (Playwright), as in ``test_e2e.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gradpick import data
from gradpick.ui import config
from tests.serving import (
    CHROMIUM_ARGS,
    REPO,
    chromium_executable,
    cifar10_images,
    open_explorer,
    pick_by_text,
    streamlit_server,
    wait_for_heatmaps,
)

SCREENSHOT = REPO / "assets" / "screenshots" / "links.png"
URL_HAS = "(text) => decodeURIComponent(location.search).includes(text)"


@contextmanager
def _server(factory: Callable[[int], Path], cache: Path, hosted: bool) -> Iterator[str]:
    env = {
        data.CIFAR10_DIR_ENV: str(cifar10_images(factory)),
        "GRADPICK_CACHE_DIR": str(cache),
        config.HOSTED_ENV: "1" if hosted else "0",
    }
    with streamlit_server(env) as running:
        yield running.url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = chromium_executable()
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def test_a_link_reopens_the_same_picks_and_maps_in_a_fresh_browser(
    browser: Any,
    tmp_path_factory: pytest.TempPathFactory,
    cifar_like_factory: Callable[[int], Path],
) -> None:
    with _server(cifar_like_factory, tmp_path_factory.mktemp("cache"), hosted=False) as url:
        page = open_explorer(browser, url)
        pick_by_text(page, [2, 7])
        wait_for_heatmaps(page, [2, 7])
        page.wait_for_function(URL_HAS, arg="picks=2,7")
        link = page.url
        code = page.locator('[data-testid="stCode"]').filter(has_text="picks=")
        assert "picks=2%2C7" in code.first.inner_text()
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), clip={"x": 0, "y": 0, "width": 1500, "height": 900})

        fresh = open_explorer(browser, link)  # a new context: no cookies, no session
        wait_for_heatmaps(fresh, [2, 7], ordered=True)
        assert "picks=2,7" in fresh.evaluate("decodeURIComponent(location.search)")
        fresh.context.close()
        page.context.close()


def test_a_hosted_page_refuses_a_server_folder_and_a_foreign_model(
    browser: Any,
    tmp_path_factory: pytest.TempPathFactory,
    cifar_like_factory: Callable[[int], Path],
) -> None:
    with _server(cifar_like_factory, tmp_path_factory.mktemp("cache"), hosted=True) as url:
        page = open_explorer(browser, f"{url}/?src=folder&folder=/etc&model=mine:evil&picks=1")
        note = page.locator('[data-testid="stAlert"]').filter(has_text="opened with changes")
        note.wait_for()
        text = note.inner_text()
        assert "never reads one" in text and "'mine:evil' is not offered" in text
        wait_for_heatmaps(page, [1])
        page.wait_for_function(URL_HAS, arg="src=cifar10")
        assert "/etc" not in page.evaluate("decodeURIComponent(location.search)")
        page.context.close()
