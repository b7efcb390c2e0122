"""Choosing which images to explain: rule-based pickers, typed index lists and chart clicks.

These are the "external logic" that decides which outputs deserve a gradient. They
work on an ``InferenceResult`` alone (no model, no images), return plain index lists in a stable
order, and raise ``SelectionError`` with a message a user can act on.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from gradpick.errors import SelectionError
from gradpick.multilabel import pick_by_label
from gradpick.outputs.inference import InferenceResult
from gradpick.picking.feature_space import nearest_neighbours
from gradpick.triage.verdicts import VERDICTS

__all__ = [
    "MERGE_MODES",
    "RULES",
    "confusion_cell",
    "format_indices",
    "indices_from_plotly_selection",
    "merge",
    "parse_indices",
    "pick",
]

RULES = (
    "misclassified",
    "top_k_loss",
    "least_confident",
    "true_class",
    "predicted_class",
    "random",
    "nearest_neighbours",
    "judged",
    "label_threshold",
)
MERGE_MODES = ("replace", "add", "remove")
_TOKEN = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")
"""An index "7" or an inclusive range "10-12"."""


def _unique(indices: Iterable[int]) -> list[int]:
    """The indices in their first-seen order, each once."""
    return list(dict.fromkeys(indices))


def _valid_range(size: int) -> str:
    return f"valid indices are 0 to {size - 1}"


def _whole(name: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise SelectionError(f"{name} must be a whole number of at least {least}; got {value!r}.")
    return int(value)


def _over_threshold(
    result: InferenceResult, class_index: int | None, threshold: float
) -> list[int]:
    """The images whose sigmoid probability for the label is at least ``threshold``."""
    if result.output != "sigmoid":
        raise SelectionError(
            "Picking by a label's probability and a threshold needs a sigmoid (multi-label) "
            "model, whose labels are scored each on its own; this model's classes are "
            "exclusive (softmax): pick by predicted class or least confident instead."
        )
    if not 0.0 <= threshold <= 1.0:
        raise SelectionError(f"The threshold is a probability, 0 to 1; got {threshold}.")
    label = _check_class(result, class_index, "label")
    return [int(index) for index in pick_by_label(result.logits, label, threshold).tolist()]


def _check_class(result: InferenceResult, class_index: int | None, role: str) -> int:
    classes = int(result.logits.shape[1])
    if class_index is None:
        raise SelectionError(f"Choose a {role} class (0 to {classes - 1}) for this rule.")
    if isinstance(class_index, bool) or not isinstance(class_index, (int, np.integer)):
        raise SelectionError(f"The {role} class must be a whole number; got {class_index!r}.")
    if not 0 <= class_index < classes:
        raise SelectionError(
            f"Class {class_index} is out of range: the model has {classes} classes "
            f"(0 to {classes - 1})."
        )
    return int(class_index)


def _labels(result: InferenceResult, purpose: str) -> torch.Tensor:
    if result.labels is None:
        raise SelectionError(
            f"{purpose} needs the true labels, and these images have none (uploaded images); "
            "use a rule that works without labels: least_confident, predicted_class or random."
        )
    return result.labels


def _where(mask: torch.Tensor) -> list[int]:
    return torch.nonzero(mask, as_tuple=False).flatten().tolist()


def _sorted_by(values: torch.Tensor, descending: bool) -> list[int]:
    """Indices ordered by value, ties broken by the lower index (a stable sort on index order)."""
    return torch.sort(values, descending=descending, stable=True).indices.tolist()


def pick(
    result: InferenceResult,
    rule: str,
    k: int = 16,
    class_index: int | None = None,
    seed: int = 0,
    anchor: int | None = None,
    judged: Mapping[int, str] | None = None,
    verdict: str | None = None,
    threshold: float = 0.5,
) -> list[int]:
    """Up to ``k`` indices chosen by ``rule`` (see ``RULES``); empty when none qualify.

    ``misclassified``, ``true_class`` and ``predicted_class`` give the first k qualifying images
    in index order; ``top_k_loss`` the k highest losses, ``least_confident`` the k lowest
    confidences (ties by index); ``random`` k distinct indices from a generator seeded by
    ``seed``, sorted; ``nearest_neighbours`` image ``anchor`` and the k - 1 images closest to it
    by cosine similarity of their penultimate-layer features (``result.features``), closest first;
    ``judged`` the first k images (index order) whose verdict in ``judged`` (index -> verdict,
    ``gradpick.triage.verdicts.VERDICTS``) is ``verdict``, or that have any verdict when it is None;
    ``label_threshold``, for a sigmoid (multi-label) model, the first k images whose own
    probability for label ``class_index`` is at least ``threshold``
    (``gradpick.multilabel.pick_by_label``).
    """
    if rule not in RULES:
        raise SelectionError(f"Unknown rule '{rule}'; use one of {', '.join(RULES)}.")
    k = _whole("k", k, least=1)
    purpose = f"The rule '{rule}'"
    if rule == "misclassified":
        chosen = _where(result.predictions != _labels(result, purpose))
    elif rule == "top_k_loss":
        _labels(result, purpose)
        assert result.losses is not None  # inference computes losses wherever labels exist
        chosen = _sorted_by(result.losses, descending=True)
    elif rule == "least_confident":
        chosen = _sorted_by(result.confidences, descending=False)
    elif rule == "true_class":
        labels = _labels(result, purpose)
        chosen = _where(labels == _check_class(result, class_index, "true"))
    elif rule == "predicted_class":
        chosen = _where(result.predictions == _check_class(result, class_index, "predicted"))
    elif rule == "nearest_neighbours":
        chosen = _neighbours(result, anchor, k)
    elif rule == "judged":
        chosen = _judged(result, judged, verdict)
    elif rule == "label_threshold":
        chosen = _over_threshold(result, class_index, threshold)
    else:
        generator = np.random.default_rng(_whole("seed", seed, least=0))
        chosen = sorted(generator.choice(len(result), size=min(k, len(result)), replace=False))
    return [int(index) for index in chosen[:k]]


def _neighbours(result: InferenceResult, anchor: int | None, k: int) -> list[int]:
    if result.features is None:
        raise SelectionError(
            "The rule 'nearest_neighbours' needs the images' penultimate-layer features, and "
            "these outputs have none: infer with features=True, with a model whose head is an "
            "nn.Linear."
        )
    if anchor is None:
        raise SelectionError("Choose the image whose nearest neighbours to pick.")
    return nearest_neighbours(result.features, _whole("The image", anchor, least=0), k)


def _judged(
    result: InferenceResult, judged: Mapping[int, str] | None, verdict: str | None
) -> list[int]:
    if verdict is not None and verdict not in VERDICTS:
        raise SelectionError(f"{verdict!r} is no verdict; choose one of {', '.join(VERDICTS)}.")
    if not judged:
        raise SelectionError(
            "No image of this batch has a verdict yet: give some in the Triage tab first."
        )
    return sorted(
        index
        for index, said in judged.items()
        if 0 <= index < len(result) and (verdict is None or said == verdict)
    )


def confusion_cell(result: InferenceResult, true_class: int, predicted_class: int) -> list[int]:
    """All indices whose label is ``true_class`` and prediction ``predicted_class``."""
    labels = _labels(result, "A confusion-matrix cell")
    true_class = _check_class(result, true_class, "true")
    predicted_class = _check_class(result, predicted_class, "predicted")
    return _where((labels == true_class) & (result.predictions == predicted_class))


def parse_indices(text: str, size: int, holder: str = "the batch") -> list[int]:
    """Indices typed as "3, 7, 10-12" (commas or spaces; a-b inclusive) in the order given.

    Anything else, an index outside 0..size-1 (``holder`` holds ``size`` images), an index
    given twice, or nothing at all is a ``SelectionError`` naming the bad token and the valid
    range: a repeated index is refused rather than dropped, since it is more likely a typo than
    a wish for one gradient.
    """
    if size < 1:
        raise SelectionError(
            f"{holder.capitalize()} holds no images, so there is nothing to select."
        )
    tokens = [token for token in re.split(r"[\s,;]+", re.sub(r"\s*-\s*", "-", text)) if token]
    if not tokens:
        raise SelectionError(f"No indices given; type e.g. '3, 7, 10-12' ({_valid_range(size)}).")
    indices: list[int] = []
    for token in tokens:
        bounds = _TOKEN.match(token)
        if bounds is None:
            raise SelectionError(
                f"'{token}' is not an index or a range like 10-12 ({_valid_range(size)})."
            )
        first = int(bounds[1])
        last = int(bounds[2]) if bounds[2] else first
        if first > last:
            raise SelectionError(f"The range '{token}' runs backwards; write it as {last}-{first}.")
        if last >= size:
            raise SelectionError(
                f"'{token}' is out of range: {holder} holds {size} images ({_valid_range(size)})."
            )
        indices.extend(range(first, last + 1))
    repeated = next((index for index, count in Counter(indices).items() if count > 1), None)
    if repeated is not None:
        raise SelectionError(
            f"Index {repeated} is given more than once in '{text.strip()}'; give each index once."
        )
    return indices


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def format_indices(indices: Sequence[int]) -> str:
    """The inverse of ``parse_indices``: consecutive runs become ranges, as in "3, 7, 10-12"."""
    runs: list[list[int]] = []
    for index in (int(value) for value in indices):
        if runs and index == runs[-1][-1] + 1:
            runs[-1][-1] = index
        else:
            runs.append([index, index])
    return ", ".join(_span(first, last) for first, last in runs)


def merge(current: Sequence[int], new: Sequence[int], mode: str) -> list[int]:
    """The selection after ``mode``: "replace" with new, "add" new ones after, "remove" them."""
    if mode == "replace":
        return _unique(int(index) for index in new)
    if mode == "add":
        return _unique(int(index) for index in (*current, *new))
    if mode == "remove":
        dropped = {int(index) for index in new}
        return _unique(int(index) for index in current if int(index) not in dropped)
    raise SelectionError(f"Unknown merge mode '{mode}'; use one of {', '.join(MERGE_MODES)}.")


def _point_index(point: Any) -> int | None:
    """The batch index a plotly point carries in its customdata (first element of a list)."""
    if not isinstance(point, Mapping):
        return None
    data = point.get("customdata")
    if isinstance(data, (list, tuple)):
        data = data[0] if data else None
    if isinstance(data, bool) or not isinstance(data, (int, float, np.number, str)):
        return None
    try:
        value = float(data)
    except ValueError:
        return None
    return int(value) if value.is_integer() and value >= 0 else None


def indices_from_plotly_selection(event: Mapping[str, Any] | None) -> list[int]:
    """Batch indices of the points a click, box or lasso selected in a Streamlit plotly chart.

    ``event`` is what ``st.plotly_chart(..., on_select="rerun")`` returns; points without an
    index in their customdata (e.g. a heatmap cell) are skipped. Order kept, duplicates dropped.
    """
    selection = event.get("selection") if isinstance(event, Mapping) else None
    points = selection.get("points") if isinstance(selection, Mapping) else None
    if not isinstance(points, (list, tuple)):
        return []
    found = (_point_index(point) for point in points)
    return _unique(index for index in found if index is not None)
