"""``gradpick slices``: where the model fails systematically, what it looks at there, and
whether removing that changes its mind.

Reads a store written with embeddings (``gradpick infer --out DIR --embeddings``), maps its
errors and a sample of correct rows with the store's own model (or ``--model``/``--weights``),
and writes the slices: a Parquet of one row per image with its slice, a JSON summary of the
slices ranked from 1, and the same JSON beside the store (``DIR.slices.json``), where
``gradpick triage`` and the explorer find it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gradpick.attribution import METHOD_NAMES
from gradpick.cli.arguments import Commands, positive_int
from gradpick.multilabel import refuse_sigmoid
from gradpick.outputs import store_format as store
from gradpick.show.slice_cards import verification
from gradpick.slices.discover import CLUSTERS
from gradpick.slices.features import METHOD
from gradpick.slices.stored import PER_CLASS, TESTED, find_slices

__all__ = ["register"]

SHOWN = 10
"""Slices printed on the terminal."""


def _atomic(out: Path, write: Any) -> None:
    partial = out.with_name(f".{out.name}.partial")
    write(partial)
    partial.replace(out)


def _line(row: dict[str, Any]) -> str:
    """The slice's rank, size and error rate, its verification (the cards' own sentence, one
    home for its figures) and its description."""
    return (
        f"{row['rank']:>3}. {row['size']:,} images, error rate {row['error_rate']:.0%}; "
        f"{verification(row)}\n"
        f"     {row['description']}"
    )


def _cmd_slices(args: argparse.Namespace) -> int:
    from gradpick.cli.arguments import load_model

    opened = store.open_store(args.outputs)
    refuse_sigmoid((opened.metadata.get("model") or {}).get("output", "softmax"), "Slices")
    model = load_model(args) if args.model else None
    found = find_slices(
        opened,
        model,
        clusters=args.clusters,
        per_class=args.per_class,
        method=args.method,
        layer=args.layer,
        tested=args.tested,
        seed=args.seed,
    )
    summary = found.to_json()
    verified = sum(row["verified"] for row in summary["slices"])
    print(
        f"{summary['rows']:,} labelled images, {summary['errors']:,} errors; "
        f"{summary['mapped']:,} mapped by {summary['method']}; {len(summary['slices'])} slices, "
        f"{verified} verified by removing their evidence"
    )
    for row in summary["slices"][:SHOWN]:
        print(_line(row))
    beside = found.write_beside()
    print(f"wrote {beside} (gradpick triage reads it)")
    if args.out:
        out = Path(args.out)
        frame = found.frame()
        _atomic(out, lambda path: frame.to_parquet(path, index=False))
        print(f"wrote {out}")
    if args.json:
        text = json.dumps(summary, indent=2, allow_nan=False) + "\n"
        _atomic(Path(args.json), lambda path: path.write_text(text, encoding="utf-8"))
        print(f"wrote {args.json}")
    return 0


def register(commands: Commands) -> None:
    from gradpick.cli.arguments import add_model_arguments

    parser = commands.add_parser(
        "slices",
        help="find where the model fails systematically, with its evidence, tested by removal",
        description="Map the errors of a store (and a sample of correct images per class) for "
        "the predicted class, describe each map's evidence without its position (how "
        "concentrated, its colour, brightness, saturation and texture), cluster the errors with "
        "their label and prediction into ranked slices, and verify each slice by removing its "
        "evidence (ROAD's imputation) against removing the same area at random positions. "
        "Keeps the result beside the store for gradpick triage.",
    )
    parser.add_argument(
        "--outputs", required=True, help="a store written by gradpick infer --out --embeddings"
    )
    parser.add_argument("--out", help="one row per image with its slice (.parquet)")
    parser.add_argument("--json", help="the slices, ranked from 1, with their verification")
    parser.add_argument("--clusters", type=positive_int, default=CLUSTERS)
    parser.add_argument(
        "--per-class", type=positive_int, default=PER_CLASS, help="correct images mapped per class"
    )
    parser.add_argument(
        "--tested", type=positive_int, default=TESTED, help="errors per slice tested by removal"
    )
    parser.add_argument("--method", default=METHOD, choices=METHOD_NAMES)
    parser.add_argument("--layer", help="the layer of a layer method (default: the automatic one)")
    parser.add_argument("--seed", type=int, default=0)
    add_model_arguments(parser)
    parser.set_defaults(handler=_cmd_slices)
