"""Multi-label (sigmoid) classifiers: per-label metrics, picking by label and per-label maps.

A sigmoid model (``LoadedModel.output == "sigmoid"``: Hugging Face's ``problem_type:
multi_label_classification``, or ``--output sigmoid``) scores each label on its own,
p_c = 1 / (1 + exp(-z_c)); an image can have none, one or several. Its targets are a label's
logit or its binary cross-entropy (``target="bce"``), one map per label::

    maps = label_maps(model, images, 3, [0, 7], method="gradcam")   # image 3, labels 0 and 7
    metrics = label_metrics(logits, present)        # per-label precision, recall, AP; mAP
    picked = pick_by_label(logits, label=7, threshold=0.5)

Average precision is the step-wise area under the precision-recall curve (as scikit-learn's
``average_precision_score``): AP_c = Σ_n (R_n - R_{n-1}) P_n over the images sorted by p_c.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gradpick.attribution import Attribution, attribute
from gradpick.errors import InputError

__all__ = [
    "LabelMetrics",
    "average_precision",
    "label_maps",
    "label_metrics",
    "per_label_lines",
    "pick_by_label",
    "refuse_sigmoid",
]


@dataclass(frozen=True)
class LabelMetrics:
    """Per label c: precision and recall of ``p_c >= threshold``, average precision, positives."""

    precision: torch.Tensor
    recall: torch.Tensor
    average_precision: torch.Tensor
    """NaN for a label no image has: its AP is undefined and left out of ``mean_ap``."""
    positives: torch.Tensor
    threshold: float

    @property
    def mean_ap(self) -> float:
        """mAP: the mean AP over the labels at least one image has."""
        known = self.average_precision[~self.average_precision.isnan()]
        return float(known.mean()) if known.numel() else float("nan")


def average_precision(scores: torch.Tensor, present: torch.Tensor) -> float:
    """AP of one label: Σ_n (R_n - R_{n-1}) P_n, images by descending score, ties together."""
    positives = int(present.sum())
    if positives == 0:
        return float("nan")
    order = torch.argsort(scores, descending=True, stable=True)
    sorted_scores, hits = scores[order], present[order].double()
    true_positives = hits.cumsum(0)
    ranks = torch.arange(1, len(hits) + 1, dtype=torch.float64)
    # the last position of each run of equal scores: a threshold takes ties together
    last = torch.ones(len(hits), dtype=torch.bool)
    last[:-1] = sorted_scores[1:] != sorted_scores[:-1]
    precision = (true_positives / ranks)[last]
    recall = (true_positives / positives)[last]
    steps = torch.diff(recall, prepend=torch.zeros(1, dtype=torch.float64))
    return float((steps * precision).sum())


def label_metrics(
    logits: torch.Tensor, present: torch.Tensor, threshold: float = 0.5
) -> LabelMetrics:
    """Per-label precision, recall (at ``threshold`` on the sigmoid) and AP of [N, C] logits
    against [N, C] multi-hot ``present``."""
    if logits.shape != present.shape or logits.dim() != 2:
        raise InputError(
            f"Give logits and multi-hot labels of the same shape [images, labels]; got "
            f"{list(logits.shape)} and {list(present.shape)}."
        )
    scores = torch.sigmoid(logits.detach().double().cpu())
    truth = present.detach().cpu().bool()
    predicted = scores >= threshold
    hits = (predicted & truth).sum(0).double()
    precision = hits / predicted.sum(0).clamp(min=1)
    recall = hits / truth.sum(0).clamp(min=1)
    ap = torch.tensor(
        [average_precision(scores[:, c], truth[:, c]) for c in range(scores.shape[1])],
        dtype=torch.float64,
    )
    return LabelMetrics(precision, recall, ap, truth.sum(0), threshold)


def pick_by_label(logits: torch.Tensor, label: int, threshold: float = 0.5) -> torch.Tensor:
    """Indices of the images whose label ``label`` scores at least ``threshold`` (sigmoid)."""
    if not 0 <= label < logits.shape[1]:
        raise InputError(f"Label {label} is out of range for {logits.shape[1]} labels.")
    return (torch.sigmoid(logits[:, label].detach()) >= threshold).nonzero().flatten()


def label_maps(
    model: nn.Module,
    images: torch.Tensor,
    index: int,
    labels: Sequence[int],
    method: str = "gradcam",
    target: str = "logit",
    present: torch.Tensor | None = None,
    **settings: object,
) -> Attribution:
    """One map per label of image ``index``: row i is the map of ``labels[i]``'s logit (or its
    binary cross-entropy against ``present``, [N, C] multi-hot, with ``target="bce"``)."""
    if not labels:
        raise InputError("Give at least one label to map.")
    picks = [index] * len(labels)
    return attribute(
        model,
        images,
        picks,
        labels=present,
        target=target,
        classes=list(labels),
        method=method,
        **settings,  # type: ignore[arg-type]
    )


def per_label_lines(
    logits: torch.Tensor, labels: torch.Tensor, names: Sequence[str] = (), threshold: float = 0.5
) -> str:
    """mAP and each label's precision, recall and AP as text; ``labels`` one per image (each
    image has its own label present, the others absent) or [N, C] multi-hot."""
    present = labels if labels.dim() == 2 else F.one_hot(labels.long(), logits.shape[1])
    metrics = label_metrics(logits, present, threshold)
    lines = [f"mAP: {metrics.mean_ap:.4f} (sigmoid; precision and recall at p >= {threshold})"]
    for label in range(logits.shape[1]):
        name = names[label] if label < len(names) else str(label)
        lines.append(
            f"  {name:<16} precision {float(metrics.precision[label]):.3f}  recall "
            f"{float(metrics.recall[label]):.3f}  AP {float(metrics.average_precision[label]):.3f}"
            f"  ({int(metrics.positives[label])} present)"
        )
    return "\n".join(lines)


def refuse_sigmoid(output: str, what: str, whose: str = "this model") -> None:
    """Refuse a softmax-only analysis of a sigmoid model (or of ``whose`` outputs: a store's),
    saying why."""
    if output == "sigmoid":
        raise InputError(
            f"{what} compares exclusive classes by their softmax; {whose} scores independent "
            "labels (sigmoid, multi-label), where one image may have several or none. Use "
            "grads/check/report with --target logit or bce and a --class per label."
        )
