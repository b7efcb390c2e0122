"""``gradpick compare``: two models on the same images, their flips and their maps, to JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gradpick import compare as versus
from gradpick import data
from gradpick.attribution import METHOD_NAMES
from gradpick.cli.arguments import (
    Commands,
    add_batch_arguments,
    add_model_arguments,
    data_source,
    load_models,
    positive_int,
)
from gradpick.errors import InputError
from gradpick.multilabel import refuse_sigmoid
from gradpick.outputs import store_format as store
from gradpick.picking.rules import parse_indices
from gradpick.share import export

__all__ = ["register"]


def _output_path(text: str, suffix: str, flag: str) -> Path:
    path = Path(text).expanduser()
    if path.suffix != suffix:
        raise InputError(f"{flag} must end in {suffix}, not '{path.suffix or path.name}'.")
    if not path.parent.is_dir():
        raise InputError(f"{flag}: the folder {path.parent} does not exist.")
    return path


def _class_names(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    if not args.class_names:
        return None
    first, second = (data.read_class_names(path) for path in args.class_names)
    return first, second


def _cmd_compare(args: argparse.Namespace) -> int:
    out = _output_path(args.json, ".json", "--json")
    drift_out = None if args.out is None else _output_path(args.out, ".parquet", "--out")
    if args.outputs and args.models:
        raise InputError("Compare two stores (--outputs) or two models (--model), not both.")
    maps = None
    if args.outputs:
        if len(args.outputs) != 2:
            raise InputError(
                f"Give two stores (--outputs DIR_A --outputs DIR_B); got {len(args.outputs)}."
            )
        if args.indices:
            raise InputError(
                "--indices maps the picks with both models: compare the models (--model A "
                "--model B --data SOURCE) to map them; two stores give the flips only."
            )
        opened = (store.open_store(path, versus.STORE_COLUMNS) for path in args.outputs)
        sides = versus.sides_of_stores(*opened)
        pairing = versus.pair(*sides, _class_names(args))
        source: dict[str, Any] = dict(pairing.source)
    else:
        first, second = load_models(args, 2)
        for loaded in (first, second):
            refuse_sigmoid(loaded.output, "Compare")
        images = data_source(args.data, args.split)
        positions = data.batch_positions(len(images), args.start, args.size, args.seed)
        pairing = versus.pair(
            *versus.sides_of_models(first, second, images, positions), _class_names(args)
        )
        source = {
            "description": images.description,
            "split": images.origin().get("split"),
            "start": args.start,
            "fingerprint": images.fingerprint(),
        }
        if args.indices:
            rows = parse_indices(args.indices, len(pairing))
            maps = versus.compare_maps(first, second, images, pairing, rows, args.method)
    report = _report(pairing, maps, source)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    if drift_out is not None:
        versus.write_drift(versus.drift_table(pairing, maps), drift_out)
    _summary(report, out, drift_out)
    return 0


def _report(
    pairing: versus.Pairing, maps: versus.MapComparison | None, source: dict[str, Any]
) -> dict[str, Any]:
    confusion = versus.confusion_difference(pairing)
    return {
        "models": versus.model_summaries(pairing),
        "source": source,
        "images": len(pairing),
        "class_names": list(pairing.class_names),
        "labels": pairing.labels is not None,
        "flips": versus.flips(pairing),
        "per_class": versus.per_class(pairing),
        "confusion_difference": None if confusion is None else confusion.tolist(),
        "maps": None
        if maps is None
        else {
            "method": maps.method,
            "class": f"each pick's {pairing.reference_kind}",
            "compared_at": list(maps.size),
            "rows": maps.records(pairing),
        },
        **export.stamp(),
    }


def _summary(report: dict[str, Any], out: Path, drift_out: Path | None) -> None:
    counts = ", ".join(
        f"{name.replace('_', ' ')} {count:,}" for name, count in report["flips"].items()
    )
    for role, model in zip(("first", "second"), report["models"], strict=True):
        accuracy = model["accuracy"]
        score = "no labels" if accuracy is None else f"accuracy {accuracy:.2%}"
        print(f"{role}:  {model['name']} ({score})")
    print(f"{report['images']:,} images: {counts}")
    if report["maps"] is not None:
        rows = report["maps"]["rows"]
        mean = sum(row["spearman"] for row in rows) / len(rows)
        print(f"maps of {len(rows)} picks ({report['maps']['method']}): mean Spearman {mean:.3f}")
    print(f"wrote {out}" + ("" if drift_out is None else f" and {drift_out}"))


def _cmd_bench_compare(args: argparse.Namespace) -> int:
    from gradpick.bench import compare as bench

    report = bench.run_compare_benchmark(
        rows=args.rows, repeats=args.repeats, picks=args.picks, maps=not args.no_maps
    )
    print(bench.report_text(report))
    report.write_json(args.json)
    print(f"\nwrote {args.json}")
    return 0


def _bench_compare_parser(commands: Commands) -> None:
    parser = commands.add_parser(
        "bench-compare",
        help="time a two-model comparison: two stored outputs, and the maps of k picks",
    )
    parser.add_argument("--rows", type=positive_int, default=10_000, help="images per store")
    parser.add_argument("--repeats", type=positive_int, default=5, help="runs (median reported)")
    parser.add_argument("--picks", type=positive_int, default=8, help="images mapped")
    parser.add_argument("--no-maps", action="store_true", help="time the stored half only")
    parser.add_argument("--json", default="bench-compare.json")
    parser.set_defaults(handler=_cmd_bench_compare)


def register(commands: Commands) -> None:
    parser = commands.add_parser(
        "compare",
        help="two models on the same images: flips, per-class accuracy and map drift",
        description="Compare two models on one source (each reading it at its own input "
        "spec) or two stores of the same source: which images flipped, each class's "
        "accuracy, the confusion difference and, for --indices, how alike both models' maps "
        "are for the same class. Write one JSON report (and the drift ranking with --out).",
    )
    add_batch_arguments(parser)
    add_model_arguments(parser, per_model=True)
    parser.add_argument(
        "--outputs",
        action="append",
        metavar="DIR",
        help="a store written by gradpick infer --out (twice: compare two stores)",
    )
    parser.add_argument(
        "--class-names",
        nargs=2,
        metavar=("FIRST.txt", "SECOND.txt"),
        help="each model's class names, one per line: compares models with different "
        "numbers of classes by name",
    )
    parser.add_argument("--indices", help='batch indices to map with both models, e.g. "3, 7"')
    parser.add_argument("--method", default="gradient", choices=METHOD_NAMES)
    parser.add_argument("--json", required=True, metavar="OUT.json", help="the report to write")
    parser.add_argument("--out", metavar="drift.parquet", help="the drift ranking to write")
    parser.set_defaults(handler=_cmd_compare)
    _bench_compare_parser(commands)
