"""``gradpick eval``: a model's accuracy, per class and as a confusion matrix."""

from __future__ import annotations

import argparse

from gradpick import data
from gradpick.cli.arguments import (
    Commands,
    add_data_arguments,
    add_model_arguments,
    data_source,
    load_model,
)
from gradpick.errors import ModelError

__all__ = ["register"]


def _cmd_eval(args: argparse.Namespace) -> int:
    from gradpick.models import training as train

    loaded = load_model(args)
    batch = data.load_batch(data_source(args.data, args.split), args.start, args.size)
    loaded.check_images(batch.images)
    if loaded.classes != len(batch.class_names):
        raise ModelError(
            f"{loaded.name} predicts {loaded.classes} classes but {batch.source} has "
            f"{len(batch.class_names)}; evaluate it on images of its own classes."
        )
    print(f"{loaded.describe()} on {batch.source}")
    print(train.evaluate(loaded.module, batch).table())
    return 0


def register(commands: Commands) -> None:
    parser = commands.add_parser(
        "eval",
        help="top-1, per-class accuracy and confusion matrix of a model",
        description="Evaluate a model on a labelled source (default: the CIFAR-10 test split).",
    )
    add_model_arguments(parser, positional=True)
    add_data_arguments(parser, "test")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--size", type=int, help="number of images (default: all)")
    parser.set_defaults(handler=_cmd_eval)
