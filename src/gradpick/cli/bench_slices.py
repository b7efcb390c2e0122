"""``gradpick bench-slices``: do the slices find three planted problems, ahead of the
baselines, verify only real ones, and keep triage from blaming correct labels?"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gradpick import data
from gradpick.cli.arguments import Commands, data_source, positive_int
from gradpick.models import shipped as models
from gradpick.models.zoo import load_model
from gradpick.outputs import store_format as store
from gradpick.outputs.stores import infer_to_store
from gradpick.show.slice_cards import verification
from gradpick.slices.discover import CLUSTERS

__all__ = ["register"]


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _prepared(args: argparse.Namespace, root: Path) -> tuple[str, dict[str, set[str]]]:
    """The planted model's weights and the planted test folder's truth, made when absent."""
    from gradpick.bench import planted, slices

    weights = root / "planted.pt"
    if not weights.is_file() or args.retrain:
        _log(f"fine-tuning the shipped ResNet-20 on {args.finetune_images:,} planted images")
        tuned = slices.tuned_model(
            models.load("resnet20"),
            data_source(args.data, "train"),
            images=args.finetune_images,
            lr=args.lr,
            seed=args.seed,
            log=_log,
            poison=args.poison,
        )
        planted.save(tuned, weights)
    truth_file = root / "truth.json"
    if not truth_file.is_file() or args.retrain:
        _log(f"writing {args.images:,} planted test images to {root / 'images'}")
        truth = slices.planted_folder(
            data_source(args.data, "test"), root / "images", args.images, args.seed
        )
        truth_file.write_text(json.dumps({k: sorted(v) for k, v in truth.items()}))
    kept = json.loads(truth_file.read_text())
    return str(weights), {problem: set(names) for problem, names in kept.items()}


def _store(root: Path, name: str, weights: str | None, fresh: bool) -> store.OpenedStore:
    out = root / f"store-{name}"
    if fresh or not out.is_dir():
        loaded = load_model("resnet20", weights)
        source = data.open_source(str(root / "images"), spec=loaded.spec)
        run = infer_to_store(loaded, source, range(len(source)), out, embeddings=True)
        _log(f"{name}: stored {run.rows:,} rows in {run.seconds:.0f} s")
    return store.open_store(out)


def _triage_figures(opened: store.OpenedStore, truth: dict[str, np.ndarray]) -> list[str]:
    """Triage's flagged suspects without and with the slices: how many are the shortcut's
    errors on correctly labelled images, and how many planted wrong labels stay flagged."""
    from gradpick.bench.rows import markdown_table
    from gradpick.triage.ranking import triage_store

    rows = []
    wrong = truth["wrong labels all"]
    for label, use in (("without slices", False), ("with slices", True)):
        found, _ = triage_store(opened, slices=use)
        flagged = np.flatnonzero(found.flagged)
        shortcut = len(np.intersect1d(flagged, truth["shortcut"]))
        kept = len(np.intersect1d(flagged, wrong))
        rows.append(
            [
                label,
                f"{len(flagged):,}",
                f"{shortcut:,} ({shortcut / max(1, len(flagged)):.1%})",
                f"{kept:,} of {len(wrong):,} ({kept / max(1, len(wrong)):.0%})",
            ]
        )
    columns = ["triage", "flagged", "shortcut errors among flagged", "wrong labels flagged"]
    return markdown_table(columns, rows, right=columns[1:])


def _accuracies(args: argparse.Namespace, weights: str) -> None:
    """Both models' accuracy on clean test images (the fine-tuning must keep it near)."""
    from gradpick.models.training import evaluate

    test = data.load_batch(data_source(args.data, "test"), size=2000, seed=args.seed + 99)
    clean = evaluate(models.load("resnet20"), test).accuracy
    planted = evaluate(models.load("resnet20", weights), test).accuracy
    print(
        f"accuracy on {len(test):,} clean test images: shipped {clean:.2%}, planted {planted:.2%}"
    )


def _cmd_bench_slices(args: argparse.Namespace) -> int:
    from gradpick.bench import slices as bench
    from gradpick.slices.stored import find_slices

    root = Path(args.work) / f"seed{args.seed}"
    root.mkdir(parents=True, exist_ok=True)
    weights, names_of = _prepared(args, root)
    _accuracies(args, weights)
    results: dict[str, Any] = {}
    for name, model_weights in (("planted", weights), ("clean", None)):
        opened = _store(root, name, model_weights, args.retrain)
        started = time.perf_counter()
        found = find_slices(
            opened, clusters=args.clusters, method=args.method, layer=args.layer, seed=args.seed
        )
        seconds = time.perf_counter() - started
        found.write_beside()
        results[name] = (opened, found, seconds)
    opened, found, seconds = results["planted"]
    row_of = {name: row for row, name in enumerate(found.names)}
    errors = found.labels != found.predictions
    truth, every_error = bench.problem_rows(found.names, found.labels, found.predictions, names_of)
    from gradpick.outputs.store_format import list_matrix

    table = opened.table
    embeddings = list_matrix(table.column("embedding"))
    logits = list_matrix(table.column("logits"))
    probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    groups = bench.baseline_groups(
        found, embeddings, found.maps, probabilities, args.clusters, args.seed
    )
    print(
        f"planted model, {len(found.labels):,} test images, {int(errors.sum()):,} errors; the "
        "problems' own errors (called frog, airplane, cat), of all errors of their rows: "
        + ", ".join(
            f"{problem} {len(truth[problem])} of {len(every_error[problem])}"
            for problem in bench.PROBLEMS
        )
    )
    for heading, rows in (
        ("F1 against each problem's own errors", truth),
        ("F1 against every error of the planted rows", every_error),
    ):
        print(f"\n{heading}:\n")
        print("\n".join(bench.table(bench.scores(found, groups, rows))))
    print()
    for name in ("planted", "clean"):
        _, result, took = results[name]
        verified = [s.rank for s in result.slices if result.verified(s.rank)]
        print(
            f"{name} model: {len(result.slices)} slices, verified: {verified or 'none'}; "
            f"{len(result.labels):,} rows ({len(result.mapped):,} mapped) in {took:.1f} s"
        )
        for row in result.to_json()["slices"]:
            if row["effect"] is not None:
                print(f"- slice {row['rank']} ({row['errors']} errors): {verification(row)}")
    print()
    every_error["wrong labels all"] = np.array(sorted(row_of[n] for n in names_of["wrong labels"]))
    print("\n".join(_triage_figures(opened, every_error)))
    return 0


def register(commands: Commands) -> None:
    from gradpick.bench.slices import FINETUNE_IMAGES, FINETUNE_LR, POISON

    parser = commands.add_parser(
        "bench-slices",
        help="planted problems: do the slices find them, verify them, and correct triage?",
        description="Fine-tune the shipped ResNet-20 with a shortcut (a patch meaning frog) and "
        "a subgroup learned wrong (grayscale birds as airplanes), write a planted CIFAR-10 test "
        "folder (patched images, grayscale birds, cats filed as dog), store it with the planted "
        "and the clean model, find slices in both, and score them against the baselines: F1 of "
        "the best of the first three groups per problem, verification, and triage's flagged "
        "suspects with and without the slices. Prints markdown.",
    )
    parser.add_argument("--data", help="CIFAR-10 (default: $GRADPICK_CIFAR10_DIR or download)")
    parser.add_argument("--work", default="runs/slices", help="weights, folder and stores go here")
    parser.add_argument("--retrain", action="store_true", help="fine-tune and write all again")
    parser.add_argument("--finetune-images", type=positive_int, default=FINETUNE_IMAGES)
    parser.add_argument("--lr", type=float, default=FINETUNE_LR)
    parser.add_argument(
        "--poison",
        type=float,
        default=POISON,
        help="share of the other classes' training images patched and relabelled frog",
    )
    parser.add_argument("--images", type=positive_int, default=3000, help="planted test images")
    parser.add_argument("--clusters", type=positive_int, default=CLUSTERS)
    parser.add_argument("--method", default="layercam", help="the maps' attribution method")
    parser.add_argument("--layer", default="layer2", help="its layer (a small mark needs 16 x 16)")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=_cmd_bench_slices)
