"""The Streamlit explorer behind ``app.py``.

``service``, ``heatmaps``, ``experiments``, ``figures``, ``state``, ``keys`` and ``config`` are
plain Python (importable and testable without a Streamlit runtime); ``cache`` wraps the service
in Streamlit's caches, and ``page`` with its panels (``sidebar``, ``outputs``,
``gradients_panel``, ``strategies_panel``) draws the page. ``keys`` names every widget and
session key, for the page and for the browser tests that find them.

The explorer's packages (Streamlit, plotly) come with the ``app`` extra, so that ``pip install
gradpick`` stays a library; importing the explorer without them names the extra to install.
"""

import importlib.util

from gradpick.errors import MissingExtraError

__all__ = ["APP_PACKAGES"]

APP_PACKAGES = ("streamlit", "plotly")

_missing = [name for name in APP_PACKAGES if importlib.util.find_spec(name) is None]
if _missing:
    raise MissingExtraError(
        f"The explorer needs {' and '.join(_missing)}, which come with gradpick's app extra: "
        "pip install 'gradpick[app]'"
    )
