"""``gradpick bench-badges``: how often the trust badges are wrong on known-good and known-bad
maps (``gradpick.bench.calibration``), or with ``--budget`` what they cost a click of a big
model (``gradpick.bench.budget``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from gradpick import attribution
from gradpick.cli.arguments import Commands, positive_int
from gradpick.errors import InputError

__all__ = ["register"]


def _cmd_bench_badges(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.budget:
        from gradpick.bench import budget

        rows = budget.budget_rows(
            tuple(args.models or budget.MODELS), args.clicks, progress=_progress
        )
        print(budget.report_text(rows))
        return 0
    from gradpick.bench import calibration

    if args.read:
        figures = calibration.read_figures([Path(path) for path in args.read])
    else:
        defaults = calibration.CalibrationConfig()
        models = tuple(args.models or defaults.models)
        weights = tuple(args.weights or defaults.weights[: len(models)])
        images = tuple(args.images or defaults.images[: len(models)])
        costly = tuple(args.costly_images or defaults.costly_images[: len(models)])
        if not len(models) == len(weights) == len(images) == len(costly):
            raise InputError(
                "Give --weights, --images and --costly-images once per model (--weights none "
                "for a model's own weights)."
            )
        config = calibration.CalibrationConfig(
            models=models,
            weights=tuple(None if weight == "none" else weight for weight in weights),
            images=images,
            costly_images=costly,
            methods=tuple(args.methods or attribution.METHOD_NAMES),
        )
        out = Path(args.json) if args.json else None
        figures = calibration.calibrate(
            config,
            progress=_progress,
            save=None if out is None else lambda found: calibration.write_figures(out, found),
        )
    print(calibration.report_text(figures))
    return 0


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def register(commands: Commands) -> None:
    parser = commands.add_parser(
        "bench-badges",
        help="the trust badges' error rates on known-good and known-bad maps",
        description="Check known-good maps (trained models' maps of correctly classified "
        "CIFAR-10 test images, from $GRADPICK_CIFAR10_DIR) and known-bad ones (the image's "
        "edges, a centre blob, a re-initialised model's maps) with the badges' own code; print "
        "per model, method and check the share of good maps failed and of bad maps missed on "
        "the half of the images not used to choose the thresholds. --budget instead times "
        "clicks of big models with the badges on.",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        help="model names (default: resnet20 and "
        "torchvision:resnet18 with runs/resnet18-cifar224/weights.pt)",
    )
    parser.add_argument("--weights", nargs="+", help="a weights file per model, or 'none'")
    parser.add_argument("--images", nargs="+", type=positive_int, help="good images per model")
    parser.add_argument(
        "--costly-images",
        nargs="+",
        type=positive_int,
        help="images per model for SmoothGrad, Integrated Gradients and Score-CAM",
    )
    parser.add_argument("--methods", nargs="+", choices=attribution.METHOD_NAMES)
    parser.add_argument("--json", help="write every figure here (to make the table again)")
    parser.add_argument(
        "--read", nargs="+", metavar="JSON", help="make the table from earlier runs' figures"
    )
    parser.add_argument("--threads", type=positive_int, help="torch intra-op threads")
    parser.add_argument(
        "--budget",
        action="store_true",
        help="time the first and later clicks of big models (default: a 224-px ViT-B/16 and "
        "ResNet-50, random weights) with the badges on, instead",
    )
    parser.add_argument("--clicks", type=positive_int, default=3, help="with --budget: clicks")
    parser.set_defaults(handler=_cmd_bench_badges)
