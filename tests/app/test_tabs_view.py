"""The explorer's tabs through AppTest: only the open tab is drawn, the closed ones keep their
widgets' values and their results, and a link naming a tab opens it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from gradpick.ui import cache, figures, keys, linking
from gradpick.ui.browser import hover
from gradpick.ui.panels import outputs
from tests.app.test_app import (
    TUTORIAL,
    captioned_indices,
    charts_keyed,
    no_errors,
    open_app,
    open_tab,
    select,
)
from tests.app.test_links_view import open_link

VALUE_WIDGETS = {
    "selectbox",
    "multiselect",
    "number_input",
    "text_input",
    "text_area",
    "radio",
    "checkbox",
    "toggle",
    "slider",
    "select_slider",
    "button_group",
    "expander",
}
"""The element types whose values are settings a closed tab must keep (an expander's, when it
tracks whether it is open; a button group's: the outputs views' row of tabs)."""


def tab_block(app: AppTest, name: str) -> Any:
    """The container of the explorer tab ``name``, shown or hidden."""
    position = linking.TABS.index(name)
    wanted = {keys.tab_pane(keys.EXPLORER_TAB, position, shown=shown) for shown in (True, False)}
    return next(node for node in app.main if getattr(node, "key", None) in wanted)


def drawn_tabs(app: AppTest) -> list[str]:
    """The explorer tabs that hold any element in this run."""
    return [name for name in linking.TABS if len(tab_block(app, name).children)]


def widget_keys(app: AppTest, name: str) -> set[str]:
    """The keys of the value widgets drawn in the explorer tab ``name``."""
    found = set()
    for node in tab_block(app, name):
        key = getattr(node, "key", None)
        if key and getattr(node, "type", None) in VALUE_WIDGETS:
            found.add(key)
    return found


def kept(key: str, tab: str) -> bool:
    """Whether ``keys.TAB_WIDGETS`` names the widget ``key`` (or its per-source prefix)."""
    return key.split(":")[0] in keys.TAB_WIDGETS.get(tab, ())


def test_a_click_in_explore_draws_only_the_explore_tab(generated: Path) -> None:
    app = select(open_app(**TUTORIAL), keys.SCATTER_CHART, [3, 1])
    no_errors(app)
    assert drawn_tabs(app) == ["Explore"]
    assert captioned_indices(app) == [3, 1]
    app.button[[b.label for b in app.button].index("Clear selection")].click().run()
    assert drawn_tabs(app) == ["Explore"]
    for button in (keys.RUN_COMPARISON, keys.TRUST_RUN, keys.TRIAGE_PICK):
        assert not any(b.key == button for b in app.button)
    app = open_tab(app, "Trust")
    assert drawn_tabs(app) == ["Trust"]
    assert any("Pick some images in the Explore tab first" in i.value for i in app.info)


def test_the_trust_and_strategies_tabs_keep_their_options_and_results(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warned = default_value_warnings(monkeypatch)
    app = select(open_app("Trust", **TUTORIAL), keys.SCATTER_CHART, [4, 1])
    app.multiselect(key=keys.TRUST_METHODS).set_value(["smoothgrad"])
    app.radio(key=keys.TRUST_MODE).set_value("independent")
    app.number_input(key=keys.TRUST_LAYERS).set_value(1)
    app.number_input(key=keys.TRUST_TOLERANCE).set_value(0.2)
    app.run()
    app.button(key=keys.TRUST_RUN).click().run()
    no_errors(app)
    app.selectbox(key=keys.TRUST_MAP_IMAGE).set_value(1).run()
    chosen = {key: app.session_state[key] for key in widget_keys(app, "Trust")}
    assert set(chosen) == {
        keys.TRUST_METHODS,
        keys.TRUST_MODE,
        keys.TRUST_LAYERS,
        keys.TRUST_BASELINES,
        keys.TRUST_TOLERANCE,
        keys.TRUST_MAX_STEPS,
        keys.TRUST_MAP_METHOD,
        keys.TRUST_MAP_IMAGE,
    }
    assert all(kept(key, "Trust") for key in chosen)
    report = app.session_state[keys.TRUST_CHECKS]

    app = open_tab(app, "Strategies")
    app.button(key=keys.RUN_COMPARISON).click().run()
    no_errors(app)
    comparison = app.session_state[keys.COMPARISON]
    assert widget_keys(app, "Strategies") == set()  # buttons and charts only

    app = open_tab(app, "Explore")
    app.run()  # a click in Explore: a run that draws neither tab
    for key in chosen:
        assert app.session_state[key] == chosen[key], key

    app = open_tab(app, "Trust")
    no_errors(app)
    assert app.multiselect(key=keys.TRUST_METHODS).value == ["smoothgrad"]
    assert app.number_input(key=keys.TRUST_LAYERS).value == 1
    assert app.selectbox(key=keys.TRUST_MAP_IMAGE).value == 1
    assert {key: app.session_state[key] for key in chosen} == chosen
    assert app.session_state[keys.TRUST_CHECKS] is report
    assert not any("changed since the last run" in info.value for info in app.info)
    app = open_tab(app, "Strategies")
    assert app.session_state[keys.COMPARISON] is comparison
    assert any("strategy" in frame.value.columns for frame in app.dataframe)
    assert warned == []


def default_value_warnings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Streamlit's warnings from here on, its record of having shown the one for a widget given
    a default beside a value set through the session state reset (it logs that once per
    process): a closed tab's widgets keep their values there, so none may have a default."""
    from streamlit.elements.lib import policies

    warned: list[str] = []
    monkeypatch.setattr(policies, "_shown_default_value_warning", False)
    monkeypatch.setattr(policies._LOGGER, "warning", lambda text, *a, **k: warned.append(text))
    return warned


def test_the_explore_tab_keeps_its_tools_and_view_while_another_tab_is_open(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """...and no widget is given a default beside the value kept for it."""
    warned = default_value_warnings(monkeypatch)
    app = select(open_app(**TUTORIAL), keys.SCATTER_CHART, [5, 2])
    app.radio(key=keys.MERGE_MODE).set_value("add")
    app.session_state[keys.DETAIL_OPEN] = True  # the detailed view is drawn once opened
    app.run()
    app.selectbox(key=keys.DETAIL).set_value(2)
    app.toggle(key=keys.TRUST_BADGES).set_value(False)
    app.run()
    app.session_state[keys.OUTPUTS_TAB] = "Feature space"
    app.run()
    app.radio(key=keys.EMBEDDING_COLOUR).set_value("correct").run()
    no_errors(app)
    chosen = {key: app.session_state[key] for key in widget_keys(app, "Explore")}
    expected = {keys.MERGE_MODE, keys.DETAIL_OPEN, keys.DETAIL, keys.TRUST_BADGES, keys.OUTPUTS_TAB}
    assert expected <= set(chosen)
    assert all(kept(key, "Explore") for key in chosen), sorted(chosen)

    app = open_tab(app, "Compare")
    app.run()
    assert widget_keys(app, "Compare") == set()  # the second model is chosen in the sidebar
    app = open_tab(app, "Explore")
    no_errors(app)
    assert {key: app.session_state[key] for key in chosen} == chosen
    assert app.radio(key=keys.MERGE_MODE).value == "add"
    assert app.selectbox(key=keys.DETAIL).value == 2
    assert app.toggle(key=keys.TRUST_BADGES).value is False
    assert app.radio(key=keys.EMBEDDING_COLOUR).value == "correct"
    assert captioned_indices(app) == [5, 2]
    assert warned == []


def test_the_triage_tab_keeps_its_note_class_and_verdicts(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warned = default_value_warnings(monkeypatch)
    app = open_app("Triage", **TUTORIAL)
    no_errors(app)
    note = next(box for box in app.text_input if box.label == "Note (optional)")
    note.set_value("a blurry cat").run()
    right = next(box for box in app.selectbox if box.label == "Right class")
    other = next(option for option in right.options if option != right.value)
    right.set_value(other).run()
    chosen = {key: app.session_state[key] for key in widget_keys(app, "Triage")}
    assert all(kept(key, "Triage") for key in chosen), sorted(chosen)
    assert chosen[note.key] == "a blurry cat"

    app = open_tab(app, "Explore")
    app = select(app, keys.SCATTER_CHART, [0])
    app = open_tab(app, "Triage")
    no_errors(app)
    assert {key: app.session_state[key] for key in chosen} == chosen
    assert app.text_input(key=note.key).value == "a blurry cat"
    assert warned == []


def test_a_link_naming_a_tab_opens_and_draws_it(generated: Path) -> None:
    app = open_link({"model": "tutorial", "picks": "2,4", "tab": "Trust"})
    no_errors(app)
    assert app.session_state[keys.EXPLORER_TAB] == "Trust"
    assert drawn_tabs(app) == ["Trust"]
    assert any(b.key == keys.TRUST_RUN for b in app.button)
    assert any("2 picked image(s)" in caption.value for caption in app.caption)
    assert app.query_params["tab"] == "Trust"
    assert captioned_indices(open_tab(app, "Explore")) == [2, 4]


def test_the_outputs_views_keep_their_settings_while_another_view_is_open(
    generated: Path,
) -> None:
    app = open_app(**TUTORIAL)
    app.selectbox(key=keys.GRID_PAGE_SIZE).set_value(50).run()
    app.session_state[keys.OUTPUTS_TAB] = "Feature space"
    app.run()
    app.radio(key=keys.EMBEDDING_COLOUR).set_value("correct").run()
    for view in ("Table", "Thumbnails", "Confusion matrix", "Feature space", "Thumbnails"):
        app.session_state[keys.OUTPUTS_TAB] = view
        app.run()
        no_errors(app)
    assert app.selectbox(key=keys.GRID_PAGE_SIZE).value == 50
    app.session_state[keys.OUTPUTS_TAB] = "Feature space"
    app.run()
    assert app.radio(key=keys.EMBEDDING_COLOUR).value == "correct"


def _specs(app: AppTest, key: str) -> list[str]:
    return [chart.proto.spec for chart in charts_keyed(app, key)]


def _open_view(app: AppTest, view: str) -> AppTest:
    app.session_state[keys.OUTPUTS_TAB] = view
    app.run()
    no_errors(app)
    return app


@pytest.mark.parametrize("webgl", [True, False])
@pytest.mark.parametrize(
    ("view", "chart"),
    [(outputs.SCATTER_VIEW, keys.SCATTER_CHART), (outputs.EMBEDDING_VIEW, keys.EMBEDDING_CHART)],
)
def test_a_webgl_scatter_is_drawn_in_its_closed_view_from_the_batchs_first_page(
    generated: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    webgl: bool,
    view: str,
    chart: str,
) -> None:
    """The browser makes the chart while the view is closed and finds it made when the view
    opens, instead of making (and Streamlit drawing twice) a new one; an SVG scatter is made
    on each opening, as every other view. The hover thumbnails' atlas is made with the closed
    chart, once, and sent when the view opens."""
    _fresh_scatters(monkeypatch, request, webgl)
    atlases = []
    make_atlas = hover.atlas
    monkeypatch.setattr(hover, "atlas", lambda images: atlases.append(1) or make_atlas(images))
    app = open_app(**TUTORIAL)
    closed = _specs(app, chart)
    assert len(closed) == (1 if webgl else 0)
    assert len(atlases) == (1 if webgl else 0)
    opened = _specs(_open_view(app, view), chart)
    assert len(opened) == 1 and ('"scattergl"' in opened[0]) == webgl
    assert len(atlases) == 1
    assert closed == (opened if webgl else [])  # the same figure: the same chart
    app = _open_view(app, "Confusion matrix")
    assert _specs(app, keys.CONFUSION_CHART)
    assert _specs(app, chart) == (opened if webgl else [])
    app = _open_view(app, "Thumbnails")
    assert _specs(app, chart) == (opened if webgl else [])
    assert _specs(_open_view(app, view), chart) == opened


def test_a_feature_space_projected_by_umap_is_kept_only_once_opened(
    generated: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """UMAP takes seconds to minutes: a new batch does not wait for it unless the view opens."""
    _fresh_scatters(monkeypatch, request, webgl=True)
    app = open_app(**TUTORIAL, **{keys.EMBEDDING_PROJECTION: "umap"})
    no_errors(app)
    assert _specs(app, keys.SCATTER_CHART)
    assert _specs(app, keys.EMBEDDING_CHART) == []


def _fresh_scatters(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, webgl: bool
) -> None:
    """Every scatter drawn with WebGL (tutorial batches are small) or with SVG; the built
    scatters are shared by sessions, so none built under another threshold is reused."""
    monkeypatch.setattr(figures, "WEBGL_ABOVE", 10 if webgl else 10**6)
    for built in (cache.outputs_scatter, cache.embedding_scatter, cache.hover_atlas):
        built.clear()
        request.addfinalizer(built.clear)
