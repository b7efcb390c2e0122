"""The explorer: ``streamlit run app.py`` (or ``make run``); the logic is in ``gradpick.ui``.

``streamlit run`` finds ``app`` below, an ``st.App``: it imports this file once when the server
starts, whose start-up hook does the explorer's warm-up (``gradpick.ui.warmup``) and serves once
the first page's part of it is done, then runs the file as ``__main__`` for every page.
"""

import streamlit as st

from gradpick.ui.warmup import lifespan

if __name__ == "__main__":  # a page run
    from gradpick.ui.start import run

    run()
else:  # the server's start
    app = st.App(__file__, lifespan=lifespan)
