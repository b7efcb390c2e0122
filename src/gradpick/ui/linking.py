"""The page's URL follows its view, and a URL someone sent reopens it (``gradpick.ui.links``).

``open_link`` runs first thing on a session's first run: it reads ``st.query_params``, keeps
what this server allows, and seeds the widgets' session state before any widget is created,
so the sidebar, the picks and the tabs come up as the link says; what it dropped is shown as
a note. ``follow`` writes the current view back into the URL on every run, and ``show_link``
draws the full link with a copy button (``st.code``'s own).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from urllib.parse import urlencode, urlsplit, urlunsplit

import streamlit as st

from gradpick import attribution, strategies
from gradpick.ui import cache, keys, links, outputs, service, state
from gradpick.ui.config import AppConfig
from gradpick.ui.guard import guarded
from gradpick.ui.heatmaps import TARGET_MODES
from gradpick.ui.service import DataChoice
from gradpick.ui.session import Loaded, Settings

__all__ = [
    "TABS",
    "allowed",
    "apply_view",
    "follow",
    "link_url",
    "open_link",
    "show_link",
    "view_of",
]

TABS = ("Explore", "Strategies", "Trust", "Compare", "Triage")
"""The explorer's tabs, as the page names them (and the links do)."""


def allowed(config: AppConfig) -> links.Allowed:
    """What a link may name on this server: a hosted demo takes CIFAR-10 and shipped models."""
    options = service.model_options()
    kinds = ("cifar10",) if config.hosted else ("cifar10", "folder", "parquet", "stored")
    models = tuple(o.name for o in options if o.shipped or not config.hosted)
    methods = {
        name: {
            p.name: links.Range(p.shown[0], p.shown[1], p.whole)
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
        total = len(source)
        view, notes = links.fit_to_source(view, total, len(source.class_names) or 1)
        if view.size is None:  # the sidebar's default, which the picks were made in
            limit = min(total, config.max_batch_size or total)
            view = replace(view, size=min(service.DEFAULT_BATCH_SIZE, limit))
            view, more = links.fit_to_source(view, total, len(source.class_names) or 1)
            notes += more
        _seed_source(session, view, base)
    for key, value in (
        (keys.MODEL, _model_identity(view.model)),
        (keys.STRATEGY, view.strategy),
        (keys.METHOD, view.method),
        (keys.TARGET_MODE, view.target),
        (keys.TARGET_CLASS, view.target_class),
        (keys.EXPLORER_TAB, view.tab),
        (keys.OUTPUTS_TAB, view.view),
    ):
        if value is not None:
            session[key] = value
    ranges = allowed(config).methods.get(view.method or "", {})
    for name, number in view.settings:
        session[keys.setting_key(name)] = int(number) if ranges[name].whole else number
    return notes


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
    elif view.start is not None:
        session[keys.per_source(keys.START, key)] = view.start
    choice = replace(base, start=0 if sampled else view.start or 0, size=view.size, seed=view.seed)
    state.set_picked(session, view.picks)
    session[keys.PICKED_BATCH] = choice.batch_key


def _model_identity(name: str | None) -> str | None:
    """The model selector's value for a built-in model's name."""
    if name is None:
        return None
    return next((o.identity for o in service.model_options() if o.name == name), None)


def view_of(loaded: Loaded, settings: Settings, session: state.State) -> links.View:
    """The view the page shows now, as a link names it (no uploads, no user's model)."""
    choice, option, request = loaded.choice, loaded.option, settings.request
    linkable = choice.kind != "upload"
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
    )


def follow(loaded: Loaded, settings: Settings) -> dict[str, str]:
    """Write the current view into the page's URL (when it changed); its parameters."""
    params = view_of(loaded, settings, st.session_state).to_params()
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)
    return params


def show_link(params: Mapping[str, str], label: str = "Link to this view") -> None:
    """The full link, in a code box whose copy button puts it on the clipboard."""
    st.caption(label + (" (uploaded images cannot be linked)." if "src" not in params else ""))
    st.code(link_url(params), language=None, wrap_lines=True)


def link_url(params: Mapping[str, str]) -> str:
    """The page's own address with ``params`` as its query (relative when it is unknown)."""
    here = st.context.url or ""
    parts = urlsplit(here)
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", urlencode(params), ""))
