"""The picked images, kept in the session's own state so they survive reruns and figure changes.

Charts and the table report selections through their widget state (``state[chart_key]``);
``absorb`` folds a *new* selection into the picked list once, according to the merge mode.
A chart that is redrawn (its picked highlight changed) comes back with an empty selection,
which is not a new selection: empty events are ignored, and forget the last one seen, so the
same points selected again later count again. A chart whose figure does not show the picks (the
thumbnail grid: a script draws its outlines) is not redrawn by its own clicks; it carries
``selection_revision(state, key)``, which changes when the picks change by anything else, so
it is redrawn then and drops a selection that no longer describes the picks (a click on a point
plotly still holds selected would unselect it). ``keep_closed_tabs`` keeps the widget values of
the tabs a run does not draw. Everything here works on any mutable mapping, so tests drive it
with a plain dict and the page with ``st.session_state``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, MutableMapping, Sequence
from typing import Any

from gradpick.errors import SelectionError
from gradpick.picking import rules as selection
from gradpick.ui.keys import (
    DRAWN_REVISIONS,
    MERGE_MODE,
    NOTICE,
    PICKED,
    PICKED_BATCH,
    REDRAWS,
    SEEN,
    SELECTION_WIDGETS,
    TAB_DRAWN,
    TEXT,
    TEXT_ERROR,
    TEXT_VERSION,
    per_source,
)

__all__ = [
    "absorb",
    "apply",
    "clear",
    "confusion_cells",
    "drawn_revision",
    "edit_text",
    "Extractor",
    "follow_batch",
    "fresh_selection",
    "keep",
    "keep_closed_tabs",
    "pending_selection",
    "picked",
    "selection_revision",
    "set_picked",
    "start_at",
    "State",
    "table_rows",
    "text_key",
]

State = MutableMapping[Any, Any]
"""st.session_state (whose keys may be str or int) or, in tests, a plain dict."""
Extractor = Callable[[Mapping[str, Any] | None], list[int]]


def picked(state: State) -> list[int]:
    return list(state.get(PICKED, []))


def text_key(state: State) -> str:
    """The index text box's key, new for every selection change.

    A browser that sends the box's old text (the user acted before the rerun that rewrote it
    reached the page) then speaks for a widget that no longer exists, so the stale text cannot
    pass for an edit and wipe the selection.
    """
    return f"{TEXT}:{state.get(TEXT_VERSION, 0)}"


def selection_revision(state: State, key: str) -> int:
    """The revision to draw the chart ``key`` with: how often the picks changed by anything but
    that chart. Sent with a new one, the chart drops its selection in the browser (and reports
    none until the next), so the next selection it reports is new even when it names the same
    points as the last: the last one seen is forgotten."""
    revision = int(state.get(REDRAWS, {}).get(key, 0))
    drawn = state.setdefault(DRAWN_REVISIONS, {})
    if drawn.get(key) != revision:
        drawn[key] = revision
        state.get(SEEN, {}).pop(key, None)
    return revision


def drawn_revision(state: State, key: str) -> int:
    """The revision the chart ``key`` was last drawn with (``selection_revision``). A chart
    drawn again in a closed view keeps it: a new figure would make the browser make the chart
    anew, so it takes the picks' changes when its view opens."""
    return int(state.get(DRAWN_REVISIONS, {}).get(key, 0))


def set_picked(
    state: State, indices: Sequence[int], notice: str | None = None, by: str | None = None
) -> None:
    """Replace the selection (``by``: the selection widget whose selection it is, if one); the
    text box follows it and any text error is cleared."""
    chosen = [int(index) for index in indices]
    if chosen != picked(state):
        counts = state.setdefault(REDRAWS, {})
        for key in SELECTION_WIDGETS:
            if key != by and _may_hold_selection(state, key):
                counts[key] = counts.get(key, 0) + 1
    state[PICKED] = chosen
    state[TEXT_VERSION] = state.get(TEXT_VERSION, 0) + 1
    state[text_key(state)] = selection.format_indices(state[PICKED])
    state.pop(TEXT_ERROR, None)
    if notice is not None:
        state[NOTICE] = notice


def apply(
    state: State, indices: Sequence[int], mode: str | None = None, by: str | None = None
) -> None:
    """Merge ``indices`` into the selection by ``mode`` (default: the page's merge mode); ``by``
    as for ``set_picked``."""
    mode = mode or state.get(MERGE_MODE, "replace")
    set_picked(state, selection.merge(picked(state), indices, mode), by=by)


def follow_batch(state: State, batch_key: str) -> None:
    """Indices mean nothing in another batch: a new batch starts with an empty selection."""
    if state.get(PICKED_BATCH) == batch_key:
        return
    had = picked(state)
    state[PICKED_BATCH] = batch_key
    # What the views still hold was selected in the old batch (a view not drawn since keeps
    # it): it counts as seen, so only a selection made from now on picks.
    held = {key: _signature(state.get(key)) for key in SELECTION_WIDGETS}
    state[SEEN] = {key: signature for key, signature in held.items() if signature is not None}
    set_picked(state, [], "The batch changed, so the selection was cleared." if had else None)
    # Every chart of the new batch is a new one, with no selection to drop: drawn closed
    # (``drawn_revision``) or open, it is the same chart.
    state[DRAWN_REVISIONS] = dict(state.get(REDRAWS, {}))


def _may_hold_selection(state: State, key: str) -> bool:
    """Whether the selection widget ``key`` may hold a selection in the browser that the picks'
    change leaves stale: it holds one, or it was not drawn in the last run (Streamlit then
    forgets its value, and the browser may restore the selection with the chart). A widget drawn
    holding none has nothing to drop: drawing it anew would only cost the browser the chart
    (0.7 s at 10,000 WebGL points)."""
    return key not in state or _signature(state.get(key)) is not None


def _signature(event: Any) -> str | None:
    """A comparable form of a widget's selection; None when nothing is selected."""
    chosen = event.get("selection") if isinstance(event, Mapping) else None
    if not isinstance(chosen, Mapping):
        return None
    parts = {name: chosen.get(name) for name in ("points", "rows", "box", "lasso")}
    if not parts["points"] and not parts["rows"]:
        return None
    return json.dumps(parts, sort_keys=True, default=str)


def fresh_selection(state: State, key: str) -> Mapping[str, Any] | None:
    """The widget's selection if it is non-empty and not yet absorbed, else None."""
    event = state.get(key)
    signature = _signature(event)
    seen: dict[str, str] = state.setdefault(SEEN, {})
    if signature is None:
        seen.pop(key, None)
        return None
    if seen.get(key) == signature:
        return None
    seen[key] = signature
    return event if isinstance(event, Mapping) else None


def absorb(state: State, key: str, extract: Extractor, size: int) -> None:
    """Merge a chart's or table's new selection into the picked images (indices < ``size``)."""
    event = fresh_selection(state, key)
    if event is None:
        return
    indices = [index for index in extract(event) if 0 <= index < size]
    if _encloses(event):
        indices = sorted(indices)  # a box or lasso lists its points by trace, not by any choice
    apply(state, indices, by=key)


def _encloses(event: Mapping[str, Any]) -> bool:
    """Whether a chart selection was made by drawing a box or lasso (not by clicking)."""
    chosen = event.get("selection")
    return isinstance(chosen, Mapping) and bool(chosen.get("box") or chosen.get("lasso"))


def table_rows(event: Mapping[str, Any] | None) -> list[int]:
    """Row positions a ``st.dataframe`` selection holds (row i is batch index i)."""
    chosen = event.get("selection") if isinstance(event, Mapping) else None
    rows = chosen.get("rows") if isinstance(chosen, Mapping) else None
    return [int(row) for row in rows or []]


def confusion_cells(event: Mapping[str, Any] | None) -> list[tuple[int, int]]:
    """(true, predicted) pairs of the confusion-matrix cells a selection holds."""
    chosen = event.get("selection") if isinstance(event, Mapping) else None
    points = chosen.get("points") if isinstance(chosen, Mapping) else None
    cells = []
    for point in points or []:
        data = point.get("customdata") if isinstance(point, Mapping) else None
        if isinstance(data, Sequence) and len(data) == 2:
            cells.append((int(data[0]), int(data[1])))
    return cells


def pending_selection(state: State, key: str) -> bool:
    """Whether the widget ``key`` holds a selection not yet absorbed (nothing is marked)."""
    signature = _signature(state.get(key))
    return signature is not None and state.get(SEEN, {}).get(key) != signature


def edit_text(state: State, size: int, key: str) -> None:
    """The text box ``key`` changed: parse it; a bad entry keeps the selection and shows why."""
    text = str(state.get(key, "")).strip()
    try:
        indices = selection.parse_indices(text, size) if text else []
    except SelectionError as error:
        state[TEXT_ERROR] = str(error)
        return
    set_picked(state, indices)


def clear(state: State) -> None:
    set_picked(state, [], "Selection cleared.")


def keep_closed_tabs(
    state: State, tabs_key: str, shown: str, widgets: Mapping[str, Collection[str]]
) -> None:
    """Keep the widget values of the tabs not drawn in this run; hand a reopened tab its own.

    ``widgets`` names each tab's widget keys (or their ``keys.per_source`` prefixes). Streamlit
    forgets a keyed widget's value at the end of a run that does not draw it, but not a value
    set through the session state in that run; and the browser shows a kept value only when it
    was set in the run that draws the widget again. So every closed tab's values are set again
    on every run, and the ``shown`` tab's once more on the run that reopens it.
    """
    drawn = per_source(TAB_DRAWN, tabs_key)
    reopened = state.get(drawn) != shown
    state[drawn] = shown
    kept = {
        prefix for tab, names in widgets.items() if tab != shown or reopened for prefix in names
    }
    keep(state, *(key for key in state if isinstance(key, str) and key.split(":", 1)[0] in kept))


def keep(state: State, *keys: str) -> None:
    """Keep the values of widgets this run does not draw (a closed tab's, a closed expander's).

    Streamlit forgets a keyed widget's value at the end of a run that does not draw it, but not
    a value set through the session state in that run. Keys without a value are left alone."""
    for key in [key for key in keys if key in state]:
        state[key] = state[key]


def start_at(state: State, key: str, value: Any) -> Any:
    """Give the keyed widget ``key`` its first value through the session state, unless it holds
    one (the user's, or a link's); the widget is then created without a default of its own.

    Streamlit logs a warning when a widget is created with a default and its key was also set
    through the session state in that run, as a link sets the widgets it names. Returns the
    value the widget starts at."""
    return state.setdefault(key, value)
