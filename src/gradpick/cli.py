"""The ``gradpick`` command line: train, eval, infer, grads, check and bench.

Every gradpick error is printed as one clear line (exit status 2), never as a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from gradpick import attribution, data, export, models, store, strategies, units
from gradpick.devices import DEVICE_CHOICES, model_device
from gradpick.errors import GradpickError, InputError, ModelError
from gradpick.gradients import REDUCTIONS, TARGETS, GradientResult
from gradpick.infer import as_model_input, infer_chunks, infer_source, source_labels
from gradpick.measure import MemoryFigure, MemoryReport, Stopwatch
from gradpick.request import GradientRequest
from gradpick.selection import parse_indices
from gradpick.spec import InputSpec
from gradpick.zoo import LoadedModel, SpecOverrides, given_overrides

Handler = Callable[[argparse.Namespace], int]


def _source(
    location: str | None, split: str, spec: InputSpec = data.DEFAULT_SPEC
) -> data.ImageSource:
    """A local path when given, else the default CIFAR-10 (configured folder or download)."""
    if location:
        return data.open_source(location, split, spec)
    return data.default_cifar10(split, progress=_download_progress, spec=spec)


def _download_progress(done: int, total: int) -> None:
    share = f"{done / total:.0%}" if total else units.format_bytes(done, digits=0)
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
        Path(args.export_dir or run_dir / "export"),
        _source(args.data, "test"),
        json.loads(card_beside.read_text()) if card_beside and card_beside.is_file() else None,
    )
    print(evaluation.table())
    print(f"\nwrote {weights_path} and {card_path}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from gradpick import train

    loaded = _load_model(args)
    batch = data.load_batch(_source(args.data, args.split), args.start, args.size)
    loaded.check_images(batch.images)
    if loaded.classes != len(batch.class_names):
        raise ModelError(
            f"{loaded.name} predicts {loaded.classes} classes but {batch.source} has "
            f"{len(batch.class_names)}; evaluate it on images of its own classes."
        )
    print(f"{loaded.describe()} on {batch.source}")
    print(train.evaluate(loaded.module, batch).table())
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
    parser.add_argument(
        "--export-dir",
        help="where weights and card go (default RUN_DIR/export; the app reads them when "
        f"${models.ASSETS_DIR_ENV} names that folder)",
    )
    parser.add_argument("--device", default="auto")
    parser.set_defaults(handler=_cmd_train)


def _eval_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "eval",
        help="top-1, per-class accuracy and confusion matrix of a model",
        description="Evaluate a model on a labelled source (default: the CIFAR-10 test split).",
    )
    _add_model_arguments(parser, positional=True)
    _add_data_arguments(parser, "test")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--size", type=int, help="number of images (default: all)")
    parser.set_defaults(handler=_cmd_eval)


# ----------------------------------------------------------------------------- infer and grads


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


MODEL_HELP = (
    "resnet20 or tutorial (shipped), torchvision:NAME[:WEIGHTS] (e.g. torchvision:resnet18:"
    "IMAGENET1K_V1), timm:NAME or package.module:factory (default: the best shipped model)"
)


def _add_model_arguments(parser: argparse.ArgumentParser, positional: bool = False) -> None:
    if positional:
        parser.add_argument("model", help=MODEL_HELP)
    else:
        parser.add_argument("--model", help=MODEL_HELP)
    parser.add_argument(
        "--weights",
        help="a state_dict file, .pt/.pth (read with weights_only) or .safetensors "
        "(default: the shipped weights; random weights for torchvision and timm)",
    )
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    spec = parser.add_argument_group("input spec (set or override what the model's metadata says)")
    spec.add_argument("--input-size", metavar="S|HxW", help="model input size, e.g. 224 or 224x160")
    spec.add_argument(
        "--resize",
        type=int,
        metavar="R",
        help="shorter side before the centre crop (default: the input height, or the weights' "
        "own recipe)",
    )
    spec.add_argument("--mean", nargs="+", type=float, metavar="M", help="per-channel mean (3)")
    spec.add_argument("--std", nargs="+", type=float, metavar="S", help="per-channel std (3)")


def _load_model(args: argparse.Namespace) -> LoadedModel:
    name = args.model or (models.shipped_models() or list(models.ARCHITECTURES))[0]
    return models.load_model(name, args.weights, args.device, **_spec_overrides(args))


def _spec_overrides(args: argparse.Namespace) -> SpecOverrides:
    """The input-spec flags that were given."""
    return given_overrides(args.input_size, args.resize, args.mean, args.std)


def _batch_description(source: data.ImageSource, args: argparse.Namespace, count: int) -> str:
    """E.g. 'a batch of 300 of the 10,000 images of folder x (from position 0)'."""
    how = f"a seeded sample, seed {args.seed}" if args.seed is not None else f"from {args.start}"
    return f"a batch of {count:,} of the {len(source):,} images of {source.description} ({how})"


def _cmd_infer(args: argparse.Namespace) -> int:
    out = _store_path(args.out)
    if args.embeddings and out is None:
        raise InputError("--embeddings are stored with the outputs; give --out DIR too.")
    loaded = _load_model(args)
    source = _source(args.data, args.split, loaded.spec)
    positions = data.batch_positions(len(source), args.start, args.size, args.seed)
    if args.engine == "ray":
        if out is None:
            raise InputError("--engine ray writes its outputs to a store: give --out DIR.")
        return _infer_on_ray(args, out, loaded, source, positions)
    if out is not None:
        return _infer_to_store(args, out, loaded, source, positions)
    inferred = infer_source(
        loaded.module, source, positions, args.batch_size, progress=_reading_progress
    )
    result = inferred.result
    print(f"model: {loaded.describe()}")
    print(f"images: {_batch_description(source, args, len(positions))}")
    for note in inferred.notes:
        print(f"note: {note}")
    if result.accuracy is not None and result.correct is not None:
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
    metadata = store.store_metadata(
        loaded.identity(), loaded.spec, source, args.embeddings, _batch_of(args, positions)
    )
    report = data.ReadReport(source.spec)
    with (
        Stopwatch(model_device(loaded.module)) as watch,
        store.StoreWriter(out, metadata, embeddings=args.embeddings) as writer,
    ):
        started = time.perf_counter()
        for chunk in infer_chunks(
            loaded.module,
            source,
            positions,
            args.batch_size,
            embeddings=args.embeddings,
            report=report,
            progress=_reading_progress,
        ):
            labels = source_labels(source, chunk.positions, int(chunk.logits.shape[1]))
            names = source.names(chunk.positions)
            writer.write(
                store.output_table(chunk.positions, names, labels, chunk.logits, chunk.embeddings)
            )
        if writer.rows == 0:
            raise InputError("None of the images could be read:\n" + "\n".join(report.skipped))
        writer.annotate(
            skipped=report.skipped,
            notes=list(report.notes()),
            inference_seconds=time.perf_counter() - started,
        )
    print(f"model: {loaded.describe()}")
    print(f"images: {_batch_description(source, args, len(positions))}")
    for note in report.notes():
        print(f"note: {note}")
    rate = writer.rows / max(watch.milliseconds / 1000, 1e-9)
    print(
        f"wrote {writer.rows:,} rows to {out} in {watch.milliseconds / 1000:,.1f} s "
        f"({rate:,.0f} images/s)"
    )
    if writer.replaced:
        print(f"note: {writer.replaced}")
    return 0


def _image_rows(
    source: data.ImageSource, positions: list[int], classes: int
) -> tuple[Path, list[tuple[int, str, int | None]]]:
    """The source's root and its (position, relative name, label) rows, which Ray workers read
    by themselves; only a folder of image files has them. Labels as in-process inference keeps
    them (none unless the folder's classes are the model's ``classes`` outputs)."""
    root = getattr(source, "root", None)
    if root is None:
        raise InputError(
            f"Ray workers read image files; {source.description} is not a folder of images. "
            "Give --data an ImageFolder tree (root/<class>/<image>)."
        )
    labels = source_labels(source, positions, classes)
    label_list = [None] * len(positions) if labels is None else labels.tolist()
    return Path(root), list(zip(positions, source.names(positions), label_list, strict=True))


def _infer_on_ray(
    args: argparse.Namespace,
    out: Path,
    loaded: LoadedModel,
    source: data.ImageSource,
    positions: list[int],
) -> int:
    """The same inference as a Ray Data pipeline, written to the same store as in-process."""
    from gradpick import distributed

    root, rows = _image_rows(source, positions, loaded.classes)
    options = distributed.ClusterOptions(
        address=args.address,
        workers=args.workers,
        gpus_per_worker=args.gpus_per_worker,
        cpus_per_worker=args.cpus_per_worker,
        batch_size=args.batch_size,
    )
    recipe = distributed.model_recipe(loaded.name, args.weights, _spec_overrides(args))
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
    print(f"model: {loaded.describe()}")
    print(f"images: {_batch_description(source, args, run.rows)}")
    print(
        f"time: {run.seconds:,.1f} s on {run.cluster} with {args.workers} worker(s), "
        f"{run.images_per_second:,.0f} images/s"
    )
    print(f"wrote {run.rows:,} rows in {run.parts} part(s) to {run.out}")
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


def _output_path(text: str | None) -> Path | None:
    """Check the output file before any work is done, so a typo costs nothing."""
    if text is None:
        return None
    path = Path(text).expanduser()
    if path.suffix not in export.SUFFIXES:
        raise InputError(f"--out must end in .pt or .npz, not '{path.suffix or path.name}'.")
    if not path.parent.is_dir():
        raise InputError(f"--out: the folder {path.parent} does not exist.")
    return path


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
        label = export.class_name(class_names, chosen)
        print(f"{index:>6}  {name[-28:]:<28} {label:<12} {value:>10.4g}  {magnitude:>10.3g}")


def _memory_line(memory: MemoryReport) -> str:
    def figure(value: MemoryFigure) -> str:
        amount = units.format_bytes(value.bytes, missing="n/a")
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
    if strategies.get(args.strategy).whole_batch:
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
    loaded = _load_model(args)
    source = _source(args.data, args.split, loaded.spec)
    positions = data.batch_positions(len(source), args.start, args.size, args.seed)
    indices = parse_indices(args.indices, len(positions))
    classes = _class_argument(args.class_, source.class_names, args.target)
    picked = _read_picked(source, args, positions, indices)
    loaded.check_images(picked.images)
    request = GradientRequest.build(
        loaded.module,
        as_model_input(picked.images),
        picked.rows,
        labels=picked.labels,
        target=args.target,
        classes=classes,
        strategy=args.strategy,
        reduction=args.reduction,
        measure_memory=args.measure_memory,
    )
    attributed = attribution.Gradient().attribute(request)
    result = attributed.gradients
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
        labels = picked.picked_labels
        written = export.Export(
            attributed,
            indices=indices,
            images=request.picked_images,
            positions=picked_positions,
            names=source.names(picked_positions),
            labels=None if labels is None else labels.tolist(),
            class_names=source.class_names,
            quantity=export.quantity(args.target, classes, source.class_names),
            model=loaded.identity(),
            source=export.source_record(
                source.description, len(positions), args.split, args.start, args.size, args.seed
            ),
            memory=result.memory,
        )
        sidecar = export.write(out, written)
        print(f"wrote {out} and {sidecar}")
    return 0


def _infer_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "infer",
        help="batched inference: accuracy and throughput, or stored outputs (--out)",
        description="Run a model over a batch (a slice or a seeded sample of a source; default "
        "all of it) under torch.inference_mode(), images decoded while the model runs, and "
        "print its accuracy and throughput; with --out DIR, store one Parquet row per image.",
    )
    _add_batch_arguments(parser)
    _add_model_arguments(parser)
    parser.add_argument("--batch-size", type=_positive_int, default=256)
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="store the outputs: one Parquet row per image (position, name, label, prediction, "
        "confidence, loss, logits) in DIR, written whole or not at all",
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
        "--workers", type=_positive_int, default=2, help="with --engine ray: model workers"
    )
    parser.add_argument(
        "--gpus-per-worker",
        type=_bounded(float, 0),
        default=0.0,
        help="with --engine ray: GPUs each worker holds (0: infer on its CPU)",
    )
    parser.add_argument(
        "--cpus-per-worker",
        type=_bounded(float, 0.1),
        default=1.0,
        help="with --engine ray: CPUs each worker holds; from 2 on it decodes with that many "
        "threads (give a GPU worker several, or decoding starves it)",
    )
    parser.set_defaults(handler=_cmd_infer)


def _grads_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "grads",
        help="exact input gradients of picked images, written to .pt or .npz",
        description="Compute d target_j / d image_j for the picked indices of a batch and "
        "write them to FILE.pt or FILE.npz with a JSON sidecar FILE.json: the README's export "
        "schema (the picked pixels, indices, targets, strategy, timing, memory, model and "
        "library versions).",
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
    parser.add_argument(
        "--strategy",
        default=strategies.NAMES[0],
        choices=strategies.NAMES,
        help=strategies.help_text(),
    )
    parser.add_argument("--reduction", default="sum", choices=REDUCTIONS)
    parser.add_argument(
        "--measure-memory", action="store_true", help="also report saved-for-backward and peak"
    )
    parser.add_argument("--out", metavar="FILE", help="write gradients to FILE.pt or FILE.npz")
    parser.set_defaults(handler=_cmd_grads)


def _cmd_check(args: argparse.Namespace) -> int:
    from gradpick.trust import command

    out, options = command.output_path(args.json), command.options_of(args)
    source = _source(args.data, args.split)
    positions = data.batch_positions(len(source), args.start, args.size, args.seed)
    indices = parse_indices(args.indices, len(positions))
    classes = _class_argument(args.class_, source.class_names, "logit")
    loaded = _load_model(args)
    # A batch index seeds SmoothGrad's noise and the random orders, so the batch is read up to
    # the largest picked index: the numbers match the explorer's for the same batch.
    images = as_model_input(source.read(positions[: max(indices) + 1]))
    context = {
        "model": loaded.identity(),
        "source": {"description": source.description, "split": args.split, "start": args.start},
        "image_names": source.names([positions[i] for i in indices]),
        **export.stamp(),
    }
    print(f"model: {loaded.describe()}")
    command.run(out, options, loaded.module, images, indices, classes, source.class_names, context)
    return 0


def _check_parser(commands: argparse._SubParsersAction) -> None:
    from gradpick.trust import command

    parser = commands.add_parser(
        "check",
        help="sanity checks of the attribution maps of picked images, written to JSON",
        description="Run the trust checks on the picked indices of a batch: the "
        "model-parameter randomisation test, Integrated Gradients completeness, deletion and "
        "insertion curves, and the top classes' and contrastive maps; write one JSON report.",
    )
    _add_batch_arguments(parser)
    _add_model_arguments(parser)
    parser.add_argument("--indices", required=True, help='batch indices, e.g. "3, 7, 10-12"')
    command.add_arguments(parser)
    parser.set_defaults(handler=_cmd_check)


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


def _cmd_bench_infer(args: argparse.Namespace) -> int:
    from gradpick import infer_bench

    images = dict(zip(args.sides, args.images, strict=True)) if args.images else None
    if args.images and len(args.images) != len(args.sides):
        raise InputError("--images needs one count per --sides value.")
    config = infer_bench.InferBenchConfig(
        folder=args.data,
        sides=tuple(args.sides),
        images=images,
        batch_size=args.batch_size,
        workers=args.workers,
        repeats=args.repeats,
        store_rows=args.store_rows,
        memory_counts=tuple(args.memory or ()),
        memory_stand_in=tuple(args.memory_stand_in or ()),
        fixed_mmap_threshold=args.fixed_mmap_threshold,
        device=args.device,
        threads=args.threads,
    )
    rows, environment = infer_bench.run(config)
    print(infer_bench.table(rows))
    infer_bench.write_json(args.json, config, rows, environment)
    print(f"\nwrote {args.json}")
    return 0


def _bench_infer_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "bench-infer",
        help="inference from a folder against a hand-written DataLoader loop; stored outputs "
        "reopened; memory",
        description="Time infer_source over a folder's first files at each input side against "
        "a hand-written DataLoader + model loop over the same files, time reopening a stored "
        "table in the explorer, and (with --memory) measure resident memory in fresh processes.",
    )
    parser.add_argument("--data", required=True, help="an ImageFolder tree")
    parser.add_argument("--sides", nargs="+", type=_positive_int, default=[32, 224])
    parser.add_argument(
        "--images", nargs="+", type=_positive_int, help="images per side (default 2000 and 256)"
    )
    parser.add_argument("--batch-size", type=_positive_int, default=64)
    parser.add_argument("--workers", type=int, help="DataLoader workers for both loops")
    parser.add_argument("--repeats", type=_positive_int, default=3)
    parser.add_argument("--store-rows", type=_positive_int, default=50_000)
    parser.add_argument(
        "--memory", nargs="+", type=_positive_int, metavar="COUNT", help="image counts to measure"
    )
    parser.add_argument(
        "--memory-stand-in",
        nargs="+",
        type=_positive_int,
        metavar="SIDE",
        help="sides whose memory rows use a pooling + linear stand-in model (decoding-bound)",
    )
    parser.add_argument(
        "--fixed-mmap-threshold",
        action="store_true",
        help="memory rows with the explorer's allocator setting (freed buffers returned to the "
        "system instead of kept on glibc's heap)",
    )
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    parser.add_argument("--threads", type=_positive_int, help="torch intra-op threads")
    parser.add_argument("--json", default="bench-infer.json")
    parser.set_defaults(handler=_cmd_bench_infer)


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


def _cmd_bench_distributed(args: argparse.Namespace) -> int:
    import tempfile

    from gradpick import distributed

    loaded = _load_model(args)
    source = _source(args.data, args.split, loaded.spec)
    positions = data.batch_positions(len(source), 0, args.size)
    root, rows = _image_rows(source, positions, loaded.classes)
    recipe = distributed.model_recipe(loaded.name, args.weights, _spec_overrides(args))
    print(f"{loaded.name} on {len(rows):,} images of {source.description}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="gradpick-bench-") as scratch:
        results = distributed.benchmark(
            recipe, rows, root, loaded.spec, Path(scratch), args.workers, args.batch_size
        )
    print(distributed.bench_table(results))
    cap = distributed.local_object_store_bytes()
    print(f"\nobject store of the local Ray instance capped at {cap / 1024**3:.2f} GiB")
    return 0


def _bench_distributed_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "bench-distributed",
        help="time inference on Ray Data against one process on the same cores",
        description="Infer the same images in one process (one torch thread, then --workers "
        "threads) and on a local Ray instance (--workers single-CPU workers), each writing a "
        "store; prints throughput and peak memory of the driver, the workers and Ray's own "
        "processes.",
    )
    _add_data_arguments(parser, "train")
    parser.add_argument("--size", type=_positive_int, help="number of images (default: all)")
    _add_model_arguments(parser)
    parser.add_argument("--workers", type=_positive_int, default=2)
    parser.add_argument("--batch-size", type=_positive_int, default=500)
    parser.set_defaults(handler=_cmd_bench_distributed)


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _train_parser,
    _eval_parser,
    _infer_parser,
    _grads_parser,
    _check_parser,
    _bench_parser,
    _bench_infer_parser,
    _bench_distributed_parser,
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
