"""Past the page's limits (lowered here to a few images): the table pages, the scatters sample.

The limits are module constants read on every run, so lowering them makes a 64-image batch
behave as a batch of hundreds of thousands does, without one.
"""

from __future__ import annotations

import sys
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
VIEW_THUMBNAILS = outputs.VIEWS[0]


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


def _store_app(out: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    """The page opened on the store ``out`` (``--outputs``), after its first run."""
    monkeypatch.setattr(sys, "argv", ["app.py", "--outputs", str(out)])
    app = AppTest.from_file(str(APP), default_timeout=180)
    for key, value in TUTORIAL.items():
        app.session_state[key] = value
    app = app.run()
    assert not app.exception and not app.error
    return app


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


def test_a_large_stores_first_page_decodes_only_the_thumbnails_it_shows(
    generated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``pixels.LAZY_ABOVE`` a store's images are decoded as views show them: the first
    page (a grid of 20 thumbnails) decodes those 20, and a pick decodes its own image."""
    from gradpick import data
    from gradpick.outputs import pixels
    from tests.app.test_app import store_of_the_stand_in

    out = tmp_path / "outputs"
    store_of_the_stand_in(generated / "test", out)
    monkeypatch.setattr(pixels, "LAZY_ABOVE", 10)
    monkeypatch.setattr(pixels, "_keep_in_background", lambda *args: lambda: None)
    monkeypatch.setattr(outputs, "PAGE_SIZES", (20, 50))
    decoded: list[int] = []
    read_one = data.FolderSource.read_one
    monkeypatch.setattr(
        data.FolderSource, "read_one", lambda self, p: decoded.append(p) or read_one(self, p)
    )
    app = _store_app(out, monkeypatch)
    positions = data.batch_positions(IMAGES, 0, IMAGES)  # the store holds the whole folder
    assert app.session_state[keys.PICKED] == []
    assert sorted(decoded) == sorted(positions[:20])
    app.session_state[keys.PICKED] = [40]
    app = app.run()
    assert not app.exception and not app.error
    assert sorted(decoded) == sorted([*positions[:20], positions[40]])


def test_a_large_stores_embeddings_are_read_when_its_feature_space_opens(
    generated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``KEPT_FROM_THE_FIRST_PAGE_AT_MOST`` images neither scatter is drawn (kept) from
    the first page: the store's embeddings are read, once, when the feature space opens, and
    each scatter is kept from its first opening on."""
    from gradpick.outputs import stores
    from tests.app.test_app import store_of_the_stand_in

    out = tmp_path / "outputs"
    store_of_the_stand_in(generated / "test", out, embeddings=True)
    monkeypatch.setattr(figures, "WEBGL_ABOVE", 10)  # the scatters are kept past it
    monkeypatch.setattr(outputs, "KEPT_FROM_THE_FIRST_PAGE_AT_MOST", 10)
    reads: list[Path] = []
    embeddings_of = stores._embeddings_of

    def counted(opened: stores.OpenedStore, *rows: object) -> object:
        reads.append(opened.path)
        return embeddings_of(opened, *rows)  # type: ignore[arg-type]

    monkeypatch.setattr(stores, "_embeddings_of", counted)
    app = _store_app(out, monkeypatch)
    assert not reads and len(app.get("plotly_chart")) == 1  # the grid alone
    app.session_state[keys.OUTPUTS_TAB] = outputs.EMBEDDING_VIEW
    app = app.run()
    assert not app.exception and not app.error and reads == [out]
    app.session_state[keys.OUTPUTS_TAB] = VIEW_THUMBNAILS
    app = app.run()
    assert len(app.get("plotly_chart")) == 2 and reads == [out]  # now kept, read once
    app.session_state[keys.OUTPUTS_TAB] = outputs.SCATTER_VIEW
    app = app.run()
    app.session_state[keys.OUTPUTS_TAB] = VIEW_THUMBNAILS
    app = app.run()
    assert not app.exception and not app.error
    assert len(app.get("plotly_chart")) == 3 and reads == [out]  # both kept now
