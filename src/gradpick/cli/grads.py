"""``gradpick grads``: exact input gradients or attribution maps of picked images, printed and
exported; ``--method`` takes any registered method, ``--layer`` the layer of a layer method."""

from __future__ import annotations

import argparse
from pathlib import Path

from gradpick import attribution, data, units
from gradpick.attribution import notes
from gradpick.cli.arguments import (
    Commands,
    add_batch_arguments,
    add_method_arguments,
    add_model_arguments,
    batch_description,
    class_argument,
    data_source,
    fitted_to_model,
    load_model,
    method_of,
    reading_progress,
)
from gradpick.errors import InputError
from gradpick.gradients import strategies
from gradpick.gradients.engine import REDUCTIONS, GradientResult
from gradpick.gradients.layers import LAYER_STRATEGIES
from gradpick.gradients.request import GradientRequest
from gradpick.models.zoo import LoadedModel
from gradpick.outputs.inference import as_model_input, infer
from gradpick.picking.rules import parse_indices
from gradpick.runtime.measure import MemoryFigure, MemoryReport
from gradpick.share import export

__all__ = ["register"]


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
    result: GradientResult,
    magnitudes: list[float],
    indices: list[int],
    names: list[str],
    class_names: tuple[str, ...],
    heading: str,
) -> None:
    print(f"{'index':>6}  {'image':<28} {'class':<12} {result.target:>10}  {heading:>10}")
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


def _batch_indices(args: argparse.Namespace, positions: list[int], source_size: int) -> list[int]:
    """The picks as batch indices: ``--indices`` directly, ``--positions`` (source positions,
    a store's ``position`` column) looked up in the batch."""
    if args.positions is None:
        return parse_indices(args.indices, len(positions))
    wanted = parse_indices(args.positions, source_size, "the source")
    index_of = {position: index for index, position in enumerate(positions)}
    missing = [position for position in wanted if position not in index_of]
    if missing:
        raise InputError(
            f"Source position {missing[0]} is not in {len(positions):,}-image batch chosen by "
            "--start/--size/--seed; widen the batch or leave those out (without --size the "
            "batch is the whole source)."
        )
    return [index_of[position] for position in wanted]


def _read_picked(
    source: data.ImageSource,
    args: argparse.Namespace,
    loaded: LoadedModel,
    positions: list[int],
    indices: list[int],
) -> tuple[data.ImageBatch, list[int]]:
    """Only the picked images, unless the strategy forwards the whole batch (then all of it),
    and which rows of them the picks are. Labels that do not fit the model's classes are
    dropped, as ``infer`` and the explorer drop them, and the model's class names used."""
    if strategies.get(args.strategy).whole_batch:
        batch = data.load_batch(source, args.start, args.size, args.seed, progress=reading_progress)
        rows = indices
    else:
        picked = [positions[i] for i in indices]
        labels = source.labels()
        batch = data.ImageBatch(
            images=source.read(picked),
            labels=None if labels is None else labels[picked],
            class_names=source.class_names,
            names=tuple(source.names(picked)),
            positions=tuple(picked),
            source=source.description,
        )
        rows = list(range(len(indices)))
    return fitted_to_model(batch, loaded, args.target), rows


def _cmd_grads(args: argparse.Namespace) -> int:
    out = _output_path(args.out)
    method = method_of(args)
    if method.takes_layer and args.strategy not in LAYER_STRATEGIES:
        raise InputError(
            f"{method.label} runs strategy {', '.join(LAYER_STRATEGIES)} (the picks only), "
            f"not '{args.strategy}'."
        )
    loaded = load_model(args)
    source = data_source(args.data, args.split, loaded.spec)
    positions = data.batch_positions(len(source), args.start, args.size, args.seed)
    indices = _batch_indices(args, positions, len(source))
    batch, rows = _read_picked(source, args, loaded, positions, indices)
    classes = class_argument(args.class_, batch.class_names, args.target)
    loaded.check_images(batch.images)
    request = GradientRequest.build(
        loaded.module,
        as_model_input(batch.images),
        rows,
        labels=batch.labels,
        target=args.target,
        classes=classes,
        strategy=args.strategy,
        reduction=args.reduction,
        measure_memory=args.measure_memory,
    )
    cost = attribution.forward_cost(method, request)
    if cost is not None:
        print(f"cost: {cost}", flush=True)
    attributed = method.attribute(request)
    result = attributed.gradients
    print(f"model: {loaded.describe()}")
    flat_model = notes.model_note(infer(loaded.module, batch.images[rows]).logits, loaded.name)
    if flat_model is not None:
        print(f"note: {flat_model}")
    print(f"images: {len(indices):,} picked from {batch_description(source, args, len(positions))}")
    if attributed.layer_maps is not None:
        grid = "x".join(str(side) for side in attributed.layer_maps.shape[1:])
        print(f"method: {method.label} at layer {attributed.layer} ({grid} grid)")
    elif method.name != attribution.Gradient.name:
        print(f"method: {method.label}")
    magnitudes = attributed.maps.detach().abs().flatten(1).amax(dim=1).tolist()
    heading = "max |grad|" if method.name == attribution.Gradient.name else "max |map|"
    names = [batch.names[row] for row in rows]
    _print_gradients(result, magnitudes, indices, names, batch.class_names, heading)
    quantity = export.quantity(result.target, classes, batch.class_names)
    for line in notes.grouped_notes(notes.map_notes(attributed, quantity), list(map(str, indices))):
        print(f"note: {line}")
    print(
        f"{result.strategy} (reduction {result.reduction}): "
        f"{result.timing:,.1f} ms on {result.device}"
        + (
            f"; {method.label} {attributed.milliseconds:,.1f} ms"
            if method.name != attribution.Gradient.name
            else ""
        )
    )
    if result.memory is not None:
        print(_memory_line(result.memory))
    if out is not None:
        written = export.of_picks(
            attributed,
            batch,
            rows,
            classes,
            loaded.identity(),
            export.source_record(
                source.description,
                len(positions),
                source.origin().get("split"),
                args.start,
                args.size,
                args.seed,
            ),
            indices=indices,
            memory=result.memory,
        )
        sidecar = export.write(out, written)
        print(f"wrote {out} and {sidecar}")
    return 0


def register(commands: Commands) -> None:
    parser = commands.add_parser(
        "grads",
        help="exact input gradients (or any attribution method's maps) of picked images, "
        "written to .pt or .npz",
        description="Compute d target_j / d image_j (or the maps of --method, e.g. Grad-CAM at "
        "--layer) for the picked images of a batch and write them to FILE.pt or FILE.npz with "
        "a JSON sidecar FILE.json: the export schema (the picked pixels, indices, maps, "
        "targets, strategy, timing, memory, model and library versions).",
    )
    add_batch_arguments(parser)
    add_model_arguments(parser)
    picks = parser.add_mutually_exclusive_group(required=True)
    picks.add_argument(
        "--indices",
        help='batch indices, e.g. "3, 7, 10-12": the images\' places in the batch that '
        "--start/--size/--seed choose (0 is the batch's first image), each at most once",
    )
    picks.add_argument(
        "--positions",
        help='source positions, e.g. "3, 7, 10-12": the images\' places in the source, as a '
        "store's position column and ImageBatch.positions name them; each must be in the batch",
    )
    add_method_arguments(parser)
    parser.add_argument("--reduction", default="sum", choices=REDUCTIONS)
    parser.add_argument(
        "--measure-memory", action="store_true", help="also report saved-for-backward and peak"
    )
    parser.add_argument("--out", metavar="FILE", help="write gradients to FILE.pt or FILE.npz")
    parser.set_defaults(handler=_cmd_grads)
