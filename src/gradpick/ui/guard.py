"""Each section of the page fails on its own: a clear message instead of a traceback."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from gradpick.errors import GradpickError

__all__ = [
    "LOG",
    "guarded",
]

LOG = logging.getLogger("gradpick.ui")


@contextmanager
def guarded(what: str) -> Iterator[None]:
    """Run a section; a gradpick error shows its message, anything else a short error whose
    traceback goes to the server's log, not the page. Streamlit's own rerun/stop signals are
    BaseExceptions and pass."""
    try:
        yield
    except GradpickError as error:
        st.error(str(error))
    except Exception as error:
        LOG.exception("%s failed", what)
        st.error(
            f"{what} failed: {type(error).__name__}: {str(error)[:300]} "
            "(the full traceback is in the server's log)."
        )
