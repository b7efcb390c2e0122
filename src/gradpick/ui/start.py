"""What a page run sends before it imports torch, the model zoo and the panels.

On a server's first page those imports take seconds, and the browser waits for them idle. The
browser's own slowest step of that page, loading and evaluating Streamlit's plotly bundle
(4.7 MB; about 1.2 s in a headless chromium on two cores), starts only when the first chart
arrives. ``run`` sends the page's frame and an invisible empty chart first, so the browser loads
plotly while the server imports, and clears that chart when the run ends. This module imports
only streamlit: everything heavier is imported inside ``run``, after the frame is sent.

Streamlit's browser code loads each kind of element's own code (a metric, a popover, a chart)
only when the first one arrives, and draws a 40 px placeholder meanwhile. On a busy browser that
code came seconds after the readouts' metrics and the link's code block, which then grew under
the thumbnails already shown: the grid moved down 74 px, and a click aimed at a thumbnail missed.
So the frame also holds one hidden metric, popover and segmented control (the link's button,
``gradpick.ui.linking.show_link``; the rows of tabs, ``gradpick.ui.tabs``), each labelled
``_LAZY_ABOVE_GRID``: their code is loaded while the server works, before anything the page
draws needs it. (The link's code box is drawn only in its opened popover.)

The imports, the model and the default batch are ``gradpick.ui.warmup``'s, begun when the server
started (or here, by a server's first page run): a run that finds them under way sends the frame
and the chart, then waits for them. Where they are done already (any run after the first few),
the chart waits until the page's batch is inferred: a session opened on a new sample would
otherwise infer while its browser evaluates plotly on the same cores (five later sessions
inferred their 1,000 images at 530-670 img/s beside it, and at 770-1,390 once it waited).
"""

from __future__ import annotations

import sys

import streamlit as st

from gradpick.ui import warmup
from gradpick.ui.keys import (
    CLASS_PREFIX,
    HEATMAPS_CONTAINER,
    HIDDEN_KEY_PREFIX,
    PRELOAD_CONTAINER,
    READOUTS,
    TAB_ROWS,
)

__all__ = ["PAGE_STYLE", "run"]

_PLACEHOLDER = '[data-testid="stSkeleton"]'
_TAB_ROW_PLACEHOLDERS = ", ".join(f".{CLASS_PREFIX}{key} > {_PLACEHOLDER}" for key in TAB_ROWS)
PAGE_STYLE = f"""<style>
.js-plotly-plot image, [data-testid="stImage"] img {{ image-rendering: pixelated; }}
[class*="{CLASS_PREFIX}{HIDDEN_KEY_PREFIX}"],
[data-testid="stLayoutWrapper"]:has(> [class*="{CLASS_PREFIX}{HIDDEN_KEY_PREFIX}"]) {{
  display: none; }}
.{CLASS_PREFIX}{HEATMAPS_CONTAINER} [data-testid="stImageCaption"] {{ contain: inline-size; }}
body [data-testid="stSpinnerIcon"] {{
  animation-duration: 2s; animation-timing-function: steps(4); }}
body:has([data-testid="stProgress"]) [data-testid="stSpinnerIcon"] {{ animation: none; }}
[data-testid="stApp"] * {{ transition-duration: 0s !important; }}
[data-testid="stMetricValue"] [data-testid="stMarkdownContainer"],
[data-testid="stMetricValue"] p {{ line-height: 1.3333; }}
.{CLASS_PREFIX}{READOUTS} {_PLACEHOLDER} {{ height: 4.75rem; }}
{_TAB_ROW_PLACEHOLDERS} {{ height: 2rem; }}
</style>"""
"""Thumbnails and heatmaps are scaled by the browser too: keep their pixels sharp. Hidden
containers take no room, their wrapper's gap included (16 px above the page's elements for as
long as the preload container lasted, which closed when the run ended). A map's caption never
widens its picture: Streamlit stretches an image to a longer caption, so a failing map, whose
caption gives the reason, was drawn larger than the others (``contain: inline-size`` lets the
picture alone set the width; the caption wraps under it). No animation draws sixty frames a
second beside the server's work: the browser draws each frame on the cores that work needs.

* Streamlit's spinner turns a quarter every half second, and stands still while a progress bar
  reports the work; the bar steps to each value instead of gliding.
* Nothing in the app glides: what a run has not redrawn yet fades at once, 0.5 s in as before,
  instead of over a second, and so do the expanders' borders; a hover or a toggle changes at
  once too. The rule once held only while a run worked (``[data-test-script-state="running"]
  *``), but that attribute of the app's root flips at every run's start and end, and each flip
  made the browser recompute the style of every element of the page: per click on a thumbnail,
  84-153 ms of style work against 12-44 ms with the rule always on.

Nothing above the thumbnails changes height once drawn, so the grid stays under the pointer:

* A metric's value is as tall in any font: its line height is set to the web font's own (4/3,
  48 px), where the browser's "normal" took each font's: in the fallback font, drawn until the
  web font arrives, the metrics were 6 px shorter, and the grid moved when it came.
* An element whose code has not arrived yet is drawn as a 40 px placeholder (the frame preloads
  that code, but on a busy browser it can still come after the grid): above the grid, the
  placeholders of the readouts' metrics and of the rows of tabs are as tall as the elements
  (76 px, 32 px; the grid moved 8 px in a hosted CI run, 16-36 px with their code held back).

On two cores, 10,000 images inferred about 6% slower beside the spinner and the bar. Beside
the spinner and the fades, a sample of 1,000 changed in an open page took the browser 0.54
cores of the inference's two; without them, 0.24."""

_PAGE_MODULE = "gradpick.ui.page"
"""Imported by a process's first page run (or its launcher), with torch and every panel."""

_LAZY_ABOVE_GRID = "preload"
"""The label of the hidden metric, popover and segmented control: the kinds of element above
the thumbnail grid whose code Streamlit's browser loads only when the first one arrives (the
sidebar's widgets load theirs before)."""

_INVISIBLE_CHART = {
    "data": [{"type": "scatter", "x": [0], "y": [0], "marker": {"opacity": 0}}],
    "layout": {
        "height": 10,
        "margin": {"l": 0, "r": 0, "t": 0, "b": 0},
        "xaxis": {"visible": False},
        "yaxis": {"visible": False},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
    },
}


def run() -> None:
    """The whole page: frame and preloaded element code, then ``gradpick.ui.page.main``."""
    st.set_page_config(page_title="gradpick", page_icon=":mag:", layout="wide")
    st.markdown(PAGE_STYLE, unsafe_allow_html=True)
    preload = st.empty()  # present on every run, so the elements after it keep their places

    hidden = preload.container(key=PRELOAD_CONTAINER)
    with hidden:
        st.metric(_LAZY_ABOVE_GRID, "", label_visibility="collapsed")
        st.popover(_LAZY_ABOVE_GRID)
        st.segmented_control(
            _LAZY_ABOVE_GRID, [_LAZY_ABOVE_GRID], required=True, label_visibility="collapsed"
        )

    def load_plotly() -> None:
        with hidden:
            st.plotly_chart(_INVISIBLE_CHART, config={"staticPlot": True, "displayModeBar": False})

    # The server's start-up hook began the warm-up; a server without one gets it here.
    begun = warmup.start(sys.argv[1:], origin=warmup.FIRST_PAGE_RUN)
    imported = begun.page_ready.is_set() and _PAGE_MODULE in sys.modules
    if not imported:
        warmup.import_charts()  # never beside the warm-up's own import of them
        load_plotly()
    from gradpick.runtime import process  # ctypes: light, and imported by the warm-up already

    try:
        warmup.wait_for_page()  # the imports, the model and the default batch
        from gradpick.ui.page import main

        # Once per process (the launcher did it already): Streamlit's full collection after
        # every run then skips the imported modules instead of delaying the click's elements.
        process.freeze_loaded_objects()
        main(after_inference=load_plotly if imported else None)
    finally:
        preload.empty()
        # Once per process, in place of Streamlit's collection as this first run ends.
        process.freeze_first_run_leftovers()
