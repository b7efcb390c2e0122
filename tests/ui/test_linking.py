"""Every setting that changes what the page shows survives a link, checked widget by widget.

Generated from ``gradpick.ui.keys``: every key there is either carried by links
(``linking.LINKED``, with a round trip below) or on ``NOT_A_VIEW`` with the reason it changes
nothing a link should reopen, so a new widget cannot be forgotten. A round trip opens the page,
sets the widget as a user does, takes the URL the page wrote, opens that URL in a fresh session
and compares the widget there; opening it must log no warning. AppTest, on the generated
64-image folder with random-weight models, as ``tests/app/test_links_view.py``.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from streamlit.elements.lib import policies
from streamlit.testing.v1 import AppTest

from gradpick import attribution
from gradpick.gradients import strategies
from gradpick.picking import feature_space
from gradpick.ui import cache, keys, linking, links, service, state
from tests.app.test_app import store_of_the_stand_in
from tests.app.test_slices_tab import write_slices


@pytest.fixture(autouse=True)
def quick_umap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A link carries the projection's name, not its points: UMAP stands in as PCA's mirror
    image here (its own points are tested in tests/picking), since its first call in a process
    compiles for tens of seconds. The shared projection cache is emptied around each test, so no
    other test reads a stand-in's points."""
    monkeypatch.setattr(
        feature_space, "umap", lambda features, seed=0: -feature_space.pca(features)
    )
    cache.projection.clear()
    yield
    cache.projection.clear()


APP = Path(__file__).resolve().parents[2] / "app.py"
TIMEOUT = 180
TUTORIAL = "tutorial:random-seed0"
"""The small tutorial net with random weights: every case starts the page on it, for speed."""
RANDOM_WEIGHTS = "No trained weights ship for this model yet"
"""The page's warning for the test's models (no shipped weights): not about the link."""

NOT_A_VIEW: dict[str, str] = {
    keys.CLASS_PREFIX: "a CSS class prefix, not a key",
    keys.HIDDEN_KEY_PREFIX: "a prefix of hidden containers, not a setting",
    keys.PRELOAD_CONTAINER: "a hidden container",
    keys.READOUTS: "the container of the batch's metrics",
    keys.HOVER_SCRIPT: "a hidden container",
    keys.OUTLINES_SCRIPT: "a hidden container",
    keys.OUTLINES_CELLS: "an element inside a hidden container",
    keys.DETAIL_SCRIPT: "a hidden container",
    keys.HEATMAPS_CONTAINER: "a container",
    keys.TABLE_PAGE: "the table's page past 10,000 rows: the picks made there are linked, and "
    "a reopened table starts at its first page",
    keys.DETAIL_HEATMAPS: "a container",
    keys.TRUST_BADGES_CONTAINER: "a container",
    keys.TRUST_BADGES_RUN: "a button that runs the checks that did not fit: an action, not a view",
    keys.TRUST_BADGES_FULL: "which picks' checks ran in full: work done, which a reopened page "
    "runs again when asked",
    keys.GRID_SHEET: "a media slot",
    keys.HOVER_ATLAS: "a media slot",
    keys.DETAIL_VALUES: "a media slot",
    keys.DRAWN_REVISIONS: "session bookkeeping of the charts' redraws",
    keys.REDRAWS: "session bookkeeping of the charts' redraws",
    keys.SEEN: "session bookkeeping of the selections absorbed",
    keys.NOTICE: "a one-off message",
    keys.TEXT_VERSION: "session bookkeeping of the index box",
    keys.TEXT_ERROR: "a message about a typed entry",
    keys.PICKED_BATCH: "the batch the picks belong to, which src, seed or start and n name",
    keys.KEPT_VIEWS: "a cache of drawn charts",
    keys.RUN_STARTED: "a timer",
    keys.TAB_DRAWN: "session bookkeeping of the open tab",
    keys.LINK_OPENED: "session bookkeeping of links",
    keys.LINK_NOTES: "the notes on a link just opened",
    keys.GOOD_BATCH_SIZE: "the last valid batch size, which n names",
    keys.MERGE_MODE: "how the next selection combines with the picks; the picks are linked",
    keys.GRID_CHART: "a selection event; the picks it made are linked",
    keys.SCATTER_CHART: "a selection event; the picks it made are linked",
    keys.CONFUSION_CHART: "a selection event; the picks it made are linked",
    keys.EMBEDDING_CHART: "a selection event; the picks it made are linked",
    keys.TABLE: "a selection event; the picks it made are linked",
    keys.COMPARE_FLIPS: "a selection event; the picks it made are linked",
    keys.PROBABILITY_CHART: "a click that sets the target class, which is linked",
    keys.PICKERS: "the picking tools' expander; the picks they make are linked",
    keys.RULE: "a picking rule's input; the picks it made are linked",
    keys.RULE_K: "a picking rule's input; the picks it made are linked",
    keys.RULE_CLASS: "a picking rule's input; the picks it made are linked",
    keys.RULE_SEED: "a picking rule's input; the picks it made are linked",
    keys.RULE_THRESHOLD: "a picking rule's input; the picks it made are linked",
    keys.RULE_VERDICT: "a picking rule's input; the picks it made are linked",
    keys.RULE_ANCHOR: "a picking rule's input; the picks it made are linked",
    keys.TRIAGE_PICK_VERDICT: "a picking rule's input; the picks it made are linked",
    keys.TRIAGE_PICK: "a button",
    keys.SLICE_PICK: "a button",
    keys.SLICE_VERDICT: "buttons that record a slice's verdict, kept beside the store",
    keys.SLICE_PROBLEM: "a message",
    keys.SLICE_SAVE: "a button that saves a named selection",
    keys.SLICE_SAVED: "a message",
    keys.COMPARE_DRIFT: "a button; the picks it made are linked",
    keys.DETAIL_OPEN: "an expander, opened with one click; what it shows follows the picks",
    keys.DETAIL: "the detailed view's pick, inside that expander",
    keys.DOWNLOADS_OPEN: "an expander of download buttons",
    keys.DOWNLOAD: "download buttons",
    keys.REINFER: "a button that infers a changed store again",
    keys.DEVICE: "the server's hardware: the maps are the same, and another server may lack it",
    keys.UPLOADS: "uploaded images are not on the server to reopen",
    keys.WEIGHTS_UPLOAD: "uploaded weights are not on the server to reopen",
    keys.SPEC_SIZE: "the input spec of the user's own model, which links do not carry",
    keys.SPEC_RESIZE: "the input spec of the user's own model, which links do not carry",
    keys.SPEC_MEAN: "the input spec of the user's own model, which links do not carry",
    keys.SPEC_STD: "the input spec of the user's own model, which links do not carry",
    keys.COMPARE_NAME: "a model by name runs the user's code, as --model does: not in links",
    keys.COMPARE_OUTPUTS: "a second store on the server: links carry built-in models only",
    keys.COMPARE_NOTHING: "a value of the Compare-with box (compare=none), not a key",
    keys.COMPARE_BY_NAME: "a value of the Compare-with box, not a key",
    keys.COMPARE_STORED: "a value of the Compare-with box, not a key",
    keys.TRUST_CHECKS: "results of the Trust tab's run",
    keys.TRUST_RUN: "the Trust tab's Run button: a link does not run minutes of checks",
    keys.TRUST_METHODS: "an input of the Trust tab's run, shown only once it is run",
    keys.TRUST_MODE: "an input of the Trust tab's run, shown only once it is run",
    keys.TRUST_LAYERS: "an input of the Trust tab's run, shown only once it is run",
    keys.TRUST_BASELINES: "an input of the Trust tab's run, shown only once it is run",
    keys.TRUST_TOLERANCE: "an input of the Trust tab's run, shown only once it is run",
    keys.TRUST_MAX_STEPS: "an input of the Trust tab's run, shown only once it is run",
    keys.TRUST_RANDOMISATION: "results of the Trust tab's run",
    keys.TRUST_COMPLETENESS: "results of the Trust tab's run",
    keys.TRUST_CURVES: "results of the Trust tab's run",
    keys.TRUST_AUCS: "results of the Trust tab's run",
    keys.TRUST_MAP_METHOD: "which of the run's results to draw, shown only once it is run",
    keys.TRUST_MAP_IMAGE: "which of the run's results to draw, shown only once it is run",
    keys.RUN_COMPARISON: "the Strategies tab's button: a link does not run benchmarks",
    keys.COMPARISON: "results of the Strategies tab's run",
    keys.STRATEGY_BARS: "a chart of the Strategies tab's results",
    keys.RUN_SWEEP: "the Strategies tab's button: a link does not run benchmarks",
    keys.SWEEP: "results of the Strategies tab's sweep",
    keys.SWEEP_K: "an input of the sweep, shown only once it is run",
    keys.SWEEP_N: "an input of the sweep, shown only once it is run",
    keys.TRIAGE_RESULT: "a cache of the batch's triage",
    keys.TRIAGE_SESSION_VERDICTS: "verdicts, kept beside the store, not in links",
    keys.TRIAGE_PROBLEM: "a message",
    keys.TRIAGE_NEIGHBOUR: "buttons that pick a neighbour; the picks are linked",
    keys.TRIAGE_NOTE: "an input of a verdict, kept beside the store",
    keys.TRIAGE_CLASS: "an input of a verdict, kept beside the store",
    keys.TRIAGE_VERDICT: "buttons that record a verdict",
    keys.VERDICT_STORE: "where verdicts are kept",
    keys.SELECTIONS_OPEN: "an expander; the selections it shows are kept beside the store",
    keys.SELECTION_NAME: "an input of saving a named selection",
    keys.SELECTION_NOTE: "an input of saving a named selection",
    keys.SELECTION_SAVE: "a button",
    keys.SELECTION_CHOSEN: "which saved selection the buttons act on; reopening one sets the link",
    keys.SELECTION_REOPEN: "a button",
    keys.SELECTION_DELETE: "a button",
    keys.SELECTION_NEW_NAME: "an input of renaming a named selection",
    keys.SELECTION_RENAME: "a button",
    keys.SELECTIONS_KEPT: "a hosted session's saved selections",
    keys.SELECTIONS_MESSAGE: "a message",
    keys.SELECTIONS_STORE: "where named selections are kept",
    keys.SELECTION_REOPENED: "session bookkeeping of a reopen",
}


def every_key() -> dict[str, str]:
    """{value: name} of every key (or key prefix) ``gradpick.ui.keys`` declares."""
    return {
        getattr(keys, name): name for name in keys.__all__ if isinstance(getattr(keys, name), str)
    }


def test_every_key_is_linked_or_said_not_to_change_the_view() -> None:
    declared = every_key()
    linked, excluded = set(linking.LINKED), set(NOT_A_VIEW)
    assert not linked & excluded, linked & excluded
    forgotten = sorted(declared[key] for key in set(declared) - linked - excluded)
    assert not forgotten, f"in neither linking.LINKED nor NOT_A_VIEW: {forgotten}"
    assert linked | excluded <= set(declared), (linked | excluded) - set(declared)
    assert all(reason for reason in NOT_A_VIEW.values())


def test_every_link_parameter_sets_a_widget_and_every_linked_widget_has_a_round_trip() -> None:
    assert set(linking.LINKED.values()) == set(links.KNOWN)
    assert set(ROUND_TRIPS) == set(linking.LINKED)


# ------------------------------------------------------------------ the round trips


@dataclass(frozen=True)
class Case:
    """How to set one widget away from its default (on a page opened with ``session``), and
    how to read it back (from the widget where the page draws it)."""

    change: Callable[[AppTest, Path], AppTest]
    read: Callable[[AppTest], Any]
    session: tuple[tuple[str, Any], ...] = ()


def labelled(app: AppTest, kind: str, label: str) -> Any:
    """The sidebar's widget of ``kind`` (``number_input``, ``toggle``, ...) labelled ``label``:
    the per-source ones have keys that name their source."""
    found = [w for w in getattr(app.sidebar, kind) if w.label == label]
    assert len(found) == 1, [w.label for w in getattr(app.sidebar, kind)]
    return found[0]


def other_model() -> str:
    """A built-in model that is not the tutorial net (random weights, small)."""
    return next(o.identity for o in service.model_options() if o.name == "resnet20")


def pick_by_text(app: AppTest, text: str = "5, 3") -> AppTest:
    return app.text_input(key=state.text_key(app.session_state)).input(text).run()


def layer_box(app: AppTest) -> Any:
    return widget(app, "selectbox", keys.per_source(keys.LAYER, TUTORIAL))


def set_layer(app: AppTest, _: Path) -> AppTest:
    return layer_box(pick_by_text(app)).set_value("conv1").run()  # the automatic one is pool


def set_folder(app: AppTest, generated: Path) -> AppTest:
    app = app.sidebar.radio(key=keys.SOURCE_KIND).set_value("folder").run()
    return app.sidebar.text_input(key=keys.FOLDER_PATH).input(str(generated)).run()


def set_start(app: AppTest, _: Path) -> AppTest:
    app = labelled(app, "toggle", "Seeded random sample").set_value(False).run()
    app = labelled(app, "number_input", "Batch size N").set_value(32).run()
    return labelled(app, "number_input", "Start").set_value(5).run()


def set_page(app: AppTest, _: Path) -> AppTest:
    app = app.selectbox(key=keys.GRID_PAGE_SIZE).set_value(50).run()
    return next(n for n in app.number_input if n.label == "Page").set_value(2).run()


def set_class(app: AppTest, _: Path) -> AppTest:
    app = app.sidebar.radio(key=keys.TARGET_MODE).set_value("class").run()
    return app.sidebar.selectbox(key=keys.TARGET_CLASS).set_value(4).run()


def in_session(key: str, value: Any) -> Callable[[AppTest, Path], AppTest]:
    """Set ``key`` as the browser does for a tab (its value comes back in the session)."""

    def change(app: AppTest, _: Path) -> AppTest:
        app.session_state[key] = value
        return app.run()

    return change


def widget(app: AppTest, kind: str, key: str) -> Any:
    """The widget of ``kind`` with ``key``, in the sidebar or the main area."""
    for area in (app.sidebar, app.main):
        found = [w for w in getattr(area, kind) if w.key == key]
        if found:
            return found[0]
    raise KeyError(f"no {kind} {key!r} on the page")


def chosen(kind: str, key: str, value: Any) -> Callable[[AppTest, Path], AppTest]:
    return lambda app, _: widget(app, kind, key).set_value(value).run()


def value_of(kind: str, key: str) -> Callable[[AppTest], Any]:
    return lambda app: widget(app, kind, key).value


FEATURE_SPACE = ((keys.OUTPUTS_TAB, "Feature space"),)
PICKED_GRADCAM = ((keys.METHOD, "gradcam"),)
ROUND_TRIPS: dict[str, Case] = {
    keys.SOURCE_KIND: Case(
        set_folder,
        lambda app: (app.sidebar.radio(key=keys.SOURCE_KIND).value, app.caption[0].value),
    ),
    keys.FOLDER_PATH: Case(set_folder, value_of("text_input", keys.FOLDER_PATH)),
    keys.OUTPUTS_PATH: Case(
        lambda app, generated: app,  # replaced in the test below: it needs a store
        lambda app: app.sidebar.text_input(key=keys.OUTPUTS_PATH).value,
    ),
    keys.SPLIT: Case(chosen("selectbox", keys.SPLIT, "train"), value_of("selectbox", keys.SPLIT)),
    keys.RANDOM_SAMPLE: Case(
        set_start, lambda app: labelled(app, "toggle", "Seeded random sample").value
    ),
    keys.SAMPLE_SEED: Case(
        lambda app, _: labelled(app, "number_input", "Seed").set_value(3).run(),
        lambda app: labelled(app, "number_input", "Seed").value,
    ),
    keys.START: Case(set_start, lambda app: labelled(app, "number_input", "Start").value),
    keys.BATCH_SIZE: Case(
        lambda app, _: labelled(app, "number_input", "Batch size N").set_value(32).run(),
        lambda app: (labelled(app, "number_input", "Batch size N").value, app.metric[0].value),
    ),
    keys.MODEL: Case(
        lambda app, _: app.sidebar.selectbox(key=keys.MODEL).set_value(other_model()).run(),
        value_of("selectbox", keys.MODEL),
    ),
    keys.STRATEGY: Case(
        chosen("selectbox", keys.STRATEGY, strategies.NAMES[-1]),
        value_of("selectbox", keys.STRATEGY),
    ),
    keys.TARGET_MODE: Case(
        chosen("radio", keys.TARGET_MODE, "predicted"), value_of("radio", keys.TARGET_MODE)
    ),
    keys.TARGET_CLASS: Case(set_class, value_of("selectbox", keys.TARGET_CLASS)),
    keys.METHOD: Case(
        chosen("selectbox", keys.METHOD, "smoothgrad"), value_of("selectbox", keys.METHOD)
    ),
    keys.COLOUR_SCALE: Case(
        chosen("radio", keys.COLOUR_SCALE, "shared"), value_of("radio", keys.COLOUR_SCALE)
    ),
    keys.MEASURE_MEMORY: Case(
        chosen("checkbox", keys.MEASURE_MEMORY, False), value_of("checkbox", keys.MEASURE_MEMORY)
    ),
    keys.COMPARE_WITH: Case(
        lambda app, _: widget(app, "selectbox", keys.COMPARE_WITH).set_value(other_model()).run(),
        value_of("selectbox", keys.COMPARE_WITH),
    ),
    keys.PICKED: Case(
        lambda app, _: pick_by_text(app), lambda app: state.picked(app.session_state)
    ),
    keys.TEXT: Case(
        lambda app, _: pick_by_text(app, "7-9"),
        lambda app: app.text_input(key=state.text_key(app.session_state)).value,
    ),
    keys.LAYER: Case(set_layer, lambda app: layer_box(app).value, PICKED_GRADCAM),
    keys.TRUST_BADGES: Case(
        lambda app, _: pick_by_text(app).toggle(key=keys.TRUST_BADGES).set_value(False).run(),
        value_of("toggle", keys.TRUST_BADGES),
    ),
    keys.OCCLUSION_CHECK: Case(
        lambda app, _: pick_by_text(app).toggle(key=keys.OCCLUSION_CHECK).set_value(True).run(),
        value_of("toggle", keys.OCCLUSION_CHECK),
    ),
    keys.EXPLORER_TAB: Case(
        in_session(keys.EXPLORER_TAB, "Trust"), lambda app: app.session_state[keys.EXPLORER_TAB]
    ),
    keys.OUTPUTS_TAB: Case(
        in_session(keys.OUTPUTS_TAB, "Table"), lambda app: app.session_state[keys.OUTPUTS_TAB]
    ),
    keys.GRID_PAGE_SIZE: Case(
        chosen("selectbox", keys.GRID_PAGE_SIZE, 50), value_of("selectbox", keys.GRID_PAGE_SIZE)
    ),
    keys.GRID_PAGE: Case(
        set_page, lambda app: next(n.value for n in app.number_input if n.label == "Page")
    ),
    keys.EMBEDDING_PROJECTION: Case(
        chosen("selectbox", keys.EMBEDDING_PROJECTION, "umap"),
        value_of("selectbox", keys.EMBEDDING_PROJECTION),
        FEATURE_SPACE,
    ),
    keys.EMBEDDING_COLOUR: Case(
        chosen("radio", keys.EMBEDDING_COLOUR, "predicted"),
        value_of("radio", keys.EMBEDDING_COLOUR),
        FEATURE_SPACE,
    ),
    keys.TRIAGE_POSITION: Case(
        chosen("number_input", keys.TRIAGE_POSITION, 3),
        value_of("number_input", keys.TRIAGE_POSITION),
        ((keys.EXPLORER_TAB, "Triage"),),
    ),
    keys.SLICE_CHOSEN: Case(
        lambda app, _: app,  # replaced in the test below: it needs a store with slices
        value_of("selectbox", keys.SLICE_CHOSEN),
    ),
}


def open_page(params: dict[str, str] | None = None, **session: Any) -> AppTest:
    app = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    for name, value in (params or {}).items():
        app.query_params[name] = value
    for key, value in session.items():
        app.session_state[key] = value
    return app.run()


def params_of(app: AppTest) -> dict[str, str]:
    return {name: str(value) for name, value in app.query_params.items()}


def no_problems(app: AppTest) -> None:
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [e.value for e in app.error]
    said = [w.value for w in app.warning if not w.value.startswith(RANDOM_WEIGHTS)]
    # The occlusion check's notes are what it is for, not a problem of the page.
    assert not [w for w in said if "and occlusion disagree" not in w], said


def server_warnings(records: list[logging.LogRecord]) -> list[str]:
    """What a page run logged at WARNING or above, less AppTest's own notes on running
    without a server (a served page has one)."""
    bare = ("No runtime found", "missing ScriptRunContext")
    return [
        r.getMessage()
        for r in records
        if r.levelno >= logging.WARNING and not any(b in r.getMessage() for b in bare)
    ]


def round_trip(
    case: Case, generated: Path, caplog: pytest.LogCaptureFixture
) -> tuple[Any, Any, dict[str, str]]:
    """The widget's value before and after ``case`` sets it, and in the page its link opens;
    no warning on the page or in the log on opening the link."""
    app = open_page(model=TUTORIAL, **dict(case.session))
    no_problems(app)
    try:
        before = case.read(app)
    except (KeyError, StopIteration, AssertionError):
        before = None  # not drawn at the page's default (a folder's path, the second page)
    app = case.change(app, generated)
    no_problems(app)
    now = case.read(app)
    params = params_of(app)
    caplog.clear()
    policies._shown_default_value_warning = False  # Streamlit says it once per process
    with caplog.at_level(logging.WARNING):
        again = open_page(params)
    no_problems(again)
    assert not server_warnings(caplog.records), server_warnings(caplog.records)
    assert case.read(again) == now, params
    return before, now, params


ROUND_TRIP_KEYS = sorted(set(ROUND_TRIPS) - {keys.OUTPUTS_PATH, keys.SLICE_CHOSEN})


@pytest.mark.parametrize("key", ROUND_TRIP_KEYS)
def test_a_changed_widget_reopens_from_the_link(
    key: str, generated: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before, now, params = round_trip(ROUND_TRIPS[key], generated, caplog)
    assert now != before, f"{key} was not changed by its case"
    assert linking.LINKED[key] in params, params


def test_a_stored_outputs_folder_reopens_from_the_link(
    generated: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder, outputs = tmp_path / "images", tmp_path / "outputs"
    shutil.copytree(generated / "test", folder)
    store_of_the_stand_in(folder, outputs)

    def open_store(app: AppTest, _: Path) -> AppTest:
        app = app.sidebar.radio(key=keys.SOURCE_KIND).set_value("stored").run()
        return app.sidebar.text_input(key=keys.OUTPUTS_PATH).input(str(outputs)).run()

    case = ROUND_TRIPS[keys.OUTPUTS_PATH]
    _, now, params = round_trip(Case(open_store, case.read), generated, caplog)
    assert now == str(outputs) and params["outputs"] == str(outputs)


def test_the_slices_tab_and_the_slice_in_view_reopen_from_the_link(
    generated: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder, outputs = tmp_path / "images", tmp_path / "outputs"
    shutil.copytree(generated / "test", folder)
    store_of_the_stand_in(folder, outputs)
    write_slices(outputs)

    def slice_two(app: AppTest, _: Path) -> AppTest:
        app = app.sidebar.radio(key=keys.SOURCE_KIND).set_value("stored").run()
        app = app.sidebar.text_input(key=keys.OUTPUTS_PATH).input(str(outputs)).run()
        app.session_state[keys.EXPLORER_TAB] = "Slices"
        app = app.run()
        assert app.selectbox(key=keys.SLICE_CHOSEN).value == 0  # all of them at first
        return app.selectbox(key=keys.SLICE_CHOSEN).set_value(2).run()

    case = ROUND_TRIPS[keys.SLICE_CHOSEN]
    _, now, params = round_trip(Case(slice_two, case.read), generated, caplog)
    assert now == 2 and (params["tab"], params["slice"]) == ("Slices", "2")
    again = open_page(params)
    cards = [m.value for m in again.markdown if m.value.startswith("**Slice ")]
    assert len(cards) == 1 and cards[0].startswith("**Slice 2**: 4 images"), cards


SETTINGS = [
    (method, parameter)
    for method in attribution.METHOD_NAMES
    for parameter in attribution.get(method).parameters
    if parameter.shown is not None
]


@pytest.mark.parametrize(
    ("method", "parameter"), SETTINGS, ids=[f"{m}-{p.name}" for m, p in SETTINGS]
)
def test_every_attribution_setting_reopens_from_the_link(
    method: str, parameter: attribution.Parameter, generated: Path, caplog: pytest.LogCaptureFixture
) -> None:
    low, high = parameter.shown or (0, 0)
    # An on/off setting is a toggle, turned to its other state; the others are sliders, moved to
    # the low end of their range.
    widget = "toggle" if parameter.switch else "slider"
    value: float | bool = (
        not parameter.default if parameter.switch else (int if parameter.whole else float)(low)
    )
    assert value != parameter.default
    case = Case(
        chosen(widget, keys.setting_key(parameter.name), value),
        value_of(widget, keys.setting_key(parameter.name)),
        ((keys.METHOD, method),),
    )
    before, now, params = round_trip(case, generated, caplog)
    assert (before, now) == (parameter.default, value)
    assert params[links.SETTING_PREFIX + parameter.name] == f"{float(value):g}"


def test_a_link_naming_no_seed_or_start_opens_the_pages_default_sample(generated: Path) -> None:
    default = open_page(model=TUTORIAL)
    linked = open_page({"src": "cifar10", "picks": "0", "model": "tutorial"})
    no_problems(linked)
    assert labelled(linked, "toggle", "Seeded random sample").value is True
    assert params_of(linked)["seed"] == params_of(default)["seed"] == "0"
    assert "start" not in params_of(linked)
    assert state.picked(linked.session_state) == [0]


def test_a_full_link_with_every_setting_changed_logs_no_warning(
    generated: Path, caplog: pytest.LogCaptureFixture
) -> None:
    params = {
        "src": "cifar10",
        "split": "train",
        "seed": "3",
        "n": "32",
        "model": "tutorial",
        "picks": "1,2",
        "method": "gradcam",
        "layer": "conv1",
        "target": "class",
        "class": "2",
        "scale": "shared",
        "memory": "off",
        "per_page": "50",
        "compare": "resnet20",
        "view": "Feature space",
        "projection": "umap",
        "colour": "correct",
    }
    policies._shown_default_value_warning = False
    with caplog.at_level(logging.WARNING):
        app = open_page(params)
    no_problems(app)
    assert not server_warnings(caplog.records), server_warnings(caplog.records)
    assert layer_box(app).value == "conv1"
    assert widget(app, "selectbox", keys.COMPARE_WITH).value == other_model()


def test_a_layer_the_model_lacks_is_said_and_the_automatic_one_used(generated: Path) -> None:
    app = open_page({"model": "tutorial", "picks": "1", "method": "gradcam", "layer": "nope"})
    assert not app.exception
    assert any("has no spatial layer nope" in w.value for w in app.warning)
    assert layer_box(app).value == "pool"
