"""The outputs of the batch and the ways to pick images from them.

Thumbnails, the confidence/loss scatter, the confusion matrix, the feature-space view and the
table are selectable; the pickers, the text box and the clear button act through callbacks. All
of them change one list, ``keys.PICKED``, which everything below the outputs reads. Only the
open view is drawn (its tab reruns the page part when switched), so a click rebuilds one figure;
a WebGL scatter is drawn in its closed view too (``_kept``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from gradpick.errors import SelectionError
from gradpick.outputs.inference import InferenceResult
from gradpick.picking import feature_space as embedding
from gradpick.picking import rules as selection
from gradpick.triage.verdicts import VERDICTS
from gradpick.ui import cache, figures, keys, media, service, state, tabs
from gradpick.ui import judged as judged_now
from gradpick.ui.browser import hover, outlines
from gradpick.ui.guard import guarded
from gradpick.ui.session import Loaded

__all__ = [
    "ANY_VERDICT",
    "COLOURING_LABELS",
    "EMBEDDING_VIEW",
    "KEPT_FROM_THE_FIRST_PAGE_AT_MOST",
    "GRID_COLUMNS",
    "PAGE_SIZES",
    "PROJECTION_LABELS",
    "RULE_LABELS",
    "TABLE_PAGE_ROWS",
    "SCATTER_VIEW",
    "VIEWS",
    "absorb_selections",
    "readouts",
    "render",
]

GRID_COLUMNS = 10
KEPT_FROM_THE_FIRST_PAGE_AT_MOST = 10_000
"""Up to this many images the WebGL scatters are drawn (kept) from the batch's first page; a
larger batch's once their view is opened (``_kept``). Each holds 10,000 points past this, which
a browser without a GPU takes seconds to draw: on a 50,000-row store whose page the server
runs from its warm caches, the hidden scatters reached the browser before it had drawn the
thumbnails, which then showed 8.6-10.6 s after the page was asked for, against 4.8-6.6 s
with the scatters kept from their first opening (at 1,280,000 rows, 1.2-1.5 s of the first
page, for a first opening of the scatter's view 1-1.7 s quicker); a store's feature space also
needs its embeddings read and projected."""
TABLE_PAGE_ROWS = 10_000
"""The table sends at most this many rows, a page of the batch: a browser grid of 50,000 rows
takes a second to receive and lay out, and the server a second to serialise."""
PAGE_SIZES = (100, 50, 200)
RULE_LABELS = {
    "misclassified": "Misclassified",
    "top_k_loss": "Top-k loss",
    "least_confident": "Least confident",
    "true_class": "By true class",
    "predicted_class": "By predicted class",
    "random": "Seeded random k",
    "nearest_neighbours": "Nearest neighbours (features)",
    "judged": "By verdict (Triage)",
    "label_threshold": "By label and threshold (sigmoid)",
}
ANY_VERDICT = "any"
"""The verdict rule's choice for every judged image."""
VIEWS = ("Thumbnails", "Confidence vs loss", "Confusion matrix", "Feature space", "Table")
SCATTER_VIEW = VIEWS[1]
EMBEDDING_VIEW = VIEWS[3]
PROJECTION_LABELS = {"pca": "PCA", "umap": "UMAP"}
COLOURING_LABELS = {"true": "true class", "predicted": "predicted class", "correct": "right/wrong"}


def absorb_selections(loaded: Loaded) -> None:
    """Fold new chart and table selections into the picked images, before anything is drawn."""
    session = st.session_state
    result = loaded.result
    state.follow_batch(session, loaded.key)
    for key in (keys.GRID_CHART, keys.SCATTER_CHART, keys.EMBEDDING_CHART):
        state.absorb(session, key, selection.indices_from_plotly_selection, len(loaded))
    first = _table_rows(loaded).start

    def table_indices(event: Mapping[str, Any] | None) -> list[int]:
        return [first + row for row in state.table_rows(event)]

    state.absorb(session, keys.TABLE, table_indices, len(loaded))
    if result.labels is not None:

        def cell_members(event: Mapping[str, Any] | None) -> list[int]:
            cells = state.confusion_cells(event)
            return [i for t, p in cells for i in selection.confusion_cell(result, t, p)]

        state.absorb(session, keys.CONFUSION_CHART, cell_members, len(loaded))


def readouts(loaded: Loaded) -> None:
    result = loaded.result
    columns = st.container(key=keys.READOUTS).columns(5)  # sized while loading: ``ui.start``
    columns[0].metric("Images N", f"{len(loaded):,}")
    columns[1].metric(
        "Accuracy", "no labels" if result.accuracy is None else f"{result.accuracy:.1%}"
    )
    columns[2].metric(
        "Inference",
        f"{result.milliseconds:,.0f} ms",
        help="The one pass over the whole batch, run when the data, model or device changed; "
        "picking images does not repeat it.",
    )
    columns[3].metric("Throughput", f"{result.images_per_second:,.0f} img/s")
    columns[4].metric("Device", result.device)
    height, width = loaded.batch.image_size
    st.caption(
        f"Images read at {height}x{width} pixels, as {loaded.served.name} takes them: "
        f"{loaded.served.spec.describe()}."
    )
    for note in loaded.batch.notes:
        st.caption(note)


def render(loaded: Loaded, judged: Mapping[int, str] | None = None) -> None:
    """The outputs views (left, only the open one drawn, but for a kept WebGL scatter) and the
    selection tools (right); ``judged`` (batch index -> verdict) is shown in every view and
    picked by the verdict rule."""
    judged = judged or {}
    charts, tools = st.columns([3, 2], gap="medium")
    with tools:
        _selection_tools(loaded, judged)
    with charts:
        row, position = tabs.tab_row(VIEWS, keys.OUTPUTS_TAB, keys.VIEW_WIDGETS)
        shown = VIEWS[position]
        views = (_thumbnails, _scatter, _confusion, _embedding, _table)
        view = dict(zip(VIEWS, views, strict=True))[shown]
        with row[position], guarded(f"The {shown.lower()} view"):
            view(loaded, judged)
        for kept, (chart_key, chart) in _KEPT.items():
            where = VIEWS.index(kept)
            if where != position and _kept(loaded, kept):
                with row[where], guarded(f"The {kept.lower()} view"):
                    chart(loaded, judged, state.drawn_revision(st.session_state, chart_key))
                    if loaded.batch.all_decoded:  # made now, sent when it opens
                        cache.hover_atlas(loaded.key, loaded.batch)


def _kept(loaded: Loaded, view: str) -> bool:
    """Whether ``view`` is drawn while closed: a WebGL scatter (the confidence/loss or the
    feature-space one) from the batch's first page, but for a feature space projected by UMAP
    (seconds to minutes) or a batch of more than ``KEPT_FROM_THE_FIRST_PAGE_AT_MOST`` images,
    once opened for this batch. Each opening
    would otherwise make the chart anew, which Streamlit draws twice (0.7-1.1 s to settle at
    10,000 points in a browser without a GPU, the hover thumbnails' atlas made on the server
    meanwhile, against about 0.3 s to show the kept one). Kept, its figure is sent again with
    each run of the page, unchanged (``state.drawn_revision``), so the browser leaves its chart
    as it is."""
    if len(loaded) <= figures.WEBGL_ABOVE:
        return False
    session = st.session_state
    pca = embedding.PROJECTIONS[0]  # the projection selector's first and default choice
    instant = view == SCATTER_VIEW or session.get(keys.EMBEDDING_PROJECTION, pca) == pca
    from_the_first_page = instant and len(loaded) <= KEPT_FROM_THE_FIRST_PAGE_AT_MOST
    return from_the_first_page or session.get(keys.KEPT_VIEWS, {}).get(view) == loaded.key


def _keep(loaded: Loaded, view: str) -> int:
    """Note ``view`` as opened for this batch (``_kept``); the revision to draw its chart with,
    open."""
    st.session_state.setdefault(keys.KEPT_VIEWS, {})[view] = loaded.key
    return state.selection_revision(st.session_state, _KEPT[view][0])


def _plot(figure: go.Figure, key: str) -> None:
    st.plotly_chart(
        figure,
        key=key,
        on_select="rerun",
        selection_mode=figures.SELECT_MODES,
        config=figures.CHART_CONFIG,
    )


def _hover_thumbnails(loaded: Loaded, chart_key: str) -> None:
    """The hovered image of the chart ``chart_key``, shown beside the mouse (``ui.hover``);
    of a batch decoded lazily, once its images are all decoded (the hover label meanwhile)."""
    if not loaded.batch.all_decoded:
        return
    layout = cache.hover_atlas(loaded.key, loaded.batch)
    url = media.image_url(layout.jpeg, keys.HOVER_ATLAS, "image/jpeg")
    with st.container(key=keys.HOVER_SCRIPT):
        st.iframe(hover.script([keys.selector(chart_key)], url, layout), height=1)


def _marked(
    figure: go.Figure, judged: Mapping[int, str], where: Any, legend: bool = True
) -> go.Figure:
    """``figure`` with the verdict marks of the judged images that ``where(index)`` places
    (None: not in this view): a copy when it places any, so a shared (cached) figure is never
    changed."""
    placed = [(where(i), v) for i, v in sorted(judged.items())]
    placed = [(point, v) for point, v in placed if point is not None]
    if not placed:
        return figure
    marked = go.Figure(figure)
    marked.add_traces(
        judged_now.marks(
            [p[0] for p, _ in placed], [p[1] for p, _ in placed], [v for _, v in placed], legend
        )
    )
    return marked


def _thumbnails(loaded: Loaded, judged: Mapping[int, str]) -> None:
    size = len(loaded)
    top = st.columns([1, 1, 2])
    page_size = top[0].selectbox("Per page", PAGE_SIZES, key=keys.GRID_PAGE_SIZE)
    pages = max(1, math.ceil(size / page_size))
    page = 1
    if pages > 1:
        page_key = keys.per_source(keys.GRID_PAGE, loaded.key, page_size)
        if not 1 <= st.session_state.get(page_key, 1) <= pages:
            st.session_state.pop(page_key)  # a link's page beyond this batch
        state.start_at(st.session_state, page_key, 1)
        page = int(top[1].number_input("Page", 1, pages, key=page_key))
    first, last = (page - 1) * page_size, min(page * page_size, size)
    top[2].caption(
        f"Images {first}–{last - 1} of {size:,}. Click, box- or lasso-select thumbnails; "
        "green outline: right, red: wrong, orange: picked"
        + ("; a corner mark: the Triage tab's verdict." if judged else ".")
    )
    sheet = cache.thumbnail_sheet(loaded.key, first, last, GRID_COLUMNS, loaded.batch)
    correct = loaded.result.correct
    figure = figures.thumbnail_grid(
        media.image_url(sheet, keys.GRID_SHEET),
        list(range(first, last)),
        loaded.hover[first:last],
        None if correct is None else correct[first:last].tolist(),
        GRID_COLUMNS,
        state.selection_revision(st.session_state, keys.GRID_CHART),
    )

    def corner(index: int) -> tuple[float, float] | None:
        if not first <= index < last:
            return None
        place = index - first
        return place % GRID_COLUMNS + 0.82, place // GRID_COLUMNS + 0.18

    _plot(_marked(figure, judged, corner, legend=False), keys.GRID_CHART)  # no legend
    _picked_marks(
        keys.GRID_CHART,
        outlines.picked_cells(state.picked(st.session_state), first, last),
        GRID_COLUMNS,
    )


def _picked_marks(chart_key: str, marked: list[int], columns: int | None = None) -> None:
    """The picks' marks over the chart ``chart_key``: boxes around grid cells (``columns`` to a
    row) or circles around a scatter's points by batch index (``gradpick.ui.browser.outlines``). The
    script is the same on every run; ``marked`` travels beside it."""
    with st.container(key=keys.OUTLINES_SCRIPT):
        chart, holder = keys.selector(chart_key), keys.selector(keys.OUTLINES_CELLS)
        st.iframe(outlines.script(chart, holder, columns, figures.PICKED), height=1)
        with st.container(key=keys.OUTLINES_CELLS):
            st.markdown(outlines.cells_html(marked), unsafe_allow_html=True)


def _scatter(loaded: Loaded, judged: Mapping[int, str]) -> None:
    _scatter_chart(loaded, judged, _keep(loaded, SCATTER_VIEW))
    _picked_marks(keys.SCATTER_CHART, state.picked(st.session_state))
    _hover_thumbnails(loaded, keys.SCATTER_CHART)


def _scatter_chart(loaded: Loaded, judged: Mapping[int, str], revision: int) -> None:
    """The scatter's caption and chart at selection ``revision``: the same elements in the same
    places whether its view is open or closed (``_kept``), so the browser keeps the chart it
    made."""
    result = loaded.result
    figure = cache.outputs_scatter(
        loaded.key, loaded.option.identity, revision, result, loaded.batch.class_names, loaded.hover
    )
    if judged:
        confidences = result.confidences.numpy()
        values = service.scatter_values(result)[0]
        heights = figures.scatter_heights(values)[0]  # a zero loss on a log axis is drawn lowest
        figure = _marked(figure, judged, lambda i: (float(confidences[i]), float(heights[i])))
    st.caption(
        "Each point is an image (hover to see it); crosses are wrong predictions; orange rings: "
        "picked. Select to pick."
        + (" Open marks: the Triage tab's verdicts." if judged else "")
        + _sampled(len(loaded))
    )
    _plot(figure, keys.SCATTER_CHART)


def _sampled(count: int) -> str:
    """The scatters' caption's note on a batch too large to draw point by point."""
    note = figures.sample_note(count, figures.drawn_sample(count))
    return f" {note}" if note else ""


def _confusion(loaded: Loaded, judged: Mapping[int, str]) -> None:
    result = loaded.result
    if result.labels is None:
        st.info("These images have no labels, so there is no confusion matrix.")
        return
    st.caption("Select a cell to pick every image with that true and predicted class.")
    figure = cache.confusion_figure(
        loaded.key, loaded.option.identity, result, loaded.batch.class_names
    )
    _plot(figure, keys.CONFUSION_CHART)


def _embedding(loaded: Loaded, judged: Mapping[int, str]) -> None:
    if _embedding_chart(loaded, judged, _keep(loaded, EMBEDDING_VIEW)):
        _picked_marks(keys.EMBEDDING_CHART, state.picked(st.session_state))
        _hover_thumbnails(loaded, keys.EMBEDDING_CHART)


def _embedding_chart(loaded: Loaded, judged: Mapping[int, str], revision: int) -> bool:
    """The feature-space view's settings, caption and chart at selection ``revision``, the same
    whether the view is open or closed (``_kept``); False when the model has no features."""
    width = loaded.result.feature_width
    if width is None:
        st.info(
            "This model has no nn.Linear head, so there are no penultimate-layer features to "
            "place the images by."
        )
        return False
    colourings = embedding.COLOURINGS if loaded.result.labels is not None else ("predicted",)
    if st.session_state.get(keys.EMBEDDING_COLOUR, colourings[0]) not in colourings:
        st.session_state.pop(keys.EMBEDDING_COLOUR)  # a link's colouring these images lack
    left, right = st.columns(2)
    method = left.selectbox(
        "Projection",
        embedding.available_projections(),
        format_func=PROJECTION_LABELS.__getitem__,
        key=keys.EMBEDDING_PROJECTION,
        help="PCA: the two directions of largest variance (exact, instant). UMAP (with the "
        "optional umap-learn): neighbourhoods kept, seconds to minutes for large batches.",
    )
    colour_by = right.radio(
        "Colour by",
        colourings,
        format_func=COLOURING_LABELS.__getitem__,
        key=keys.EMBEDDING_COLOUR,
        horizontal=True,
    )
    points = cache.projection(loaded.key, loaded.option.identity, method, loaded.result)
    st.caption(
        f"Each point is an image placed by its penultimate-layer features ({width} "
        f"numbers: the input of the model's last linear layer) projected by "
        f"{PROJECTION_LABELS[method]}. Hover for the image and its classes; click, box- or "
        "lasso-select to pick; the 'Nearest neighbours' rule picks the closest in feature space."
        + _sampled(len(loaded))
    )
    figure = cache.embedding_scatter(
        loaded.key,
        loaded.option.identity,
        method,
        colour_by,
        revision,
        points,
        loaded.result,
        loaded.batch.class_names,
        loaded.hover,
    )
    figure = _marked(figure, judged, lambda i: (float(points[i, 0]), float(points[i, 1])))
    _plot(figure, keys.EMBEDDING_CHART)
    return True


def _table_rows(loaded: Loaded) -> range:
    """The batch indices of the table's open page (all of them up to ``TABLE_PAGE_ROWS``)."""
    size = len(loaded)
    page = int(st.session_state.get(keys.per_source(keys.TABLE_PAGE, loaded.key), 1))
    pages = max(1, math.ceil(size / TABLE_PAGE_ROWS))
    first = (min(max(page, 1), pages) - 1) * TABLE_PAGE_ROWS
    return range(first, min(first + TABLE_PAGE_ROWS, size))


def _table(loaded: Loaded, judged: Mapping[int, str]) -> None:
    size = len(loaded)
    if size > TABLE_PAGE_ROWS:
        page_key = keys.per_source(keys.TABLE_PAGE, loaded.key)
        pages = math.ceil(size / TABLE_PAGE_ROWS)
        if not 1 <= st.session_state.get(page_key, 1) <= pages:
            st.session_state.pop(page_key)
        state.start_at(st.session_state, page_key, 1)
        st.number_input(f"Table page (of {pages:,})", 1, pages, key=page_key)
    rows = _table_rows(loaded)
    if size > TABLE_PAGE_ROWS:
        st.caption(
            f"Rows {rows.start:,}–{rows.stop - 1:,} of {size:,} (a page of "
            f"{TABLE_PAGE_ROWS:,}); select rows to pick them (the index column is the image's)."
        )
    else:
        st.caption("Select rows to pick them (row i is image i).")
    table = service.batch_table(loaded.batch, loaded.result, rows)
    if judged:
        table["verdict"] = [VERDICTS[judged[i]] if i in judged else "" for i in table["index"]]
    st.dataframe(
        table,
        key=keys.TABLE,
        on_select="rerun",
        selection_mode="multi-row",
        hide_index=True,
        height=420,
    )


def _pick(result: InferenceResult, judged: Mapping[int, str]) -> None:
    session = st.session_state
    verdict = session.get(keys.RULE_VERDICT, ANY_VERDICT)
    try:
        indices = selection.pick(
            result,
            session[keys.RULE],
            k=int(session[keys.RULE_K]),
            class_index=int(session.get(keys.RULE_CLASS, 0)),
            seed=int(session.get(keys.RULE_SEED, 0)),
            anchor=int(session.get(keys.RULE_ANCHOR, 0)),
            judged=judged,
            verdict=None if verdict == ANY_VERDICT else verdict,
            threshold=float(session.get(keys.RULE_THRESHOLD, 0.5)),
        )
    except SelectionError as error:
        session[keys.NOTICE] = str(error)
        return
    if not indices:
        session[keys.NOTICE] = f"No image matches the rule '{RULE_LABELS[session[keys.RULE]]}'."
        return
    state.apply(session, indices)


def _selection_tools(loaded: Loaded, judged: Mapping[int, str]) -> None:
    session = st.session_state
    st.subheader("Pick images")
    st.radio(
        "A new selection",
        selection.MERGE_MODES,
        key=keys.MERGE_MODE,
        horizontal=True,
        format_func={"replace": "replaces", "add": "adds to", "remove": "removes from"}.get,
        help="How a click, box, lasso, table selection or picker changes the picked images.",
    )
    with st.form(keys.PICKERS, border=True):
        rule_column, k_column = st.columns([2, 1])
        sigmoid = loaded.result.output == "sigmoid"
        # the label rule needs a sigmoid model's own per-label probabilities
        rules = [rule for rule in selection.RULES if sigmoid or rule != "label_threshold"]
        rule_column.selectbox("Rule", rules, format_func=RULE_LABELS.__getitem__, key=keys.RULE)
        # Their first values through the session state (``state.start_at``): a closed tab's
        # values are kept there too, and a widget given both logs a warning.
        state.start_at(session, keys.RULE_K, min(16, len(loaded)))
        state.start_at(session, keys.RULE_SEED, 0)
        state.start_at(session, keys.RULE_ANCHOR, 0)
        k_column.number_input("k", 1, len(loaded), key=keys.RULE_K)
        class_column, seed_column = st.columns([2, 1])
        class_column.selectbox(
            "Class or label (for the class and label rules)"
            if sigmoid
            else "Class (for the class rules)",
            range(len(loaded.batch.class_names)),
            format_func=loaded.batch.class_names.__getitem__,
            key=keys.RULE_CLASS,
        )
        seed_column.number_input("Seed", 0, None, key=keys.RULE_SEED)
        if sigmoid:
            state.start_at(session, keys.RULE_THRESHOLD, 0.5)
            st.number_input(
                "Threshold (for the label rule)",
                0.0,
                1.0,
                step=0.05,
                key=keys.RULE_THRESHOLD,
                help="Picks the images whose probability for the label (its own sigmoid) is "
                "at least this.",
            )
        st.number_input(
            "Image (for nearest neighbours)",
            0,
            len(loaded) - 1,
            key=keys.RULE_ANCHOR,
            help="The rule picks this image and the k - 1 images closest to it by cosine "
            "similarity of their penultimate-layer features.",
        )
        st.selectbox(
            "Verdict (for the verdict rule)",
            (ANY_VERDICT, *VERDICTS),
            format_func=lambda v: "any verdict" if v == ANY_VERDICT else VERDICTS[v],
            key=keys.RULE_VERDICT,
        )
        st.form_submit_button("Pick", on_click=_pick, args=(loaded.result, judged), type="primary")
    notice = session.pop(keys.NOTICE, None)
    if notice:
        st.info(notice)
    chosen = state.picked(session)
    st.markdown(f"**Picked: {len(chosen)}** image(s)")
    text_key = state.text_key(session)
    session.setdefault(text_key, selection.format_indices(chosen))
    st.text_input(
        "Picked indices (editable, e.g. 3, 7, 10-12)",
        key=text_key,
        on_change=state.edit_text,
        args=(session, len(loaded), text_key),
    )
    error = session.get(keys.TEXT_ERROR)
    if error:
        st.error(error)
    st.button("Clear selection", on_click=state.clear, args=(session,))


_KEPT: dict[str, tuple[str, Callable[[Loaded, Mapping[int, str], int], object]]] = {
    SCATTER_VIEW: (keys.SCATTER_CHART, _scatter_chart),
    EMBEDDING_VIEW: (keys.EMBEDDING_CHART, _embedding_chart),
}
"""The views kept drawn while closed (``_kept``): their chart's key and what draws the chart."""
