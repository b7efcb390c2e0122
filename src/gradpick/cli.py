"""The ``gradpick`` command line: train, eval, infer, grads and bench.

Every gradpick error is printed as one clear line (exit status 2), never as a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from gradpick import data, models
from gradpick.devices import DEVICE_CHOICES
from gradpick.errors import GradpickError, InputError, ModelError
from gradpick.gradients import REDUCTIONS, STRATEGIES, TARGETS, GradientResult, input_gradients
from gradpick.infer import as_model_input, infer
from gradpick.measure import MemoryFigure, MemoryReport
from gradpick.selection import parse_indices
from gradpick.versions import library_versions

Handler = Callable[[argparse.Namespace], int]


def _source(location: str | None, split: str) -> data.ImageSource:
    """A local path when given, else the default CIFAR-10 (configured folder or download)."""
    if location:
        return data.open_source(location, split)
    return data.default_cifar10(split, progress=_download_progress)


def _download_progress(done: int, total: int) -> None:
    share = f"{done / total:.0%}" if total else f"{done / 1e6:.0f} MB"
    sys.stderr.write(f"\rdownloading CIFAR-10: {share}")
    if total and done >= total:
        sys.stderr.write("\n")


def _reading_progress(done: int, total: int) -> None:
    sys.stderr.write(f"\rreading images: {done:,} of {total:,}")
    if done >= total:
        sys.stderr.write("\n")


def _add_data_arguments(parser: argparse.ArgumentParser, split: str) -> None:
    parser.add_argument(
        "--data",
        help="a local folder: ImageFolder layout, a folder with train/ and test/, or "
        "cifar-10-batches-py (default: $GRADPICK_CIFAR10_DIR, else torchvision's download)",
    )
    parser.add_argument("--split", default=split, choices=("train", "test"))


def _cmd_train(args: argparse.Namespace) -> int:
    from gradpick import train

    config = train.default_config(args.model, args.epochs)
    warm_start = Path(args.warm_start) if args.warm_start else None
    if warm_start is not None and not warm_start.is_file():
        raise ModelError(f"{warm_start}: no such weights file to start from.")
    teachers = [Path(path) for path in args.teacher]
    for teacher in teachers:
        if not teacher.is_file():
            raise ModelError(f"{teacher}: no such teacher weights file.")
    overrides = {
        "seed": args.seed,
        "batch_size": args.batch_size,
        "max_lr": args.max_lr,
        "cutout": args.cutout,
        "distill_weight": args.distill_weight,
        "warm_start_sha256": models.sha256_file(warm_start) if warm_start else None,
        "teachers": tuple(models.sha256_file(path) for path in teachers) or None,
    }
    config = train.TrainConfig(
        **{
            **train.asdict(config),
            **{key: value for key, value in overrides.items() if value is not None},
            "compile": config.compile and not args.no_compile,
            "swa": args.swa,
        }
    )
    run_dir = Path(args.run_dir or f"runs/{args.model}")
    model = train.train(
        config,
        _source(args.data, "train"),
        run_dir,
        resume=args.resume,
        device=args.device,
        warm_start=warm_start,
        teachers=teachers,
    )
    card_beside = warm_start.with_suffix(".json") if warm_start else None
    weights_path, card_path, evaluation = train.export(
        model,
        config,
        run_dir,
        Path(args.export_dir),
        _source(args.data, "test"),
        json.loads(card_beside.read_text()) if card_beside and card_beside.is_file() else None,
    )
    print(evaluation.table())
    print(f"\nwrote {weights_path} and {card_path}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from gradpick import train

    model = models.load(args.model, args.weights, device=args.device)
    batch = data.load_batch(_source(args.data, args.split), args.start, args.size)
    print(f"{args.model} on {batch.source}")
    print(train.evaluate(model, batch).table())
    return 0


def _train_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "train",
        help="train a built-in model on CIFAR-10 and export weights with a model card",
        description="Train a built-in model; checkpoints every epoch, resumable with --resume. "
        "At the end, writes EXPORT_DIR/MODEL.pt and its card, evaluated on the test split.",
    )
    parser.add_argument("model", choices=list(models.ARCHITECTURES))
    parser.add_argument("--data", help="training data: a folder with train/ and test/ trees")
    parser.add_argument("--epochs", type=int, help="number of epochs (default per model)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--batch-size", type=int, help="images per step (default per model)")
    parser.add_argument("--max-lr", type=float, help="peak learning rate (default per model)")
    parser.add_argument(
        "--warm-start",
        metavar="WEIGHTS",
        help="start from these weights (a finished run's export): a warm restart, recorded "
        "with the weights' sha256 and, when it lies beside them, their card",
    )
    parser.add_argument(
        "--cutout",
        type=_cutout_side,
        metavar="PIXELS",
        help="side of the square erased from each augmented image (0: none; default per model)",
    )
    parser.add_argument(
        "--teacher",
        action="append",
        default=[],
        metavar="WEIGHTS",
        help="distil from these weights of the same model (repeat for an ensemble): targets mix "
        "the labels with the teachers' mean probabilities on each training image",
    )
    parser.add_argument(
        "--distill-weight",
        type=_fraction,
        help="the teachers' share of each target (default 0.5)",
    )
    parser.add_argument(
        "--swa",
        action="store_true",
        help="stochastic weight averaging instead of one-cycle: a constant --max-lr, the weights "
        "averaged over every epoch, BatchNorm recomputed (for a warm restart)",
    )
    parser.add_argument(
        "--no-compile", action="store_true", help="skip torch.compile (slower steps, no warm-up)"
    )
    parser.add_argument("--run-dir", help="checkpoint folder (default runs/MODEL)")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    parser.add_argument("--export-dir", default="assets", help="where weights and card go")
    parser.add_argument("--device", default="auto")
    parser.set_defaults(handler=_cmd_train)


def _eval_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "eval",
        help="top-1, per-class accuracy and confusion matrix of a model",
        description="Evaluate a model on a labelled source (default: the CIFAR-10 test split).",
    )
    parser.add_argument("model", choices=list(models.ARCHITECTURES))
    parser.add_argument("--weights", help="weights file (default: the shipped weights)")
    _add_data_arguments(parser, "test")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--size", type=int, help="number of images (default: all)")
    parser.add_argument("--device", default="auto")
    parser.set_defaults(handler=_cmd_eval)


# ----------------------------------------------------------------------------- infer and grads

WHOLE_BATCH_STRATEGIES = ("summed", "retain_graph")
"""Strategies that forward every image of the batch; the others need only the picked ones."""
OUTPUT_SUFFIXES = (".pt", ".npz")


def _bounded(
    convert: Callable[[str], Any], low: float, high: float | None = None, unit: str = ""
) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text (int or float), refusing values outside the bounds."""
    kind = "a whole number" if convert is int else "a number"

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not {kind}") from None
        if high is None and value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if high is not None and not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}{unit}, got {value}")
        return value

    return parse


_positive_int = _bounded(int, 1)
_fraction = _bounded(float, 0, 1)
_cutout_side = _bounded(int, 0, data.IMAGE_SIZE, " pixels")


def _add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    _add_data_arguments(parser, "test")
    parser.add_argument("--start", type=int, default=0, help="first image of the batch")
    parser.add_argument("--size", type=int, help="number of images (default: all)")
    parser.add_argument(
        "--seed", type=int, help="take a seeded random sample of --size images instead of a slice"
    )


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        choices=list(models.ARCHITECTURES),
        help="built-in architecture (default: the best one with shipped weights)",
    )
    parser.add_argument("--weights", help="weights file (default: the shipped weights)")
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES)


@dataclass(frozen=True)
class _LoadedModel:
    model: nn.Module
    name: str
    weights: Path
    card: dict[str, Any] | None
    """The shipped model card; None for other weights, which it does not describe."""

    def describe(self) -> str:
        if self.card is None:
            return f"{self.name} (weights {self.weights})"
        accuracy = self.card.get("test_accuracy")
        shown = f"; card: {accuracy:.2%} test accuracy" if accuracy is not None else ""
        return f"{self.name} (shipped weights{shown})"

    def provenance(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "weights": str(self.weights),
            "weights_sha256": models.sha256_file(self.weights),
            "card_sha256": None if self.card is None else self.card.get("sha256"),
            "card_test_accuracy": None if self.card is None else self.card.get("test_accuracy"),
        }


def _load_model(args: argparse.Namespace) -> _LoadedModel:
    name = args.model or (models.shipped_models() or list(models.ARCHITECTURES))[0]
    model = models.load(name, args.weights, device=args.device)
    if args.weights:
        return _LoadedModel(model, name, Path(args.weights), None)
    return _LoadedModel(model, name, models.shipped_weights_path(name), models.model_card(name))


def _batch_description(source: data.ImageSource, args: argparse.Namespace, count: int) -> str:
    """E.g. 'a batch of 300 of the 10,000 images of folder x (from position 0)'."""
    how = f"a seeded sample, seed {args.seed}" if args.seed is not None else f"from {args.start}"
    return f"a batch of {count:,} of the {len(source):,} images of {source.description} ({how})"


def _cmd_infer(args: argparse.Namespace) -> int:
    source = _source(args.data, args.split)
    loaded = _load_model(args)
    batch = data.load_batch(source, args.start, args.size, args.seed, progress=_reading_progress)
    result = infer(loaded.model, batch.images, batch.labels, batch_size=args.batch_size)
    print(f"model: {loaded.describe()}")
    print(f"images: {_batch_description(source, args, len(batch))}")
    if result.accuracy is not None and result.correct is not None:
        print(f"accuracy: {result.accuracy:.2%} ({int(result.correct.sum()):,} of {len(result):,})")
    print(
        f"time: {result.milliseconds:,.1f} ms on {result.device} (batch size {args.batch_size}), "
        f"{result.images_per_second:,.0f} images/s"
    )
    return 0


def _class_argument(text: str | None, class_names: tuple[str, ...], target: str) -> int | None:
    """``--class`` as an index or a class name of the source."""
    if text is None:
        return None
    if target != "logit":
        raise InputError("--class chooses a logit; use it with --target logit.")
    if text.isdigit():
        return int(text)
    if text in class_names:
        return class_names.index(text)
    raise InputError(f"Unknown class '{text}'; give an index or one of: {', '.join(class_names)}.")


def _class_name(class_names: tuple[str, ...], index: int) -> str:
    """The source's name for a model class, or the number when the source has fewer classes."""
    return class_names[index] if 0 <= index < len(class_names) else str(index)


def _output_path(text: str | None) -> Path | None:
    """Check the output file before any work is done, so a typo costs nothing."""
    if text is None:
        return None
    path = Path(text).expanduser()
    if path.suffix not in OUTPUT_SUFFIXES:
        raise InputError(f"--out must end in .pt or .npz, not '{path.suffix or path.name}'.")
    if not path.parent.is_dir():
        raise InputError(f"--out: the folder {path.parent} does not exist.")
    return path


def _write_gradients(path: Path, result: GradientResult, indices: list[int]) -> None:
    gradients = result.gradients.cpu()
    if path.suffix == ".pt":
        torch.save(
            {
                "gradients": gradients,
                "indices": torch.tensor(indices),
                "target_values": result.target_values,
                "classes": result.classes,
            },
            path,
        )
    else:
        np.savez(
            path,
            gradients=gradients.numpy(),
            indices=np.asarray(indices),
            target_values=result.target_values.numpy(),
            classes=result.classes.numpy(),
        )


def _sidecar(
    args: argparse.Namespace,
    path: Path,
    source: data.ImageSource,
    loaded: _LoadedModel,
    result: GradientResult,
    indices: list[int],
    positions: list[int],
    labels: torch.Tensor | None,
) -> dict[str, Any]:
    return {
        "gradients_file": path.name,
        "shape": list(result.gradients.shape),
        "dtype": str(result.gradients.dtype).removeprefix("torch."),
        "rows": "row i is d target_i / d image[indices[i]], pixels in [0, 1]",
        "indices": indices,
        "source_positions": positions,
        "image_names": source.names(positions),
        "labels": None if labels is None else labels.tolist(),
        "target": result.target,
        "target_values": result.target_values.tolist(),
        "classes": result.classes.tolist(),
        "class_names": [_class_name(source.class_names, c) for c in result.classes.tolist()],
        "strategy": result.strategy,
        "reduction": result.reduction,
        "device": result.device,
        "timing_ms": result.timing,
        "chunks": result.chunks,
        "memory": None if result.memory is None else result.memory.as_dict(),
        "model": loaded.provenance(),
        "source": {
            "description": source.description,
            "split": args.split,
            "start": args.start,
            "size": args.size,
            "seed": args.seed,
        },
        "versions": library_versions(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _print_gradients(
    result: GradientResult, indices: list[int], names: list[str], class_names: tuple[str, ...]
) -> None:
    print(f"{'index':>6}  {'image':<28} {'class':<12} {result.target:>10}  {'max |grad|':>10}")
    magnitudes = result.gradients.detach().abs().flatten(1).amax(dim=1).tolist()
    for index, name, value, chosen, magnitude in zip(
        indices,
        names,
        result.target_values.tolist(),
        result.classes.tolist(),
        magnitudes,
        strict=True,
    ):
        label = _class_name(class_names, chosen)
        print(f"{index:>6}  {name[-28:]:<28} {label:<12} {value:>10.4g}  {magnitude:>10.3g}")


def _memory_line(memory: MemoryReport) -> str:
    def figure(value: MemoryFigure) -> str:
        amount = "n/a" if value.megabytes is None else f"{value.megabytes:,.2f} MB"
        return f"{amount} ({value.counts})"

    return (
        f"memory: saved for backward {figure(memory.saved_for_backward)}; "
        f"peak {figure(memory.peak)}"
    )


@dataclass(frozen=True)
class _Picked:
    """The images a strategy needs (uint8), and which of their rows the picked images are."""

    images: torch.Tensor
    labels: torch.Tensor | None
    rows: list[int]

    @property
    def picked_labels(self) -> torch.Tensor | None:
        return None if self.labels is None else self.labels[torch.tensor(self.rows)]


def _read_picked(
    source: data.ImageSource, args: argparse.Namespace, positions: list[int], indices: list[int]
) -> _Picked:
    """Only the picked images, unless the strategy forwards the whole batch (then all of it)."""
    if args.strategy in WHOLE_BATCH_STRATEGIES:
        batch = data.load_batch(
            source, args.start, args.size, args.seed, progress=_reading_progress
        )
        return _Picked(batch.images, batch.labels, indices)
    picked = [positions[i] for i in indices]
    labels = source.labels()
    return _Picked(
        source.read(picked),
        None if labels is None else labels[torch.tensor(picked)],
        list(range(len(indices))),
    )


def _cmd_grads(args: argparse.Namespace) -> int:
    out = _output_path(args.out)
    source = _source(args.data, args.split)
    positions = data.batch_positions(len(source), args.start, args.size, args.seed)
    indices = parse_indices(args.indices, len(positions))
    classes = _class_argument(args.class_, source.class_names, args.target)
    loaded = _load_model(args)
    picked = _read_picked(source, args, positions, indices)
    result = input_gradients(
        loaded.model,
        as_model_input(picked.images),
        picked.rows,
        labels=picked.labels,
        target=args.target,
        classes=classes,
        strategy=args.strategy,
        reduction=args.reduction,
        measure_memory=args.measure_memory,
    )
    picked_positions = [positions[i] for i in indices]
    print(f"model: {loaded.describe()}")
    print(
        f"images: {len(indices):,} picked from {_batch_description(source, args, len(positions))}"
    )
    _print_gradients(result, indices, source.names(picked_positions), source.class_names)
    print(
        f"{result.strategy} (reduction {result.reduction}): "
        f"{result.timing:,.1f} ms on {result.device}"
    )
    if result.memory is not None:
        print(_memory_line(result.memory))
    if out is not None:
        _write_gradients(out, result, indices)
        sidecar = out.with_suffix(".json")
        record = _sidecar(
            args, out, source, loaded, result, indices, picked_positions, picked.picked_labels
        )
        sidecar.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {out} and {sidecar}")
    return 0


def _infer_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "infer",
        help="batched inference: accuracy and throughput of a model on a batch",
        description="Run a model over a batch (a slice or a seeded sample of a source) under "
        "torch.inference_mode() and print its accuracy and throughput.",
    )
    _add_batch_arguments(parser)
    _add_model_arguments(parser)
    parser.add_argument("--batch-size", type=_positive_int, default=500)
    parser.set_defaults(handler=_cmd_infer)


def _grads_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "grads",
        help="exact input gradients of picked images, written to .pt or .npz",
        description="Compute d target_j / d image_j for the picked indices of a batch and "
        "write them to FILE.pt or FILE.npz with a JSON sidecar FILE.json (indices, targets, "
        "strategy, timing, memory, model and library versions).",
    )
    _add_batch_arguments(parser)
    _add_model_arguments(parser)
    parser.add_argument(
        "--indices", required=True, help='batch indices, e.g. "3, 7, 10-12" (each used once)'
    )
    parser.add_argument("--target", default="loss", choices=TARGETS)
    parser.add_argument(
        "--class",
        dest="class_",
        metavar="CLASS",
        help="with --target logit: the class (index or name) whose logit to differentiate "
        "(default: each image's predicted class)",
    )
    parser.add_argument("--strategy", default="recompute", choices=STRATEGIES)
    parser.add_argument("--reduction", default="sum", choices=REDUCTIONS)
    parser.add_argument(
        "--measure-memory", action="store_true", help="also report saved-for-backward and peak"
    )
    parser.add_argument("--out", metavar="FILE", help="write gradients to FILE.pt or FILE.npz")
    parser.set_defaults(handler=_cmd_grads)


# ----------------------------------------------------------------------------- bench


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.explorer:
        return _bench_explorer(args)
    from gradpick import bench

    given: dict[str, Any] = {
        "models": args.models,
        "sizes": args.n,
        "picks": args.k,
        "repeats": args.repeats,
        "device": args.device,
        "row_budget_seconds": args.budget,
        "threads": args.threads,
    }
    overrides: dict[str, Any] = {
        field: tuple(value) if isinstance(value, list) else value
        for field, value in given.items()
        if value is not None
    }
    config = replace(bench.QUICK if args.quick else bench.BenchConfig(), **overrides)
    report = bench.run_benchmark(config, progress=lambda line: print(line, file=sys.stderr))
    print(bench.report_text(report))
    report.write_json(args.json or "bench.json")
    print(f"\nwrote {args.json or 'bench.json'}")
    return 0


def _bench_explorer(args: argparse.Namespace) -> int:
    import shutil

    from gradpick import explorer_bench

    chromium = shutil.which("chromium")
    if chromium is None:
        raise InputError(
            "The explorer benchmark drives Debian's chromium: apt-get install chromium."
        )
    config = explorer_bench.QUICK if args.quick else explorer_bench.ExplorerBenchConfig()
    if args.taskset:
        server, browser = explorer_bench.parse_taskset(args.taskset)
        config = replace(config, server_cpus=server, browser_cpus=browser)
    if args.clicks is not None:
        config = replace(config, clicks=args.clicks)
    if args.threads is not None:
        config = replace(config, threads=args.threads)
    report = explorer_bench.run_explorer_benchmark(config, chromium)
    print(explorer_bench.report_text(report))
    path = args.json or "bench-explorer.json"
    report.write_json(path)
    print(f"\nwrote {path}")
    return 0


def _bench_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "bench",
        help="time every gradient strategy against the floor and captum",
        description="Benchmark every strategy (and the hand-written floor, captum's Saliency, "
        "recompute with memory measurement, and inference) over models, batch sizes N and "
        "picked counts k; prints a markdown table and writes JSON.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a small grid that runs in under a minute"
    )
    parser.add_argument("--models", nargs="+", choices=list(models.ARCHITECTURES))
    parser.add_argument("--n", nargs="+", type=_positive_int, help="batch sizes N")
    parser.add_argument("--k", nargs="+", type=_positive_int, help="numbers of picked images")
    parser.add_argument("--repeats", type=_positive_int, help="runs per row (median reported)")
    parser.add_argument("--device", choices=DEVICE_CHOICES)
    parser.add_argument(
        "--budget",
        type=float,
        help="seconds an expensive row (summed, retain_graph) may take before it is skipped",
    )
    parser.add_argument(
        "--threads",
        type=_positive_int,
        help="torch intra-op threads (default: torch's own; --quick uses 1, steady on busy cores)",
    )
    parser.add_argument(
        "--explorer",
        action="store_true",
        help="time the Streamlit explorer in a real browser instead (reads $GRADPICK_CIFAR10_DIR)",
    )
    parser.add_argument(
        "--taskset",
        metavar="SERVER:BROWSER",
        help="with --explorer: pin the server and the browser to these cores, e.g. 0:1",
    )
    parser.add_argument(
        "--clicks", type=_positive_int, help="with --explorer: clicks per timed step (default 10)"
    )
    parser.add_argument(
        "--json", help="where to write the JSON results (bench.json, bench-explorer.json)"
    )
    parser.set_defaults(handler=_cmd_bench)


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _train_parser,
    _eval_parser,
    _infer_parser,
    _grads_parser,
    _bench_parser,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gradpick",
        description="Exact input gradients for the images you pick from a batch.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in SUBCOMMANDS:
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except GradpickError as error:
        print(f"gradpick {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ngradpick {args.command}: interrupted", file=sys.stderr)
        return 130
