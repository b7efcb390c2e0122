"""The Triage tab: the batch's suspect labels one at a time, the evidence, and a verdict.

The suspects come from ``gradpick.triage.ranking`` on the batch's own outputs (probabilities,
labels and
embeddings, no new inference). For the suspect in view the page shows the image, its given and
suggested labels with their probabilities, the contrast map of the logit difference z[suggested]
- z[given] by the explorer's chosen attribution method, layer maps included (the pixels that
argue for the suggestion over the label), and its nearest neighbours with their labels. A
verdict goes to the ``gradpick.triage.verdicts.VerdictBook`` beside the batch's store (the one
opened,
or the app's own store of the batch), so it is there when the store opens again; the next
suspect without a verdict follows. The queue is the triage's ranking, so the flagged suspects
come first; the suspect in view is a position in it (``keys.TRIAGE_POSITION``, from 1), which
the page's link carries. A hosted demo keeps no files on its server: verdicts last for
the session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import streamlit as st

from gradpick import attribution
from gradpick.errors import GradpickError
from gradpick.outputs.inference import InferenceResult
from gradpick.outputs.stores import StoredResult
from gradpick.picking import rules as selection
from gradpick.triage import ranking as triage
from gradpick.triage.verdicts import VERDICTS, Verdict, VerdictBook
from gradpick.ui import cache, heatmaps, keys, state
from gradpick.ui import judged as judged_now
from gradpick.ui.session import Loaded, Settings

__all__ = ["heading", "render"]

SHOWN_NEIGHBOURS = 6
LISTED = 20
"""Suspects in the table under the one in view."""


def _found(loaded: Loaded) -> triage.Triage:
    """The batch's triage, computed once per batch (the session keeps it; a store's is shared
    by every session, ``cache.stored_triage``)."""
    memo = st.session_state.get(keys.TRIAGE_RESULT)
    if memo is not None and memo[0] == loaded.key:
        return memo[1]
    result = loaded.result
    assert result.labels is not None
    if isinstance(result, StoredResult):
        found = cache.stored_triage(result.rows_key, result)
    else:  # outputs held in memory (a store without embeddings has none to search)
        probabilities, labels = result.probabilities.double().numpy(), result.labels.numpy()
        features = None if result.features is None else result.features.numpy()
        found = triage.triage(probabilities, labels, features)
    if loaded.choice.kind == "stored":  # the slices kept beside the store explain errors
        path = loaded.choice.outputs.strip()
        opened = cache.stored_outputs(path, Path(path).expanduser().stat().st_mtime)
        positions = np.asarray(loaded.batch.positions)
        found = triage.explained_by_slices(found, opened, positions, result.predictions.numpy())
    st.session_state[keys.TRIAGE_RESULT] = (loaded.key, found)
    return found


def _record(
    book: VerdictBook | None, position: int, name: str, verdict: str, after: int | None = None
) -> None:
    """A button's callback: keep the verdict (the file first; the session when it fails), with
    the note and the right class as the widgets hold them now; the queue moves on to ``after``
    (the next suspect without a verdict)."""
    session = st.session_state
    if after is not None:
        session[keys.TRIAGE_POSITION] = after
    right = session.get(keys.per_source(keys.TRIAGE_CLASS, position))
    judged = Verdict(
        position,
        name,
        verdict,
        int(right) if verdict == "label_wrong" and right is not None else None,
        str(session.get(keys.per_source(keys.TRIAGE_NOTE, position)) or ""),
    )
    if book is not None:
        try:
            book.record(judged)
            return
        except GradpickError as error:
            session[keys.TRIAGE_PROBLEM] = f"{error} Kept for this session only."
    judged_now.session_book()[position] = judged


def _pick_judged(result: InferenceResult, judged: dict[int, str]) -> None:
    """The picking rule (``selection``'s verdict rule): every image with the chosen verdict."""
    chosen = st.session_state.get(keys.TRIAGE_PICK_VERDICT) or next(iter(VERDICTS))
    indices = selection.pick(result, "judged", len(result), judged=judged, verdict=chosen)
    state.set_picked(st.session_state, indices, f"Picked the images judged {VERDICTS[chosen]}.")


def _picking_rule(loaded: Loaded, current: dict[int, Verdict]) -> None:
    """Pick, for the other tabs, every image judged label wrong (or model wrong, ...)."""
    if not current:
        return
    index_of = loaded.batch.indices_of(current)
    judged = {index_of[p]: v.verdict for p, v in current.items()}
    counts = {verdict: sum(v == verdict for v in judged.values()) for verdict in VERDICTS}
    left, right = st.columns([2, 1])
    left.selectbox(
        "Pick the images judged",
        list(VERDICTS),
        format_func=lambda v: f"{VERDICTS[v]} ({counts[v]})",
        key=keys.TRIAGE_PICK_VERDICT,
    )
    right.button(
        "Pick them",
        key=keys.TRIAGE_PICK,
        on_click=_pick_judged,
        args=(loaded.result, judged),
    )


def _inspect(index: int) -> None:
    state.set_picked(st.session_state, [index], f"Picked #{index} from the triage.")


def _contrast(
    loaded: Loaded, settings: Settings, index: int, suggested: int, given: int
) -> tuple[Any, str]:
    """The image, heat and overlay of the explorer's chosen method (layer maps included) for
    the logit difference z[suggested] - z[given], and the method's label."""
    request = settings.request
    cached_by = (loaded.key, loaded.option.identity, str(loaded.device), (index,))
    maps = cache.attribution(
        *cached_by, request, loaded.model, loaded.batch, contrast=(suggested, given)
    ).maps
    tile = heatmaps.tiles(loaded.batch.rows([index]), maps.cpu(), False)[0]
    return heatmaps.strip(tile, compact=True), attribution.get(request.method).label


def _evidence(
    loaded: Loaded, settings: Settings, found: triage.Triage, index: int, names: list[str]
) -> None:
    result = loaded.result
    given, suggested = int(found.given[index]), int(found.suggested[index])
    probabilities = result.probabilities[index]
    slice_rank = 0 if found.explained_by_slice is None else int(found.explained_by_slice[index])
    if slice_rank:
        st.warning(
            f"Likely the model (slice {slice_rank}), not a label to fix: its error belongs to a "
            "slice verified by removing its evidence (see the Slices tab), so it is not flagged."
        )
    left, right = st.columns([1, 2])
    left.image(loaded.batch.rows(index).permute(1, 2, 0).numpy(), width=128)
    left.markdown(
        f"**#{index}** {loaded.batch.names[index]}  \n"
        f"given **{names[given]}** ({float(probabilities[given]):.1%})  \n"
        f"suggested **{names[suggested]}** ({float(probabilities[suggested]):.1%} by the model, "
        f"{float(found.suggested_probability[index]):.1%} with the neighbours)"
    )
    with right:
        logits = result.logits[index]
        value = float(logits[suggested] - logits[given])
        try:
            strip, method = _contrast(loaded, settings, index, suggested, given)
        except GradpickError as error:
            st.error(f"No contrast map: {error}")
        else:
            st.image(
                strip,
                caption=f"{method} of logit {names[suggested]} - logit {names[given]}: image, "
                f"map, overlay (logit difference {value:+.2f})",
            )
    if found.neighbours is None:
        return
    st.caption("Nearest neighbours in feature space (click one to pick it in Explore):")
    columns = st.columns(SHOWN_NEIGHBOURS)
    for column, (neighbour, similarity) in zip(
        columns,
        zip(found.neighbours.indices[index], found.neighbours.similarities[index], strict=True),
        strict=False,
    ):
        label = int(found.given[neighbour])
        column.image(loaded.batch.rows(neighbour).permute(1, 2, 0).numpy(), width=64)
        column.button(
            f"#{neighbour} {names[label]}",
            key=keys.per_source(keys.TRIAGE_NEIGHBOUR, int(neighbour)),
            help=f"cosine similarity {similarity:.2f}",
            on_click=_inspect,
            args=(int(neighbour),),
        )


def _verdict_buttons(
    loaded: Loaded,
    found: triage.Triage,
    index: int,
    book: VerdictBook | None,
    names: list[str],
    after: int | None,
) -> None:
    position, name = int(loaded.batch.positions[index]), loaded.batch.names[index]
    st.text_input("Note (optional)", key=keys.per_source(keys.TRIAGE_NOTE, position))
    others = [c for c in range(len(names)) if c != int(found.given[index])]
    # The suggestion as the first value through the session state (``state.start_at``): a closed
    # tab's values are kept there, and a widget given an index too logs a warning.
    chosen = keys.per_source(keys.TRIAGE_CLASS, position)
    state.start_at(st.session_state, chosen, int(found.suggested[index]))
    right = st.selectbox("Right class", others, format_func=lambda c: names[c], key=chosen)
    columns = st.columns(len(VERDICTS))
    for column, (verdict, said) in zip(columns, VERDICTS.items(), strict=True):
        column.button(
            f"{said} → {names[int(right)]}" if verdict == "label_wrong" else said,
            key=keys.per_source(keys.TRIAGE_VERDICT, verdict),
            on_click=_record,
            args=(book, position, name, verdict, after),
            type="primary" if verdict == "label_wrong" else "secondary",
        )


def _listing(
    loaded: Loaded, found: triage.Triage, current: dict[int, Verdict], names: list[str]
) -> None:
    import pandas as pd

    rows = found.order[:LISTED]
    positions = [int(loaded.batch.positions[i]) for i in rows]
    frame = pd.DataFrame(
        {
            "index": rows,
            "position": positions,
            "name": [loaded.batch.names[i] for i in rows],
            "given": [names[found.given[i]] for i in rows],
            "suggested": [names[found.suggested[i]] for i in rows],
            "score": found.score[rows],
            "flagged": found.flagged[rows],
            "verdict": [VERDICTS[current[p].verdict] if p in current else "" for p in positions],
        }
    )
    colours = {"label wrong": "#f8d0c8", "model wrong": "#d8e4f8", "ambiguous": "#f4ecc4"}
    styled = (
        frame.style.apply(
            lambda row: [f"background-color: {colours.get(row['verdict'], '')}"] * len(row), axis=1
        )
        .format({"score": "{:.3f}"})
        .hide(axis="index")
    )
    # A static table, not an interactive grid: the listing is read in its ranked order, and the
    # grid's hidden copy of its cells for screen readers followed each verdict about 200 ms
    # after the grid itself, keeping the page changing that much longer.
    st.table(styled)


def heading(rank: int, found: triage.Triage, waiting: np.ndarray) -> str:
    """Where the queue is: among the flagged suspects (which come first), or past them;
    ``waiting``: the ranks (from 1, ascending) without a verdict."""
    flagged = int(found.flagged.sum())
    if rank <= flagged:
        left = int(np.searchsorted(waiting, flagged, side="right"))
        return f"Suspect {rank} of {flagged} flagged: {left} flagged without a verdict"
    return (
        f"Suspect {rank} of {len(found.order)}, past the {flagged} flagged: "
        f"{len(waiting)} without a verdict"
    )


def _queue_position(size: int, waiting: np.ndarray) -> int:
    """The queue's position box (from 1): the first suspect without a verdict to begin with."""
    session = st.session_state
    position = session.get(keys.TRIAGE_POSITION)
    if not isinstance(position, int) or not 1 <= position <= size:
        session.pop(keys.TRIAGE_POSITION, None)  # another batch's, or a link's beyond this one
    state.start_at(session, keys.TRIAGE_POSITION, int(waiting[0]) if len(waiting) else 1)
    return int(
        st.columns([1, 3])[0].number_input(
            "Suspect in the queue",
            min_value=1,
            max_value=size,
            key=keys.TRIAGE_POSITION,
            help="The suspects ranked by how likely their label is wrong, the flagged ones "
            "first; a verdict moves on to the next one without a verdict.",
        )
    )


def render(loaded: Loaded, settings: Settings) -> None:
    """The tab: what cannot be triaged and why, else the next suspect and the verdicts."""
    result = loaded.result
    if result.output == "sigmoid":
        st.info(
            "Label triage ranks images by how likely their given label is wrong among exclusive "
            "classes (softmax); this model scores independent labels (sigmoid, multi-label), "
            "where an image may have several or none, so it has no one label to doubt. Pick "
            "by label and threshold in the Explore tab instead."
        )
        return
    if result.labels is None:
        st.info(
            "Triage needs labels: these images have none (uploaded images), so there is no "
            "given label to doubt. Open a labelled folder (one subfolder per class) or stored "
            "outputs with labels to triage them."
        )
        return
    names = list(loaded.batch.class_names)
    found = _found(loaded)
    book = judged_now.book(loaded, settings)
    current, stale, unread = judged_now.in_force(loaded, book)
    for problem in (unread, st.session_state.pop(keys.TRIAGE_PROBLEM, None)):
        if problem:
            st.error(problem)
    st.caption(
        f"{int(found.flagged.sum())} of {len(loaded)} images flagged as label issues; "
        + (
            "neighbours skipped: these outputs have no embeddings."
            if found.neighbours is None
            else f"{found.neighbours.indices.shape[1]} nearest neighbours vote."
        )
        + (
            " Verdicts last for this session only (the hosted demo keeps no files)."
            if book is None
            else f" Verdicts are kept in {book.path}."
        )
    )
    for verdict in stale:
        st.warning(
            f"A verdict on {verdict.name} ({VERDICTS[verdict.verdict]}) no longer matches the "
            f"image at position {verdict.position}: shown, not applied."
        )
    positions = np.asarray(loaded.batch.positions)
    # the ranks without a verdict, by array (a loop over 1,280,000 ranks took a second a run)
    judged = np.isin(positions[found.order], np.fromiter(current, dtype=np.int64))
    waiting = np.flatnonzero(~judged) + 1
    if not len(waiting):
        st.success("Every image has a verdict.")
    rank = _queue_position(len(found.order), waiting)
    index = int(found.order[rank - 1])
    st.subheader(heading(rank, found, waiting))
    _evidence(loaded, settings, found, index, names)
    if int(positions[index]) in current:
        st.caption(f"Judged {VERDICTS[current[int(positions[index])].verdict]}.")
    later = waiting[waiting > rank]
    if not len(later):
        later = waiting[waiting != rank]
    _verdict_buttons(loaded, found, index, book, names, int(later[0]) if len(later) else None)
    _listing(loaded, found, current, names)
    _picking_rule(loaded, current)
