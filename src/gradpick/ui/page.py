"""The page: sidebar, then the batch's outputs, the picked images' gradients, the strategies.

``main`` is all ``app.py`` calls. Each section is guarded, so a failure in one shows a message
and leaves the others working.

Everything below the readouts is one fragment (``_explorer``): a click, a picker or a tab switch
reruns only it, not the sidebar, the loading and the readouts; a change in the sidebar reruns
the whole page.
"""

from __future__ import annotations

import time

import streamlit as st

from gradpick.ui import (
    cache,
    gradients_panel,
    outputs,
    process,
    service,
    sidebar,
    state,
    strategies_panel,
)
from gradpick.ui.config import (
    HOSTED_MAX_BATCH_SIZE,
    HOSTED_MAX_IMAGE_BYTES,
    HOSTED_MAX_UPLOAD_FILES,
    app_config,
)
from gradpick.ui.guard import guarded
from gradpick.ui.outputs import Loaded

PIXELATED = """<style>
.js-plotly-plot image, [data-testid="stImage"] img { image-rendering: pixelated; }
</style>"""
"""Thumbnails and heatmaps are scaled by the browser too: keep their pixels sharp."""


HOSTED_NOTE = (
    f"Hosted demo: local folders and your own model code are off; uploads take at most "
    f"{HOSTED_MAX_UPLOAD_FILES} images of {HOSTED_MAX_IMAGE_BYTES >> 20} MB each, and batches "
    f"at most {HOSTED_MAX_BATCH_SIZE:,} images. Run gradpick locally to lift these limits."
)


def _load(settings: sidebar.Settings) -> Loaded | None:
    """The batch, the model and their inference outputs, each from its cache."""
    choice, source = settings.data, settings.source
    if choice is None or source is None:
        st.info("Choose a data source in the sidebar to begin.")
        return None
    loaded: Loaded | None = None
    with guarded("Loading the batch and the model"):
        option, device = settings.model, settings.device
        model = cache.model(option.identity, str(device), option)
        classes = cache.output_count(option.identity, str(device), model)
        batch, note = service.fit_classes(
            cache.batch(choice.batch_key, source, choice), classes, option.class_names
        )
        if note:
            st.warning(note)
        result = cache.inference(choice.batch_key, option.identity, str(device), model, batch)
        hover = cache.hover_lines(choice.batch_key, option.identity, batch, result)
        loaded = Loaded(choice, batch, option, model, device, result, hover)
    return loaded


def main() -> None:
    started = time.perf_counter()
    config = app_config()
    if config.hosted:
        process.return_freed_memory_promptly()
    st.set_page_config(page_title="gradpick", page_icon=":mag:", layout="wide")
    st.markdown(PIXELATED, unsafe_allow_html=True)
    gradients_panel.absorb_target_click()
    if config.problem is not None:
        st.error(config.problem)
    settings = sidebar.render(config)
    st.title("gradpick")
    st.caption(
        "Exact input gradients d target_j / d image_j for the images you pick out of an "
        "already-inferred batch."
    )
    if config.hosted:
        st.caption(HOSTED_NOTE)
    loaded = _load(settings)
    if loaded is None:
        return
    outputs.readouts(loaded)
    st.session_state[state.RUN_STARTED] = started
    _explorer(loaded, settings)


@st.fragment
def _explorer(loaded: Loaded, settings: sidebar.Settings) -> None:
    """The outputs, the picked images' gradients and the strategies: what a click changes."""
    session = st.session_state
    started = session.pop(state.RUN_STARTED, None) or time.perf_counter()
    if state.pending_selection(session, state.PROBABILITY_CHART):
        st.rerun()  # a bar click sets the target class, which the sidebar shows: a page run
    outputs.absorb_selections(loaded)
    explore, strategies = st.tabs(["Explore", "Strategies"])
    with explore:
        # The outputs sit above the gradients but are drawn after them: a click's heatmaps
        # reach the browser first, the charts' picked highlights follow.
        outputs_area = st.container()
        with guarded("The gradients"):
            gradients_panel.render_panel(loaded, settings, started)
        with outputs_area, guarded("The outputs"):
            outputs.render(loaded)
    with strategies, guarded("The strategies"):
        strategies_panel.render(loaded, settings)
