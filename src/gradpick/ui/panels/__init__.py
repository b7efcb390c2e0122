"""The explorer's panels: one module per tab, named as the tab reads, and the sidebar.

A panel draws with Streamlit and calls the plain modules of ``gradpick.ui``; no panel imports
another.
"""

__all__: list[str] = []
