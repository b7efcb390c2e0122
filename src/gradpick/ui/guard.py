"""Each section of the page fails on its own: a clear message instead of a traceback."""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from gradpick.errors import GradpickError


@contextmanager
def guarded(what: str) -> Iterator[None]:
    """Run a section; a gradpick error shows its message, anything else a short error with
    the details folded away. Streamlit's own rerun/stop signals are BaseExceptions and pass."""
    try:
        yield
    except GradpickError as error:
        st.error(str(error))
    except Exception as error:
        st.error(f"{what} failed: {type(error).__name__}: {str(error)[:300]}")
        with st.expander("Details"):
            st.code(traceback.format_exc(), language="text")
