"""A failing section shows one clear message, never a traceback, and the page goes on."""

from __future__ import annotations

import logging

import pytest
from streamlit.testing.v1 import AppTest


def page() -> None:
    import streamlit as st

    from gradpick.errors import SelectionError
    from gradpick.ui.guard import guarded

    with guarded("The gradients"):
        raise SelectionError("Index 99 is out of range.")
    with guarded("The outputs"):
        raise KeyError("boom")
    st.write("still drawn")


def test_errors_become_messages_and_tracebacks_go_to_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="gradpick.ui"):
        app = AppTest.from_function(page).run()
    assert not app.exception
    assert [error.value for error in app.error] == [
        "Index 99 is out of range.",
        "The outputs failed: KeyError: 'boom' (the full traceback is in the server's log).",
    ]
    assert not app.code and not app.expander
    assert app.markdown[-1].value == "still drawn"
    logged = [record for record in caplog.records if record.name == "gradpick.ui"]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert "The outputs failed" in logged[0].getMessage()
