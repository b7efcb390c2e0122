"""The floor of a click in Streamlit: a page with nothing but what a click must change.

A fragment holds a 100-point plotly chart over one image (the thumbnail grid's shape) and,
once a point is picked, one image captioned with its index and two readouts, plus
``FLOOR_EXTRA`` elements that no click changes (``FLOOR_KIND``: captions, metrics, download
buttons, or download buttons in a closed popover); ``FLOOR_SIDEBAR`` widgets sit outside it.
``FLOOR_GRID=image`` draws the sheet as a plain image instead of the chart (nothing to click):
what a first page costs without Streamlit's plotly bundle.
``tools/floor.py`` serves it and times clicks on it as the explorer benchmark times the app.
"""

from __future__ import annotations

import base64
import io
import os
import time

import numpy as np
import plotly.graph_objects as go
import streamlit as st
from PIL import Image

from gradpick.ui import keys

SIDE = 10
GENERATOR = np.random.default_rng(0)


SHEET_IMAGE = Image.fromarray(GENERATOR.integers(0, 255, (32 * SIDE, 32 * SIDE, 3), dtype=np.uint8))


def _sheet() -> str:
    buffer = io.BytesIO()
    SHEET_IMAGE.save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


SHEET = _sheet()


@st.fragment
def _clicked_part(extra: int) -> None:
    started = time.perf_counter()
    event = st.session_state.get(keys.GRID_CHART) or {}
    picked = [int(point["point_index"]) for point in event.get("selection", {}).get("points", [])]
    centres = [(i % SIDE + 0.5, i // SIDE + 0.5) for i in range(SIDE * SIDE)]
    figure = go.Figure(
        go.Scatter(
            x=[x for x, _ in centres],
            y=[y for _, y in centres],
            mode="markers",
            customdata=list(range(SIDE * SIDE)),
            marker={"size": 28, "opacity": 0.05, "symbol": "square"},
        )
    )
    figure.add_layout_image(
        source=SHEET, x=0, y=0, sizex=SIDE, sizey=SIDE, xref="x", yref="y",
        sizing="stretch", layer="below", yanchor="top",
    )  # fmt: skip
    figure.update_xaxes(range=[0, SIDE], visible=False)
    figure.update_yaxes(range=[SIDE, 0], visible=False)
    figure.update_layout(height=500, margin={"l": 0, "r": 0, "t": 0, "b": 0})
    left, right = st.columns(2)
    with left:
        if os.environ.get("FLOOR_GRID", "plotly") == "image":  # the sheet alone, no chart
            st.image(SHEET_IMAGE, width=500)
        else:
            st.plotly_chart(
                figure, key=keys.GRID_CHART, on_select="rerun", selection_mode=("points", "box")
            )
    with right, st.container(key=keys.HEATMAPS_CONTAINER):
        if picked:
            strip = GENERATOR.integers(0, 255, (32, 32 * 5, 3), dtype=np.uint8)
            st.image(Image.fromarray(strip).resize((640, 128)), caption=f"#{picked[0]}")
        elapsed = (time.perf_counter() - started) * 1000
        st.metric("Server time for this update", f"{elapsed:,.0f} ms")
    _unchanged(extra, os.environ.get("FLOOR_KIND", "caption"))


def _unchanged(count: int, kind: str) -> None:
    """``count`` elements of ``kind`` that no click changes (``popover``: download buttons in a
    closed popover)."""
    if kind == "popover":
        with st.popover("Downloads"):
            _unchanged(count, "download")
        return
    for number in range(count):
        if kind == "metric":
            st.metric(f"Readout {number}", f"{number:,} ms", help="A readout no click changes")
        elif kind == "download":
            st.download_button(f"File {number}", data=b"x", file_name=f"{number}.txt")
        else:
            st.caption(f"A caption no click changes, number {number}")


st.set_page_config(layout="wide")  # as the explorer's
with st.sidebar:
    for number in range(int(os.environ.get("FLOOR_SIDEBAR", "0"))):
        st.selectbox(f"Setting {number}", ["a", "b", "c"], key=f"setting_{number}")
_clicked_part(int(os.environ.get("FLOOR_EXTRA", "0")))
