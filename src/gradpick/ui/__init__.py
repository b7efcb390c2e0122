"""The Streamlit explorer behind ``app.py``.

``service``, ``heatmaps``, ``experiments``, ``figures``, ``state`` and ``config`` are plain
Python (importable and testable without a Streamlit runtime); ``cache`` wraps the service in
Streamlit's caches, and ``page`` with its panels (``sidebar``, ``outputs``, ``gradients_panel``,
``strategies_panel``) draws the page.
"""
