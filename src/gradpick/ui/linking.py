"""The page's URL follows its view, and a URL someone sent reopens it (``gradpick.ui.links``).

``open_link`` runs first thing on a session's first run: it reads ``st.query_params``, keeps
what this server allows, and seeds the widgets' session state before any widget is created,
so the sidebar, the picks and the tabs come up as the link says; what it dropped is shown as
a note. What the link leaves out keeps the page's default: a link without ``seed`` or
``start`` opens the batch the page would open (a seeded sample of a folder stored class by
class, a store's own batch). The widgets take their first value from the session state and
pass no default of their own (``state.start_at``), so a linked value never makes Streamlit warn
in the server log. ``follow`` writes the current view back into the URL on every run, and
``show_link`` draws the full link with a copy button (``st.code``'s own).

``LINKED`` names the widget keys a link carries, with their parameter: every widget of
``gradpick.ui.keys`` is either there or, in the tests, on a list of widgets that do not change
what the page shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from urllib.parse import urlencode, urlsplit, urlunsplit

import streamlit as st

from gradpick import attribution
from gradpick.gradients import strategies
from gradpick.picking import feature_space as embedding
from gradpick.ui import cache, keys, layer_select, links, service, state
from gradpick.ui.config import AppConfig, app_config
from gradpick.ui.guard import guarded
from gradpick.ui.heatmaps import TARGET_MODES
from gradpick.ui.panels import outputs, sidebar
from gradpick.ui.service import DataChoice
from gradpick.ui.session import Loaded, Settings

__all__ = [
    "LINKED",
    "TABS",
    "allowed",
    "apply_view",
    "follow",
    "link_url",
    "open_link",
    "show_link",
    "view_of",
]

TABS = keys.EXPLORER_TABS
"""The explorer's tabs, as the page names them (and the links do)."""
LINKED: dict[str, str] = {
    keys.SOURCE_KIND: "src",
    keys.SPLIT: "split",
    keys.FOLDER_PATH: "folder",
    keys.OUTPUTS_PATH: "outputs",
    keys.RANDOM_SAMPLE: "start",  # on: the link names seed; off: start
    keys.SAMPLE_SEED: "seed",
    keys.START: "start",
    keys.BATCH_SIZE: "n",
    keys.MODEL: "model",
    keys.STRATEGY: "strategy",
    keys.TARGET_MODE: "target",
    keys.TARGET_CLASS: "class",
    keys.METHOD: "method",
    keys.COLOUR_SCALE: "scale",
    keys.COMPARE_WITH: "compare",
    keys.PICKED: "picks",
    keys.TEXT: "picks",
    keys.LAYER: "layer",
    keys.TRUST_BADGES: "badges",
    keys.OCCLUSION_CHECK: "occlusion",
    keys.EXPLORER_TAB: "tab",
    keys.OUTPUTS_TAB: "view",
    keys.TRIAGE_POSITION: "suspect",
    keys.SLICE_CHOSEN: "slice",
    keys.MEASURE_MEMORY: "memory",
    keys.GRID_PAGE_SIZE: "per_page",
    keys.GRID_PAGE: "page",
    keys.EMBEDDING_PROJECTION: "projection",
    keys.EMBEDDING_COLOUR: "colour",
}
"""The widget keys (or ``per_source`` prefixes) a link carries, and the parameter of each; the
attribution settings' sliders (``keys.setting_key``) are ``m.NAME``."""


def allowed(config: AppConfig) -> links.Allowed:
    """What a link may name on this server: a hosted demo takes CIFAR-10 and shipped models."""
    options = service.model_options()
    kinds = ("cifar10",) if config.hosted else ("cifar10", "folder", "parquet", "stored")
    models = tuple(o.name for o in options if o.shipped or not config.hosted)
    methods = {
        name: {
            p.name: links.Range(p.shown[0], p.shown[1], p.whole, p.switch)
            for p in attribution.get(name).parameters
            if p.shown is not None
        }
        for name in attribution.METHOD_NAMES
    }
    return links.Allowed(
        kinds=kinds,
        models=models,
        strategies=strategies.NAMES,
        methods=methods,
        targets=TARGET_MODES,
        tabs=TABS,
        views=outputs.VIEWS,
        max_batch_size=config.max_batch_size,
        hosted=config.hosted,
        page_sizes=outputs.PAGE_SIZES,
        projections=embedding.available_projections(),
        colourings=embedding.COLOURINGS,
    )


def open_link(config: AppConfig) -> None:
    """On the session's first run, seed the page from its URL; show what was dropped."""
    session = st.session_state
    if not session.get(keys.LINK_OPENED):
        session[keys.LINK_OPENED] = True
        params = st.query_params.to_dict()
        if params:
            view, notes = links.from_params(params, allowed(config))
            session[keys.LINK_NOTES] = notes + apply_view(session, view, config)
    notes = session.pop(keys.LINK_NOTES, None)
    if notes:
        st.warning("This link was opened with changes:\n\n" + "\n".join(f"- {n}" for n in notes))


def apply_view(session: state.State, view: links.View, config: AppConfig) -> list[str]:
    """Set the widgets' state to ``view`` (before they are drawn); notes on what did not fit."""
    notes: list[str] = []
    if view.kind is None and (view.picks or view.size or view.start or view.seed is not None):
        # The batch without its source: the one the page opens on.
        kind = "stored" if config.outputs and config.allow_local_folder else "cifar10"
        view = replace(view, kind=kind, outputs=config.outputs or "")
    if view.kind is not None:
        base = DataChoice(
            kind=view.kind,
            split=view.split or "test",
            folder=view.folder,
            hosted=config.hosted,
            outputs=view.outputs,
        )
        source = None
        with guarded("Opening the link's images"):
            source = cache.source(base.source_key, base)
        if source is None:
            return [*notes, "The link's images cannot be opened here; the default source is used."]
        classes = len(source.class_names) or 1
        view, notes = links.fit_to_source(view, len(source), classes)
        # What the link leaves out is the page's default batch, which the picks were made in.
        view, more = links.fit_to_source(_with_defaults(view, base, config), len(source), classes)
        notes += more
        _seed_source(session, view, base)
    model = _model_identity(view.model)
    for key, value in (
        (keys.MODEL, model),
        (keys.STRATEGY, view.strategy),
        (keys.METHOD, view.method),
        (keys.TARGET_MODE, view.target),
        (keys.TARGET_CLASS, view.target_class),
        (keys.COLOUR_SCALE, view.scale),
        (keys.TRUST_BADGES, view.badges),
        (keys.OCCLUSION_CHECK, view.occlusion),
        (keys.MEASURE_MEMORY, view.memory),
        (keys.GRID_PAGE_SIZE, view.per_page),
        (keys.EMBEDDING_PROJECTION, view.projection),
        (keys.EMBEDDING_COLOUR, view.colour),
        (keys.EXPLORER_TAB, view.tab),
        (keys.OUTPUTS_TAB, view.view),
        (keys.TRIAGE_POSITION, view.suspect),
        (keys.SLICE_CHOSEN, view.slice),
        (keys.COMPARE_WITH, _compared(view.compare)),
    ):
        if value is not None:
            session[key] = value
    if view.layer is not None:
        # The layer box is per model: the link's model, else the one the page opens with.
        identity = model or service.model_options()[0].identity
        session[keys.per_source(keys.LAYER, identity)] = view.layer
    ranges = allowed(config).methods.get(view.method or "", {})
    for name, number in view.settings:
        shape = ranges[name]
        chosen = bool(number) if shape.switch else int(number) if shape.whole else number
        session[keys.setting_key(name)] = chosen
    return notes


def _with_defaults(view: links.View, base: DataChoice, config: AppConfig) -> links.View:
    """``view`` with the batch it leaves out (start or seed, size) as the page opens it."""
    held = sidebar.stored_batch(base) if base.kind == "stored" else None
    source = cache.source(base.source_key, base)
    default = service.default_batch(base, source, config.max_batch_size, held)
    if view.seed is None and view.start is None:
        start = None if default.seed is not None else default.start
        view = replace(view, seed=default.seed, start=start)
    return replace(view, size=view.size or default.size)


def _seed_source(session: state.State, view: links.View, base: DataChoice) -> None:
    """The source's widgets, and the picks, kept because they belong to the linked batch."""
    session[keys.SOURCE_KIND] = base.kind
    if base.kind == "stored":
        session[keys.OUTPUTS_PATH] = base.outputs
    else:
        session[keys.SPLIT] = base.split
    if base.kind in ("folder", "parquet"):
        session[keys.FOLDER_PATH] = base.folder
    key = base.source_key
    session[keys.per_source(keys.BATCH_SIZE, key)] = view.size
    sampled = view.seed is not None
    session[keys.per_source(keys.RANDOM_SAMPLE, key)] = sampled
    if sampled:
        session[keys.per_source(keys.SAMPLE_SEED, key)] = view.seed
    else:
        session[keys.per_source(keys.START, key)] = view.start or 0
    choice = replace(base, start=0 if sampled else view.start or 0, size=view.size, seed=view.seed)
    state.set_picked(session, view.picks)
    session[keys.PICKED_BATCH] = choice.batch_key
    if view.page is not None:
        per_page = view.per_page or outputs.PAGE_SIZES[0]
        session[keys.per_source(keys.GRID_PAGE, choice.batch_key, per_page)] = view.page


def _compared(name: str | None) -> str | None:
    """The Compare-with selector's value for a link's ``compare``."""
    if name == links.COMPARE_NONE:
        return keys.COMPARE_NOTHING
    return _model_identity(name)


def _model_identity(name: str | None) -> str | None:
    """The model selector's value for a built-in model's name."""
    if name is None:
        return None
    return next((o.identity for o in service.model_options() if o.name == name), None)


def view_of(loaded: Loaded, settings: Settings, session: state.State) -> links.View:
    """The view the page shows now, as a link names it (no uploads, no user's model)."""
    choice, option, request = loaded.choice, loaded.option, settings.request
    linkable = choice.kind != "upload"
    position = session.get(keys.TRIAGE_POSITION)
    chosen_slice = session.get(keys.SLICE_CHOSEN)
    memory_default = not app_config().hosted
    per_page = session.get(keys.GRID_PAGE_SIZE, outputs.PAGE_SIZES[0])
    page = session.get(keys.per_source(keys.GRID_PAGE, loaded.key, per_page))
    built_in = not option.factory and option.upload is None
    tab, view = session.get(keys.EXPLORER_TAB), session.get(keys.OUTPUTS_TAB)
    return links.View(
        kind=choice.kind if linkable else None,
        split=choice.split,
        folder=choice.folder,
        outputs=choice.outputs,
        start=choice.start if linkable else None,
        size=choice.size if linkable else None,
        seed=choice.seed if linkable else None,
        model=option.name if built_in else None,
        strategy=request.strategy,
        picks=tuple(state.picked(session)) if linkable else (),
        method=request.method,
        settings=tuple((name, float(value)) for name, value in request.settings),
        target=request.target_mode,
        target_class=request.target_class,
        tab=tab if isinstance(tab, str) else None,
        view=view if isinstance(view, str) else None,
        layer=_layer(loaded, request.method),
        compare=_compare_name(session, option),
        suspect=position if isinstance(position, int) and linkable else None,
        slice=chosen_slice if isinstance(chosen_slice, int) and chosen_slice > 0 else None,
        scale=links.SCALES[1] if settings.shared_scale else None,
        badges=None if session.get(keys.TRUST_BADGES, True) else False,
        occlusion=True if session.get(keys.OCCLUSION_CHECK, False) else None,
        memory=None if settings.measure_memory == memory_default else settings.measure_memory,
        per_page=None if per_page == outputs.PAGE_SIZES[0] else per_page,
        page=page if isinstance(page, int) and page > 1 and linkable else None,
        projection=_unless(session.get(keys.EMBEDDING_PROJECTION), embedding.PROJECTIONS[0]),
        colour=_unless(session.get(keys.EMBEDDING_COLOUR), embedding.COLOURINGS[0]),
    )


def _unless(value: object, default: str) -> str | None:
    """A widget's value for a link: None at the page's default (or before it is drawn)."""
    return value if isinstance(value, str) and value != default else None


def _layer(loaded: Loaded, method: str) -> str | None:
    """The layer chosen for a layer method, unless it is the automatic one."""
    if method not in attribution.LAYER_METHODS:
        return None
    chosen = layer_select.chosen(loaded)
    if chosen is None or chosen == layer_select.candidates(loaded).automatic:
        return None
    return chosen


def _compare_name(session: state.State, first: service.ModelOption) -> str | None:
    """The built-in model compared with (``none`` for nothing, where the page's default is a
    model); a model by name or a stored folder is not in links, as the first model's are not."""
    chosen = session.get(keys.COMPARE_WITH)
    if chosen is None or chosen == sidebar.compare_default(app_config(), first):
        return None
    if chosen == keys.COMPARE_NOTHING:
        return links.COMPARE_NONE
    return next((o.name for o in service.model_options() if o.identity == chosen), None)


def follow(loaded: Loaded, settings: Settings) -> dict[str, str]:
    """Write the current view into the page's URL (when it changed); its parameters."""
    params = view_of(loaded, settings, st.session_state).to_params()
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)
    return params


def show_link(params: Mapping[str, str], label: str = "Link to this view") -> None:
    """A button that opens the full link, in a code box whose copy button puts it on the
    clipboard. The browser draws a popover's content only once it is opened: a code box on the
    page itself cost a first page 0.6-1.1 s of the browser's main thread on two cores (its
    highlighter's code and font), and every new session the same."""
    with st.popover(label, icon=":material/link:"):
        if "src" not in params:
            st.caption("Uploaded images cannot be linked.")
        st.code(link_url(params), language=None, wrap_lines=True)


def link_url(params: Mapping[str, str]) -> str:
    """The page's own address with ``params`` as its query (relative when it is unknown)."""
    here = st.context.url or ""
    parts = urlsplit(here)
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", urlencode(params), ""))
