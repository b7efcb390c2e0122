"""Deep links and named selections on the page, through AppTest: the URL follows the view, a
link reopens it, a refused parameter is noted, and selections are saved, reopened, renamed and
deleted (or reported when their file is damaged)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from gradpick.picking import named as selections
from gradpick.ui import config, keys, state

APP = Path(__file__).resolve().parents[2] / "app.py"
TIMEOUT = 180


OPEN = {keys.SELECTIONS_OPEN: True}
"""The named selections' expander open (it is drawn only while open)."""


def open_link(params: dict[str, str], **session: Any) -> AppTest:
    app = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    for name, value in params.items():
        app.query_params[name] = value
    for key, value in session.items():
        app.session_state[key] = value
    return app.run()


def captioned_indices(app: AppTest) -> list[int]:
    for element in app.image:
        captions = element.captions
        if captions and all(c.startswith("#") and "overlay" not in c for c in captions):
            return [int(caption.split()[0].lstrip("#")) for caption in captions]
    return []


def params_of(app: AppTest) -> dict[str, str]:
    return {name: str(value) for name, value in app.query_params.items()}


def pick(app: AppTest, indices: list[int]) -> AppTest:
    points = [{"customdata": index} for index in indices]
    app.session_state[keys.SCATTER_CHART] = {
        "selection": {"points": points, "box": [], "lasso": []}
    }
    return app.run()


def no_errors(app: AppTest) -> None:
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [e.value for e in app.error]


def test_the_url_follows_the_picks_and_reopens_them_in_a_new_session(generated: Path) -> None:
    app = pick(open_link({}, model="tutorial:random-seed0"), [5, 3])
    no_errors(app)
    params = params_of(app)
    assert params["picks"] == "5,3" and params["model"] == "tutorial"
    assert params["src"] == "cifar10" and params["n"] == "64" and "folder" not in params
    assert any("picks=5%2C3" in code.value and "model=tutorial" in code.value for code in app.code)
    again = open_link(params)
    no_errors(again)
    assert state.picked(again.session_state) == [5, 3]
    assert captioned_indices(again) == [5, 3]
    assert again.sidebar.selectbox(key=keys.MODEL).value == "tutorial:random-seed0"
    assert not again.warning or all("link" not in w.value for w in again.warning)


def test_a_link_sets_the_method_target_and_view(generated: Path) -> None:
    app = open_link(
        {
            "model": "tutorial",
            "picks": "2",
            "method": "smoothgrad",
            "m.samples": "8",
            "target": "class",
            "class": "4",
            "view": "Table",
            "tab": "Explore",
        }
    )
    no_errors(app)
    assert app.sidebar.selectbox(key=keys.METHOD).value == "smoothgrad"
    assert app.sidebar.selectbox(key=keys.TARGET_CLASS).value == 4
    assert app.session_state[keys.OUTPUTS_TAB] == "Table"
    params = params_of(app)
    assert (params["method"], params["class"], params["view"]) == ("smoothgrad", "4", "Table")


def test_garbage_and_out_of_range_parameters_are_noted_not_raised(generated: Path) -> None:
    app = open_link({"picks": "3,999", "n": "abc", "strategy": "turbo", "zz": "1", "start": "70"})
    no_errors(app)
    notes = " ".join(w.value for w in app.warning)
    assert "999" in notes and "turbo" in notes and "zz" in notes and "'abc'" in notes
    assert state.picked(app.session_state) == [3]


def test_a_hosted_link_to_a_server_folder_or_a_foreign_model_is_refused(
    generated: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(config.HOSTED_ENV, "1")
    link = {"src": "folder", "folder": str(tmp_path), "model": "tutorial", "picks": "1"}
    app = open_link(link, **OPEN)
    assert not app.exception
    notes = " ".join(w.value for w in app.warning)
    assert "never reads one" in notes and "model 'tutorial' is not offered" in notes
    assert app.sidebar.radio(key=keys.SOURCE_KIND).value == "cifar10"
    assert "folder" not in params_of(app)
    assert any("session only" in c.value for c in app.caption)
    assert not list(tmp_path.glob("*.selections.sqlite"))


def _save(app: AppTest, name: str, note: str = "") -> AppTest:
    app.text_input(key=keys.SELECTION_NAME).input(name)
    app.text_area(key=keys.SELECTION_NOTE).input(note)
    return (
        app.button[
            [b.label for b in app.button].index(
                f"Save the {len(state.picked(app.session_state))} picks"
            )
        ]
        .click()
        .run()
    )


def test_named_selections_are_saved_reopened_renamed_and_deleted(generated: Path) -> None:
    app = pick(open_link({}, model="tutorial:random-seed0", **OPEN), [4, 1])
    app = _save(app, "odd ones", "both blurry")
    no_errors(app)
    assert app.selectbox(key=keys.SELECTION_CHOSEN).options == ["odd ones"]
    app = pick(app, [7])
    app = app.button(key=keys.SELECTION_REOPEN).click().run()
    app.run()
    no_errors(app)
    assert state.picked(app.session_state) == [4, 1]
    # Another session (or a restarted server) finds it beside the store.
    other = open_link({}, model="tutorial:random-seed0", **OPEN)
    assert other.selectbox(key=keys.SELECTION_CHOSEN).options == ["odd ones"]
    other.text_input(key=keys.SELECTION_NEW_NAME).input("blurry").run()
    other = other.button(key=keys.SELECTION_RENAME).click().run()
    assert other.selectbox(key=keys.SELECTION_CHOSEN).options == ["blurry"]
    other = other.button(key=keys.SELECTION_DELETE).click().run()
    no_errors(other)
    assert not any(s.key == keys.SELECTION_CHOSEN for s in other.selectbox)


def test_a_corrupt_selections_file_is_reported_and_the_page_still_opens(
    generated: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.selections.sqlite"
    broken.write_bytes(b"garbage" * 500)
    monkeypatch.setattr(
        selections.SelectionShelf, "beside", classmethod(lambda cls, store: cls(broken))
    )
    closed = open_link({}, model="tutorial:random-seed0")
    no_errors(closed)  # the expander closed: the file is not read
    app = open_link({}, model="tutorial:random-seed0", **OPEN)
    assert not app.exception
    assert any("the store itself is fine" in e.value for e in app.error)
    assert any(m.label == "Images N" for m in app.metric)


def test_the_named_selections_are_drawn_only_while_their_expander_is_open(
    generated: Path,
) -> None:
    """A click's rerun neither reads the shelf nor sends the expander's widgets while it is
    closed; a new name typed before closing it is still there when it opens again."""
    app = pick(open_link({}, model="tutorial:random-seed0"), [2])
    assert not any(t.key == keys.SELECTION_NAME for t in app.text_input)
    app.session_state[keys.SELECTIONS_OPEN] = True
    app = _save(app.run(), "kept")
    app.text_input(key=keys.SELECTION_NEW_NAME).input("half typed").run()
    app.session_state[keys.SELECTIONS_OPEN] = False
    app = pick(app, [5])
    assert not any(t.key == keys.SELECTION_NAME for t in app.text_input)
    assert not any(s.key == keys.SELECTION_CHOSEN for s in app.selectbox)
    app.session_state[keys.SELECTIONS_OPEN] = True
    app = app.run()
    no_errors(app)
    assert app.selectbox(key=keys.SELECTION_CHOSEN).options == ["kept"]
    assert app.text_input(key=keys.SELECTION_NEW_NAME).value == "half typed"
