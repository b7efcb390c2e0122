"""``gradpick bench-planted``: which attribution methods point at a planted cause (the pointing
game and the mass on the mark, against the clean model as a control), and occlusion's time."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from gradpick import attribution, data
from gradpick.bench.rows import markdown_table
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


def _occlusion_seconds(
    model: torch.nn.Module,
    size: int,
    picks: int,
    window: int,
    stride: int,
    batch: int,
    bfloat16: int = 0,
) -> tuple[float, int, int]:
    """Wall seconds of occlusion of ``picks`` random images, its forwards, and the altered
    images per forward it ran (``batch`` capped by the memory budget)."""
    images = torch.rand(picks, 3, size, size, generator=torch.Generator().manual_seed(0))
    request = GradientRequest.build(model, images, list(range(picks)), target="logit")

    def progress(done: int, total: int) -> None:
        if size > 64:  # a large image's forwards take seconds: say how far they are
            print(f"\r  {done:,}/{total:,} forwards", end="", file=sys.stderr, flush=True)

    method = attribution.Occlusion(
        window=window, stride=stride, batch_size=batch, bfloat16=bfloat16, progress=progress
    )
    _log(f"occlusion at {size} px: {method.forwards(request):,} forwards for {picks} picks")
    started = time.perf_counter()
    method.attribute(request)
    seconds = time.perf_counter() - started
    if size > 64:
        print(file=sys.stderr)
    return seconds, method.forwards(request), method.batch_for(request)


def _timings(clean: torch.nn.Module, large: int, repeats: int) -> list[str]:
    """The timing table: occlusion of 16 picks at 32 px through the shipped ResNet-20 at the
    default settings, with bfloat16 forwards, at stride 3, and at stride 3 with 64 images a
    batch, and at 224 px through a random ResNet-50."""
    default = attribution.Occlusion()
    window, stride = int(default.settings["window"]), int(default.settings["stride"])
    batch = int(default.settings["batch_size"])
    # the default first
    settings = dict.fromkeys(((stride, batch, 0), (stride, batch, 1), (3, batch, 0), (3, 64, 0)))
    cases = [("ResNet-20", clean, 32, 16, window, s, b, low) for s, b, low in settings]
    if large:
        import torchvision

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            resnet50 = models.freeze(torchvision.models.resnet50(weights=None).eval())
        cases.append(("ResNet-50 (random weights)", resnet50, 224, large, 56, 28, 8, 0))
    rows = []
    for name, model, size, picks, window, stride, batch, low in cases:
        seconds, loads, forwards, ran = [], [], 0, batch
        for _ in range(repeats):
            loads.append(os.getloadavg()[0])
            took, forwards, ran = _occlusion_seconds(model, size, picks, window, stride, batch, low)
            seconds.append(took)
        rows.append(
            [
                name,
                f"{size} px",
                str(picks),
                f"{window}×{window}, stride {stride}" + (", bfloat16" if low else ""),
                f"{forwards:,}",
                f"{ran} (of {batch})" if ran < batch else str(batch),
                f"{statistics.median(seconds):.2f}",
                " / ".join(f"{s:.2f}" for s in seconds),
                " / ".join(f"{load:.1f}" for load in loads),
            ]
        )
    columns = [
        "model",
        "size",
        "picks",
        "occlusion",
        "forwards",
        "batch",
        "seconds (median)",
        "each run (s)",
        "load average at each run",
    ]
    return markdown_table(columns, rows, right=columns[2:3] + columns[4:7])


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
    print(f"\nOcclusion's time ({os.cpu_count()} CPU cores, {torch.get_num_threads()} threads):\n")
    print("\n".join(_timings(clean, args.large, args.repeats)))
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
    parser.add_argument("--finetune-images", type=positive_int, default=8000)
    parser.add_argument("--epochs", type=positive_int, default=1)
    parser.add_argument("--share", type=float, default=0.5, help="planted share of each class")
    parser.add_argument(
        "--poison", type=float, default=0.3, help="share of other classes' images marked"
    )
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument("--images", type=positive_int, default=2000, help="test images marked")
    parser.add_argument("--errors", type=positive_int, default=64, help="planted errors scored")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), metavar="NAME")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timing-only", action="store_true", help="only time occlusion")
    parser.add_argument(
        "--repeats", type=positive_int, default=3, help="runs of each occlusion timing"
    )
    parser.add_argument(
        "--large",
        type=int,
        default=0,
        metavar="PICKS",
        help="also time occlusion of PICKS 224-px images through a random ResNet-50",
    )
    parser.set_defaults(handler=_cmd_bench_planted)
