"""The ``gradpick`` command line: one module per subcommand (``gradpick --help`` lists them).

Each command module has a ``register`` that adds its subparser; the arguments they
share are in ``gradpick.cli.arguments``. Every gradpick error is printed as one clear line
(exit status 2), never as a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from gradpick.cli import (
    badges,
    bench,
    bench_planted,
    bench_slices,
    check,
    check_deploy,
    compare,
    eval,
    grads,
    infer,
    layers,
    report,
    slices,
    train,
)
from gradpick.cli import triage as triage_command
from gradpick.cli.arguments import Commands, Handler
from gradpick.errors import GradpickError

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

SUBCOMMANDS: list[Callable[[Commands], None]] = [
    train.register,
    eval.register,
    infer.register,
    grads.register,
    layers.register,
    check.register,
    report.register,
    bench.register,
    check_deploy.register,
    badges.register,
    bench_planted.register,
    bench_slices.register,
    compare.register,
    triage_command.register,
    slices.register,
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
