"""``gradpick check``: its options, its printed summary and its JSON file.

``cli.py`` loads the model, the data and the picks with the helpers every command shares and
hands them to ``run``; everything particular to the checks lives here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.trust.baselines import BASELINES
from gradpick.trust.completeness import DEFAULT_MAX_STEPS, DEFAULT_TOLERANCE
from gradpick.trust.contrastive import DEFAULT_TOP
from gradpick.trust.engine import METHODS, MethodSettings
from gradpick.trust.faithfulness import DEFAULT_STEPS, RANDOM
from gradpick.trust.randomisation import MODES
from gradpick.trust.report import CheckOptions, TrustReport, report_dict, run_checks


def _steps(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is neither 'auto' nor a whole number") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The check-specific options (model, data and --indices come from cli.py's helpers)."""
    defaults = MethodSettings()
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
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


def options_of(args: argparse.Namespace) -> CheckOptions:
    """The options the arguments ask for, validated (InputError) before any work."""
    return CheckOptions(
        methods=tuple(args.methods),
        settings=MethodSettings(args.samples, args.noise, args.steps, args.check_seed),
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


def output_path(text: str) -> Path:
    path = Path(text).expanduser()
    if path.suffix != ".json":
        raise InputError(f"--json must end in .json, not '{path.suffix or path.name}'.")
    if not path.parent.is_dir():
        raise InputError(f"--json: the folder {path.parent} does not exist.")
    return path


def _progress(done: int, total: int) -> None:
    sys.stderr.write(f"\rrandomising layers: {done} of {total}")
    if done >= total:
        sys.stderr.write("\n")


def _mean(values: dict[str, Any]) -> str:
    return "n/a" if values["mean"] is None else f"{values['mean']:.3f}"


def summary(record: dict[str, Any]) -> str:
    """A few lines per check, from the JSON record."""
    lines = ["randomisation (Spearman / SSIM, mean over picks, at the first and last step):"]
    for method, curve in record["randomisation"].items():
        first, last = curve["steps"][0], curve["steps"][-1]
        lines.append(
            f"  {method:<22} {first['layer']}: {_mean(first['spearman'])} / "
            f"{_mean(first['ssim'])}   all {last['randomised_layers']} layers: "
            f"{_mean(last['spearman'])} / {_mean(last['ssim'])}"
        )
    lines.append("completeness (IG: sum of attributions vs F(x) - F(baseline)):")
    for row in record["completeness"]:
        error = "n/a" if row["relative_error"] is None else f"{row['relative_error']:.2%}"
        lines.append(
            f"  #{row['index']:<5} {row['baseline']:<14} {row['steps']:>5} steps  "
            f"sum {row['attribution_sum']:>9.4g}  difference {row['difference']:>9.4g}  "
            f"error {error}"
        )
    faithful = record["faithfulness"]
    lines.append(f"faithfulness (AUC, mean over picks; {RANDOM} order in brackets):")
    for method, row in faithful["methods"].items():
        lines.append(
            f"  {method:<22} deletion {_mean(row['deletion_auc'])} "
            f"({_mean(row['random_deletion_auc'])})  insertion {_mean(row['insertion_auc'])} "
            f"({_mean(row['random_insertion_auc'])})"
        )
    return "\n".join(lines)


def write_json(path: Path, record: dict[str, Any]) -> None:
    """Write through a temporary file, so an interrupted run never leaves a partial report."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(record, indent=2, allow_nan=False) + "\n")
    os.replace(partial, path)


def _name(class_names: Sequence[str], index: int) -> str:
    return class_names[index] if 0 <= index < len(class_names) else str(index)


def run(
    out: Path,
    options: CheckOptions,
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    classes: int | None,
    class_names: Sequence[str],
    context: dict[str, Any],
) -> TrustReport:
    """Run the checks, print the summary and write ``out`` with ``context`` merged in."""
    result = run_checks(model, images, indices, classes, options, progress=_progress)
    record = report_dict(result)
    record = {
        **context,
        **record,
        "class_names": [_name(class_names, index) for index in record["classes"]],
    }
    print(summary(record))
    write_json(out, record)
    print(f"\nwrote {out}")
    return result
