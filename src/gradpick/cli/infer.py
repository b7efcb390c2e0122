"""``gradpick infer``: batched inference, printed or stored, in this process or on Ray."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gradpick import data
from gradpick.cli.arguments import (
    Commands,
    add_batch_arguments,
    add_model_arguments,
    batch_description,
    bounded,
    data_source,
    load_model,
    positive_int,
    reading_progress,
    spec_overrides,
)
from gradpick.errors import InputError
from gradpick.models.zoo import LoadedModel
from gradpick.multilabel import per_label_lines
from gradpick.outputs import store_format as store
from gradpick.outputs import stores as stored
from gradpick.outputs.inference import infer_source

__all__ = ["register"]


def _cmd_infer(args: argparse.Namespace) -> int:
    out = _store_path(args.out)
    if args.embeddings and out is None:
        raise InputError("--embeddings are stored with the outputs; give --out DIR too.")
    loaded = load_model(args)
    source = data_source(args.data, args.split, loaded.spec)
    positions = data.batch_positions(len(source), args.start, args.size, args.seed)
    if args.engine == "ray":
        if out is None:
            raise InputError("--engine ray writes its outputs to a store: give --out DIR.")
        return _infer_on_ray(args, out, loaded, source, positions)
    if out is not None:
        return _infer_to_store(args, out, loaded, source, positions)
    inferred = infer_source(
        loaded.module,
        source,
        positions,
        args.batch_size,
        progress=reading_progress,
        output=loaded.output,
    )
    result = inferred.result
    print(f"model: {loaded.describe()}")
    print(f"images: {batch_description(source, args, len(positions))}")
    for note in inferred.notes:
        print(f"note: {note}")
    if loaded.output == "sigmoid" and result.labels is not None:
        print(per_label_lines(result.logits, result.labels, source.class_names))
    elif result.accuracy is not None and result.correct is not None:
        print(f"accuracy: {result.accuracy:.2%} ({int(result.correct.sum()):,} of {len(result):,})")
    print(
        f"time: {result.milliseconds:,.1f} ms on {result.device} (batch size {args.batch_size}), "
        f"{result.images_per_second:,.0f} images/s"
    )
    return 0


def _store_path(text: str | None) -> Path | None:
    """``--out`` of ``infer``: a folder that is new, or an earlier store to replace."""
    if text is None:
        return None
    path = Path(text).expanduser()
    if path.suffix == ".parquet" or path.is_file():
        raise InputError(f"--out names a folder for the Parquet parts, not a file: '{path}'.")
    if not path.parent.is_dir():
        raise InputError(f"--out: the folder {path.parent} does not exist.")
    return path


def _print_run(
    args: argparse.Namespace,
    loaded: LoadedModel,
    source: data.ImageSource,
    positions: list[int],
    notes: Sequence[str],
) -> None:
    """What both engines print first: the model, the batch, and what was skipped or adapted."""
    print(f"model: {loaded.describe()}")
    print(f"images: {batch_description(source, args, len(positions))}")
    for note in notes:
        print(f"note: {note}")


def _batch_of(args: argparse.Namespace, positions: list[int]) -> dict[str, int | None]:
    """The batch ``infer`` read, recorded in its store so the explorer opens on it."""
    return {"start": args.start, "size": len(positions), "seed": args.seed}


def _infer_to_store(
    args: argparse.Namespace,
    out: Path,
    loaded: LoadedModel,
    source: data.ImageSource,
    positions: list[int],
) -> int:
    """Stream the model's outputs into a store: one Parquet row per image, published whole."""
    run = stored.infer_to_store(
        loaded,
        source,
        positions,
        out,
        args.batch_size,
        embeddings=args.embeddings,
        progress=reading_progress,
        batch=_batch_of(args, positions),
    )
    _print_run(args, loaded, source, positions, run.notes)
    print(
        f"wrote {run.rows:,} rows to {out} in {run.seconds:,.1f} s "
        f"({run.images_per_second:,.0f} images/s)"
    )
    if run.replaced:
        print(f"note: {run.replaced}")
    return 0


def _infer_on_ray(
    args: argparse.Namespace,
    out: Path,
    loaded: LoadedModel,
    source: data.ImageSource,
    positions: list[int],
) -> int:
    """The same inference as a Ray Data pipeline, written to the same store as in-process."""
    from gradpick.outputs import distributed

    root, rows = distributed.source_rows(source, positions, loaded.classes)
    options = distributed.ClusterOptions(
        address=args.address,
        workers=args.workers,
        gpus_per_worker=args.gpus_per_worker,
        cpus_per_worker=args.cpus_per_worker,
        batch_size=args.batch_size,
    )
    recipe = distributed.model_recipe(loaded.name, args.weights, spec_overrides(args))
    run = distributed.infer_on_ray(
        recipe,
        rows,
        root,
        loaded.spec,
        store.store_metadata(
            loaded.identity(), loaded.spec, source, args.embeddings, _batch_of(args, positions)
        ),
        out,
        options,
        embeddings=args.embeddings,
        log=lambda line: print(line, file=sys.stderr),
    )
    _print_run(args, loaded, source, positions, run.notes)
    print(
        f"time: {run.seconds:,.1f} s on {run.cluster} with {args.workers} worker(s), "
        f"{run.images_per_second:,.0f} images/s"
    )
    print(f"wrote {run.rows:,} rows in {run.parts} part(s) to {run.out}")
    return 0


def register(commands: Commands) -> None:
    parser = commands.add_parser(
        "infer",
        help="batched inference: accuracy and throughput, or stored outputs (--out)",
        description="Run a model over a batch (a slice or a seeded sample of a source; default "
        "all of it) under torch.inference_mode(), images decoded while the model runs, and "
        "print its accuracy and throughput; with --out DIR, store one Parquet row per image.",
    )
    add_batch_arguments(parser)
    add_model_arguments(parser)
    parser.add_argument("--batch-size", type=positive_int, default=256)
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="store the outputs: one Parquet row per image (position, name, label, prediction, "
        "confidence, loss, logits; a sigmoid model's also each label's probability) in DIR, "
        "written whole or not at all",
    )
    parser.add_argument(
        "--embeddings",
        action="store_true",
        help="with --out: also store each image's embedding (the input of the last nn.Linear)",
    )
    parser.add_argument(
        "--engine",
        default="local",
        choices=("local", "ray"),
        help="local: this process; ray: a Ray Data pipeline (pip install 'gradpick[distributed]')",
    )
    parser.add_argument(
        "--address",
        help="with --engine ray: join the Ray cluster at host:port (default: start "
        "a local instance)",
    )
    parser.add_argument(
        "--workers", type=positive_int, default=2, help="with --engine ray: model workers"
    )
    parser.add_argument(
        "--gpus-per-worker",
        type=bounded(float, 0),
        default=0.0,
        help="with --engine ray: GPUs each worker holds (0: infer on its CPU)",
    )
    parser.add_argument(
        "--cpus-per-worker",
        type=bounded(float, 0.1),
        default=1.0,
        help="with --engine ray: CPUs each worker holds; from 2 on it decodes with that many "
        "threads (give a GPU worker several, or decoding starves it)",
    )
    parser.set_defaults(handler=_cmd_infer)
