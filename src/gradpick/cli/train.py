"""``gradpick train``: train a built-in model and export its weights with a model card."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gradpick import data
from gradpick.cli.arguments import Commands, bounded, data_source, fraction
from gradpick.errors import ModelError
from gradpick.models import shipped as models

__all__ = ["register"]

_cutout_side = bounded(int, 0, data.IMAGE_SIZE, " pixels")


def _cmd_train(args: argparse.Namespace) -> int:
    from gradpick.models import training as train

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
        data_source(args.data, "train"),
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
        data_source(args.data, "test"),
        json.loads(card_beside.read_text()) if card_beside and card_beside.is_file() else None,
    )
    print(evaluation.table())
    print(f"\nwrote {weights_path} and {card_path}")
    return 0


def register(commands: Commands) -> None:
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
        type=fraction,
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
