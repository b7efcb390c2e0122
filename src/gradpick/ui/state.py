"""The picked images, kept in the session's own state so they survive reruns and figure changes.

Charts and the table report selections through their widget state (``state[chart_key]``);
``absorb`` folds a *new* selection into the picked list once, according to the merge mode.
A chart that is redrawn (its picked highlight changed) comes back with an empty selection,
which is not a new selection: empty events are ignored, and forget the last one seen, so the
same points selected again later count again. Everything here works on any mutable mapping,
so tests drive it with a plain dict and the page with ``st.session_state``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from gradpick import selection
from gradpick.errors import SelectionError
from gradpick.ui.start import HIDDEN_KEY_PREFIX

PICKED = "picked"
PICKED_BATCH = "picked_batch"
SEEN = "selections_seen"
NOTICE = "selection_notice"
MERGE_MODE = "merge_mode"
TEXT = "picked_text"
TEXT_VERSION = "picked_text_version"
TEXT_ERROR = "picked_text_error"
OUTPUTS_PATH = "outputs_path"
REINFER = "reinfer"
"""The button that infers a changed store's images again; per_source(REINFER, source) is set
once it was pressed."""
SPEC_SIZE = "spec_size"
SPEC_RESIZE = "spec_resize"
SPEC_MEAN = "spec_mean"
SPEC_STD = "spec_std"
TRUST_CHECKS = "trust_checks"
TRUST_METHODS = "trust_methods"
TRUST_MODE = "trust_mode"
TRUST_LAYERS = "trust_layers"
TRUST_BASELINES = "trust_baselines"
TRUST_TOLERANCE = "trust_tolerance"
TRUST_MAX_STEPS = "trust_max_steps"
TRUST_RUN = "run_trust_checks"
TRUST_RANDOMISATION = "trust_randomisation"
TRUST_MAP_METHOD = "trust_map_method"
TRUST_MAP_IMAGE = "trust_map_image"
TRUST_COMPLETENESS = "trust_completeness"
TRUST_CURVES = "trust_curves"
TRUST_AUCS = "trust_aucs"
"""The last trust checks run, with the selection and options they were run on."""

GRID_CHART = "grid_chart"
SCATTER_CHART = "scatter_chart"
CONFUSION_CHART = "confusion_chart"
EMBEDDING_CHART = "embedding_chart"
TABLE = "batch_table"
PROBABILITY_CHART = "probability_chart"
SELECTION_WIDGETS = (GRID_CHART, SCATTER_CHART, CONFUSION_CHART, EMBEDDING_CHART, TABLE)
"""The widgets whose selections pick images."""

GRID_SHEET = "grid_sheet"
"""The media slot of the grid's thumbnail sheet (``media.image_url``), one per session."""
HOVER_ATLAS = "hover_atlas"
"""The media slot of the batch's hover thumbnails (``gradpick.ui.hover``)."""
HOVER_SCRIPT = HIDDEN_KEY_PREFIX + "hover_script"
"""The container of the hover thumbnails' script, hidden by the page style."""
OUTPUTS_TAB = "outputs_tab"
"""The open outputs view: only that one is drawn, so a click does not rebuild the others."""
EMBEDDING_PROJECTION = "embedding_projection"
EMBEDDING_COLOUR = "embedding_colour"
RULE_ANCHOR = "rule_anchor"
"""The image whose nearest neighbours the nearest-neighbours rule picks."""
RUN_STARTED = "run_started"
"""perf_counter at the start of a whole-page run, for the server-time readout of the part
of the page that reruns on its own (a click reruns only that part, which then starts the
clock itself)."""

# Widget and session keys of the page, all in this one place (their values are what the browser
# tests find as .st-key-<key>).
SOURCE_KIND = "source_kind"
UPLOADS = "uploads"
SPLIT = "split"
FOLDER_PATH = "folder_path"
RANDOM_SAMPLE = "random"
SAMPLE_SEED = "seed"
START = "start"
BATCH_SIZE = "size"
GOOD_BATCH_SIZE = "good_size"
"""Prefixes of the per-source keys (``per_source``): each source keeps its own batch."""
MODEL = "model"
WEIGHTS_UPLOAD = "weights_upload"
DEVICE = "device"
STRATEGY = "strategy"
TARGET_MODE = "target_mode"
TARGET_CLASS = "target_class"
METHOD = "method"
COLOUR_SCALE = "colour_scale"
MEASURE_MEMORY = "measure_memory"
GRID_PAGE_SIZE = "grid_page_size"
GRID_PAGE = "grid_page"
PICKERS = "pickers"
RULE = "rule"
RULE_K = "rule_k"
RULE_CLASS = "rule_class"
RULE_SEED = "rule_seed"
HEATMAPS_CONTAINER = "heatmaps"
DETAIL = "detail_index"
DETAIL_HEATMAPS = "detail_heatmaps"
DOWNLOAD = "download"
RUN_COMPARISON = "run_comparison"
COMPARISON = "strategy_comparison"
STRATEGY_BARS = "strategy_bars"
RUN_SWEEP = "run_sweep"
SWEEP = "strategy_sweep"
SWEEP_K = "sweep_k"
SWEEP_N = "sweep_n"

State = MutableMapping[Any, Any]
"""st.session_state (whose keys may be str or int) or, in tests, a plain dict."""
Extractor = Callable[[Mapping[str, Any] | None], list[int]]


def per_source(prefix: str, *parts: object) -> str:
    """A key that belongs to one source or batch, e.g. ``per_source(START, source_key)``."""
    return ":".join((prefix, *(str(part) for part in parts)))


def download_key(suffix: str) -> str:
    return f"{DOWNLOAD}_{suffix}"


def setting_key(name: str) -> str:
    """The slider key of an attribution method's setting (its parameter name)."""
    return name


def picked(state: State) -> list[int]:
    return list(state.get(PICKED, []))


def text_key(state: State) -> str:
    """The index text box's key, new for every selection change.

    A browser that sends the box's old text (the user acted before the rerun that rewrote it
    reached the page) then speaks for a widget that no longer exists, so the stale text cannot
    pass for an edit and wipe the selection.
    """
    return f"{TEXT}:{state.get(TEXT_VERSION, 0)}"


def set_picked(state: State, indices: Sequence[int], notice: str | None = None) -> None:
    """Replace the selection; the text box follows it and any text error is cleared."""
    state[PICKED] = [int(index) for index in indices]
    state[TEXT_VERSION] = state.get(TEXT_VERSION, 0) + 1
    state[text_key(state)] = selection.format_indices(state[PICKED])
    state.pop(TEXT_ERROR, None)
    if notice is not None:
        state[NOTICE] = notice


def apply(state: State, indices: Sequence[int], mode: str | None = None) -> None:
    """Merge ``indices`` into the selection by ``mode`` (default: the page's merge mode)."""
    mode = mode or state.get(MERGE_MODE, "replace")
    set_picked(state, selection.merge(picked(state), indices, mode))


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
    apply(state, indices)


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
