"""A row of tabs of which only the open one is drawn: one home for both rows' lookup.

Switching tabs reruns the page part they sit in (``on_change="rerun"``), so a run draws the open
tab alone and the closed tabs' widgets keep their values (``state.keep_closed_tabs``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from gradpick.ui import state

__all__ = ["open_tab"]


def open_tab(
    names: Sequence[str], key: str, widgets: Mapping[str, Collection[str]]
) -> tuple[DeltaGenerator, str]:
    """Draw the tabs ``names`` and return the open one and its name (the first until another is
    chosen).

    ``widgets`` names each tab's widget keys, kept while it is closed."""
    tabs = st.tabs(list(names), key=key, on_change="rerun")
    position = next(position for position, tab in enumerate(tabs) if tab.open)
    state.keep_closed_tabs(st.session_state, key, names[position], widgets)
    return tabs[position], names[position]
