"""The Slices tab: where the model fails systematically, as cards, from ``gradpick slices``.

The slices are read from the file ``gradpick slices`` keeps beside the store the page opened
(``gradpick.ui.judged.slices_of``: only while it describes that store's model and images).
Each card shows the slice's mean map (each member's map moved so its peak is at the centre), its
most typical images of this batch, its description, and its verification by intervention; a
button picks the slice's images of this batch into Explore. A verdict on the slice (the triage's
words: model wrong, label wrong, ambiguous, fine) goes to the store's verdicts file
(``gradpick.slices.verdicts``), where it stays for this store's slice of those same images.
Another button saves the slice's images of this batch as a named selection
(``gradpick.picking.named``, beside the store), with the link that reopens them in Explore, so
the slice is listed wherever named selections are.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import streamlit as st

from gradpick.data.sources import ImageBatch
from gradpick.errors import GradpickError
from gradpick.picking.named import NamedSelection, SelectionShelf
from gradpick.show.render import fit
from gradpick.show.slice_cards import mean_map_picture, verification
from gradpick.slices.verdicts import SliceVerdict, SliceVerdictBook
from gradpick.triage.verdicts import VERDICTS
from gradpick.ui import judged as judged_now
from gradpick.ui import keys, linking, state
from gradpick.ui.session import Loaded, Settings

__all__ = ["render"]

SHOWN = 12
"""Slices drawn as cards, in rank order."""
TYPICAL = 6
"""Typical images per card."""
SIDE = 96
"""Pixels of a card's pictures."""


def _pick(indices: list[int], rank: int) -> None:
    session = st.session_state
    state.set_picked(session, indices, f"Picked the {len(indices)} images of slice {rank}.")
    session[keys.EXPLORER_TAB] = "Explore"


def _judge(book: SliceVerdictBook, kept: dict[str, Any], row: dict[str, Any], verdict: str) -> None:
    """A verdict button's callback: keep the verdict beside the store (or say why not)."""
    try:
        book.record(SliceVerdict.of(kept, row, verdict))
    except GradpickError as error:
        st.session_state[keys.SLICE_PROBLEM] = f"The verdict was not kept: {error}"


def _save(
    shelf: SelectionShelf, row: dict[str, Any], here: list[int], link: dict[str, str]
) -> None:
    """A save button's callback: the slice's images of this batch as the named selection
    'slice N', noted with its description, and the link that picks them in Explore."""
    rank = int(row["rank"])
    name = f"slice {rank}"
    try:
        shelf.save(NamedSelection(name, tuple(here), str(row["description"]), link))
    except GradpickError as error:
        st.session_state[keys.SLICE_PROBLEM] = str(error)
        return
    st.session_state[keys.SLICE_SAVED] = (
        f"Saved the {len(here)} images of slice {rank} as the named selection {name!r} "
        "(Explore, Named selections)."
    )


def render(loaded: Loaded, settings: Settings) -> None:
    """The slices of the opened store as cards, or what to run to get them."""
    if loaded.choice.kind != "stored":
        st.info(
            "Slices are read from a store: write one with gradpick infer --out DIR "
            "--embeddings, run gradpick slices --outputs DIR, and open DIR here."
        )
        return
    path = loaded.choice.outputs.strip()
    kept, where = judged_now.slices_of(loaded)
    if kept is None:
        st.info(
            f"No slices of this store yet: run gradpick slices --outputs {path} "
            f"(they are kept in {where})."
        )
        return
    slices = kept.get("slices", [])
    verified = sum(bool(row["verified"]) for row in slices)
    book, judged, unread = judged_now.slice_verdicts(loaded, kept)
    st.caption(
        f"{len(slices)} slices of {kept.get('errors', 0):,} errors, {verified} verified by "
        f"removing their evidence; read from {where}. Verdicts are kept in {book.path}."
    )
    for problem in (unread, st.session_state.pop(keys.SLICE_PROBLEM, None)):
        if problem:
            st.error(problem)
    saved = st.session_state.pop(keys.SLICE_SAVED, None)
    if saved:
        st.success(saved)
    index_of = loaded.batch.indices_of(
        int(position) for row in slices for key in ("positions", "typical") for position in row[key]
    )
    shelf = SelectionShelf.beside(path)
    view = replace(linking.view_of(loaded, settings, st.session_state), slice=None)
    for row in _in_view(slices):
        here = [index_of[p] for p in row["positions"] if p in index_of]
        link = replace(view, picks=tuple(here), tab="Explore").to_params()
        with st.container(border=True):
            _card(row, here, index_of, loaded.batch)
            _verdicts(kept, row, book, judged.get(int(row["rank"])))
            st.button(
                f"Save its {len(here)} images as the named selection 'slice {row['rank']}'",
                key=keys.per_source(keys.SLICE_SAVE, row["rank"]),
                disabled=not here,
                on_click=_save,
                args=(shelf, row, here, link),
            )


def _in_view(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The slices to draw: the one chosen in the box (a link's ``slice``), or the first
    ``SHOWN``."""
    session = st.session_state
    ranks = [int(row["rank"]) for row in slices]
    chosen = session.get(keys.SLICE_CHOSEN)
    if chosen is not None and chosen not in (0, *ranks):
        session.pop(keys.SLICE_CHOSEN)  # another store's slice, or a link's beyond these
    state.start_at(session, keys.SLICE_CHOSEN, 0)
    rank = st.columns([1, 3])[0].selectbox(
        "Slice in view",
        [0, *ranks],
        format_func=lambda r: f"slice {r}" if r else f"the first {min(SHOWN, len(ranks))}",
        key=keys.SLICE_CHOSEN,
    )
    return [row for row in slices if int(row["rank"]) == rank] if rank else slices[:SHOWN]


def _verdicts(
    kept: dict[str, Any], row: dict[str, Any], book: SliceVerdictBook, now: SliceVerdict | None
) -> None:
    """The slice's verdict in force, and a button per verdict."""
    rank = int(row["rank"])
    st.caption(
        f"Slice {rank}: judged {VERDICTS[now.verdict]} ({now.time})."
        if now is not None
        else f"Slice {rank}: no verdict yet. Is it the model or the labels?"
    )
    for column, (verdict, said) in zip(st.columns(len(VERDICTS)), VERDICTS.items(), strict=True):
        column.button(
            said,
            key=keys.per_source(keys.SLICE_VERDICT, rank, verdict),
            on_click=_judge,
            args=(book, kept, row, verdict),
            type="primary" if now is not None and now.verdict == verdict else "secondary",
            use_container_width=True,
        )


def _card(
    row: dict[str, Any], here: list[int], index_of: dict[int, int], batch: ImageBatch
) -> None:
    rank = int(row["rank"])
    st.markdown(
        f"**Slice {rank}**: {row['size']:,} images, {row['errors']:,} errors "
        f"(error rate {row['error_rate']:.0%})"
    )
    left, right = st.columns([1, 3])
    left.image(mean_map_picture(row["mean_map"], SIDE), caption="mean map, peaks at the centre")
    right.markdown(row["description"])
    right.markdown(verification(row, "**{}**"))
    typical = [index_of[p] for p in row["typical"] if p in index_of][:TYPICAL]
    if typical:
        right.image(
            [fit(batch.rows(i).permute(1, 2, 0).numpy(), SIDE // 2) for i in typical],
            caption=[f"#{i}" for i in typical],
            width=SIDE // 2,  # each its own size: a short caption shrank its image
        )
    right.button(
        f"Pick its {len(here)} images of this batch",
        key=keys.per_source(keys.SLICE_PICK, str(rank)),
        disabled=not here,
        on_click=_pick,
        args=(here, rank),
    )
