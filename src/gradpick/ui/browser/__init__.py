"""Scripts that act on the page in the browser, and the one frame they share.

Each builds the JavaScript for one behaviour Streamlit has no widget for (the pick outlines,
the hover thumbnail, the pixel readout); ``frame`` injects them from a hidden iframe.
"""

__all__: list[str] = []
