"""A row of tabs of which only the open one is drawn: one home for both rows' lookup.

The row is a segmented control over one container per tab, the closed tabs' hidden by the page
style (their key starts with ``keys.HIDDEN_KEY_PREFIX``), not ``st.tabs``: the browser library
behind Streamlit's tabs watches the open panel and, after every change inside it, looks for a
focusable element by checking each one's visibility, which makes the browser recompute the
page's styles; a click that redraws the maps and the charts changed the panel some twenty times
and spent 70-120 ms of the browser's main thread there. Switching tabs reruns the page part the
row sits in (the control's change reruns its fragment), so a run draws the open tab alone and
the closed tabs' widgets keep their values (``state.keep_closed_tabs``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from gradpick.ui import keys, state

__all__ = ["open_tab", "tab_row"]


def tab_row(
    names: Sequence[str], key: str, widgets: Mapping[str, Collection[str]]
) -> tuple[list[DeltaGenerator], int]:
    """Draw the tabs ``names``; every tab's container and the open one's position (the first
    until another is chosen). A closed tab's container stays on the page, hidden, with what a
    run draws into it.

    ``widgets`` names each tab's widget keys, kept while it is closed. A row above the
    thumbnails is named in ``keys.TAB_ROWS``, whose placeholders the page style sizes."""
    session = st.session_state
    if session.get(key) not in names:  # the first run, or a value no tab has
        session[key] = names[0]
    shown = st.segmented_control(
        "Tabs", list(names), key=key, required=True, label_visibility="collapsed"
    )
    position = list(names).index(shown or names[0])  # never None: a tab was set above
    state.keep_closed_tabs(session, key, names[position], widgets)
    containers = [
        st.container(key=keys.tab_pane(key, number, shown=number == position))
        for number in range(len(names))
    ]
    return containers, position


def open_tab(
    names: Sequence[str], key: str, widgets: Mapping[str, Collection[str]]
) -> tuple[DeltaGenerator, str]:
    """``tab_row`` for a run that draws the open tab alone: its container and its name."""
    tabs, position = tab_row(names, key, widgets)
    return tabs[position], names[position]
