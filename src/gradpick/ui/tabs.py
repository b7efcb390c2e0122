"""A row of tabs of which only the open one is drawn: one home for both rows' lookup.

Switching tabs reruns the page part they sit in (``on_change="rerun"``), so a run draws the open
tab alone and the closed tabs' widgets keep their values (``state.keep_closed_tabs``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from gradpick.ui import state

__all__ = ["open_tab", "tab_row"]


def tab_row(
    names: Sequence[str], key: str, widgets: Mapping[str, Collection[str]]
) -> tuple[list[DeltaGenerator], int]:
    """Draw the tabs ``names``; every tab's container and the open one's position (the first
    until another is chosen). A closed tab's container stays on the page, hidden, with what a
    run draws into it.

    ``widgets`` names each tab's widget keys, kept while it is closed."""
    tabs = st.tabs(list(names), key=key, on_change="rerun")
    position = next(position for position, tab in enumerate(tabs) if tab.open)
    state.keep_closed_tabs(st.session_state, key, names[position], widgets)
    return list(tabs), position


def open_tab(
    names: Sequence[str], key: str, widgets: Mapping[str, Collection[str]]
) -> tuple[DeltaGenerator, str]:
    """``tab_row`` for a run that draws the open tab alone: its container and its name."""
    tabs, position = tab_row(names, key, widgets)
    return tabs[position], names[position]
