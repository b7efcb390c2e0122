"""The Triage tab through AppTest: suspects in order, verdicts kept beside the batch's store and
there again when the page reopens; stale verdicts shown, not applied; a corrupt file reported."""

from __future__ import annotations

import base64
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from gradpick.triage.verdicts import Verdict, VerdictBook
from gradpick.ui import keys
from tests.app.test_app import TUTORIAL, open_tab, store_of_the_stand_in
from tests.app.test_app import open_app as open_page


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache of this test's own: the app's stores, and so the verdicts beside them."""
    monkeypatch.setenv("GRADPICK_CACHE_DIR", str(tmp_path / "cache"))


def open_app() -> AppTest:
    """The page on the Triage tab."""
    return open_page("Triage", **TUTORIAL)


def verdicts_file(app: AppTest) -> Path:
    caption = next(c.value for c in app.caption if "Verdicts are kept in" in c.value)
    found = re.search(r"Verdicts are kept in (.+)\.$", caption)
    assert found is not None
    return Path(found.group(1))


def suspect(app: AppTest) -> str:
    """The name of the suspect in view."""
    text = next(m.value for m in app.markdown if m.value.startswith("**#"))
    return text.split("  \n")[0].split(" ", 1)[1]


def contrast_captions(app: AppTest) -> list[str]:
    return [c for image in app.image for c in image.captions or [] if " - logit " in c]


def listing(app: AppTest) -> Any:
    return next(table.value for table in app.table if "verdict" in table.value.columns)


def test_a_verdict_is_kept_the_next_suspect_follows_and_it_is_there_again(
    generated: Path,
) -> None:
    app = open_app()
    assert not app.exception and not app.error, [e.value for e in app.error]
    first = suspect(app)
    table = listing(app)
    assert table["name"].iloc[0] == first and (table["verdict"] == "").all()
    assert any(c.startswith("Gradient of logit") for c in contrast_captions(app))
    book_path = verdicts_file(app)
    note = next(box for box in app.text_input if box.label == "Note (optional)")
    note.set_value("looks fine to me").run()
    app.button(key=keys.per_source(keys.TRIAGE_VERDICT, "fine")).click().run()
    assert not app.exception
    second = suspect(app)
    assert second != first and second == listing(app)["name"].iloc[1]
    app.button(key=keys.per_source(keys.TRIAGE_VERDICT, "label_wrong")).click().run()
    recorded = VerdictBook(book_path).history()
    assert [(v.name, v.verdict, v.note) for v in recorded][:1] == [
        (first, "fine", "looks fine to me")
    ]
    assert recorded[1].name == second and recorded[1].new_label is not None

    again = open_app()  # a new session: the verdicts come from the file
    assert not again.exception
    table = listing(again)
    assert table["verdict"].iloc[:2].tolist() == ["fine", "label wrong"]
    assert suspect(again) == table["name"].iloc[2]

    again.selectbox(key=keys.TRIAGE_PICK_VERDICT).set_value("label_wrong").run()
    again.button(key=keys.TRIAGE_PICK).click().run()
    assert again.session_state[keys.PICKED] == [int(table["index"].iloc[1])]


def test_a_stale_verdict_is_shown_not_applied_and_a_corrupt_file_is_reported(
    generated: Path,
) -> None:
    app = open_app()
    book_path = verdicts_file(app)
    first = suspect(app)
    position = int(listing(app)["position"].iloc[0])
    VerdictBook(book_path).record(Verdict(position, "another/image.png", "fine"))
    app = open_app()
    assert any("no longer matches" in w.value for w in app.warning)
    assert suspect(app) == first and (listing(app)["verdict"] == "").all()

    book_path.write_bytes(b"this is not a database" * 100)
    for suffix in ("-wal", "-shm"):
        Path(str(book_path) + suffix).unlink(missing_ok=True)
    app = open_app()
    assert not app.exception
    assert any("cannot be read" in e.value for e in app.error)
    assert suspect(app) == first


def test_stored_outputs_without_embeddings_skip_the_neighbours_and_keep_verdicts_beside(
    generated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "images"
    shutil.copytree(generated / "test", folder)
    store_of_the_stand_in(folder, tmp_path / "outputs")  # logits and labels, no embeddings
    monkeypatch.setattr(sys, "argv", ["app.py", "--outputs", str(tmp_path / "outputs")])
    app = open_app()
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert any("neighbours skipped" in c.value for c in app.caption)
    assert verdicts_file(app) == (tmp_path / "outputs.verdicts.sqlite").resolve()
    first = suspect(app)
    app.button(key=keys.per_source(keys.TRIAGE_VERDICT, "ambiguous")).click().run()
    assert [v.name for v in VerdictBook.beside(tmp_path / "outputs").history()] == [first]


def test_the_contrast_map_follows_the_explorers_method_layer_maps_included(
    generated: Path,
) -> None:
    app = open_page("Triage", **TUTORIAL, method="gradcam")
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert any(c.startswith("Grad-CAM of logit") for c in contrast_captions(app))


def test_images_without_labels_are_said_to_need_labels_and_nothing_is_lost(
    generated: Path,
) -> None:
    from tests.app.test_hardening import png, uploads

    app = open_app()
    first = suspect(app)
    app.button(key=keys.per_source(keys.TRIAGE_VERDICT, "fine")).click().run()
    kind = app.sidebar.radio(key="source_kind").value
    app = uploads(app, [("a.png", png(0)), ("b.png", png(1))])
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert any("Triage needs labels" in i.value for i in app.info)
    app.sidebar.radio(key="source_kind").set_value(kind).run()
    assert not app.exception
    table = listing(app)
    assert table.loc[table["name"] == first, "verdict"].tolist() == ["fine"]


def test_a_verdict_is_a_column_of_the_table_and_a_picking_rule(generated: Path) -> None:
    from tests.app.test_app import table

    app = open_app()
    first = suspect(app)
    index = int(listing(app)["index"].iloc[0])
    app.button(key=keys.per_source(keys.TRIAGE_VERDICT, "label_wrong")).click().run()
    rows = table(open_tab(app, "Explore"))
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert rows.loc[rows["verdict"] != "", ["name", "verdict"]].values.tolist() == [
        [first, "label wrong"]
    ]
    app.session_state[keys.RULE] = "judged"
    app.session_state[keys.RULE_VERDICT] = "label_wrong"
    next(button for button in app.button if button.label == "Pick").click().run()
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert app.session_state[keys.PICKED] == [index]
    for view in ("Thumbnails", "Confidence vs loss", "Feature space"):
        app.session_state[keys.OUTPUTS_TAB] = view
        app.run()
        assert not app.exception and not app.error, [e.value for e in app.error]
        specs = [json.loads(chart.proto.spec) for chart in app.get("plotly_chart")]
        marks = [
            t for spec in specs for t in spec["data"] if t.get("name", "").startswith("verdict")
        ]
        assert [t["name"] for t in marks] == ["verdict: label wrong"], view
        assert "customdata" not in marks[0]
        if view == "Confidence vs loss":  # the mark sits on the image's point as drawn
            own = {  # its point, and the ring around it once picked
                (x, y)
                for spec in specs
                for trace in spec["data"]
                if "customdata" in trace
                for x, y, said in zip(
                    _array(trace["x"]), _array(trace["y"]), _array(trace["customdata"]), strict=True
                )
                if said == index
            }
            assert own == {(marks[0]["x"][0], marks[0]["y"][0])}


def _array(field: Any) -> list[Any]:
    """A figure's column as plotly's JSON holds it: a list, or a typed array (base64 bytes)."""
    if isinstance(field, dict):
        return np.frombuffer(base64.b64decode(field["bdata"]), dtype=field["dtype"]).tolist()
    return list(field)


def test_the_queue_goes_through_the_flagged_suspects_first_and_says_where_it_is(
    generated: Path,
) -> None:
    app = open_app()
    assert not app.exception
    found = app.session_state[keys.TRIAGE_RESULT][1]
    flagged = int(found.flagged.sum())
    assert 0 < flagged < len(found.order)
    assert (
        found.flagged[found.order[:flagged]].all()
        and not found.flagged[found.order[flagged:]].any()
    )
    heading = app.subheader[0].value
    assert heading == f"Suspect 1 of {flagged} flagged: {flagged} flagged without a verdict"
    app.button(key=keys.per_source(keys.TRIAGE_VERDICT, "fine")).click().run()
    assert app.number_input(key=keys.TRIAGE_POSITION).value == 2
    assert app.subheader[0].value.endswith(f"{flagged - 1} flagged without a verdict")
    app.number_input(key=keys.TRIAGE_POSITION).set_value(flagged + 1).run()
    heading = app.subheader[0].value
    total = len(found.order)
    past = f"past the {flagged} flagged: {total - 1} without a verdict"
    assert heading == f"Suspect {flagged + 1} of {total}, {past}"
    shown = f"**#{int(found.order[flagged])}** "  # the suspect in view: the first unflagged
    assert any(m.value.startswith(shown) for m in app.markdown)
