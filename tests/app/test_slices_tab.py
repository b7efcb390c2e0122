"""The Slices tab through AppTest: the cards of the slices kept beside the opened store, their
verification, a click picking a slice's images into Explore; what to run when there are none,
and a file of another store ignored."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from gradpick.outputs import store_format as store
from gradpick.picking.named import SelectionShelf
from gradpick.slices.verdicts import SliceVerdictBook
from gradpick.ui import keys
from tests.app.test_app import TUTORIAL, no_errors, open_app, store_of_the_stand_in


@pytest.fixture
def stored(generated: Path, tmp_path: Path) -> Path:
    """A store of the generated test split by the tutorial stand-in."""
    out = tmp_path / "outputs"
    store_of_the_stand_in(generated / "test", out)
    return out


def write_slices(out: Path, fingerprint: str | None = None) -> Path:
    """A slices file beside the store at ``out``: slice 1 verified (rows 1, 2, 5), slice 2
    not tested."""
    metadata = store.open_store(out).metadata
    kept = {
        "model": metadata["model"]["identity"],
        "fingerprint": fingerprint or metadata["source"]["fingerprint"],
        "errors": 4,
        "slices": [
            {
                "rank": 1,
                "size": 3,
                "errors": 3,
                "error_rate": 1.0,
                "positions": [1, 2, 5],
                "names": ["a", "b", "c"],
                "confusions": [],
                "description": "3 error(s) called cat (3), labelled dog (3).",
                "typical": [2, 5],
                "mean_map": [[0.0, 0.25], [0.5, 0.25]],
                "effect": {
                    "evidence_change": 1.0,
                    "random_change": 0.05,
                    "ratio": 20.0,
                    "p_value": 0.001,
                    "tested": 3,
                    "verified": True,
                },
                "verified": True,
            },
            {
                "rank": 2,
                "size": 4,
                "errors": 0,
                "error_rate": 0.0,
                "positions": [0, 3, 4, 6],
                "names": ["d", "e", "f", "g"],
                "confusions": [],
                "description": "correctly called cat.",
                "typical": [0],
                "mean_map": [[1.0]],
                "effect": None,
                "verified": False,
            },
        ],
    }
    path = out.with_name(out.name + ".slices.json")
    path.write_text(json.dumps(kept))
    return path


def _open(out: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setattr(sys, "argv", ["app.py", "--outputs", str(out)])
    return open_app("Slices", **TUTORIAL)


def test_the_cards_show_the_slices_and_a_click_picks_one_into_explore(
    stored: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = stored
    where = write_slices(out)
    app = _open(out, monkeypatch)
    no_errors(app)
    assert any(
        "2 slices of 4 errors, 1 verified" in c.value and str(where) in c.value for c in app.caption
    )
    texts = [m.value for m in app.markdown]
    assert any(t.startswith("**Verified**: removing the evidence changed 100% of 3") for t in texts)
    assert "No errors to test." in texts
    assert "3 error(s) called cat (3), labelled dog (3)." in texts
    button = app.button(key=keys.per_source(keys.SLICE_PICK, "1"))
    assert button.label == "Pick its 3 images of this batch"
    app = button.click().run()
    no_errors(app)
    assert app.session_state[keys.EXPLORER_TAB] == "Explore"
    assert list(app.session_state[keys.PICKED]) == [1, 2, 5]


def test_without_slices_the_tab_says_what_to_run_and_ignores_another_store_s(
    stored: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = stored
    app = _open(out, monkeypatch)
    no_errors(app)
    assert any(f"gradpick slices --outputs {out}" in i.value for i in app.info)
    write_slices(out, fingerprint="another folder")
    app = _open(out, monkeypatch)
    assert any("No slices of this store yet" in i.value for i in app.info)


def test_triage_says_likely_the_model_for_an_error_of_a_verified_slice(
    stored: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = store.open_store(stored)
    logits = np.asarray(opened.table.column("logits").to_pylist())
    labels = np.asarray(opened.table.column("label").to_pylist())
    errors = np.flatnonzero(logits.argmax(axis=1) != labels)
    assert len(errors)
    path = write_slices(stored)
    kept = json.loads(path.read_text())
    kept["slices"][0]["positions"] = [int(p) for p in errors]
    path.write_text(json.dumps(kept))
    monkeypatch.setattr(sys, "argv", ["app.py", "--outputs", str(stored)])
    app = open_app("Triage", **TUTORIAL)
    no_errors(app)
    # The most suspect image is an error, and all errors are the verified slice's.
    assert any("Likely the model (slice 1), not a label to fix" in w.value for w in app.warning)


def test_a_verdict_on_a_slice_is_kept_beside_the_store_for_that_slice_only(
    stored: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = stored
    path = write_slices(out)
    app = _open(out, monkeypatch)
    assert any(
        c.value == "Slice 1: no verdict yet. Is it the model or the labels?" for c in app.caption
    )
    app = app.button(key=keys.per_source(keys.SLICE_VERDICT, 1, "model_wrong")).click().run()
    no_errors(app)
    app = app.button(key=keys.per_source(keys.SLICE_VERDICT, 2, "fine")).click().run()
    history = SliceVerdictBook.beside(out).history()
    assert [(v.rank, v.verdict) for v in history] == [(1, "model_wrong"), (2, "fine")]
    # A new session (a restarted server): the verdicts are read back from the file.
    app = _open(out, monkeypatch)
    said = [c.value for c in app.caption]
    assert any(s.startswith("Slice 1: judged model wrong (") for s in said), said
    assert any(s.startswith("Slice 2: judged fine (") for s in said), said
    button = app.button(key=keys.per_source(keys.SLICE_VERDICT, 1, "model_wrong"))
    assert button.proto.type == "primary"
    # Slices found again with other members for slice 1: its verdict no longer applies.
    kept = json.loads(path.read_text())
    kept["slices"][0]["positions"] = [1, 2]
    path.write_text(json.dumps(kept))
    app = _open(out, monkeypatch)
    said = [c.value for c in app.caption]
    assert "Slice 1: no verdict yet. Is it the model or the labels?" in said
    assert any(s.startswith("Slice 2: judged fine (") for s in said), said


def test_a_slice_saved_as_a_named_selection_is_listed_in_explore_and_reopens_it(
    stored: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = stored
    write_slices(out)
    app = _open(out, monkeypatch)
    button = app.button(key=keys.per_source(keys.SLICE_SAVE, 1))
    assert button.label == "Save its 3 images as the named selection 'slice 1'"
    app = button.click().run()
    no_errors(app)
    assert any("as the named selection 'slice 1'" in s.value for s in app.success)
    (saved,) = SelectionShelf.beside(out).all()
    assert (saved.name, saved.picks) == ("slice 1", (1, 2, 5))
    assert saved.note == "3 error(s) called cat (3), labelled dog (3)."
    assert saved.params["picks"] == "1,2,5" and saved.params["tab"] == "Explore"
    assert saved.params["outputs"] == str(out)
    # Saving it twice says so, and keeps the one saved.
    app = app.button(key=keys.per_source(keys.SLICE_SAVE, 1)).click().run()
    assert any("'slice 1' exists already" in e.value for e in app.error)
    # Explore lists it among the named selections, and reopening it picks its images.
    app.session_state[keys.EXPLORER_TAB] = "Explore"
    app.session_state[keys.SELECTIONS_OPEN] = True  # drawn only while open
    app = app.run()
    assert app.selectbox(key=keys.SELECTION_CHOSEN).options == ["slice 1"]
    app = app.button(key=keys.SELECTION_REOPEN).click().run()
    no_errors(app)
    assert list(app.session_state[keys.PICKED]) == [1, 2, 5]
