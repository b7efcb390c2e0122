"""End to end on the hosted demo's server (``GRADPICK_HOSTED=1``), one for the module, in a real
browser: a click on a flip cell of the Compare view picks its images and both models' maps appear
for them (the view is screenshotted for the docs), and a link that names a server folder and a
model outside the allowed set opens with both refused."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gradpick.ui import keys
from tests.serving import (
    SCATTER_POINTS_JS,
    URL_HAS,
    cifar10_images,
    click_point,
    explorer_server,
    open_explorer,
    page_errors,
    screenshot,
    tab_button,
    wait_for_heatmaps,
)

FLIPS = keys.selector(keys.COMPARE_FLIPS)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, cifar_like_factory: Callable[[int], Path]
) -> Iterator[str]:
    images, cache = cifar10_images(cifar_like_factory), tmp_path_factory.mktemp("cache")
    with explorer_server(images, cache, "e2e-hosted-server", hosted=True) as running:
        yield running.url


def test_a_flip_cell_click_shows_both_models_maps(browser: Any, server: str) -> None:
    page: Any = open_explorer(browser, server)
    tab_button(page, "Compare").click()
    page.locator(f"{FLIPS} .js-plotly-plot").wait_for()
    cells = page.evaluate(SCATTER_POINTS_JS, FLIPS)["points"]
    assert [cell["index"] for cell in cells] == [0, 1, 2, 3]
    # only the second model right: the images the retrained model gained
    gained = cells[2]
    click_point(page, {"x": gained["x"], "y": gained["y"], "cell": [gained["index"]]})
    captions = page.get_by_text("Spearman", exact=False)
    captions.first.wait_for()
    page.wait_for_function("() => document.body.innerText.includes('second: ')")
    assert page_errors(page).count() == 0
    screenshot(page, "compare", docs=True, size={"width": 1400, "height": 1900}, settle_ms=1500)
    page.context.close()


def test_a_hosted_page_refuses_a_server_folder_and_a_foreign_model(
    browser: Any, server: str
) -> None:
    page = open_explorer(browser, f"{server}/?src=folder&folder=/etc&model=mine:evil&picks=1")
    note = page.locator('[data-testid="stAlert"]').filter(has_text="opened with changes")
    note.wait_for()
    text = note.inner_text()
    assert "never reads one" in text and "'mine:evil' is not offered" in text
    wait_for_heatmaps(page, [1])
    page.wait_for_function(URL_HAS, arg="src=cifar10")
    assert "/etc" not in page.evaluate("decodeURIComponent(location.search)")
    page.context.close()
