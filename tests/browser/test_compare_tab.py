"""End to end: the hosted demo's Compare view in a real browser. A click on a flip cell picks
its images, and both models' maps appear for them; the view is screenshotted for the docs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gradpick.ui import keys
from tests.serving import (
    CHROMIUM_ARGS,
    SCATTER_POINTS_JS,
    chromium_executable,
    cifar10_images,
    explorer_server,
    open_explorer,
    page_errors,
    save_screenshot,
)

FLIPS = keys.selector(keys.COMPARE_FLIPS)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, cifar_like_factory: Callable[[int], Path]
) -> Iterator[str]:
    images, cache = cifar10_images(cifar_like_factory), tmp_path_factory.mktemp("cache")
    with explorer_server(images, cache, "e2e-compare-server", hosted=True) as running:
        yield running.url


def test_a_flip_cell_click_shows_both_models_maps(server: str) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_executable(), args=CHROMIUM_ARGS
        )
        page: Any = open_explorer(browser, server)
        page.get_by_role("tab", name="Compare").click()
        page.locator(f"{FLIPS} .js-plotly-plot").wait_for()
        cells = page.evaluate(SCATTER_POINTS_JS, FLIPS)["points"]
        assert [cell["index"] for cell in cells] == [0, 1, 2, 3]
        # only the second model right: the images the retrained model gained
        gained = cells[2]
        page.mouse.click(gained["x"], gained["y"])
        captions = page.get_by_text("Spearman", exact=False)
        captions.first.wait_for()
        page.wait_for_function("() => document.body.innerText.includes('second: ')")
        assert page_errors(page).count() == 0
        page.set_viewport_size({"width": 1400, "height": 1900})
        page.wait_for_timeout(1500)  # plotly redraws at the new size
        save_screenshot(page, "compare", docs=True)
        browser.close()
