"""Every test in this folder drives a real Streamlit server from a real browser (Debian's
chromium through Playwright): marked ``e2e``, so ``make quick`` leaves them out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.serving import CHROMIUM_ARGS, chromium_executable

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One chromium for the module (each test opens a context of its own: a fresh session);
    skips without Playwright or Debian's chromium."""
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = chromium_executable()
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()
