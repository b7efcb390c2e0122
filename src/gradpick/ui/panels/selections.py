"""The link to this view, and named selections: save the picks, reopen, rename or delete them.

Locally they are kept beside the batch's store (``gradpick.picking.named``), so another session
or a restarted server finds them; a hosted demo keeps them in the visitor's session only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import streamlit as st

from gradpick.errors import GradpickError
from gradpick.outputs import stores as stored
from gradpick.picking.named import NamedSelection, SelectionShelf, SessionShelf, Shelf
from gradpick.ui import keys, linking, links, state
from gradpick.ui.config import AppConfig, app_config
from gradpick.ui.session import Loaded, Settings

__all__ = ["render", "shelf_of"]

_WIDGETS = (
    keys.SELECTION_NAME,
    keys.SELECTION_NOTE,
    keys.SELECTION_CHOSEN,
    keys.SELECTION_NEW_NAME,
)
"""The expander's widgets whose values outlast its closing."""


def shelf_of(loaded: Loaded, settings: Settings, config: AppConfig) -> Shelf:
    """Where this batch's selections are kept: beside its store, or (hosted) in the session."""
    if config.hosted:
        kept = st.session_state.setdefault(keys.SELECTIONS_KEPT, SessionShelf())
        assert isinstance(kept, SessionShelf)
        return kept
    if loaded.choice.kind == "stored":
        return SelectionShelf.beside(Path(loaded.choice.outputs.strip()))
    # The store's path hashes the folder's listing (a stat per file): once per batch and model.
    which = (loaded.key, loaded.option.identity)
    memo = st.session_state.get(keys.SELECTIONS_STORE)
    if not (isinstance(memo, tuple) and memo[0] == which):
        assert settings.source is not None
        source = settings.source.at_spec(loaded.served.spec)
        memo = (which, stored.own_store_path(loaded.served, source, loaded.batch))
        st.session_state[keys.SELECTIONS_STORE] = memo
    return SelectionShelf.beside(memo[1])


def render(loaded: Loaded, settings: Settings, params: Mapping[str, str]) -> None:
    """The link, then the named selections of this batch."""
    session = st.session_state
    if session.pop(keys.SELECTION_REOPENED, False):
        st.rerun()  # the sidebar shows what the reopened selection set: a page run
    linking.show_link(params)
    config = app_config()
    # Drawn only while open: a click's rerun neither reads the shelf nor sends its widgets.
    named = st.expander("Named selections", key=keys.SELECTIONS_OPEN, on_change="rerun")
    if not named.open:
        state.keep(session, *_WIDGETS)
        return
    with named:
        shelf = shelf_of(loaded, settings, config)
        if isinstance(shelf, SelectionShelf):
            st.caption(f"Kept beside the batch's store, in {shelf.path}.")
        else:
            st.caption(
                "This demo keeps named selections in your session only (nothing is written "
                "on the server): they are gone when the page closes; their links still work."
            )
        message = session.pop(keys.SELECTIONS_MESSAGE, None)
        if message:
            st.error(message)
        _save_form(shelf, params, state.picked(session))
        try:
            kept = shelf.all()
        except GradpickError as error:
            st.error(str(error))
            return
        if kept:
            _kept(shelf, kept, config)


def _save_form(shelf: Shelf, params: Mapping[str, str], picks: list[int]) -> None:
    with st.form(keys.SELECTION_SAVE, clear_on_submit=True, border=False):
        name = st.text_input("Name", key=keys.SELECTION_NAME, max_chars=80)
        note = st.text_area("Note", key=keys.SELECTION_NOTE, height=68)
        saved = st.form_submit_button(f"Save the {len(picks)} picks", disabled=not picks)
    if saved:
        try:
            shelf.save(NamedSelection(name.strip(), tuple(picks), note, dict(params)))
            st.success(f"Saved {name.strip()!r}.")
        except GradpickError as error:
            st.error(str(error))


def _kept(shelf: Shelf, kept: list[NamedSelection], config: AppConfig) -> None:
    by_name = {selection.name: selection for selection in kept}
    name = st.selectbox("Saved selections", list(by_name), key=keys.SELECTION_CHOSEN)
    chosen = by_name.get(name or "", kept[0])
    st.caption(
        f"{len(chosen.picks)} picks ({', '.join(map(str, chosen.picks[:12]))}"
        f"{', …' if len(chosen.picks) > 12 else ''}), saved {chosen.time}"
        + (f": {chosen.note}" if chosen.note else "")
    )
    linking.show_link(chosen.params, f"Link to {chosen.name!r}")
    reopen, delete = st.columns(2)
    reopen.button(
        "Reopen",
        key=keys.SELECTION_REOPEN,
        on_click=_reopen,
        args=(chosen, config),
        use_container_width=True,
    )
    delete.button(
        "Delete",
        key=keys.SELECTION_DELETE,
        on_click=_act,
        args=(shelf.delete, chosen.name),
        use_container_width=True,
    )
    new_name = st.text_input("New name", key=keys.SELECTION_NEW_NAME)
    st.button(
        "Rename",
        key=keys.SELECTION_RENAME,
        disabled=not new_name.strip(),
        on_click=_act,
        args=(shelf.rename, chosen.name, new_name.strip()),
    )


def _act(action: Callable[..., None], *names: str) -> None:
    """Delete or rename (a callback); a refusal is shown on the next run."""
    try:
        action(*names)
    except GradpickError as error:
        st.session_state[keys.SELECTIONS_MESSAGE] = str(error)


def _reopen(selection: NamedSelection, config: AppConfig) -> None:
    """Seed the page from the selection's link (a callback, before any widget is drawn)."""
    session = st.session_state
    view, notes = links.from_params(selection.params, linking.allowed(config))
    session[keys.LINK_NOTES] = notes + linking.apply_view(session, view, config)
    session[keys.SELECTION_REOPENED] = True
