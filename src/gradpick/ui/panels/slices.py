"""The Slices tab: where the model fails systematically, as cards, from ``gradpick slices``.

The slices are read from the file ``gradpick slices`` keeps beside the store the page opened
(``gradpick.slices.stored.read_beside``: only while it describes that store's model and images).
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
from pathlib import Path
from typing import Any

import numpy as np
import streamlit as st

from gradpick.errors import GradpickError
from gradpick.picking.named import NamedSelection, SelectionShelf
from gradpick.show.render import colorize, fit
from gradpick.slices.stored import read_beside
from gradpick.slices.verdicts import SliceVerdict, SliceVerdictBook, in_force
from gradpick.triage.verdicts import VERDICTS
from gradpick.ui import cache, keys, linking, state
from gradpick.ui.session import Loaded, Settings

__all__ = ["render", "verification"]

SHOWN = 12
"""Slices drawn as cards, in rank order."""
TYPICAL = 6
"""Typical images per card."""
SIDE = 96
"""Pixels of a card's pictures."""


def verification(row: dict[str, Any]) -> str:
    """One line saying whether the slice verified and by how much."""
    effect = row.get("effect")
    if effect is None:
        return "No errors to test."
    ratio = "∞" if effect["ratio"] is None else f"{effect['ratio']:.1f}"
    verdict = "**Verified**" if row["verified"] else "Not verified"
    return (
        f"{verdict}: removing the evidence changed {effect['evidence_change']:.0%} of "
        f"{effect['tested']} calls, the same area at random {effect['random_change']:.0%} "
        f"(x{ratio}, p = {effect['p_value']:.2g})."
    )


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
    opened = cache.stored_outputs(path, Path(path).expanduser().stat().st_mtime)
    kept, where = read_beside(opened)
    if kept is None:
        st.info(
            f"No slices of this store yet: run gradpick slices --outputs {path} "
            f"(they are kept in {where})."
        )
        return
    slices = kept.get("slices", [])
    verified = sum(bool(row["verified"]) for row in slices)
    book = SliceVerdictBook.beside(path)
    st.caption(
        f"{len(slices)} slices of {kept.get('errors', 0):,} errors, {verified} verified by "
        f"removing their evidence; read from {where}. Verdicts are kept in {book.path}."
    )
    problem = st.session_state.pop(keys.SLICE_PROBLEM, None)
    try:
        judged = in_force(kept, book.history())
    except GradpickError as error:
        judged, problem = {}, f"{error} {problem or ''}".strip()
    if problem:
        st.error(problem)
    saved = st.session_state.pop(keys.SLICE_SAVED, None)
    if saved:
        st.success(saved)
    index_of = {int(position): index for index, position in enumerate(loaded.batch.positions)}
    images = loaded.batch.images
    shelf = SelectionShelf.beside(path)
    view = linking.view_of(loaded, settings, st.session_state)
    for row in slices[:SHOWN]:
        here = [index_of[p] for p in row["positions"] if p in index_of]
        link = replace(view, picks=tuple(here), tab="Explore").to_params()
        with st.container(border=True):
            _card(row, here, index_of, images)
            _verdicts(kept, row, book, judged.get(int(row["rank"])))
            st.button(
                f"Save its {len(here)} images as the named selection 'slice {row['rank']}'",
                key=keys.per_source(keys.SLICE_SAVE, row["rank"]),
                disabled=not here,
                on_click=_save,
                args=(shelf, row, here, link),
            )


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


def _card(row: dict[str, Any], here: list[int], index_of: dict[int, int], images: Any) -> None:
    rank = int(row["rank"])
    st.markdown(
        f"**Slice {rank}**: {row['size']:,} images, {row['errors']:,} errors "
        f"(error rate {row['error_rate']:.0%})"
    )
    left, right = st.columns([1, 3])
    mean_map = np.asarray(row["mean_map"], dtype=np.float64)
    limit = float(mean_map.max()) if mean_map.size and mean_map.max() > 0 else 1.0
    left.image(fit(colorize(mean_map, limit), SIDE), caption="mean map, peaks at the centre")
    right.markdown(row["description"])
    right.markdown(verification(row))
    typical = [index_of[p] for p in row["typical"] if p in index_of][:TYPICAL]
    if typical:
        right.image(
            [fit(images[i].permute(1, 2, 0).numpy(), SIDE // 2) for i in typical],
            caption=[f"#{i}" for i in typical],
        )
    right.button(
        f"Pick its {len(here)} images of this batch",
        key=keys.per_source(keys.SLICE_PICK, str(rank)),
        disabled=not here,
        on_click=_pick,
        args=(here, rank),
    )
