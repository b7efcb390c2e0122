"""The verdicts in force on the batch, for every view that shows or picks by them.

The Triage tab records verdicts (``gradpick.triage.verdicts``) beside the batch's store; the table,
the scatter and the thumbnails show them and the pickers' verdict rule picks by them, all read
through here so that each view sees the same verdicts: the file's, overlaid by those kept for
this session only (a hosted demo, or a file that could not be written). The slices kept
beside an opened store, and the verdicts on them, are read here too, for the Slices tab and the
report.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import streamlit as st

from gradpick.errors import DataError
from gradpick.outputs import stores as stored
from gradpick.slices.stored import read_beside
from gradpick.slices.verdicts import SliceVerdict, SliceVerdictBook
from gradpick.slices.verdicts import in_force as slices_in_force
from gradpick.triage.verdicts import VERDICTS, Verdict, VerdictBook, split_stale
from gradpick.ui import cache, keys
from gradpick.ui.config import app_config
from gradpick.ui.session import Loaded, Settings

__all__ = [
    "MARKS",
    "book",
    "by_index",
    "in_force",
    "marks",
    "session_book",
    "slice_verdicts",
    "slices_of",
    "store_path",
]

MARKS = {
    "label_wrong": ("#c2255c", "diamond-open"),
    "model_wrong": ("#1971c2", "square-open"),
    "ambiguous": ("#e67700", "circle-open-dot"),
    "fine": ("#495057", "star-open"),
}
"""Each verdict's colour and marker symbol, beside an image's own point or thumbnail."""


def store_path(loaded: Loaded, settings: Settings) -> Path | None:
    """The store the batch's verdicts belong beside: the one opened, else the app's own store
    of this batch; None in a hosted demo, which keeps nothing on disk."""
    if loaded.choice.kind == "stored":
        return Path(loaded.choice.outputs.strip()).expanduser()
    if app_config().hosted or settings.source is None:
        return None
    # Every view asks on every click, and a folder's fingerprint reads every file's metadata:
    # the path is kept per batch and model.
    memo_key = (loaded.key, loaded.option.identity)
    memo = st.session_state.get(keys.VERDICT_STORE)
    if memo is not None and memo[0] == memo_key:
        return Path(memo[1])
    source = settings.source.at_spec(loaded.served.spec)
    path = stored.own_store_path(loaded.served, source, loaded.batch)
    st.session_state[keys.VERDICT_STORE] = (memo_key, str(path))
    return path


def book(loaded: Loaded, settings: Settings) -> VerdictBook | None:
    """The batch's verdict file (None: verdicts last for the session)."""
    path = store_path(loaded, settings)
    return None if path is None else VerdictBook.beside(path)


def session_book() -> dict[int, Verdict]:
    """Verdicts kept for this session only, by position."""
    kept: dict[int, Verdict] = st.session_state.setdefault(keys.TRIAGE_SESSION_VERDICTS, {})
    return kept


def in_force(
    loaded: Loaded, verdicts: VerdictBook | None
) -> tuple[dict[int, Verdict], list[Verdict], str | None]:
    """The verdicts in force on this batch's images by position, the stale ones (shown, not
    applied), and why the file could not be read (None when it could)."""
    latest = dict(session_book())
    problem = None
    if verdicts is not None:
        try:
            latest = {**verdicts.latest(), **latest}
        except DataError as error:
            problem = f"{error} Verdicts given now last for this session only."
    index_of = loaded.batch.indices_of(latest)
    names = {position: loaded.batch.names[index] for position, index in index_of.items()}
    current, stale = split_stale(latest, names)
    return current, stale, problem


def by_index(loaded: Loaded, settings: Settings) -> dict[int, str]:
    """Batch index -> verdict of every judged image (a file that cannot be read counts as
    none here; the Triage tab says why)."""
    current, _, _ = in_force(loaded, book(loaded, settings))
    index_of = loaded.batch.indices_of(current)
    return {index_of[p]: v.verdict for p, v in current.items() if p in index_of}


def marks(
    x: Sequence[float], y: Sequence[float], verdicts: Sequence[str], legend: bool = True
) -> list[dict[str, Any]]:
    """Plotly traces, one per verdict given: an open marker of its colour and symbol at (x, y)
    (in the legend unless ``legend`` is False). Without customdata, so a box or lasso over a
    mark picks nothing extra (the image's own point carries its index)."""
    traces = []
    for verdict, (colour, symbol) in MARKS.items():
        members = [i for i, said in enumerate(verdicts) if said == verdict]
        if members:
            traces.append(
                {
                    "type": "scatter",
                    "x": [x[i] for i in members],
                    "y": [y[i] for i in members],
                    "mode": "markers",
                    "name": f"verdict: {VERDICTS[verdict]}",
                    "hoverinfo": "skip",
                    "showlegend": legend,
                    "marker": {"color": colour, "symbol": symbol, "size": 13},
                }
            )
    return traces


def slices_of(loaded: Loaded) -> tuple[dict[str, Any] | None, Path | None]:
    """The slices kept beside the opened store (``read_beside``: None when there are none or
    they describe another store) and their file; (None, None) for a batch of no store."""
    if loaded.choice.kind != "stored":
        return None, None
    path = loaded.choice.outputs.strip()
    opened = cache.stored_outputs(path, Path(path).expanduser().stat().st_mtime)
    return read_beside(opened)


def slice_verdicts(
    loaded: Loaded, kept: dict[str, Any]
) -> tuple[SliceVerdictBook, dict[int, SliceVerdict], str | None]:
    """The opened store's slice verdicts file, the verdicts in force on the slices ``kept``
    by rank, and why the file could not be read (None when it could)."""
    book = SliceVerdictBook.beside(loaded.choice.outputs.strip())
    try:
        return book, slices_in_force(kept, book.history()), None
    except DataError as error:
        return book, {}, str(error)
