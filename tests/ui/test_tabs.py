"""``tabs.open_tab`` in a page of its own: the open tab alone is drawn (the first one until
another is chosen), into the one container the page style does not hide, and a closed tab's
widget keeps its value."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import Block


def _page() -> None:
    import streamlit as st

    from gradpick.ui import tabs

    tab, shown = tabs.open_tab(["One", "Two"], "tabs", {"One": ["one_text"], "Two": ["two_text"]})
    with tab:
        st.write(f"open: {shown}")
        st.text_input("text", key=f"{shown.lower()}_text")


def _drawn(app: AppTest) -> dict[str, int]:
    """Each tab container's key and how many elements it holds."""
    return {
        block.key: len(block.children)
        for block in app.main.children.values()
        if isinstance(block, Block) and block.key is not None
    }


def test_the_first_tab_is_open_and_drawn_alone() -> None:
    app = AppTest.from_function(_page).run()
    assert not app.exception
    assert [markdown.value for markdown in app.markdown] == ["open: One"]
    assert _drawn(app) == {"tabs_pane_0": 2, "hidden_tabs_pane_1": 0}


def test_a_chosen_tab_is_drawn_alone_and_the_closed_one_keeps_its_text() -> None:
    app = AppTest.from_function(_page).run()
    app.text_input(key="one_text").input("kept").run()
    app.session_state["tabs"] = "Two"
    app.run()
    assert [markdown.value for markdown in app.markdown] == ["open: Two"]
    assert _drawn(app) == {"hidden_tabs_pane_0": 0, "tabs_pane_1": 2}
    assert app.session_state["one_text"] == "kept"
    app.session_state["tabs"] = "One"
    app.run()
    assert app.text_input(key="one_text").value == "kept"


def test_the_tabs_are_a_segmented_control_and_a_value_no_tab_has_opens_the_first() -> None:
    app = AppTest.from_function(_page).run()
    assert app.get("button_group")[0].options == ["One", "Two"]
    app.session_state["tabs"] = "Three"
    app.run()
    assert not app.exception
    assert [markdown.value for markdown in app.markdown] == ["open: One"]
    assert app.session_state["tabs"] == "One"
