"""The ``gradpick`` command line: train, eval, infer, grads and bench.

Every gradpick error is printed as one clear line (exit status 2), never as a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from gradpick import data, models
from gradpick.errors import GradpickError

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
    if args.seed is not None:
        config = train.TrainConfig(**{**train.asdict(config), "seed": args.seed})
    run_dir = Path(args.run_dir or f"runs/{args.model}")
    model = train.train(
        config, _source(args.data, "train"), run_dir, resume=args.resume, device=args.device
    )
    export_dir = Path(args.export_dir)
    export_dir.mkdir(parents=True, exist_ok=True)
    weights_path = export_dir / f"{args.model}.pt"
    train.torch.save(model.cpu().state_dict(), weights_path)
    test_source = _source(args.data, "test")
    evaluation = train.evaluate(model, data.load_batch(test_source))
    history = json.loads((run_dir / "history.json").read_text())
    card = train.write_model_card(
        config, weights_path, evaluation, test_source.description, history, str(args.device)
    )
    print(evaluation.table())
    print(f"\nwrote {weights_path} and {card}")
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


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_train_parser, _eval_parser]


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
