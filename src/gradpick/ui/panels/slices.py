"""The Slices tab: where the model fails systematically, as cards, from ``gradpick slices``.

The slices are read from the file ``gradpick slices`` keeps beside the store the page opened
(``gradpick.slices.stored.read_beside``: only while it describes that store's model and images).
Each card shows the slice's mean map (each member's map moved so its peak is at the centre), its
most typical images of this batch, its description, and its verification by intervention; a
button picks the slice's images of this batch into Explore.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import streamlit as st

from gradpick.data.sources import ImageBatch
from gradpick.show.render import colorize, fit
from gradpick.slices.stored import read_beside
from gradpick.ui import cache, keys, state
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
    st.caption(
        f"{len(slices)} slices of {kept.get('errors', 0):,} errors, {verified} verified by "
        f"removing their evidence; read from {where}."
    )
    index_of = {int(position): index for index, position in enumerate(loaded.batch.positions)}
    for row in slices[:SHOWN]:
        _card(row, index_of, loaded.batch)


def _card(row: dict[str, Any], index_of: dict[int, int], batch: ImageBatch) -> None:
    rank = int(row["rank"])
    here = [index_of[p] for p in row["positions"] if p in index_of]
    with st.container(border=True):
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
                [fit(batch.rows(i).permute(1, 2, 0).numpy(), SIDE // 2) for i in typical],
                caption=[f"#{i}" for i in typical],
            )
        right.button(
            f"Pick its {len(here)} images of this batch",
            key=keys.per_source(keys.SLICE_PICK, str(rank)),
            disabled=not here,
            on_click=_pick,
            args=(here, rank),
        )
