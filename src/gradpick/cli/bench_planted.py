"""``gradpick bench-planted``: which attribution methods point at a planted cause (the pointing
game and the mass on the mark, against the clean model as a control), and occlusion's time."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from gradpick import attribution, data
from gradpick.cli.arguments import Commands, data_source, positive_int
from gradpick.data.planted import FEATURES
from gradpick.errors import InputError
from gradpick.gradients.request import GradientRequest
from gradpick.models import shipped as models
from gradpick.models.training import evaluate

__all__ = ["register"]


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _planted_model(args: argparse.Namespace, clean: torch.nn.Module) -> torch.nn.Module:
    """The fine-tuned weights at --planted-weights, made there first when absent."""
    from gradpick.bench import planted

    path = Path(args.planted_weights)
    if path.is_file() and not args.retrain:
        _log(f"planted model: {path}")
        return models.load("resnet20", str(path))
    _log(f"fine-tuning the shipped ResNet-20 on {args.finetune_images:,} planted images")
    tuned = planted.finetune(
        clean,
        data_source(args.data, "train"),
        images=args.finetune_images,
        share=args.share,
        poison=args.poison,
        epochs=args.epochs,
        lr=args.lr,
        batch_size=args.batch_size,
        seed=args.seed,
        log=_log,
    )
    planted.save(tuned, path)
    _log(f"wrote {path}")
    return tuned


def _occlusion_seconds(model: torch.nn.Module, size: int, picks: int, window: int) -> float:
    """Wall seconds of occlusion (stride window // 2) of ``picks`` random images."""
    images = torch.rand(picks, 3, size, size, generator=torch.Generator().manual_seed(0))
    request = GradientRequest.build(model, images, list(range(picks)), target="logit")

    def progress(done: int, total: int) -> None:
        if size > 64:  # a large image's forwards take seconds: say how far they are
            print(f"\r  {done:,}/{total:,} forwards", end="", file=sys.stderr, flush=True)

    method = attribution.Occlusion(
        window=window, stride=max(1, window // 2), batch_size=64 if size <= 64 else 8,
        progress=progress,
    )  # fmt: skip
    _log(f"occlusion at {size} px: {method.forwards(request):,} forwards for {picks} picks")
    started = time.perf_counter()
    method.attribute(request)
    seconds = time.perf_counter() - started
    if size > 64:
        print(file=sys.stderr)
    return seconds


def _cmd_bench_planted(args: argparse.Namespace) -> int:
    from gradpick.bench import planted

    unknown = [name for name in args.methods if name not in planted.METHODS]
    if unknown:
        raise InputError(f"Unknown method '{unknown[0]}'; use one of {', '.join(planted.METHODS)}.")
    clean = models.load("resnet20")
    if not args.timing_only:
        model = _planted_model(args, clean)
        test = data.load_batch(data_source(args.data, "test"), size=args.images, seed=args.seed)
        accuracy = {
            "clean": evaluate(clean, test).accuracy,
            "planted": evaluate(model, test).accuracy,
        }
        errors = planted.planted_errors(model, test, most=args.errors, seed=args.seed + 1)
        if not len(errors.images):
            raise InputError("The planted model made no planted errors; fine-tune it longer.")
        print(
            f"clean accuracy on {len(test):,} test images: shipped {accuracy['clean']:.2%}, "
            f"planted {accuracy['planted']:.2%}"
        )
        for name, (rate, base) in errors.rates.items():
            label = test.class_names[FEATURES[name].label]
            print(
                f"{name} -> {label}: {rate:.1%} of marked other-class images ({base:.1%} unmarked)"
            )
        print(f"\n{len(errors.images)} planted errors\n")
        kept: dict[str, torch.Tensor] = {}
        scores = planted.score_methods(model, clean, errors, args.methods, log=_log, kept=kept)
        print("\n".join(planted.table(scores, errors)))
        rates = planted.note_rates(kept, errors) if "occlusion 6x6" in kept else []
        if rates:
            print("\nThe occlusion note (the shown map's peak outside occlusion's region):\n")
            print("\n".join(planted.note_table(rates)))
    print()
    seconds = _occlusion_seconds(clean, 32, 16, 6)
    print(f"occlusion 6x6 stride 3, 16 picks at 32 px (ResNet-20): {seconds:.2f} s")
    if args.large:
        import torchvision

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            large = models.freeze(torchvision.models.resnet50(weights=None).eval())
        seconds = _occlusion_seconds(large, 224, args.large, 56)
        print(
            f"occlusion 56x56 stride 28, {args.large} pick(s) at 224 px (ResNet-50, random "
            f"weights): {seconds:.1f} s, {seconds / args.large:.1f} s per pick"
        )
    return 0


def register(commands: Commands) -> None:
    from gradpick.bench.planted import METHODS

    parser = commands.add_parser(
        "bench-planted",
        help="do the maps point at a planted cause? pointing game per method, and timings",
        description="Fine-tune the shipped ResNet-20 on CIFAR-10 training images with planted "
        "marks (each tied to a class), collect its planted errors on the test split, and score "
        "each attribution method: the pointing game (the map's maximum within 2 px of the "
        "mark) and the share of the map on the mark, against the clean shipped model on the "
        "same images; then time occlusion. Prints markdown.",
    )
    parser.add_argument("--data", help="CIFAR-10 (default: $GRADPICK_CIFAR10_DIR or download)")
    parser.add_argument(
        "--planted-weights",
        default="runs/planted/resnet20-planted.pt",
        help="the fine-tuned weights: read when present, else written there",
    )
    parser.add_argument("--retrain", action="store_true", help="fine-tune even if present")
    parser.add_argument("--finetune-images", type=positive_int, default=6000)
    parser.add_argument("--epochs", type=positive_int, default=1)
    parser.add_argument("--share", type=float, default=0.5, help="planted share of each class")
    parser.add_argument(
        "--poison", type=float, default=0.2, help="share of other classes' images marked"
    )
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument("--images", type=positive_int, default=2000, help="test images marked")
    parser.add_argument("--errors", type=positive_int, default=64, help="planted errors scored")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), metavar="NAME")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timing-only", action="store_true", help="only time occlusion")
    parser.add_argument(
        "--large",
        type=int,
        default=0,
        metavar="PICKS",
        help="also time occlusion of PICKS 224-px images through a random ResNet-50",
    )
    parser.set_defaults(handler=_cmd_bench_planted)
