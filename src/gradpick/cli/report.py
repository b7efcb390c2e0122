"""``gradpick report``: the picks of a batch as one self-contained HTML file.

The batch, model and target options are the other commands' own (``gradpick grads``); the
page is ``gradpick.share.report.build_report``'s, written through a temporary file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from gradpick import data
from gradpick.attribution import AttributionMethod
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
    output_class_names,
)
from gradpick.errors import InputError
from gradpick.gradients import strategies
from gradpick.outputs.store_format import open_store
from gradpick.picking.rules import parse_indices
from gradpick.share import export, report
from gradpick.slices.stored import read_beside
from gradpick.trust.engine import CHECKABLE, MethodSettings
from gradpick.trust.report import CheckOptions

__all__ = ["output_path", "register", "run", "say"]


def output_path(text: str) -> Path:
    """``--out`` checked before any work is done, so a typo costs nothing."""
    path = Path(text).expanduser()
    if path.suffix.lower() not in (".html", ".htm"):
        raise InputError(f"--out must end in .html, not '{path.suffix or path.name}'.")
    if not path.parent.is_dir():
        raise InputError(f"--out: the folder {path.parent} does not exist.")
    return path


def _slices(store: str | None) -> dict[str, Any] | None:
    """The slices kept beside ``store`` (None without --slices); refused when there are none
    that describe it, before any work."""
    if store is None:
        return None
    kept, where = read_beside(open_store(store))
    if kept is None:
        raise InputError(
            f"--slices {store}: no slices of this store in {where}; run gradpick slices "
            f"--outputs {store} first."
        )
    return kept


def say(step: str, stream: TextIO | None = None) -> None:
    """One step of a long report: on a terminal it overwrites the last; in a log or a pipe,
    where that would run the steps together, one line each."""
    out = stream or sys.stderr
    out.write(f"\r\033[K{step}" if out.isatty() else f"{step}\n")
    out.flush()


def _check_options(args: argparse.Namespace, method: AttributionMethod) -> CheckOptions | None:
    """The checks of the maps the report shows: ``--methods`` (default: the shown method) at
    the shown layer and settings; None without ``--check``."""
    if not args.check:
        if args.methods or args.layers is not None:
            raise InputError("--methods and --layers choose what --check checks; add --check.")
        return None
    settings = MethodSettings.from_chosen({**method.settings, "layer": args.layer})
    return CheckOptions(
        methods=tuple(args.methods or [method.name]), settings=settings, layers=args.layers
    )


def register(commands: Commands) -> None:
    """Add ``report`` to the command line's subcommands."""
    parser = commands.add_parser(
        "report",
        help="the picks' images, maps, predictions and readouts as one self-contained HTML file",
        description="Compute the attribution maps of the picked indices of a batch and write one "
        "HTML file that needs no network to open: the model and its card, the batch, each "
        "pick's image, map, overlay, prediction, top classes and target, the method's settings "
        "and the readouts (with --check, the trust checks' summary too).",
    )
    add_batch_arguments(parser)
    add_model_arguments(parser)
    parser.add_argument("--indices", required=True, help='batch indices, e.g. "3, 7, 10-12"')
    add_method_arguments(parser)
    parser.add_argument(
        "--shared-scale",
        action="store_true",
        help="one colour scale for all picks, so magnitudes compare (default: each map its own, "
        "so its structure shows)",
    )
    parser.add_argument(
        "--measure-memory", action="store_true", help="also report saved-for-backward and peak"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="also run the trust checks on the maps shown (the method and layer above) and add "
        "their tables",
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=CHECKABLE,
        metavar="METHOD",
        help="with --check: the methods to check (default: --method, the one shown)",
    )
    parser.add_argument(
        "--layers",
        type=int,
        help="with --check: randomise only this many layers from the output (default: all)",
    )
    parser.add_argument(
        "--slices",
        metavar="DIR",
        help="a store whose failure slices (gradpick slices --outputs DIR) the report adds as a "
        "Slices section",
    )
    parser.add_argument("--out", required=True, metavar="FILE.html", help="the report to write")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Compute the picks' maps and write the report; the exit status."""
    out = output_path(args.out)
    slices = _slices(args.slices)
    method = method_of(args)
    checks = _check_options(args, method)
    loaded = load_model(args)
    source = data_source(args.data, args.split, loaded.spec)
    positions = data.batch_positions(len(source), args.start, args.size, args.seed)
    indices = parse_indices(args.indices, len(positions))
    classes = class_argument(args.class_, output_class_names(source, loaded), args.target)
    # A batch index seeds SmoothGrad's noise, so the batch is read up to the largest pick (all
    # of it for a whole-batch strategy): the maps match the explorer's for the same batch.
    whole = strategies.get(args.strategy).whole_batch
    read = positions if whole else positions[: max(indices) + 1]
    labels = source.labels()
    batch = fitted_to_model(
        data.ImageBatch(
            images=source.read(read),
            labels=None if labels is None else labels[read],
            class_names=source.class_names,
            names=tuple(source.names(read)),
            positions=tuple(read),
            source=source.description,
        ),
        loaded,
        args.target,
    )
    document = report.of_batch(
        loaded,
        batch,
        indices,
        method,
        target=args.target,
        classes=classes,
        strategy=args.strategy,
        measure_memory=args.measure_memory,
        checks=checks,
        source=export.source_record(
            source.description,
            len(positions),
            source.origin().get("split"),
            args.start,
            args.size,
            args.seed,
        ),
        shared_scale=args.shared_scale,
        progress=say,
        slices=slices,
    )
    if sys.stderr.isatty():  # end the step line a terminal kept overwriting
        sys.stderr.write("\n")
    report.write_report(out, document)
    print(f"model: {loaded.describe()}")
    print(f"images: {len(indices):,} picked from {batch_description(source, args, len(positions))}")
    print(f"wrote {out} ({len(document.encode()) / 1000:,.0f} kB)")
    return 0
