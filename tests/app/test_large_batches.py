"""Past the page's limits (lowered here to a few images): the table pages, the scatters sample.

The limits are module constants read on every run, so lowering them makes a 64-image batch
behave as a batch of hundreds of thousands does, without one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from gradpick.ui import figures, keys
from gradpick.ui.panels import outputs

APP = Path(__file__).resolve().parents[2] / "app.py"
TUTORIAL = {"model": "tutorial:random-seed0"}
IMAGES = 64


@pytest.fixture(autouse=True)
def caches_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Empty caches: a figure cached at the usual limits would be shown again."""
    st.cache_data.clear()
    st.cache_resource.clear()
    monkeypatch.setenv("GRADPICK_CACHE_DIR", str(tmp_path / "cache"))
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


def _app(view: str) -> AppTest:
    app = AppTest.from_file(str(APP), default_timeout=180)
    for key, value in TUTORIAL.items():
        app.session_state[key] = value
    app.session_state[keys.OUTPUTS_TAB] = view
    return app.run()


def test_the_table_sends_one_page_and_a_row_picks_its_own_image(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outputs, "TABLE_PAGE_ROWS", 25)
    app = _app("Table")
    assert not app.exception and not app.error
    assert list(app.dataframe[0].value["index"]) == list(range(25))
    (page,) = [box for box in app.number_input if box.label.startswith("Table page")]
    assert page.label == "Table page (of 3)"
    app = page.set_value(3).run()
    assert list(app.dataframe[0].value["index"]) == list(range(50, IMAGES))
    app.session_state[keys.TABLE] = {"selection": {"rows": [0, 2], "columns": []}}
    app = app.run()
    assert app.session_state[keys.PICKED] == [50, 52]


def test_the_scatters_say_they_draw_a_sample_past_their_limit(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(figures, "DRAWN_AT_MOST", 20)
    app = _app(outputs.SCATTER_VIEW)
    assert not app.exception and not app.error
    captions = [caption.value for caption in app.caption]
    assert any(f"20 of {IMAGES} images drawn (a seeded sample)" in text for text in captions)
