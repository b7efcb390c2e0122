"""The Streamlit explorer behind ``app.py``.

``service``, ``heatmaps``, ``experiments``, ``figures``, ``state``, ``keys`` and ``config`` are
plain Python (importable and testable without a Streamlit runtime); ``cache`` wraps the service
in Streamlit's caches, and ``page`` with its panels (``sidebar``, ``outputs``,
``gradients_panel``, ``strategies_panel``) draws the page. ``keys`` names every widget and
session key, for the page and for the browser tests that find them.
"""
