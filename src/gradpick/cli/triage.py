"""``gradpick triage``: rank a store's images by how likely their given label is wrong.

Reads stored outputs only (``gradpick infer --out DIR --embeddings``), so it takes a second, not
an inference pass. Writes the suspects (Parquet, most suspect first: pandas, DuckDB and polars
read it), a JSON summary, and, with ``--export``, the relabelling the verdicts recorded in the
explorer ask for. It never moves or rewrites an image.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from gradpick.cli.arguments import Commands, positive_int
from gradpick.outputs import store_format as store
from gradpick.triage.ranking import NEIGHBOURS, sample_warning, triage_store
from gradpick.triage.verdicts import VerdictBook, accept_suggestions, split_stale, write_relabelling

__all__ = ["register", "summary"]

SHOWN = 10
"""Suspects printed on the terminal."""


def summary(opened: store.OpenedStore, found: Any, frame: Any, k: int) -> dict[str, Any]:
    """What a reader of the suspects needs to know before trusting them, as plain JSON."""
    used = found.neighbours is not None
    return {
        "store": str(opened.path),
        "rows": len(opened),
        "labelled": len(frame),
        "flagged": int(frame["flagged"].sum()),
        "confident_learning_issues": found.confident.issue_count,
        "neighbours_used": used,
        "k": int(found.neighbours.indices.shape[1]) if used else None,
        "k_asked": k,
        "neighbours_note": None
        if used
        else "the store has no embeddings, so neighbour agreement was skipped; infer with "
        "--embeddings to use it",
        "sample_warning": sample_warning(opened.metadata),
        "slices_file": found.slices_file,
        "explained_by_slice": 0
        if found.explained_by_slice is None
        else int((found.explained_by_slice > 0).sum()),
        "slices_note": None
        if found.slices_file is None
        else f"read the slices in {found.slices_file}: errors of a verified slice are likely "
        "the model's, so they are marked explained_by_slice and not flagged",
    }


def _atomic(out: Path, write: Any) -> None:
    """Write through a hidden sibling and rename it: a reader never sees half a file."""
    partial = out.with_name(f".{out.name}.partial")
    write(partial)
    partial.replace(out)


def _export(opened: store.OpenedStore, frame: Any, out: str) -> str:
    book = VerdictBook.beside(opened.path)
    latest = book.latest()
    names = opened.table.column("name").to_pylist()
    positions = opened.table.column("position").to_pylist()
    current, stale = split_stale(latest, dict(zip(positions, names, strict=True)))
    given = dict(
        zip(frame["position"].tolist(), frame["given_label"].astype(np.int64).tolist(), strict=True)
    )
    class_names = opened.metadata.get("class_names") or [
        str(i) for i in range(max(given.values()) + 1)
    ]
    count = write_relabelling(current, given, class_names, out)
    line = f"wrote {out}: {count} relabelling(s) from {book.path}"
    if stale:
        line += f"; {len(stale)} stale verdict(s) left out (their image is no longer there)"
    return line


def _cmd_triage(args: argparse.Namespace) -> int:
    opened = store.open_store(args.outputs)
    found, frame = triage_store(opened, k=args.k)
    info = summary(opened, found, frame, args.k)
    for note in (info["sample_warning"], info["neighbours_note"], info["slices_note"]):
        if note:
            print(f"note: {note}", file=sys.stderr)
    print(
        f"{info['labelled']:,} labelled images, {info['flagged']:,} flagged as label issues "
        f"(neighbours: {'k=' + str(info['k']) if info['neighbours_used'] else 'skipped'})"
    )
    shown = [c for c in ("rank", "name", "given_class", "suggested_class", "score") if c in frame]
    print(frame.head(SHOWN)[shown].to_string(index=False))
    if args.out:
        out = Path(args.out)
        _atomic(out, lambda path: frame.to_parquet(path, index=False))
        print(f"wrote {out}")
    if args.json:
        text = json.dumps(info, indent=2) + "\n"
        _atomic(Path(args.json), lambda path: path.write_text(text, encoding="utf-8"))
        print(f"wrote {args.json}")
    if args.accept:
        print(_accept(opened, frame))
    if args.export:
        print(_export(opened, frame, args.export))
    return 0


def _accept(opened: store.OpenedStore, frame: Any) -> str:
    """Every flagged image's suggested label recorded as its verdict, unless it has one."""
    flagged = frame[frame["flagged"]]
    recorded, kept = accept_suggestions(
        VerdictBook.beside(opened.path),
        zip(
            flagged["position"].astype(np.int64).tolist(),
            flagged["name"].tolist(),
            flagged["suggested_label"].astype(np.int64).tolist(),
            strict=True,
        ),
    )
    line = f"accepted {len(recorded):,} suggested label(s) of {len(flagged):,} flagged as verdicts"
    if kept:
        line += f"; {len(kept):,} already judged, kept as they were"
    return line


def register(commands: Commands) -> None:
    parser = commands.add_parser(
        "triage",
        help="rank stored images by how likely their label is wrong; export the relabelling",
        description="Score every labelled row of a store by confident learning and the label "
        "agreement of its nearest neighbours in embedding space (when the store has "
        "embeddings); write the suspects, most suspect first, to Parquet. --export writes "
        "name,old,new for every image the explorer's verdicts call mislabelled.",
    )
    parser.add_argument("--outputs", required=True, help="a store written by gradpick infer --out")
    parser.add_argument("--out", help="the suspects, one row per image (.parquet)")
    parser.add_argument("--json", help="a summary: counts, neighbours, the in-sample warning")
    parser.add_argument("--export", help="the relabelling CSV (name,old,new) from the verdicts")
    parser.add_argument(
        "--accept",
        choices=("flagged",),
        help="record the suggested label of every flagged image as its verdict ('label wrong'), "
        "unless it already has one; --export then lists them",
    )
    parser.add_argument("--k", type=positive_int, default=NEIGHBOURS, help="neighbours per image")
    parser.set_defaults(handler=_cmd_triage)
