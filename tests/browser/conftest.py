"""Every test in this folder drives a real Streamlit server from a real browser (Debian's
chromium through Playwright): marked ``e2e``, so ``make quick`` leaves them out."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)
