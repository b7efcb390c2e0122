"""``gradpick check``: the trust checks of picked images' maps, summarised and written to JSON."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from gradpick import attribution, data
from gradpick.cli.arguments import (
    Commands,
    add_batch_arguments,
    add_model_arguments,
    class_argument,
    data_source,
    load_model,
    output_class_names,
    step_progress,
)
from gradpick.errors import InputError
from gradpick.gradients import layers
from gradpick.outputs.inference import as_model_input
from gradpick.picking.rules import parse_indices
from gradpick.share import export
from gradpick.trust import command
from gradpick.trust.baselines import BASELINES
from gradpick.trust.completeness import DEFAULT_MAX_STEPS, DEFAULT_TOLERANCE
from gradpick.trust.contrastive import DEFAULT_TOP
from gradpick.trust.engine import CHECKABLE, METHODS, MethodSettings
from gradpick.trust.faithfulness import DEFAULT_STEPS
from gradpick.trust.randomisation import MODES
from gradpick.trust.report import CheckOptions

__all__ = ["register"]


def _steps(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is neither 'auto' nor a whole number") from None


def _options_of(args: argparse.Namespace) -> CheckOptions:
    """The options the arguments ask for, validated (InputError) before any work."""
    return CheckOptions(
        methods=tuple(args.methods),
        settings=MethodSettings(args.samples, args.noise, args.steps, args.check_seed, args.layer),
        randomisation=args.randomisation,
        layers=args.layers,
        baselines=tuple(args.baselines),
        ig_steps=args.ig_steps,
        tolerance=args.tolerance,
        max_steps=args.max_steps,
        deletion_steps=args.deletion_steps,
        top=args.top,
        seed=args.check_seed,
    )


def _output_path(text: str) -> Path:
    path = Path(text).expanduser()
    if path.suffix != ".json":
        raise InputError(f"--json must end in .json, not '{path.suffix or path.name}'.")
    if not path.parent.is_dir():
        raise InputError(f"--json: the folder {path.parent} does not exist.")
    return path


def _cmd_check(args: argparse.Namespace) -> int:
    out, options = _output_path(args.json), _options_of(args)
    source = data_source(args.data, args.split)
    positions = data.batch_positions(len(source), args.start, args.size, args.seed)
    indices = parse_indices(args.indices, len(positions))
    loaded = load_model(args)
    # a sigmoid model's label is read by its own sigmoid in the curves, not by a softmax
    options = replace(options, output=loaded.output)
    source = source.at_spec(loaded.spec)  # read at the model's own input size
    class_names = output_class_names(source, loaded)
    classes = class_argument(args.class_, class_names, "logit")
    # A batch index seeds SmoothGrad's noise and the random orders, so the batch is read up to
    # the largest picked index: the numbers match the explorer's for the same batch.
    images = as_model_input(source.read(positions[: max(indices) + 1]))
    at_layer = any(method in attribution.LAYER_METHODS for method in options.methods)
    context = {
        # The layer methods' layer by name (None for none): a bad name is refused before any work.
        "layer": layers.resolve(loaded.module, args.layer, images).name if at_layer else None,
        "model": loaded.identity(),
        "source": {
            "description": source.description,
            "split": source.origin().get("split"),
            "start": args.start,
        },
        "image_names": source.names([positions[i] for i in indices]),
        **export.stamp(),
    }
    print(f"model: {loaded.describe()}")
    command.run(
        out,
        options,
        loaded.module,
        images,
        indices,
        classes,
        class_names,
        context,
        progress=step_progress("randomising layers"),
    )
    return 0


def _add_check_arguments(parser: argparse.ArgumentParser) -> None:
    """The check-specific options (model, data and --indices are every command's)."""
    defaults = MethodSettings()
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=CHECKABLE)
    parser.add_argument(
        "--layer",
        help="the layer of the layer methods (gradcam, ...), by its dotted name in the model "
        "(default: chosen automatically)",
    )
    parser.add_argument(
        "--class",
        dest="class_",
        metavar="CLASS",
        help="the class (index or name) to explain for every pick (default: each pick's "
        "predicted class)",
    )
    parser.add_argument("--samples", type=int, default=defaults.samples, help="SmoothGrad copies")
    parser.add_argument(
        "--noise",
        type=float,
        default=defaults.noise,
        help="SmoothGrad noise std as a fraction of each image's range (max - min)",
    )
    parser.add_argument(
        "--steps", type=int, default=defaults.steps, help="IG steps of the maps compared"
    )
    parser.add_argument("--randomisation", default="cascade", choices=MODES)
    parser.add_argument(
        "--layers", type=int, help="randomise only this many layers from the output (default: all)"
    )
    parser.add_argument("--baselines", nargs="+", default=list(BASELINES), choices=BASELINES)
    parser.add_argument(
        "--ig-steps",
        type=_steps,
        default="auto",
        help="IG steps of the completeness check, or 'auto': double from 16 until the "
        "relative error is at most --tolerance (default)",
    )
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE)
    parser.add_argument("--max-steps", type=int, default=DEFAULT_MAX_STEPS, help="cap of 'auto'")
    parser.add_argument("--deletion-steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--top", type=int, default=DEFAULT_TOP, help="top classes mapped")
    parser.add_argument(
        "--check-seed", type=int, default=0, help="seeds SmoothGrad, noise baselines, orders"
    )
    parser.add_argument("--json", required=True, metavar="OUT.json", help="the report to write")


def register(commands: Commands) -> None:
    parser = commands.add_parser(
        "check",
        help="sanity checks of the attribution maps of picked images, written to JSON",
        description="Run the trust checks on the picked indices of a batch: the "
        "model-parameter randomisation test, Integrated Gradients completeness, deletion and "
        "insertion curves, and the top classes' and contrastive maps; write one JSON report.",
    )
    add_batch_arguments(parser)
    add_model_arguments(parser)
    parser.add_argument("--indices", required=True, help='batch indices, e.g. "3, 7, 10-12"')
    _add_check_arguments(parser)
    parser.set_defaults(handler=_cmd_check)
