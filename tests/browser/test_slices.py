"""End to end: the Slices tab of a store in a real browser, and a card's pick into Explore.

A store of 200 CIFAR-10 test images (20 per class; a generated stand-in without the copy) by the
small tutorial net, with embeddings, and its slices found by ``gradpick.slices`` and kept beside
it; a link opens the store on the Slices tab. Writes the tab's screenshot to
``artifacts/e2e-slices.png`` (not to the docs: it shows CIFAR-10 images).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from gradpick import data
from gradpick.models.zoo import load_model
from gradpick.outputs import store_format as store
from gradpick.outputs.stores import infer_to_store
from gradpick.slices.stored import find_slices
from gradpick.ui.panels.slices import SIDE
from tests.serving import (
    APP_IDLE,
    CHROMIUM_ARGS,
    TAB_SELECTED_JS,
    chromium_executable,
    cifar10_images,
    metric_value,
    open_explorer,
    page_errors,
    screenshot,
    streamlit_server,
)

PER_CLASS = 20
TYPICAL_WIDTHS_JS = """() => Array.from(document.querySelectorAll('[data-testid=stImageCaption]'))
    .filter(caption => /^#\\d+$/.test(caption.innerText.trim()))
    .map(caption => caption.parentElement.querySelector('img').getBoundingClientRect().width)"""
"""The rendered widths of the slices' typical images (their captions are their positions)."""
PICK = re.compile(r"^Pick its (\d+) images of this batch$")


@pytest.fixture(scope="module")
def sliced(
    tmp_path_factory: pytest.TempPathFactory, cifar_like_factory: Callable[[int], Path]
) -> Path:
    """A store of 200 test images with its slices file beside it."""
    root = tmp_path_factory.mktemp("sliced")
    images = cifar10_images(cifar_like_factory) / "test"
    for folder in sorted(p for p in images.iterdir() if p.is_dir()):
        for picture in sorted(folder.iterdir())[:PER_CLASS]:
            (root / "images" / folder.name).mkdir(parents=True, exist_ok=True)
            shutil.copy(picture, root / "images" / folder.name / picture.name)
    loaded = load_model("tutorial")
    source = data.open_source(str(root / "images"), spec=loaded.spec)
    infer_to_store(loaded, source, range(len(source)), root / "outputs", embeddings=True)
    find_slices(store.open_store(root / "outputs"), loaded, clusters=4).write_beside()
    return root / "outputs"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, sliced: Path) -> Iterator[str]:
    env = {"GRADPICK_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}
    with streamlit_server(env, log_name="e2e-slices-server") as running:
        yield running.url


def test_the_slices_tab_shows_cards_and_picks_a_slice_into_explore(
    server: str, sliced: Path
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    link = urlencode(
        {"src": "stored", "outputs": str(sliced), "model": "tutorial", "tab": "Slices"}
    )
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_executable(), args=CHROMIUM_ARGS
        )
        page = open_explorer(browser, f"{server}/?{link}")
        page.get_by_text(re.compile(r"\d+ slices of \d+ errors")).wait_for()
        page.locator(APP_IDLE).wait_for()  # every card drawn, not only the first
        cards = page.get_by_text(re.compile(r"^Slice \d+: \d+ images, \d+ errors"))
        assert cards.count() >= 1
        assert cards.first.inner_text().startswith("Slice 1: ")
        assert page.get_by_text(re.compile(r"^(Verified|Not verified): removing")).count() >= 1
        mean_maps = page.get_by_text("mean map, peaks at the centre")
        mean_maps.nth(cards.count() - 1).wait_for()  # a picture's caption comes with its image
        assert mean_maps.count() == cards.count()
        # Every typical image at the panel's size, whatever the length of its caption.
        widths = page.evaluate(TYPICAL_WIDTHS_JS)
        assert widths and set(widths) == {SIDE // 2}, widths
        assert page_errors(page).count() == 0
        screenshot(page, "slices", size={"width": 1400, "height": 1400}, full_page=True)

        button = page.get_by_role("button", name=PICK).first
        found = PICK.match(button.inner_text().strip())
        assert found is not None
        count = int(found.group(1))
        assert count > 0
        button.click()
        page.wait_for_function(TAB_SELECTED_JS, arg="Explore")
        sync_api.expect(metric_value(page, "Picked k / batch N")).to_have_text(
            re.compile(rf"^{count} / ")
        )
        assert page_errors(page).count() == 0
        browser.close()
