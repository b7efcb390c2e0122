"""Plotly figures of the explorer, built from plain arrays (no Streamlit).

Selectable figures put the batch index of every image in its point's ``customdata`` (the
confusion matrix puts the cell's [true, predicted] pair there), so a click, box or lasso
selection maps back to images whatever the figure looks like. Colours are mid-tones readable on
light and dark backgrounds; the page draws figures with Streamlit's theme, which sets text and
grid colours to match the active theme.

Each figure is written as one dict and validated once: plotly's incremental ``add_*`` and
``update_*`` calls re-validate on every call and would cost most of a click's time budget.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import plotly.graph_objects as go
from PIL import Image

from gradpick import units
from gradpick.gradients import strategies
from gradpick.gradients.timing import FLOOR
from gradpick.show import render

__all__ = [
    "CHART_CONFIG",
    "CLASS_COLOURS",
    "NEUTRAL",
    "PICKED",
    "RIGHT",
    "SELECT_MODES",
    "THUMBNAIL_GAP",
    "THUMBNAIL_SIDE",
    "WEBGL_ABOVE",
    "WRONG",
    "DRAWN_AT_MOST",
    "confusion_matrix",
    "drawn_sample",
    "embedding_scatter",
    "faithfulness_lines",
    "outputs_scatter",
    "scatter_heights",
    "probability_bars",
    "randomisation_lines",
    "sample_note",
    "Series",
    "strategy_bars",
    "strategy_colour",
    "sweep_lines",
    "thumbnail_grid",
    "thumbnail_sheet",
    "Trace",
    "TrustSeries",
]

RIGHT = "#2f9e44"
WRONG = "#e03131"
PICKED = "#f08c00"
NEUTRAL = "#868e96"
CLASS_COLOURS = (
    "#4c6ef5",
    "#f76707",
    "#37b24d",
    "#e03131",
    "#ae3ec9",
    "#a0522d",
    "#e64980",
    "#868e96",
    "#99a000",
    "#1098ad",
)
THUMBNAIL_GAP = 2
"""Transparent pixels between thumbnails of a sheet, so the page background shows through."""
CHART_CONFIG: dict[str, Any] = {
    "displaylogo": False,
    "modeBarButtonsToRemove": ["toImage"],
    "plotGlPixelRatio": 1,
}
"""Plotly options of every chart on the page: no logo, no PNG export button, and WebGL charts
(scatters of more than ``WEBGL_ABOVE`` points) drawn at one canvas pixel per CSS pixel. Plotly's
default of two draws four times the pixels: about 100 ms more per new chart in a browser that
renders WebGL in software, each time the view is opened; a high-DPI screen shows those markers a
little softer."""
THUMBNAIL_SIDE = 64
"""Thumbnails of larger inputs are averaged down to this side: a page of 100 224-pixel images
would otherwise send a 2,260-pixel PNG for cells drawn about 56 pixels wide."""
WEBGL_ABOVE = 5000
"""Scatters with more points are drawn with WebGL: thousands of SVG markers make a page slow."""
DRAWN_AT_MOST = 10_000
"""Scatters of larger batches draw a seeded sample of this many points (``drawn_sample``): a
browser without a GPU takes seconds to draw and select 50,000 WebGL points, and the figure's
JSON grows with every point."""
SELECT_MODES: tuple[Literal["points", "box", "lasso"], ...] = ("points", "box", "lasso")

Trace = dict[str, Any]
Series = Mapping[str, tuple[Sequence[int], Sequence[float], Sequence[int | None]]]
"""Per strategy: (x values, milliseconds, peak bytes)."""


def strategy_colour(name: str) -> str:
    """The same colour for a strategy in every chart, whichever strategies a chart shows."""
    order = (FLOOR, *strategies.NAMES)
    return CLASS_COLOURS[order.index(name)] if name in order else NEUTRAL


def _class_colour(index: int) -> str:
    return CLASS_COLOURS[index % len(CLASS_COLOURS)]


def _figure(traces: list[Trace], height: int, select: bool = True, **layout: Any) -> go.Figure:
    """A figure with the explorer's compact layout.

    Selectable figures leave ``dragmode`` to Streamlit, which then makes a click select a point
    and offers box and lasso in the mode bar (a preset select dragmode would turn click
    selection off); the others zoom on drag.
    """
    base: dict[str, Any] = {
        "height": height,
        "margin": {"l": 10, "r": 10, "t": 30, "b": 10},
        "legend": {"itemsizing": "constant"},
    }
    if not select:
        base["dragmode"] = "zoom"
    return go.Figure({"data": traces, "layout": {**base, **layout}})


def _side_by_side(
    titles: Sequence[str], gap: float, widths: Sequence[float] | None = None
) -> dict[str, Any]:
    """Layout entries for subplots in a row, titled, without make_subplots.

    ``widths`` are relative panel widths (equal by default); ``gap`` is the paper fraction
    between neighbours.
    """
    count = len(titles)
    shares = list(widths) if widths is not None else [1.0] * count
    scale = (1.0 - gap * (count - 1)) / sum(shares)
    layout: dict[str, Any] = {"annotations": []}
    left = 0.0
    for position, (title, share) in enumerate(zip(titles, shares, strict=True)):
        suffix = "" if position == 0 else str(position + 1)
        width = share * scale
        right = min(left + width, 1.0)  # rounding must not push the last panel past 1
        layout[f"xaxis{suffix}"] = {"domain": [left, right], "anchor": f"y{suffix}"}
        layout[f"yaxis{suffix}"] = {"anchor": f"x{suffix}"}
        layout["annotations"].append(
            {
                "text": title,
                "x": left + width / 2,
                "y": 1.0,
                "xref": "paper",
                "yref": "paper",
                "xanchor": "center",
                "yanchor": "bottom",
                "showarrow": False,
            }
        )
        left += width + gap
    return layout


# ----------------------------------------------------------------------------- thumbnails


def thumbnail_sheet(images: np.ndarray, columns: int, side: int = THUMBNAIL_SIDE) -> bytes:
    """A PNG of uint8 [n, 3, H, W] images in rows of ``columns``, transparent between them;
    images taller than ``side`` are averaged down to it (``render.fit``)."""
    if images.shape[2] > side:
        images = np.stack([render.fit(image.transpose(1, 2, 0), side) for image in images])
        images = images.transpose(0, 3, 1, 2)
    count, _, height, width = images.shape
    rows = max(1, math.ceil(count / columns))
    cell_h, cell_w = height + THUMBNAIL_GAP, width + THUMBNAIL_GAP
    sheet = np.zeros((rows * cell_h, columns * cell_w, 4), dtype=np.uint8)
    for position, image in enumerate(images):
        top = (position // columns) * cell_h + THUMBNAIL_GAP // 2
        left = (position % columns) * cell_w + THUMBNAIL_GAP // 2
        sheet[top : top + height, left : left + width, :3] = image.transpose(1, 2, 0)
        sheet[top : top + height, left : left + width, 3] = 255
    buffer = io.BytesIO()
    Image.fromarray(sheet, "RGBA").save(buffer, format="PNG")
    return buffer.getvalue()


OUTLINE_INSET = 0.03
"""The right/wrong outlines' gap to their cell's edge, in cells."""


def _outlines(centres: Sequence[tuple[float, float]], inset: float) -> tuple[list, list]:
    """x and y of closed squares around ``centres`` (half-size 0.5 - inset), None-separated."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    half = 0.5 - inset
    for x, y in centres:
        xs += [x - half, x + half, x + half, x - half, x - half, None]
        ys += [y - half, y - half, y + half, y + half, y - half, None]
    return xs, ys


def thumbnail_grid(
    sheet_source: str,
    indices: Sequence[int],
    hover: Sequence[str],
    correct: Sequence[bool] | None,
    columns: int,
    selection_revision: int = 0,
) -> go.Figure:
    """The page of thumbnails ``indices`` (drawn in the sheet at ``sheet_source``, a URL or a
    data URI) as a selectable chart, one data unit per thumbnail.

    One invisible marker sits on each thumbnail's centre and carries its batch index. Outlines
    are line traces (not selectable): green right, red wrong, grey unlabelled. The picked
    images' outlines are not part of it (``gradpick.ui.browser.outlines`` draws them over the
    chart),
    so a click leaves the figure as it was; a new ``selection_revision`` (plotly's
    ``selectionrevision``) makes it drop the selection it holds.
    """
    rows = max(1, math.ceil(len(indices) / columns))
    centres = [(p % columns + 0.5, p // columns + 0.5) for p in range(len(indices))]
    groups: dict[str, list[tuple[float, float]]] = {RIGHT: [], WRONG: [], NEUTRAL: []}
    for position, centre in enumerate(centres):
        colour = NEUTRAL if correct is None else RIGHT if correct[position] else WRONG
        groups[colour].append(centre)
    traces: list[Trace] = []
    for colour, members in groups.items():
        if members:
            xs, ys = _outlines(members, OUTLINE_INSET)
            traces.append(
                {
                    "type": "scatter",
                    "x": xs,
                    "y": ys,
                    "mode": "lines",
                    "line": {"color": colour, "width": 1.5},
                    "hoverinfo": "skip",
                    "showlegend": False,
                }
            )
    traces.append(
        {
            "type": "scatter",
            "x": [x for x, _ in centres],
            "y": [y for _, y in centres],
            "mode": "markers",
            "customdata": list(indices),
            "hovertext": list(hover),
            "hoverinfo": "text",
            "marker": {"size": 24, "color": "rgba(0,0,0,0)", "symbol": "square"},
            "selected": {"marker": {"color": "rgba(0,0,0,0)"}},
            "unselected": {"marker": {"opacity": 1}},
            "showlegend": False,
            "name": "images",
        }
    )
    image = {
        "source": sheet_source,
        "xref": "x",
        "yref": "y",
        "x": 0,
        "y": 0,
        "sizex": columns,
        "sizey": rows,
        "xanchor": "left",
        "yanchor": "top",
        "sizing": "stretch",
        "layer": "below",
    }
    return _figure(
        traces,
        height=max(120, 56 * rows + 20),
        images=[image],
        selectionrevision=selection_revision,
        xaxis={"range": [0, columns], "visible": False, "fixedrange": True},
        yaxis={
            "range": [rows, 0],
            "visible": False,
            "fixedrange": True,
            "scaleanchor": "x",
            "scaleratio": 1,
        },
    )


# ----------------------------------------------------------------------------- outputs


def _points(
    points: np.ndarray,
    hover: Sequence[str],
    name: str,
    members: np.ndarray | Sequence[int],
    marker: dict[str, Any],
) -> Trace:
    """A selectable marker trace of ``points[members]`` ([N, 2]) whose customdata are the
    batch indices; WebGL once the whole scatter holds more than ``WEBGL_ABOVE`` points.

    Arrays, not lists: plotly validates a numpy array in one step, a list item by item, which
    at 10,000 points would cost a rerun tens of milliseconds more.
    """
    members = np.asarray(members, dtype=np.int64)
    return {
        "type": "scattergl" if len(points) > WEBGL_ABOVE else "scatter",
        "x": points[members, 0],
        "y": points[members, 1],
        "mode": "markers",
        "name": name,
        "customdata": members,
        "hovertext": np.array([hover[index] for index in members.tolist()], dtype=object),
        "hoverinfo": "text",
        "marker": marker,
    }


def scatter_heights(values: np.ndarray) -> tuple[np.ndarray, bool]:
    """Where ``outputs_scatter`` draws ``values`` and whether on a log axis: one when the
    positive values span more than a factor of 100, with 0 drawn at the lowest positive value
    (a log axis has no 0). Marks added over the scatter are placed by the same heights."""
    positive = values[values > 0]
    log_scale = positive.size > 1 and float(positive.max() / positive.min()) > 100
    if log_scale and positive.size < values.size:
        return np.maximum(values, positive.min()), True
    return values, log_scale


def drawn_sample(count: int, at_most: int | None = None, seed: int = 0) -> np.ndarray | None:
    """The batch indices a scatter of ``count`` points draws: None (every one) up to
    ``at_most`` (default ``DRAWN_AT_MOST``), else a seeded sample of ``at_most`` of them,
    sorted, the same on every run and in both scatters (so a point's image sits in the hover
    atlas of the sample)."""
    at_most = DRAWN_AT_MOST if at_most is None else at_most
    if count <= at_most:
        return None
    return np.sort(np.random.default_rng(seed).choice(count, size=at_most, replace=False))


def sample_note(count: int, drawn: np.ndarray | None) -> str:
    """What a sampled scatter says of itself (empty when it draws every point)."""
    if drawn is None:
        return ""
    return (
        f"{len(drawn):,} of {count:,} images drawn (a seeded sample); the pickers and the "
        "table reach every image."
    )


def _drawn_mask(count: int, drawn: np.ndarray | None) -> np.ndarray:
    mask = np.zeros(count, dtype=bool)
    mask[slice(None) if drawn is None else drawn] = True
    return mask


def outputs_scatter(
    confidences: np.ndarray,
    values: np.ndarray,
    value_label: str,
    predictions: np.ndarray,
    correct: np.ndarray | None,
    class_names: Sequence[str],
    hover: Sequence[str],
    selection_revision: int = 0,
    drawn: np.ndarray | None = None,
) -> go.Figure:
    """Confidence against ``values`` (the loss, or entropy without labels), coloured by
    predicted class; wrong predictions are crosses. The picks are ringed over the chart
    (``gradpick.ui.browser.outlines``), so a click leaves the figure as it was; a new
    ``selection_revision`` makes plotly drop the selection it holds. ``drawn``: the batch
    indices to draw (``drawn_sample``; None: all), said in the title when not all."""
    heights, log_scale = scatter_heights(values)
    if log_scale and not bool((values > 0).all()):
        value_label += " (0 drawn lowest)"
    values = heights
    traces: list[Trace] = []
    indices = np.arange(len(confidences))
    points = np.stack([confidences, values], axis=1)
    right = np.ones(len(indices), dtype=bool) if correct is None else correct
    kept = _drawn_mask(len(indices), drawn)
    for class_index, name in enumerate(class_names):
        predicted = (predictions == class_index) & kept
        shown = False
        for symbol, members in (("circle", predicted & right), ("x", predicted & ~right)):
            if members.any():
                marker = {"color": _class_colour(class_index), "size": 7, "symbol": symbol}
                trace = _points(points, hover, name, indices[members], marker)
                # One legend entry per class toggles its right and wrong points together.
                trace.update(legendgroup=name, showlegend=not shown)
                shown = True
                traces.append(trace)
    return _figure(
        traces,
        height=430,
        selectionrevision=selection_revision,
        **_sample_title(len(indices), drawn),
        xaxis={"title": {"text": "confidence (top-1 probability)"}, "range": [0, 1.02]},
        yaxis={"title": {"text": value_label}, "type": "log" if log_scale else "linear"},
    )


def embedding_scatter(
    points: np.ndarray,
    groups: np.ndarray,
    group_names: Sequence[str],
    hover: Sequence[str],
    method: str,
    selection_revision: int = 0,
    drawn: np.ndarray | None = None,
) -> go.Figure:
    """The batch in feature space: ``points`` [N, 2] (a projection of the penultimate-layer
    features) coloured by ``groups`` [N] (indices into ``group_names``); the picks are ringed
    over the chart, and ``drawn`` limits the points drawn, as in ``outputs_scatter``.

    Right/wrong colouring uses the page's green and red; classes use the class colours.
    """
    two_tone = tuple(group_names) == ("right", "wrong")
    traces: list[Trace] = []
    kept = _drawn_mask(len(points), drawn)
    for group, name in enumerate(group_names):
        members = np.flatnonzero((groups == group) & kept)
        if members.size:
            colour = (RIGHT, WRONG)[group] if two_tone else _class_colour(group)
            traces.append(_points(points, hover, name, members, {"color": colour, "size": 6}))
    label = method.upper()
    return _figure(
        traces,
        height=470,
        selectionrevision=selection_revision,
        **_sample_title(len(points), drawn),
        xaxis={"title": {"text": f"{label} 1"}, "zeroline": False},
        yaxis={"title": {"text": f"{label} 2"}, "zeroline": False},
    )


def _sample_title(count: int, drawn: np.ndarray | None) -> dict[str, Any]:
    """A sampled scatter's title, saying so; nothing for a scatter of every point."""
    if drawn is None:
        return {}
    text = f"{len(drawn):,} of {count:,} images drawn (seeded sample)"
    return {"title": {"text": text, "font": {"size": 13}}}


def confusion_matrix(
    labels: np.ndarray, predictions: np.ndarray, class_names: Sequence[str]
) -> go.Figure:
    """One marker per non-empty (true, predicted) cell, sized and coloured by its count; its
    customdata is [true, predicted], so selecting a cell selects every image in it."""
    classes = len(class_names)
    counts = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(counts, (labels, predictions), 1)
    true_idx, predicted_idx = np.nonzero(counts)
    cell_counts = counts[true_idx, predicted_idx]
    largest = max(int(cell_counts.max(initial=1)), 1)
    names = list(class_names)
    trace = {
        "type": "scatter",
        "x": [names[p] for p in predicted_idx.tolist()],
        "y": [names[t] for t in true_idx.tolist()],
        "mode": "markers+text",
        "text": [str(count) for count in cell_counts.tolist()],
        "textposition": "middle center",
        # Counts sit on opaque markers: light text on the dark (large) ones, dark on the rest.
        "textfont": {
            "color": ["white" if c > largest / 3 else "#212529" for c in cell_counts.tolist()]
        },
        "customdata": np.stack([true_idx, predicted_idx], axis=1).tolist(),
        "hovertemplate": "true %{y}, predicted %{x}: %{text} image(s)<extra></extra>",
        "marker": {
            "size": (14 + 30 * np.sqrt(cell_counts / largest)).tolist(),
            "color": np.log1p(cell_counts).tolist(),
            "colorscale": "Blues",
            "cmin": 0,
            "line": {
                "color": [
                    RIGHT if t == p else WRONG
                    for t, p in zip(true_idx.tolist(), predicted_idx.tolist(), strict=True)
                ],
                "width": 1.5,
            },
            "opacity": 0.85,
        },
        "showlegend": False,
    }
    return _figure(
        [trace],
        height=470,
        xaxis={
            "title": {"text": "predicted"},
            "categoryorder": "array",
            "categoryarray": names,
            "tickangle": -45,
        },
        yaxis={
            "title": {"text": "true"},
            "categoryorder": "array",
            "categoryarray": names,
            "autorange": "reversed",
        },
    )


def probability_bars(
    probabilities: np.ndarray,
    class_names: Sequence[str],
    true_class: int | None,
    target_class: int | None,
) -> go.Figure:
    """Class probabilities of one image; customdata is the class index, so a click on a bar
    can set the target class. The true class is green, the current target orange."""
    colours = [
        PICKED if index == target_class else RIGHT if index == true_class else NEUTRAL
        for index in range(len(class_names))
    ]
    trace = {
        "type": "bar",
        "x": probabilities.tolist(),
        "y": list(class_names),
        "orientation": "h",
        "customdata": list(range(len(class_names))),
        "marker": {"color": colours},
        "hovertemplate": "%{y}: %{x:.1%} (click to explain this class)<extra></extra>",
    }
    return _figure(
        [trace],
        height=280,
        select=False,
        xaxis={"title": {"text": "probability"}, "range": [0, 1], "tickformat": ".0%"},
        yaxis={"autorange": "reversed"},
    )


# ----------------------------------------------------------------------------- heatmaps


def strategy_bars(
    names: Sequence[str],
    milliseconds: Sequence[float],
    saved_bytes: Sequence[int | None],
    peak_bytes: Sequence[int | None],
) -> go.Figure:
    """Time and memory of each strategy side by side (memory in MB; missing ones left out)."""
    layout = _side_by_side(("time per call (ms, median)", f"memory ({units.UNIT})"), gap=0.12)
    traces: list[Trace] = [
        {
            "type": "bar",
            "x": list(names),
            "y": list(milliseconds),
            "marker": {"color": NEUTRAL},
            "name": "time",
            "showlegend": False,
        }
    ]
    for label, values, colour in (
        ("saved for backward", saved_bytes, "#4c6ef5"),
        ("peak during the step", peak_bytes, PICKED),
    ):
        traces.append(
            {
                "type": "bar",
                "x": list(names),
                "y": [units.megabytes(value) for value in values],
                "name": label,
                "marker": {"color": colour},
                "xaxis": "x2",
                "yaxis": "y2",
            }
        )
    return _figure(traces, height=360, select=False, barmode="group", **layout)


def sweep_lines(series: Series, axis_label: str) -> go.Figure:
    """Time and peak memory against ``axis_label`` (k or N), one line per strategy."""
    layout = _side_by_side(
        (f"time (ms) against {axis_label}", f"peak memory ({units.UNIT}) against {axis_label}"),
        gap=0.12,
    )
    traces: list[Trace] = []
    ticks = sorted({x for xs, _, _ in series.values() for x in xs})
    for name, (xs, times, peaks) in series.items():
        line = {"color": strategy_colour(name)}
        common = {"type": "scatter", "x": list(xs), "mode": "lines+markers", "line": line}
        traces.append({**common, "y": list(times), "name": name, "legendgroup": name})
        traces.append(
            {
                **common,
                "y": [units.megabytes(peak) for peak in peaks],
                "name": name,
                "legendgroup": name,
                "showlegend": False,
                "xaxis": "x2",
                "yaxis": "y2",
            }
        )
    for suffix in ("", "2"):
        layout[f"xaxis{suffix}"].update(title={"text": axis_label}, type="log", tickvals=ticks)
    return _figure(traces, height=330, select=False, **layout)


# ----------------------------------------------------------------------------- trust checks

TrustSeries = Mapping[str, tuple[Sequence[float | None], Sequence[float | None]]]
"""Per name (an attribution method, or 'random'): two curves, (left panel, right panel)."""


def _method_colour(name: str, names: Sequence[str]) -> str:
    return NEUTRAL if name == "random" else _class_colour(list(names).index(name))


def _paired_lines(
    x: Sequence[Any],
    series: TrustSeries,
    titles: tuple[str, str],
    spreads: TrustSeries | None = None,
) -> list[Trace]:
    traces: list[Trace] = []
    names = [name for name in series if name != "random"]
    for name, curves in series.items():
        line = {"color": _method_colour(name, names), "dash": "dot" if name == "random" else None}
        for panel, values in enumerate(curves):
            trace: Trace = {
                "type": "scatter",
                "x": list(x),
                "y": list(values),
                "mode": "lines+markers",
                "line": line,
                "name": name,
                "legendgroup": name,
                "showlegend": panel == 0,
                "hovertemplate": f"{name}<br>{titles[panel]} %{{y:.3f}}<extra>%{{x}}</extra>",
            }
            if spreads is not None:
                trace["error_y"] = {"type": "data", "array": list(spreads[name][panel])}
            if panel == 1:
                trace.update(xaxis="x2", yaxis="y2")
            traces.append(trace)
    return traces


def randomisation_lines(
    labels: Sequence[str], means: TrustSeries, spreads: TrustSeries
) -> go.Figure:
    """Spearman of |attribution| and SSIM against the randomised layers, one line per method.

    ``labels`` name the steps ('trained', then each layer as it is randomised); error bars are
    the standard deviation over the picked images.
    """
    titles = ("Spearman rank correlation", "SSIM")
    layout = _side_by_side(titles, gap=0.08)
    for suffix in ("", "2"):
        layout[f"xaxis{suffix}"].update(type="category", tickangle=-60)
        layout[f"yaxis{suffix}"].update(range=[-0.3, 1.05])
    traces = _paired_lines(labels, means, titles, spreads)
    return _figure(traces, height=380, select=False, **layout)


def faithfulness_lines(fractions: Sequence[float], curves: TrustSeries) -> go.Figure:
    """Probability of the held class as pixels are deleted and as they are inserted."""
    titles = ("deletion", "insertion")
    layout = _side_by_side(titles, gap=0.08)
    for suffix in ("", "2"):
        layout[f"xaxis{suffix}"].update(title={"text": "share of pixels"}, range=[0, 1])
        layout[f"yaxis{suffix}"].update(title={"text": "probability"}, range=[0, 1.02])
    return _figure(_paired_lines(fractions, curves, titles), height=330, select=False, **layout)
