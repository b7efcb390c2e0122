"""The picked-images state: chart and table selections are folded in once, by merge mode."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from gradpick.ui import keys, state


def _points(*indices: int) -> dict[str, Any]:
    return {"selection": {"points": [{"customdata": i} for i in indices], "box": [], "lasso": []}}


def _indices(event: Any) -> list[int]:
    return [point["customdata"] for point in event["selection"]["points"]]


def test_a_new_selection_replaces_by_default_and_updates_the_text() -> None:
    session: dict[str, Any] = {keys.SCATTER_CHART: _points(4, 2)}
    state.absorb(session, keys.SCATTER_CHART, _indices, size=10)
    assert state.picked(session) == [4, 2]
    assert session[state.text_key(session)] == "4, 2"


def test_the_same_selection_is_absorbed_once() -> None:
    session: dict[str, Any] = {keys.MERGE_MODE: "add"}
    session[keys.GRID_CHART] = _points(1)
    state.absorb(session, keys.GRID_CHART, _indices, size=10)
    state.set_picked(session, [7])  # e.g. a picker replaced the selection meanwhile
    state.absorb(session, keys.GRID_CHART, _indices, size=10)  # a rerun: nothing new
    assert state.picked(session) == [7]


def test_an_empty_selection_is_ignored_and_lets_the_same_one_count_again() -> None:
    session: dict[str, Any] = {keys.MERGE_MODE: "add", keys.GRID_CHART: _points(1)}
    state.absorb(session, keys.GRID_CHART, _indices, size=10)
    state.set_picked(session, [])
    session[keys.GRID_CHART] = _points()  # the chart was redrawn: its selection is empty
    state.absorb(session, keys.GRID_CHART, _indices, size=10)
    assert state.picked(session) == []
    session[keys.GRID_CHART] = _points(1)  # the user selects the same point again
    state.absorb(session, keys.GRID_CHART, _indices, size=10)
    assert state.picked(session) == [1]


def test_a_chart_that_does_not_show_the_picks_is_redrawn_when_something_else_changes_them() -> None:
    """The grid's own clicks keep its revision (the browser keeps the chart); a pick by any
    other means changes it, and the chart drawn with it reports the same point again as new."""
    session: dict[str, Any] = {keys.GRID_CHART: _points(1)}
    assert state.selection_revision(session, keys.GRID_CHART) == 0
    state.absorb(session, keys.GRID_CHART, _indices, size=10)
    assert state.picked(session) == [1]
    assert state.selection_revision(session, keys.GRID_CHART) == 0  # its own click
    assert state.selection_revision(session, keys.SCATTER_CHART) == 1  # the others' picks moved
    state.clear(session)  # the chart still holds point 1 in this run: not absorbed again
    state.absorb(session, keys.GRID_CHART, _indices, size=10)
    assert state.picked(session) == []
    assert state.selection_revision(session, keys.GRID_CHART) == 1  # drawn anew
    state.absorb(session, keys.GRID_CHART, _indices, size=10)  # point 1 clicked again
    assert state.picked(session) == [1]
    state.set_picked(session, [1])  # no change: no redraw
    assert state.selection_revision(session, keys.GRID_CHART) == 1


def test_a_chart_drawn_holding_no_selection_keeps_its_revision_when_the_picks_move() -> None:
    """It has nothing to drop, so it is not made anew (at 10,000 WebGL points that costs the
    browser 0.7 s), and its next selection still picks; one holding a selection is made anew,
    and so is one not drawn in the last run (Streamlit forgot what it holds, not the browser)."""
    session: dict[str, Any] = {keys.SCATTER_CHART: _points(), keys.EMBEDDING_CHART: _points(5)}
    state.set_picked(session, [2], by=keys.GRID_CHART)
    assert state.selection_revision(session, keys.SCATTER_CHART) == 0
    assert state.selection_revision(session, keys.EMBEDDING_CHART) == 1
    assert state.selection_revision(session, keys.CONFUSION_CHART) == 1  # not drawn
    session[keys.SCATTER_CHART] = _points(6)
    state.absorb(session, keys.SCATTER_CHART, _indices, size=10)
    assert state.picked(session) == [6]


def test_a_chart_kept_in_a_closed_view_keeps_the_revision_it_was_drawn_with() -> None:
    """Picks made elsewhere move a chart's revision; drawn closed it keeps the one it was last
    drawn with (its figure, and so the browser's chart, unchanged), and takes the new one, and
    forgets the selection it held, when drawn open."""
    session: dict[str, Any] = {keys.SCATTER_CHART: _points(4)}
    assert state.selection_revision(session, keys.SCATTER_CHART) == 0
    state.absorb(session, keys.SCATTER_CHART, _indices, size=10)
    state.set_picked(session, [2], by=keys.GRID_CHART)
    state.set_picked(session, [3], by=keys.CONFUSION_CHART)
    assert state.drawn_revision(session, keys.SCATTER_CHART) == 0
    assert state.drawn_revision(session, keys.SCATTER_CHART) == 0  # reading it changes nothing
    assert state.selection_revision(session, keys.SCATTER_CHART) == 2  # drawn open
    assert state.drawn_revision(session, keys.SCATTER_CHART) == 2
    state.absorb(session, keys.SCATTER_CHART, _indices, size=10)  # point 4 again: new
    assert state.picked(session) == [4]


def test_merge_modes_add_and_remove() -> None:
    session: dict[str, Any] = {keys.PICKED: [1, 2]}
    session[keys.MERGE_MODE] = "add"
    session[keys.SCATTER_CHART] = _points(3, 2)
    state.absorb(session, keys.SCATTER_CHART, _indices, size=10)
    assert state.picked(session) == [1, 2, 3]
    session[keys.MERGE_MODE] = "remove"
    session[keys.TABLE] = {"selection": {"rows": [1, 3], "columns": []}}
    state.absorb(session, keys.TABLE, state.table_rows, size=10)
    assert state.picked(session) == [2]


def test_indices_outside_the_batch_are_dropped() -> None:
    session: dict[str, Any] = {keys.GRID_CHART: _points(3, 12)}
    state.absorb(session, keys.GRID_CHART, _indices, size=10)
    assert state.picked(session) == [3]


def test_a_new_batch_clears_the_selection_with_a_notice() -> None:
    session: dict[str, Any] = {}
    state.follow_batch(session, "batch-a")
    assert session.get(keys.NOTICE) is None
    state.set_picked(session, [1, 2])
    state.follow_batch(session, "batch-a")
    assert state.picked(session) == [1, 2]
    state.follow_batch(session, "batch-b")
    assert state.picked(session) == []
    assert "batch changed" in session[keys.NOTICE]


def test_a_new_batchs_charts_are_drawn_at_one_revision_closed_or_open() -> None:
    """Picks made while a chart was never drawn moved its revision; a new batch's chart is a new
    one, so drawn closed first it must not be made again when its view opens."""
    session: dict[str, Any] = {}
    state.follow_batch(session, "batch-a")
    state.set_picked(session, [1], by=keys.GRID_CHART)
    state.set_picked(session, [2], by=keys.CONFUSION_CHART)
    state.follow_batch(session, "batch-b")
    for key in keys.SELECTION_WIDGETS:
        assert state.drawn_revision(session, key) == state.selection_revision(session, key)


def test_a_selection_held_from_the_old_batch_does_not_pick_in_the_new_one() -> None:
    session: dict[str, Any] = {}
    state.follow_batch(session, "batch-a")
    session[keys.SCATTER_CHART] = _points(1, 2)
    state.absorb(session, keys.SCATTER_CHART, _indices, size=10)
    assert state.picked(session) == [1, 2]
    state.follow_batch(session, "batch-b")  # the scatter, not drawn since, still holds 1, 2
    state.absorb(session, keys.SCATTER_CHART, _indices, size=10)
    assert state.picked(session) == []
    session[keys.SCATTER_CHART] = _points(3)
    state.absorb(session, keys.SCATTER_CHART, _indices, size=10)
    assert state.picked(session) == [3]


def test_a_pending_selection_is_reported_without_being_absorbed() -> None:
    session: dict[str, Any] = {keys.PROBABILITY_CHART: _points(4)}
    assert state.pending_selection(session, keys.PROBABILITY_CHART)
    assert state.pending_selection(session, keys.PROBABILITY_CHART)
    assert state.fresh_selection(session, keys.PROBABILITY_CHART) is not None
    assert not state.pending_selection(session, keys.PROBABILITY_CHART)
    assert not state.pending_selection(session, keys.GRID_CHART)


def test_bad_text_keeps_the_selection_and_says_why() -> None:
    session: dict[str, Any] = {keys.PICKED: [5]}
    key = state.text_key(session)
    session[key] = "3, 7, x"
    state.edit_text(session, 10, key)
    assert state.picked(session) == [5]
    assert "'x'" in session[keys.TEXT_ERROR]
    session[key] = "2-4, 9"
    state.edit_text(session, 10, key)
    assert state.picked(session) == [2, 3, 4, 9]
    assert keys.TEXT_ERROR not in session
    assert session[state.text_key(session)] == "2-4, 9"


def test_clearing_the_text_clears_the_selection() -> None:
    session: dict[str, Any] = {keys.PICKED: [5], state.text_key({}): "  "}
    state.edit_text(session, 10, state.text_key({}))
    assert state.picked(session) == []


def test_every_selection_change_gives_the_text_box_a_new_key() -> None:
    """The browser may send the box's old text after a click changed the selection; with a new
    key that text belongs to a box that is gone, so it cannot count as an edit."""
    session: dict[str, Any] = {}
    text_keys = [state.text_key(session)]
    state.set_picked(session, [4, 2])
    text_keys.append(state.text_key(session))
    state.clear(session)
    text_keys.append(state.text_key(session))
    assert len(set(text_keys)) == 3
    assert [session.get(key) for key in text_keys[1:]] == ["4, 2", ""]


PANELS_DIR = Path(state.__file__).parent / "panels"
PANELS = tuple(sorted(path.stem for path in PANELS_DIR.glob("*.py") if path.stem != "__init__"))
BARE_KEY = re.compile(
    r"""key=f?["']|session(?:_state)?(?:\[|\.get\(|\.pop\(|\.setdefault\()f?["']|st\.form\(["']"""
)


def test_every_key_constant_names_a_different_key() -> None:
    named = {
        name: value
        for name, value in vars(keys).items()
        if name.isupper() and isinstance(value, str)
    }
    assert len(set(named.values())) == len(named), named


@pytest.mark.parametrize("panel", PANELS)
def test_panels_use_the_key_constants_and_import_no_other_panel(panel: str) -> None:
    source = (PANELS_DIR / f"{panel}.py").read_text()
    assert not BARE_KEY.findall(source), f"{panel} spells a session key out"
    imported = {
        node.module or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module == "gradpick.ui.panels"
        for alias in node.names
    }
    others = {f"gradpick.ui.panels.{name}" for name in PANELS if name != panel} | set(PANELS) - {
        panel
    }
    assert not imported & others, f"{panel} imports {imported & others}"


def test_per_source_keys_join_their_parts() -> None:
    assert keys.per_source(keys.START, "cifar10:test") == "start:cifar10:test"
    assert keys.per_source(keys.GRID_PAGE, "batch", 100) == "grid_page:batch:100"
    assert keys.download_key("npz") == "download_npz"


class _Recording(dict[str, Any]):
    """A session that notes every key written: setting a value again is what keeps it."""

    def __init__(self, values: dict[str, Any]) -> None:
        super().__init__(values)
        self.written: set[str] = set()

    def __setitem__(self, key: str, value: Any) -> None:
        self.written.add(key)
        super().__setitem__(key, value)


def test_closed_tabs_set_their_widgets_again_and_a_reopened_tab_once() -> None:
    widgets = {"One": ("alpha",), "Two": ("beta", "layer")}
    values = {"alpha": 1, "beta": [2], "layer:net": "conv", "layer_count": 3, "other": 4}
    session = _Recording(values)
    widget_values = set(values)

    def written_while(shown: str) -> set[str]:
        session.written.clear()
        state.keep_closed_tabs(session, "tabs", shown, widgets)
        return session.written & widget_values

    assert written_while("One") == {"alpha", "beta", "layer:net"}  # the first run: One opens
    assert written_while("One") == {"beta", "layer:net"}  # One was drawn last run too
    assert written_while("Two") == {"alpha", "beta", "layer:net"}  # Two reopens, One closes
    assert written_while("Two") == {"alpha"}
    assert {key: session[key] for key in values} == values  # the values themselves are kept
