"""Every widget key and session-state key of the explorer, in one place and importing nothing.

A widget's key is also how a browser finds it: Streamlit gives the widget's element the class
``st-key-<key>`` (``selector``), so the benchmark and the browser tests build their selectors
from these names and a renamed key cannot silently break them.
"""

from __future__ import annotations

__all__ = [
    "EXPLORER_TABS",
    "BATCH_SIZE",
    "CLASS_PREFIX",
    "COLOUR_SCALE",
    "COMPARISON",
    "CONFUSION_CHART",
    "DETAIL",
    "DETAIL_HEATMAPS",
    "DETAIL_OPEN",
    "DETAIL_SCRIPT",
    "DETAIL_VALUES",
    "DEVICE",
    "DOWNLOAD",
    "DOWNLOADS_OPEN",
    "DRAWN_REVISIONS",
    "EMBEDDING_CHART",
    "EMBEDDING_COLOUR",
    "EMBEDDING_PROJECTION",
    "FOLDER_PATH",
    "GOOD_BATCH_SIZE",
    "GRID_CHART",
    "GRID_PAGE",
    "GRID_PAGE_SIZE",
    "GRID_SHEET",
    "TABLE_PAGE",
    "HEATMAPS_CONTAINER",
    "HIDDEN_KEY_PREFIX",
    "HOVER_ATLAS",
    "HOVER_SCRIPT",
    "KEPT_VIEWS",
    "MEASURE_MEMORY",
    "MERGE_MODE",
    "METHOD",
    "MODEL",
    "NOTICE",
    "OUTPUTS_PATH",
    "OUTLINES_CELLS",
    "OUTLINES_SCRIPT",
    "OUTPUTS_TAB",
    "PICKED",
    "PICKED_BATCH",
    "PICKERS",
    "PRELOAD_CONTAINER",
    "READOUTS",
    "PROBABILITY_CHART",
    "RANDOM_SAMPLE",
    "REINFER",
    "RULE",
    "RULE_ANCHOR",
    "RULE_CLASS",
    "RULE_K",
    "RULE_SEED",
    "RULE_THRESHOLD",
    "RULE_VERDICT",
    "RUN_COMPARISON",
    "RUN_STARTED",
    "RUN_SWEEP",
    "SAMPLE_SEED",
    "SCATTER_CHART",
    "REDRAWS",
    "SEEN",
    "SELECTION_WIDGETS",
    "SOURCE_KIND",
    "SPEC_MEAN",
    "SPEC_RESIZE",
    "SPEC_SIZE",
    "SPEC_STD",
    "SPLIT",
    "START",
    "STRATEGY",
    "STRATEGY_BARS",
    "SWEEP",
    "SWEEP_K",
    "SWEEP_N",
    "TABLE",
    "TARGET_CLASS",
    "TARGET_MODE",
    "TEXT",
    "TEXT_ERROR",
    "TEXT_VERSION",
    "TRUST_AUCS",
    "TRUST_BASELINES",
    "TRUST_CHECKS",
    "TRUST_COMPLETENESS",
    "TRUST_CURVES",
    "TRUST_LAYERS",
    "TRUST_MAP_IMAGE",
    "TRUST_MAP_METHOD",
    "TRUST_MAX_STEPS",
    "TRUST_METHODS",
    "TRUST_MODE",
    "TRUST_RANDOMISATION",
    "TRUST_RUN",
    "TRUST_TOLERANCE",
    "UPLOADS",
    "WEIGHTS_UPLOAD",
    "download_key",
    "per_source",
    "selector",
    "setting_key",
    "tab_pane",
]

CLASS_PREFIX = "st-key-"
"""What Streamlit puts before a keyed element's key in its CSS class."""
HIDDEN_KEY_PREFIX = "hidden_"
"""Containers whose key starts with this are never shown (``ui.start.PAGE_STYLE``): the preload
chart and the hover thumbnails' script take no room, so nothing moves when they come or go."""
PRELOAD_CONTAINER = HIDDEN_KEY_PREFIX + "preload"
"""The container of the elements a page run sends first so the browser loads their code
(``gradpick.ui.start``)."""
READOUTS = "readouts"
"""The container of the batch's metrics above the thumbnails, whose placeholders the page style
sizes as the metrics (``gradpick.ui.start.PAGE_STYLE``)."""

PICKED = "picked"
PICKED_BATCH = "picked_batch"
SEEN = "selections_seen"
REDRAWS = "selection_redraws"
"""Per selection widget, how often the picks changed by anything else."""
DRAWN_REVISIONS = "selection_revisions_drawn"
"""Per selection widget, the revision it was last drawn with (``state.selection_revision``)."""
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
"""The media slot of the batch's hover thumbnails (``gradpick.ui.browser.hover``)."""
HOVER_SCRIPT = HIDDEN_KEY_PREFIX + "hover_script"
"""The container of the hover thumbnails' script, hidden by the page style."""
OUTLINES_SCRIPT = HIDDEN_KEY_PREFIX + "outlines_script"
"""The container of the picked thumbnails' outlines script (``gradpick.ui.browser.outlines``)."""
OUTLINES_CELLS = "outlines_cells"
"""The element that tells the outlines' script what to mark, grid cells or a scatter's batch
indices (inside the hidden ``OUTLINES_SCRIPT`` container)."""
OUTPUTS_TAB = "outputs_tab"
"""The open outputs view: only that one is drawn, so a click does not rebuild the others (but
for a WebGL scatter, drawn closed too: ``gradpick.ui.panels.outputs``)."""
KEPT_VIEWS = "kept_views"
"""{outputs view: batch key} of the WebGL scatters opened in this session: a feature space
projected by UMAP is then drawn in its closed view too (the others are from the batch's first
page), so that opening the view again finds its chart made."""
EMBEDDING_PROJECTION = "embedding_projection"
EMBEDDING_COLOUR = "embedding_colour"
RULE_ANCHOR = "rule_anchor"
"""The image whose nearest neighbours the nearest-neighbours rule picks."""
RUN_STARTED = "run_started"
"""perf_counter at the start of a whole-page run, for the server-time readout of the part
of the page that reruns on its own (a click reruns only that part, which then starts the
clock itself)."""

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
TABLE_PAGE = "table_page"
"""Prefix of the table's page number (``per_source(TABLE_PAGE, batch_key)``), past one page."""
PICKERS = "pickers"
RULE = "rule"
RULE_K = "rule_k"
RULE_CLASS = "rule_class"
RULE_SEED = "rule_seed"
RULE_THRESHOLD = "rule_threshold"
RULE_VERDICT = "rule_verdict"
HEATMAPS_CONTAINER = "heatmaps"
DETAIL_OPEN = "detail_open"
"""The detailed view's expander: drawn only while open, so a click does not send it closed."""
DETAIL = "detail_index"
DETAIL_HEATMAPS = "detail_heatmaps"
"""The container of the detailed view's picture of maps."""
DETAIL_VALUES = "detail_values"
"""The media slot of that picture's values (``gradpick.ui.browser.pixels``)."""
DETAIL_SCRIPT = HIDDEN_KEY_PREFIX + "detail_script"
"""The container of the script that shows those values on hover, hidden by the page style."""
DOWNLOAD = "download"
DOWNLOADS_OPEN = "downloads_open"
"""The downloads' expander, drawn only while open like the detailed view's."""
RUN_COMPARISON = "run_comparison"
COMPARISON = "strategy_comparison"
STRATEGY_BARS = "strategy_bars"
RUN_SWEEP = "run_sweep"
SWEEP = "strategy_sweep"
SWEEP_K = "sweep_k"
SWEEP_N = "sweep_n"


def tab_pane(row: str, position: int, *, shown: bool) -> str:
    """The key of the container of tab ``position`` of the tab row ``row``: hidden by the page
    style unless ``shown`` (``ui.tabs``)."""
    return f"{'' if shown else HIDDEN_KEY_PREFIX}{row}_pane_{position}"


def selector(key: str) -> str:
    """The CSS selector of the element Streamlit draws for ``key``."""
    return f".{CLASS_PREFIX}{key}"


def per_source(prefix: str, *parts: object) -> str:
    """A key that belongs to one source or batch, e.g. ``per_source(START, source_key)``."""
    return ":".join((prefix, *(str(part) for part in parts)))


def download_key(suffix: str) -> str:
    return f"{DOWNLOAD}_{suffix}"


def setting_key(name: str) -> str:
    """The slider key of an attribution method's setting (its parameter name)."""
    return name


# The Compare view: the second model (sidebar) and the flip matrix.
COMPARE_WITH = "compare_with"
COMPARE_NAME = "compare_name"
COMPARE_OUTPUTS = "compare_outputs"
COMPARE_FLIPS = "compare_flips"
COMPARE_DRIFT = "compare_drift"
COMPARE_NOTHING, COMPARE_BY_NAME, COMPARE_STORED = "", "by name", "stored"
"""The Compare-with selector's values besides a built-in model's identity."""
__all__ += [
    "COMPARE_BY_NAME",
    "COMPARE_DRIFT",
    "COMPARE_FLIPS",
    "COMPARE_NAME",
    "COMPARE_NOTHING",
    "COMPARE_OUTPUTS",
    "COMPARE_STORED",
    "COMPARE_WITH",
]

# The Triage tab's widgets and session values.
TRIAGE_RESULT = "triage_result"
TRIAGE_SESSION_VERDICTS = "triage_session_verdicts"
TRIAGE_PROBLEM = "triage_problem"
TRIAGE_NEIGHBOUR = "triage_neighbour"
TRIAGE_NOTE = "triage_note"
TRIAGE_CLASS = "triage_class"
TRIAGE_VERDICT = "triage_verdict"
TRIAGE_PICK_VERDICT = "triage_pick_verdict"
TRIAGE_PICK = "triage_pick"
TRIAGE_POSITION = "triage_position"
"""The suspect in view: its place in the queue, from 1 (flagged suspects first)."""
SLICE_PICK = "slice_pick"
"""Prefix of each slice card's button that picks its images (``per_source(SLICE_PICK, rank)``)."""
SLICE_VERDICT = "slice_verdict"
"""Prefix of each slice card's verdict buttons (``per_source(SLICE_VERDICT, rank, verdict)``)."""
SLICE_PROBLEM = "slice_problem"
"""A message of the Slices tab's last action (a verdict or selection not saved)."""
SLICE_CHOSEN = "slice_chosen"
"""The slice in view in the Slices tab: its rank, or 0 for all of them (a link's ``slice``)."""
SLICE_SAVE = "slice_save"
"""Prefix of each slice card's button that saves it as a named selection."""
SLICE_SAVED = "slice_saved"
"""The Slices tab's note on the named selection just saved."""
VERDICT_STORE = "verdict_store"
"""(batch and model, path) of the store the batch's verdicts belong beside."""
__all__ += [
    "SLICE_CHOSEN",
    "SLICE_PICK",
    "SLICE_PROBLEM",
    "SLICE_SAVE",
    "SLICE_SAVED",
    "SLICE_VERDICT",
    "TRIAGE_CLASS",
    "TRIAGE_NEIGHBOUR",
    "TRIAGE_NOTE",
    "TRIAGE_PICK",
    "TRIAGE_PICK_VERDICT",
    "TRIAGE_POSITION",
    "TRIAGE_PROBLEM",
    "TRIAGE_RESULT",
    "TRIAGE_SESSION_VERDICTS",
    "TRIAGE_VERDICT",
    "VERDICT_STORE",
]

# ----------------------------------------------------------------------------- layer maps

__all__ += ["LAYER"]

LAYER = "layer"
"""Prefix of the layer select box's key, one per model (``per_source(LAYER, identity)``)."""

# The trust badges beside the maps.
__all__ += ["TRUST_BADGES", "TRUST_BADGES_CONTAINER", "TRUST_BADGES_FULL", "TRUST_BADGES_RUN"]
TRUST_BADGES = "trust_badges"
"""The switch that turns the badges (and their checks) on and off."""
TRUST_BADGES_CONTAINER = "trust_badges_shown"
TRUST_BADGES_RUN = "trust_badges_run"
"""The button that runs the badges' checks that did not fit in a click's budget."""
TRUST_BADGES_FULL = "trust_badges_full"
"""Session state: the (picks, request) whose badges were asked to run in full."""

# The occlusion note beside the maps.
__all__ += ["OCCLUSION_CHECK"]
OCCLUSION_CHECK = "occlusion_check"
"""The switch that checks the shown maps' peaks against occlusion (off: costs forwards)."""

# Deep links and named selections.
__all__ += [
    "EXPLORER_TAB",
    "LINK_NOTES",
    "LINK_OPENED",
    "SELECTION_CHOSEN",
    "SELECTION_DELETE",
    "SELECTION_NAME",
    "SELECTION_NEW_NAME",
    "SELECTION_NOTE",
    "SELECTION_RENAME",
    "SELECTION_REOPEN",
    "SELECTION_REOPENED",
    "SELECTION_SAVE",
    "SELECTIONS_KEPT",
    "SELECTIONS_MESSAGE",
    "SELECTIONS_OPEN",
    "SELECTIONS_STORE",
    "TAB_ROWS",
]
EXPLORER_TAB = "explorer_tab"
EXPLORER_TABS = ("Explore", "Strategies", "Trust", "Compare", "Triage", "Slices")
"""The explorer's tabs, as the page names them (and the links do); the values of
``EXPLORER_TAB``."""
TAB_ROWS = (EXPLORER_TAB, OUTPUTS_TAB)
"""The segmented controls drawn as rows of tabs (``gradpick.ui.tabs``), both above the
thumbnails: the page style sizes their placeholders as the rows."""
LINK_OPENED = "link_opened"
"""Set once the session's URL was read: a link seeds only the first run."""
LINK_NOTES = "link_notes"
SELECTIONS_OPEN = "selections_open"
"""The named selections' expander, drawn only while open like the detailed view's."""
SELECTION_NAME = "selection_name"
SELECTION_NOTE = "selection_note"
SELECTION_SAVE = "selection_save"
SELECTION_CHOSEN = "selection_chosen"
SELECTION_REOPEN = "selection_reopen"
SELECTION_DELETE = "selection_delete"
SELECTION_NEW_NAME = "selection_new_name"
SELECTION_RENAME = "selection_rename"
SELECTIONS_KEPT = "selections_kept"
"""A hosted session's named selections: kept in the session, never on the server's disk."""
SELECTIONS_MESSAGE = "selections_message"
SELECTIONS_STORE = "selections_store"
"""(batch and model, the path of their store): where their selections are kept."""
SELECTION_REOPENED = "selection_reopened"
"""Set by a reopen button: the page reruns whole, so the sidebar follows the selection."""

# What the explorer's closed tabs keep (``state.keep_closed_tabs``).
__all__ += ["TAB_DRAWN", "TAB_WIDGETS", "VIEW_WIDGETS"]
TAB_DRAWN = "tab_drawn"
"""Prefix of the key naming the tab a tabs widget drew last (``per_source(TAB_DRAWN, tabs)``)."""
VIEW_WIDGETS: dict[str, tuple[str, ...]] = {
    "Thumbnails": (GRID_PAGE_SIZE, GRID_PAGE),
    "Feature space": (EMBEDDING_PROJECTION, EMBEDDING_COLOUR),
    "Table": (TABLE_PAGE,),
}
"""The value widgets of each outputs view (``state.keep_closed_tabs``), as TAB_WIDGETS."""
TAB_WIDGETS: dict[str, tuple[str, ...]] = {
    "Explore": (
        OUTPUTS_TAB,
        GRID_PAGE_SIZE,
        GRID_PAGE,
        TABLE_PAGE,
        EMBEDDING_PROJECTION,
        EMBEDDING_COLOUR,
        MERGE_MODE,
        RULE,
        RULE_K,
        RULE_CLASS,
        RULE_SEED,
        RULE_THRESHOLD,
        RULE_ANCHOR,
        RULE_VERDICT,
        TEXT,
        DETAIL_OPEN,
        DETAIL,
        DOWNLOADS_OPEN,
        LAYER,
        TRUST_BADGES,
        OCCLUSION_CHECK,
        SELECTIONS_OPEN,
        SELECTION_NAME,
        SELECTION_NOTE,
        SELECTION_CHOSEN,
        SELECTION_NEW_NAME,
    ),
    "Trust": (
        TRUST_METHODS,
        TRUST_MODE,
        TRUST_LAYERS,
        TRUST_BASELINES,
        TRUST_TOLERANCE,
        TRUST_MAX_STEPS,
        TRUST_MAP_METHOD,
        TRUST_MAP_IMAGE,
    ),
    "Triage": (TRIAGE_POSITION, TRIAGE_PICK_VERDICT, TRIAGE_NOTE, TRIAGE_CLASS),
    "Slices": (SLICE_CHOSEN,),
}
"""The value widgets each explorer tab draws, by key (or ``per_source`` prefix): a closed tab
is not drawn, and Streamlit forgets the value of a widget a run does not draw. The Strategies
and Compare tabs draw only buttons and charts, whose values are events, not settings."""
