"""The Compare view: the batch through a second model, where the two flip and how their maps
differ for the picked images.

The second model (the sidebar's "Compare with") is served and its inference cached and kept
exactly like the first's; a stored-outputs folder of the same images serves as the second
model's outputs without inferring (its maps need the model, so they are not drawn). A click on
a cell of the flip matrix picks that cell's images; the drift rule picks the images whose
outputs moved most while both predictions stayed the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import streamlit as st
import torch

from gradpick import compare as versus
from gradpick.data import ImageBatch
from gradpick.errors import DataError
from gradpick.models.zoo import LoadedModel
from gradpick.multilabel import refuse_sigmoid
from gradpick.outputs import store_format as store
from gradpick.outputs.inference import InferenceResult
from gradpick.show import render as pictures
from gradpick.ui import cache, figures, keys, service, state
from gradpick.ui.config import app_config
from gradpick.ui.guard import guarded
from gradpick.ui.session import Loaded, Settings

__all__ = ["MAPPED_PICKS", "Second", "absorb_flips", "flip_matrix", "render"]

MAPPED_PICKS = 8
"""Picks mapped by both models at most: each costs two gradient steps."""
SIDE = 128
"""Pixels each picture is shown at."""
CELL_LABELS = {
    "both_right": "both right",
    "first_only_right": "only the first right",
    "second_only_right": "only the second right",
    "both_wrong": "both wrong",
    "agree": "same prediction",
    "disagree": "different predictions",
}


@dataclass(frozen=True)
class Second:
    """The second model's outputs on the batch, and the model when it was loaded."""

    identity: dict[str, Any]
    key: str
    """What its caches are keyed by."""
    batch: ImageBatch
    result: InferenceResult
    served: LoadedModel | None


def _option() -> service.ModelOption | str | None:
    """The sidebar's second model: an option, a store's path, or None."""
    session = st.session_state
    chosen = session.get(keys.COMPARE_WITH, keys.COMPARE_NOTHING)
    if chosen == keys.COMPARE_NOTHING:
        return None
    if chosen == keys.COMPARE_STORED:
        return str(session.get(keys.COMPARE_OUTPUTS) or "").strip() or None
    if chosen == keys.COMPARE_BY_NAME:
        name = str(session.get(keys.COMPARE_NAME) or "").strip()
        return service.ModelOption(name=name, factory=name) if name else None
    return next((o for o in service.model_options() if o.identity == chosen), None)


def _second(loaded: Loaded, settings: Settings) -> Second | None:
    chosen = _option()
    source = settings.source
    if chosen is None or source is None:
        return None
    refuse_sigmoid(loaded.result.output, "Compare", "the first model")
    if isinstance(chosen, str):
        stamp = Path(chosen).expanduser().stat().st_mtime if Path(chosen).exists() else 0.0
        opened = cache.stored_outputs(chosen, stamp)
        # The images as the page takes them (a large store's while its check runs beside the
        # page), else the page's own check of them (a stat per image, at most every 30 s).
        fingerprint = loaded.fingerprint
        if fingerprint is None:
            with st.spinner("Checking the images against the store…"):
                fingerprint = cache.folder_check(loaded.choice.source_key, source).fingerprint()
        if fingerprint is None or not store.store_is_current(opened, fingerprint):
            raise DataError(
                f"{opened.path} was written from other images than {source.description}: "
                "compare outputs of the same images."
            )
        identity = dict(opened.metadata.get("model") or {})
        name = str(identity.get("identity", chosen))
        result = cache.stored_result(loaded.key, stamp, name, opened, loaded.batch)
        refuse_sigmoid(
            result.output, "Compare", f"the store {opened.path} holds a sigmoid model's outputs: it"
        )
        return Second(identity, name, loaded.batch, result, None)
    device = str(loaded.device)
    served = cache.served(chosen.identity, device, chosen)
    at_spec = source.at_spec(served.spec)
    pixels = cache.batch(f"{loaded.key}|{served.spec.describe()}", at_spec, loaded.choice)
    batch, _ = service.fit_classes(pixels, served.classes, chosen.class_names)
    keep = not app_config().hosted
    result = cache.inference(loaded.key, chosen.identity, device, served, batch, at_spec, keep)
    refuse_sigmoid(result.output, "Compare", "the second model")
    return Second(served.identity(), chosen.identity, batch, result, served)


def _side(batch: ImageBatch, result: InferenceResult, model: Mapping[str, Any]) -> versus.Side:
    return versus.Side(
        positions=np.asarray(batch.positions, dtype=np.int64),
        names=batch.names,
        labels=None if result.labels is None else result.labels.numpy(),
        logits=result.logits.numpy(),
        class_names=batch.class_names,
        model=dict(model),
        source={"description": batch.source},
    )


def _pairing(loaded: Loaded, second: Second) -> versus.Pairing:
    """The two models' outputs lined up, once per batch and pair of models (``cache.pairing``)."""
    return cache.pairing(
        loaded.key,
        loaded.option.identity,
        second.key,
        lambda: (
            _side(loaded.batch, loaded.result, loaded.served.identity()),
            _side(second.batch, second.result, second.identity),
        ),
    )


CELL_FILLS = {
    "both_right": "#d3f9d8",
    "first_only_right": "#fff3bf",
    "second_only_right": "#d0ebff",
    "both_wrong": "#ffe3e3",
    "agree": "#d3f9d8",
    "disagree": "#ffe3e3",
}
"""Each cell's pale fill: the counts on it are near-black, at a contrast of 15:1 or more."""
COUNT_COLOUR = "#111111"
COUNT_SIZE = 30
"""Pixels of a cell's count: read from across the room, not hovered for."""


def flip_matrix(pairing: versus.Pairing, names: tuple[str, str] = ("first", "second")) -> go.Figure:
    """The flips as a table of cells (2 × 2 with labels: the first model right or wrong by the
    second right or wrong, each named by ``names``; else same or different prediction), each a
    pale square with its count large and near-black and what it holds under it. A transparent
    marker at each cell's centre carries the cell's index in ``versus.OUTCOMES`` (or
    ``AGREEMENT``) as customdata, so a click anywhere on the cell picks every image in it."""
    groups = versus.flip_groups(pairing)
    counts = [len(rows) for rows in groups.values()]
    if pairing.labels is None:
        x, y, columns, rows = [0, 1], [0, 0], ["same", "different"], ["predictions"]
    else:
        x, y = [0, 1, 0, 1], [0, 0, 1, 1]
        first, second = names
        columns, rows = [f"{second} right", f"{second} wrong"], [f"{first} right", f"{first} wrong"]
    total = max(sum(counts), 1)
    cells_of = list(groups)
    cells = [
        {
            "type": "rect",
            "x0": column - 0.48,
            "x1": column + 0.48,
            "y0": row - 0.47,
            "y1": row + 0.47,
            "fillcolor": CELL_FILLS[name],
            "line": {"color": "#495057", "width": 1},
            "layer": "below",
        }
        for column, row, name in zip(x, y, cells_of, strict=True)
    ]
    trace = {
        "type": "scatter",
        "x": x,
        "y": y,
        "mode": "markers+text",
        "text": [
            f"<b>{count:,}</b><br><span style='font-size:13px'>{CELL_LABELS[name]} · "
            f"{count / total:.0%}</span>"
            for count, name in zip(counts, cells_of, strict=True)
        ],
        "textposition": "middle center",
        "textfont": {"size": COUNT_SIZE, "color": COUNT_COLOUR},
        "customdata": [[index] for index in range(len(counts))],
        "hovertext": [
            f"{CELL_LABELS[name]}: {count:,} image(s)"
            for name, count in zip(cells_of, counts, strict=True)
        ],
        "hovertemplate": "%{hovertext}; click to pick them<extra></extra>",
        "marker": {"size": 110, "color": "rgba(0,0,0,0)", "symbol": "square"},
        # a picked cell keeps its count as clear as the others
        "selected": {"marker": {"opacity": 1}, "textfont": {"color": COUNT_COLOUR}},
        "unselected": {"marker": {"opacity": 1}, "textfont": {"color": COUNT_COLOUR}},
        "showlegend": False,
    }
    tick = {"size": 15, "color": COUNT_COLOUR}
    figure = go.Figure([trace])
    figure.update_layout(
        height=320,
        margin={"l": 10, "r": 10, "t": 10, "b": 10},
        shapes=cells,
        plot_bgcolor="white",
        # numeric axes with named ticks: a cell's place on the page is plain arithmetic
        xaxis={
            "tickvals": [0, 1][: len(columns)],
            "ticktext": columns,
            "range": [-0.5, 1.5],
            "side": "top",
            "tickfont": tick,
            "showgrid": False,
            "zeroline": False,
            "fixedrange": True,
        },
        yaxis={
            "tickvals": [0, 1][: len(rows)],
            "ticktext": rows,
            "range": [len(rows) - 0.5, -0.5],
            "tickfont": tick,
            "showgrid": False,
            "zeroline": False,
            "fixedrange": True,
        },
        clickmode="event+select",
        dragmode=False,
    )
    return figure


def _cell_rows(pairing: versus.Pairing) -> Any:
    groups = list(versus.flip_groups(pairing).values())

    def rows(event: Mapping[str, Any] | None) -> list[int]:
        chosen = event.get("selection") if isinstance(event, Mapping) else None
        points = chosen.get("points") if isinstance(chosen, Mapping) else None
        cells = []
        for point in points or []:
            data = point.get("customdata") if isinstance(point, Mapping) else None
            if isinstance(data, Sequence) and len(data) == 1:
                cells.append(int(data[0]))
        return [int(row) for cell in cells for row in groups[cell]]

    return rows


def absorb_flips(loaded: Loaded, settings: Settings) -> None:
    """Fold a new click on the flip matrix into the picked images, before the page writes its
    link and draws anything (nothing to do, and nothing computed, without one)."""
    session = st.session_state
    if not state.pending_selection(session, keys.COMPARE_FLIPS):
        return
    with guarded("The second model"):
        second = _second(loaded, settings)
        if second is not None:
            pairing = _pairing(loaded, second)
            state.absorb(session, keys.COMPARE_FLIPS, _cell_rows(pairing), len(loaded))


def render(loaded: Loaded, settings: Settings) -> None:
    second = None
    with guarded("The second model"):
        second = _second(loaded, settings)
    if second is None:
        st.info("Choose a model to compare with in the sidebar (Compare with).")
        return
    pairing = _pairing(loaded, second)
    names = (loaded.served.name, str(second.identity.get("name", second.key)))
    st.caption(
        f"First: {names[0]}; second: {names[1]}; "
        f"{len(pairing):,} images, compared on each image's {pairing.reference_kind}."
    )
    left, right = st.columns([1, 1], gap="medium")
    with left:
        st.markdown("**Flips** — click a cell to pick its images")
        st.plotly_chart(
            flip_matrix(pairing, names),
            key=keys.COMPARE_FLIPS,
            on_select="rerun",
            selection_mode=("points",),
            config=figures.CHART_CONFIG,
        )
    with right:
        _per_class(pairing)
    _drift_rule(pairing)
    with guarded("The two models' maps"):
        _maps(loaded, settings, second, pairing)


def _per_class(pairing: versus.Pairing) -> None:
    rows = versus.per_class(pairing)
    if pairing.labels is None:
        st.markdown("**Predictions per class** (second minus first)")
        values = [row["difference"] for row in rows]
    else:
        st.markdown("**Accuracy per class** (second minus first)")
        values = [100 * row["difference"] for row in rows]
    figure = go.Figure(
        go.Bar(
            x=[row["class"] for row in rows],
            y=values,
            marker_color=[figures.RIGHT if v >= 0 else figures.WRONG for v in values],
            hovertemplate="%{x}: %{y:+.1f}<extra></extra>",
        )
    )
    figure.update_layout(height=320, margin={"l": 10, "r": 10, "t": 10, "b": 10})
    figure.update_yaxes(title_text="points" if pairing.labels is not None else "images")
    st.plotly_chart(figure, config=figures.CHART_CONFIG)


def _drift_rule(pairing: versus.Pairing) -> None:
    """Pick the images whose outputs moved most while both predictions stayed the same (ranked
    when the button is pressed, not on every run)."""

    def pick_drift() -> None:
        state.apply(st.session_state, versus.most_drifted(pairing, MAPPED_PICKS))

    st.button(
        f"Pick the {MAPPED_PICKS} that drifted most (same prediction, most moved probability)",
        key=keys.COMPARE_DRIFT,
        on_click=pick_drift,
        disabled=not bool(np.any(pairing.first == pairing.second)),
    )


def _maps(loaded: Loaded, settings: Settings, second: Second, pairing: versus.Pairing) -> None:
    picked = state.picked(st.session_state)[:MAPPED_PICKS]
    if not picked:
        st.info("Pick images (a flip cell, the rule above, or the Explore tab) to see both maps.")
        return
    if second.served is None or settings.source is None:
        st.info("A stored-outputs folder has no model to map with: compare with a model.")
        return
    request = settings.request
    compared = cache.compared_maps(
        loaded.key,
        loaded.option.identity,
        second.key,
        tuple(picked),
        request.method,
        request.settings,
        loaded,
        second.served,
        settings.source,
        pairing,
    )
    st.markdown(
        f"**Both models' maps** ({request.method}, each pick's {pairing.reference_kind}; each "
        f"map divided by its own peak, one colour scale 0 to 1, at {compared.size[0]} x "
        f"{compared.size[1]})"
    )
    names = pairing.class_names
    for row, rho, similarity, first_map, second_map in zip(
        compared.rows,
        compared.spearman.tolist(),
        compared.ssim.tolist(),
        compared.maps[0],
        compared.maps[1],
        strict=True,
    ):
        image, first, second_column = st.columns(3)
        first_label, second_label = names[pairing.first[row]], _name(names, pairing.second[row])
        image.image(
            pictures.fit(pictures.as_hwc(loaded.batch.rows(row)), SIDE),
            caption=f"index {row}, {_true(pairing, row)}",
            width=SIDE,
        )
        first.image(_picture(first_map), caption=f"first: {first_label}", width=SIDE)
        second_column.image(
            _picture(second_map),
            caption=f"second: {second_label} · Spearman {rho:.2f}, SSIM {similarity:.2f}",
            width=SIDE,
        )


def _name(names: Sequence[str], index: int) -> str:
    return names[index] if index >= 0 else "another class"


def _picture(values: torch.Tensor) -> np.ndarray:
    return pictures.fit(pictures.colorize(values.float().numpy(), 1.0), SIDE)


def _true(pairing: versus.Pairing, row: int) -> str:
    return (
        "no label" if pairing.labels is None else f"true {pairing.class_names[pairing.labels[row]]}"
    )
