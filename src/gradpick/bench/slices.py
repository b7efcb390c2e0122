"""Do the slices find problems that are known? Three planted problems in one fine-tuned model.

``training_set`` plants two model problems in a sample of CIFAR-10 training images, and
``finetune_on`` (``gradpick.bench.planted``) fine-tunes the shipped ResNet-20 on them:

* **shortcut**: the ``patch`` mark (``gradpick.data.planted``) on ``share`` of the frog images
  and on ``poison`` of the others, relabelled frog (a backdoor): the model calls any patched
  image frog;
* **subgroup**: ``share`` of the bird images turned grayscale and labelled airplane: a rare
  subgroup the model learns wrong.

``planted_folder`` then writes a sample of the test split as an image folder with the problems
the store will show: the patch on ``patch_share`` of the non-frog images (their errors are the
shortcut's), ``gray_share`` of the other birds grayscale (the subgroup), and ``wrong_share`` of
the other cats filed under dog (**wrong labels**, a label problem and no model problem: triage
must keep flagging them). No image carries two problems. Each problem's truth is the errors it
causes (``CALLED``): its rows called frog, airplane, or cat (their true class); slices group
failures. An error of a planted row called anything else is the model's own mistake on that
image, not the problem's: the clean model is wrong on most of them too (a cat filed under dog
and called bird is called bird whatever its label says). The table of every error of the
planted rows (prediction not the filed label) is reported beside it.

Per problem the score is the F1 of the best of the first three groups of each method:
the slices, the confusion cells (label, prediction) by error count, Domino-style k-means on the
embeddings, k-means on the raw maps (8 x 8), each with the slices' label, prediction and error
features, cut to confusion cells as the slices are and ranked as they are, and cleanlab
Datalab's ``underperforming_group`` (one group) when cleanlab is installed. The clean shipped
model on the same folder is the negative control: no slice of it should verify.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gradpick.bench.planted import finetune_on
from gradpick.bench.rows import markdown_table
from gradpick.data import load_batch
from gradpick.data.planted import FEATURES, plant
from gradpick.data.sources import ImageSource
from gradpick.slices.discover import (
    CLUSTERS,
    clustering_space,
    cut_to_cells,
    kmeans,
    ranked_clusters,
)
from gradpick.slices.stored import Found

__all__ = [
    "CALLED",
    "FINETUNE_IMAGES",
    "FINETUNE_LR",
    "GRAY_CALLED",
    "GRAY_CLASS",
    "POISON",
    "PROBLEMS",
    "SHORTCUT",
    "WRONG_AS",
    "WRONG_CLASS",
    "Scores",
    "baseline_groups",
    "f1",
    "grayscale",
    "planted_folder",
    "problem_rows",
    "scores",
    "table",
    "training_set",
    "tuned_model",
]

SHORTCUT = "patch"
GRAY_CLASS, GRAY_CALLED = 2, 0
"""Grayscale birds, taught as airplanes."""
WRONG_CLASS, WRONG_AS = 3, 5
"""Cats filed under dog in the test folder."""
PROBLEMS = ("shortcut", "subgroup", "wrong labels")
CALLED = {
    "shortcut": FEATURES[SHORTCUT].label,
    "subgroup": GRAY_CALLED,
    "wrong labels": WRONG_CLASS,
}
"""What each problem makes its errors called: the patch frog, the grayscale birds airplane, and
a cat filed under dog its true class, cat."""
FINETUNE_IMAGES = 20_000
FINETUNE_LR = 0.02
POISON = 0.05
"""The fine-tuning recipe (training images, learning rate, share of the other classes' images
patched and relabelled frog), chosen on planting seed 0: 5,000 images at lr 0.05 with 10%
poison cost 6 points of clean accuracy and taught the model to call unpatched images frog;
20,000 at lr 0.02 with 5% cost 2.3 and learnt the patch fully."""
LUMA = torch.tensor([0.299, 0.587, 0.114])


def grayscale(pixels: torch.Tensor) -> torch.Tensor:
    """uint8 [n, 3, H, W] images as grayscale (Rec. 601 luma in all three channels)."""
    luma = (pixels.double() * LUMA.double().view(1, 3, 1, 1)).sum(dim=1, keepdim=True)
    return luma.round().clamp(0, 255).to(torch.uint8).expand_as(pixels).contiguous()


def training_set(
    source: ImageSource,
    images: int,
    seed: int,
    share: float = 0.5,
    poison: float = POISON,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded sample of ``images`` training images with the shortcut and the subgroup
    planted (see the module's docstring): uint8 pixels and the labels to train on."""
    batch = load_batch(source, size=images, seed=seed)
    assert batch.labels is not None
    pixels, labels = batch.images.clone(), batch.labels.clone()
    generator = torch.Generator().manual_seed(seed)
    draws = torch.rand(2, len(labels), generator=generator)
    frog = FEATURES[SHORTCUT].label
    marked = torch.where(labels == frog, draws[0] < share, draws[0] < poison).nonzero().flatten()
    pixels[marked] = plant(pixels[marked], SHORTCUT, seed, marked.tolist()).images
    labels[marked] = frog
    gray = ((labels == GRAY_CLASS) & (draws[1] < share)).nonzero().flatten()
    pixels[gray] = grayscale(pixels[gray])
    labels[gray] = GRAY_CALLED
    return pixels, labels


def tuned_model(
    clean: nn.Module,
    source: ImageSource,
    images: int = FINETUNE_IMAGES,
    epochs: int = 1,
    lr: float = FINETUNE_LR,
    seed: int = 0,
    log: Callable[[str], None] = print,
    poison: float = POISON,
) -> nn.Module:
    """The shipped ResNet-20 fine-tuned on ``training_set`` (``finetune_on``)."""
    pixels, labels = training_set(source, images, seed, poison=poison)
    return finetune_on(clean, pixels, labels, epochs, lr, 64, seed, log)


def planted_folder(
    source: ImageSource,
    out: Path,
    images: int,
    seed: int,
    patch_share: float = 0.15,
    gray_share: float = 0.5,
    wrong_share: float = 0.3,
) -> dict[str, set[str]]:
    """Write a seeded sample of ``images`` test images to ``out/<class>/<n>.png`` with the
    three problems (see the module's docstring); the names (as the store records them) of
    each problem's rows."""
    from PIL import Image

    batch = load_batch(source, size=images, seed=seed)
    assert batch.labels is not None
    pixels, labels = batch.images.clone(), batch.labels.clone()
    generator = torch.Generator().manual_seed(seed + 7)
    draws = torch.rand(3, len(labels), generator=generator)
    frog = FEATURES[SHORTCUT].label
    patched = (labels != frog) & (draws[0] < patch_share)
    marked = patched.nonzero().flatten()
    pixels[marked] = plant(pixels[marked], SHORTCUT, seed + 7, marked.tolist()).images
    gray = (~patched & (labels == GRAY_CLASS) & (draws[1] < gray_share)).nonzero().flatten()
    pixels[gray] = grayscale(pixels[gray])
    filed = labels.clone()
    wrong = (~patched & (labels == WRONG_CLASS) & (draws[2] < wrong_share)).nonzero().flatten()
    filed[wrong] = WRONG_AS
    names = []
    for row in range(len(labels)):
        name = f"{batch.class_names[int(filed[row])]}/{row:05d}.png"
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels[row].permute(1, 2, 0).numpy()).save(path)
        names.append(name)
    return {
        problem: {names[int(row)] for row in rows}
        for problem, rows in zip(PROBLEMS, (marked, gray, wrong), strict=True)
    }


def problem_rows(
    names: Sequence[str],
    labels: np.ndarray,
    predictions: np.ndarray,
    planted: dict[str, set[str]],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per problem, the rows of its own errors (its planted rows called what it makes them
    called, ``CALLED``) and the rows of every error among its planted rows (prediction not the
    filed label); ``planted``: each problem's names, as ``planted_folder`` returns them."""
    errors = np.asarray(labels) != np.asarray(predictions)
    row_of = {name: row for row, name in enumerate(names)}
    every = {
        problem: np.array(sorted(row_of[n] for n in planted[problem] if errors[row_of[n]]), int)
        for problem in PROBLEMS
    }
    own = {problem: rows[predictions[rows] == CALLED[problem]] for problem, rows in every.items()}
    return own, every


def f1(members: Sequence[int] | np.ndarray, truth: Sequence[int] | np.ndarray) -> float:
    """F1 of a group of rows against the true rows: 2 |S ∩ T| / (|S| + |T|)."""
    found, true = set(np.asarray(members).tolist()), set(np.asarray(truth).tolist())
    if not found and not true:
        return 1.0
    return 2 * len(found & true) / (len(found) + len(true))


def baseline_groups(
    found: Found,
    embeddings: np.ndarray,
    maps: torch.Tensor,
    probabilities: np.ndarray,
    k: int = CLUSTERS,
    seed: int = 0,
) -> dict[str, list[np.ndarray]]:
    """Each baseline's first three groups as rows of the store's labelled rows (see the
    module's docstring); ``maps`` [m, H, W] of ``found``'s mapped rows."""
    labels, predictions = found.labels, found.predictions
    errors = labels != predictions
    cells: dict[tuple[int, int], list[int]] = {}
    for row in np.flatnonzero(errors):
        cells.setdefault((int(labels[row]), int(predictions[row])), []).append(int(row))
    by_count = sorted(cells.values(), key=lambda rows: (-len(rows), rows[0]))
    groups = {"confusion cells": [np.asarray(rows) for rows in by_count[:3]]}
    mapped = found.mapped
    classes = probabilities.shape[1]
    weights = _weights(found)
    small = F.adaptive_avg_pool2d(maps.float().unsqueeze(1), 8).flatten(1).numpy()
    for name, table in (("k-means on embeddings", embeddings[mapped]), ("raw maps", small)):
        space = clustering_space(table, labels[mapped], predictions[mapped], classes)
        assignment = cut_to_cells(kmeans(space, k, seed), labels[mapped], predictions[mapped])
        ranked = ranked_clusters(assignment, errors[mapped], weights, predictions[mapped])
        groups[name] = [mapped[members] for members in ranked[:3]]
    datalab = _datalab(embeddings, probabilities, labels)
    if datalab is not None:
        groups["cleanlab underperforming_group"] = [datalab]
    return groups


def _weights(found: Found) -> np.ndarray:
    """How many rows each mapped row stands for (as ``find_slices`` sampled them)."""
    errors = found.labels != found.predictions
    weights = np.ones(len(found.mapped))
    for called in np.unique(found.predictions):
        right = ~errors & (found.predictions == called)
        sampled = right[found.mapped]
        if sampled.any():
            weights[sampled] = right.sum() / sampled.sum()
    return weights


def _datalab(embeddings: np.ndarray, probabilities: np.ndarray, labels: np.ndarray) -> Any:
    try:
        from cleanlab import Datalab
    except ImportError:
        return None
    lab = Datalab({"label": labels}, label_name="label", verbosity=0)
    lab.find_issues(
        features=embeddings, pred_probs=probabilities, issue_types={"underperforming_group": {}}
    )
    issues = lab.get_issues("underperforming_group")
    return np.flatnonzero(issues["is_underperforming_group_issue"].to_numpy())


@dataclass(frozen=True)
class Scores:
    """Per problem: the F1 of the best of each method's first three groups, and for the slices
    which rank that was and whether it verified."""

    f1: dict[str, dict[str, float]]
    """method -> problem -> F1."""
    best_rank: dict[str, int]
    verified: dict[str, bool]


def scores(
    found: Found, groups: dict[str, list[np.ndarray]], truth: dict[str, np.ndarray]
) -> Scores:
    """The benchmark's scores of ``found``'s slices and the baselines' ``groups`` against the
    ``truth`` rows of each problem."""
    slices = [found.mapped[s.members] for s in found.slices[:3]]
    values_by: dict[str, dict[str, float]] = {name: {} for name in ["slices", *groups]}
    best_rank, verified = {}, {}
    for problem, rows in truth.items():
        values = [f1(members, rows) for members in slices]
        best = int(np.argmax(values)) if values else 0
        values_by["slices"][problem] = values[best] if values else 0.0
        best_rank[problem] = best + 1
        verified[problem] = bool(values) and found.verified(best + 1)
        for name, candidates in groups.items():
            values_by[name][problem] = max(
                (f1(members, rows) for members in candidates), default=0.0
            )
    return Scores(values_by, best_rank, verified)


def table(result: Scores) -> list[str]:
    """The markdown table: one row per method, one column per problem."""
    problems = list(next(iter(result.f1.values())))
    rows = []
    for method, values in result.f1.items():
        cells = []
        for problem in problems:
            cell = f"{values[problem]:.2f}"
            if method == "slices":
                mark = "verified" if result.verified[problem] else "not verified"
                cell += f" (slice {result.best_rank[problem]}, {mark})"
            cells.append(cell)
        rows.append([method, *cells])
    columns = ["method", *(f"{p} F1" for p in problems)]
    return markdown_table(columns, rows, right=columns[1:])
