"""End to end: triage a few suspects in a real browser, reload, and the verdicts are there.

Uses the shared CIFAR-10 copy when present (else a generated folder) and writes the tab's
screenshot to assets/screenshots/triage.png.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gradpick import data
from gradpick.triage.verdicts import VerdictBook
from tests.serving import (
    APP_IDLE,
    CHROMIUM_ARGS,
    chromium_executable,
    cifar10_images,
    open_explorer,
    page_errors,
    pick_by_text,
    screenshot,
    streamlit_server,
    tab_button,
    wait_for_heatmaps,
)

HEADING = re.compile(r"Suspect (\d+) of (\d+) flagged: (\d+) flagged without a verdict")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def server(cache: Path, cifar_like_factory: Callable[[int], Path]) -> Iterator[str]:
    env = {
        data.CIFAR10_DIR_ENV: str(cifar10_images(cifar_like_factory)),
        "GRADPICK_CACHE_DIR": str(cache),
    }
    with streamlit_server(env, log_name="e2e-triage-server") as running:
        yield running.url


def open_triage(browser: Any, url: str) -> Any:
    page = open_explorer(browser, url)
    tab_button(page, "Triage").click()
    page.get_by_text(HEADING).wait_for()
    return page


def heading(page: Any) -> tuple[int, int, int]:
    found = HEADING.search(page.get_by_text(HEADING).inner_text())
    assert found is not None
    return int(found.group(1)), int(found.group(2)), int(found.group(3))


def suspect_name(page: Any) -> str:
    text = page.get_by_text(re.compile(r"^#\d+ ")).first.inner_text()
    return text.split("\n")[0].split(" ", 1)[1]


def judge(page: Any, button: str | re.Pattern[str]) -> None:
    """Click a verdict button and wait for the next suspect: the new heading, then the end of
    the run that drew it (the heading comes before the suspect's card, and until the run ends
    an element of the run before may still be on the page, where ``suspect_name`` reads it)."""
    waiting = heading(page)[2]
    page.get_by_role("button", name=button).click()
    page.get_by_text(f"{waiting - 1} flagged without a verdict").wait_for()
    page.locator(APP_IDLE).wait_for()


def test_verdicts_survive_a_reload(server: str, cache: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_executable(), args=CHROMIUM_ARGS
        )
        page = open_triage(browser, server)
        _, total, waiting = heading(page)
        judged = [suspect_name(page)]
        judge(page, "fine")
        judged.append(suspect_name(page))
        judge(page, "model wrong")
        judged.append(suspect_name(page))
        judge(page, re.compile(r"^label wrong → "))
        assert heading(page)[2] == waiting - 3

        page.reload()
        page.get_by_text("Images N").wait_for()
        tab_button(page, "Triage").click()
        page.get_by_text(HEADING).wait_for()
        assert heading(page)[1:] == (total, waiting - 3)
        assert suspect_name(page) not in judged
        assert page_errors(page).count() == 0
        books = list(cache.rglob("*.verdicts.sqlite"))
        assert len(books) == 1
        history = VerdictBook(books[0]).history()
        assert [v.name for v in history] == judged
        assert [v.verdict for v in history] == ["fine", "model_wrong", "label_wrong"]
        screenshot(page, "triage", docs=True, size={"width": 1400, "height": 1500}, full_page=True)
        browser.close()


def test_a_note_and_a_class_typed_in_triage_survive_a_pick_in_explore(
    server: str, cache: Path
) -> None:
    """The closed tab is not drawn, yet the browser shows its values again when it reopens
    (and so sends them back, not its defaults)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_executable(), args=CHROMIUM_ARGS
        )
        page = open_triage(browser, server)
        note = page.get_by_label("Note (optional)")
        note.fill("the ears say dog")
        note.press("Enter")
        page.get_by_label("Right class").click()
        options = page.get_by_role("option")
        options.last.wait_for()
        chosen = options.last.inner_text().strip()
        options.last.click()
        label_wrong = page.get_by_role("button", name=f"label wrong → {chosen}")
        label_wrong.wait_for()

        tab_button(page, "Explore").click()
        pick_by_text(page, [1])
        wait_for_heatmaps(page, [1])
        tab_button(page, "Triage").click()
        label_wrong.wait_for()
        assert note.input_value() == "the ears say dog"
        judge(page, f"label wrong → {chosen}")
        assert page_errors(page).count() == 0
        (book,) = cache.rglob("*.verdicts.sqlite")
        last = VerdictBook(book).history()[-1]
        assert (last.verdict, last.note) == ("label_wrong", "the ears say dog")
        assert last.new_label is not None and data.CIFAR10_CLASSES[last.new_label] == chosen
        browser.close()
