"""Two models on the same images: which images flipped, and whether the reasoning changed.

After fine-tuning, pruning or retraining the question is not only "did accuracy move" but
"which images flipped, and does the new model still look at the same pixels?". The outputs of
both models come from two stores of one source (``sides_of_stores``, refused when the stores'
sources differ) or from two models reading one source, each at its own input spec
(``sides_of_models``); ``pair`` lines them up by position and class, and the rest follows
from the pairing without touching a model:

* ``flips``: both right, only the first right, only the second right, both wrong (without
  labels: agree / disagree);
* ``per_class``: each model's accuracy per true class and the difference, and
  ``confusion_difference`` (the second's confusion matrix minus the first's);
* ``drift_table``: every image with both predictions and how far its outputs (and, for the
  mapped picks, its maps) moved, ranked so that "right for a different reason" comes first.

``compare_maps`` maps the picks with both models for the same class (the true label when
known, else the first model's prediction) by any registered attribution method and scores
them with the trust checks' Spearman and SSIM, at the smaller of the two input sizes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from gradpick.attribution import LAYER_METHODS, build
from gradpick.data import ImageSource
from gradpick.errors import InputError
from gradpick.gradients.request import GradientRequest
from gradpick.models.zoo import LoadedModel
from gradpick.multilabel import refuse_sigmoid
from gradpick.outputs.inference import as_model_input, infer_chunks, labels_fit, output_names
from gradpick.outputs.store_format import OpenedStore, list_matrix, store_output
from gradpick.show.notebook import map_comparison_html, pairing_html
from gradpick.trust.engine import saliency
from gradpick.trust.metrics import spearman, ssim

__all__ = [
    "AGREEMENT",
    "accuracies",
    "model_summaries",
    "most_drifted",
    "OUTCOMES",
    "MapComparison",
    "Pairing",
    "STORE_COLUMNS",
    "Side",
    "compare_maps",
    "confusion_difference",
    "drift_table",
    "flip_groups",
    "flips",
    "pair",
    "per_class",
    "ranked",
    "sides_of_models",
    "sides_of_stores",
    "write_drift",
]

STORE_COLUMNS = ("name", "label", "logits")
"""What a comparison reads of a store (``open_store(path, STORE_COLUMNS)``): not its
embeddings, 328 MB of 1,280,000 rows' that it never uses."""
OUTCOMES = ("both_right", "first_only_right", "second_only_right", "both_wrong")
"""The flip cells when labels are known, in the order of the flip matrix (first right or
wrong by row, second right or wrong by column)."""
AGREEMENT = ("agree", "disagree")
"""The cells without labels: whether the two predictions are the same class."""
OTHER = -1
"""A second model's prediction of a class the first has no output for."""


@dataclass(frozen=True)
class Side:
    """One model's outputs on the shared images."""

    positions: np.ndarray
    """Source positions [N], int64, ascending."""
    names: tuple[str, ...]
    labels: np.ndarray | None
    """True classes [N] in ``class_names``; None when the source has none for this model."""
    logits: np.ndarray
    """[N, C] float32."""
    class_names: tuple[str, ...]
    """Names of the model's C outputs."""
    model: dict[str, Any]
    """The model's identity (``LoadedModel.identity()``, as stores and reports carry it)."""
    source: dict[str, Any]
    """Where the images came from, with the source's ``fingerprint``."""


def _store_side(opened: OpenedStore) -> Side:
    table, metadata = opened.table, opened.metadata
    logits = list_matrix(table["logits"])
    labels = table["label"]
    names = tuple(metadata.get("class_names") or ())
    return Side(
        positions=table["position"].to_numpy().astype(np.int64),
        names=tuple(table["name"].to_pylist()),
        labels=None if labels.null_count else labels.to_numpy().astype(np.int64),
        logits=logits,
        class_names=output_names(logits.shape[1], names if len(names) == logits.shape[1] else ()),
        model=dict(metadata.get("model") or {}),
        source=dict(metadata.get("source") or {}),
    )


def sides_of_stores(first: OpenedStore, second: OpenedStore) -> tuple[Side, Side]:
    """Both stores' outputs, refused unless they were written from the same images by softmax
    models (a sigmoid model's labels are not exclusive classes)."""
    for opened in (first, second):
        whose = f"the store {opened.path} holds a sigmoid model's outputs: it"
        refuse_sigmoid(store_output(opened.metadata), "Compare", whose)
    a, b = _store_side(first), _store_side(second)
    fingerprints = (a.source.get("fingerprint"), b.source.get("fingerprint"))
    if None in fingerprints or fingerprints[0] != fingerprints[1]:
        raise InputError(
            f"{first.path} and {second.path} were written from different images "
            f"({a.source.get('description', '?')}, fingerprint {str(fingerprints[0])[:12]}; "
            f"{b.source.get('description', '?')}, fingerprint {str(fingerprints[1])[:12]}): "
            "compare stores of the same source, or infer both models on one folder."
        )
    return a, b


def _model_side(
    loaded: LoadedModel, source: ImageSource, positions: Sequence[int], batch_size: int
) -> Side:
    at_spec = source.at_spec(loaded.spec)
    kept: list[int] = []
    chunks: list[torch.Tensor] = []
    for chunk in infer_chunks(loaded.module, at_spec, positions, batch_size):
        kept.extend(chunk.positions)
        chunks.append(chunk.logits)
    if not kept:
        raise InputError(f"None of the images of {source.description} could be read.")
    labels = source.labels()
    fits = labels is not None and labels_fit(source.class_names, loaded.classes)
    own = tuple(loaded.spec.class_names) if len(loaded.spec.class_names) == loaded.classes else ()
    return Side(
        positions=np.asarray(kept, dtype=np.int64),
        names=tuple(source.names(kept)),
        labels=labels[torch.as_tensor(kept)].numpy().astype(np.int64)
        if fits and labels is not None
        else None,
        logits=torch.cat(chunks).numpy(),
        class_names=tuple(source.class_names) if fits else output_names(loaded.classes, own),
        model=loaded.identity(),
        source={**source.origin(), "count": len(source), "fingerprint": source.fingerprint()},
    )


def sides_of_models(
    first: LoadedModel,
    second: LoadedModel,
    source: ImageSource,
    positions: Sequence[int] | None = None,
    batch_size: int = 256,
) -> tuple[Side, Side]:
    """Both models' outputs for ``positions`` of ``source`` (default all), each reading the
    images at its own input spec."""
    wanted = list(range(len(source))) if positions is None else list(positions)
    return (
        _model_side(first, source, wanted, batch_size),
        _model_side(second, source, wanted, batch_size),
    )


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class Pairing:
    """Two models' outputs on the same images, in the first model's classes."""

    positions: np.ndarray
    names: tuple[str, ...]
    labels: np.ndarray | None
    first: np.ndarray
    """The first model's predictions [N]."""
    second: np.ndarray
    """The second model's predictions [N] in the first's classes (``OTHER``: none of them)."""
    probabilities: tuple[np.ndarray, np.ndarray]
    """Each model's probability of each image's reference class [N]."""
    class_names: tuple[str, ...]
    second_classes: np.ndarray
    """The second model's output index of each of the first's classes [C]."""
    models: tuple[dict[str, Any], dict[str, Any]]
    source: dict[str, Any]

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def references(self) -> np.ndarray:
        """The class each image is compared on: its label when known, else the first model's
        prediction."""
        return self.labels if self.labels is not None else self.first

    @property
    def reference_kind(self) -> str:
        return "true label" if self.labels is not None else "first model's prediction"

    def __repr__(self) -> str:
        """One line, not the arrays: which model is first, each one's accuracy, the flips."""
        models = " vs ".join(
            f"{model['name']}"
            + ("" if model["accuracy"] is None else f" ({model['accuracy']:.1%})")
            for model in model_summaries(self)
        )
        counts = ", ".join(
            f"{name.replace('_', ' ')} {count:,}" for name, count in flips(self).items()
        )
        return f"Pairing({len(self):,} images: {models}; {counts})"

    def _repr_html_(self) -> str:
        """Jupyter shows both models, the flip matrix and the per-class table
        (``gradpick.show.notebook``)."""
        return pairing_html(len(self), model_summaries(self), flips(self), per_class(self))


def _class_map(
    first: Side, second: Side, class_names: tuple[Sequence[str], Sequence[str]] | None
) -> tuple[tuple[str, ...], np.ndarray]:
    """The first's class names and, for each, the second's output index."""
    widths = (first.logits.shape[1], second.logits.shape[1])
    if class_names is None:
        if widths[0] != widths[1]:
            raise InputError(
                f"The first model has {widths[0]} outputs and the second {widths[1]}: give both "
                "models' class names (--class-names FIRST.txt SECOND.txt) to compare them by name."
            )
        return first.class_names, np.arange(widths[0])
    names = tuple(tuple(part) for part in class_names)
    for which, part, width in zip(("first", "second"), names, widths, strict=True):
        if len(part) != width:
            raise InputError(
                f"{len(part)} class names for the {which} model, which has {width} outputs."
            )
    missing = [name for name in names[0] if name not in names[1]]
    if missing:
        raise InputError(
            f"The class names do not match: the second model has no class {missing[0]!r} "
            f"(and {len(missing) - 1} more of the first's)."
        )
    return names[0], np.asarray([names[1].index(name) for name in names[0]], dtype=np.int64)


def _shared_rows(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the positions both hold, in the first's order (a batch's own order)."""
    if not len(second):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.argsort(second, kind="stable")
    found = order[np.minimum(np.searchsorted(second, first, sorter=order), len(second) - 1)]
    shared = second[found] == first
    return np.flatnonzero(shared), found[shared]


def pair(
    first: Side, second: Side, class_names: tuple[Sequence[str], Sequence[str]] | None = None
) -> Pairing:
    """The two sides lined up on the positions both hold (in the first's order), in the first
    model's classes.

    Models with different numbers of outputs are compared by name, only when ``class_names``
    (the first's, the second's) are given and every one of the first's is the second's too.
    """
    names, second_classes = _class_map(first, second, class_names)
    rows_a, rows_b = _shared_rows(first.positions, second.positions)
    positions = first.positions[rows_a]
    if not len(positions):
        raise InputError("The two models' outputs share no image.")
    back = np.full(second.logits.shape[1], OTHER, dtype=np.int64)
    back[second_classes] = np.arange(len(second_classes))
    first_predictions = first.logits[rows_a].argmax(axis=1)
    second_predictions = back[second.logits[rows_b].argmax(axis=1)]
    labels = None if first.labels is None else first.labels[rows_a]
    if labels is None and second.labels is not None:
        labels = back[second.labels[rows_b]]
    references = labels if labels is not None else first_predictions
    chosen = np.arange(len(positions))
    probability_a = _softmax(first.logits[rows_a])[chosen, references]
    probability_b = _softmax(second.logits[rows_b])[chosen, second_classes[references]]
    return Pairing(
        positions=positions,
        names=tuple(first.names[i] for i in rows_a),
        labels=labels,
        first=first_predictions,
        second=second_predictions,
        probabilities=(probability_a, probability_b),
        class_names=names,
        second_classes=second_classes,
        models=(first.model, second.model),
        source=first.source,
    )


def _cells(pairing: Pairing) -> tuple[str, ...]:
    return AGREEMENT if pairing.labels is None else OUTCOMES


def _cell_index(pairing: Pairing) -> np.ndarray:
    """Each image's flip cell, an index into ``_cells(pairing)``."""
    if pairing.labels is None:
        return (pairing.first != pairing.second).astype(np.int64)
    first_right = pairing.first == pairing.labels
    second_right = pairing.second == pairing.labels
    return np.select([first_right & second_right, first_right, second_right], [0, 1, 2], default=3)


def flip_groups(pairing: Pairing) -> dict[str, np.ndarray]:
    """The row indices of each flip cell (``OUTCOMES``, or ``AGREEMENT`` without labels)."""
    cell = _cell_index(pairing)
    return {name: np.flatnonzero(cell == index) for index, name in enumerate(_cells(pairing))}


def accuracies(pairing: Pairing) -> tuple[float | None, float | None]:
    """Each model's overall accuracy on the paired images (a second-model prediction of a class
    the first has no output for counts as wrong); None for both without labels."""
    if pairing.labels is None or len(pairing) == 0:
        return None, None
    first = float(np.mean(pairing.first == pairing.labels))
    return first, float(np.mean(pairing.second == pairing.labels))


def model_summaries(pairing: Pairing) -> list[dict[str, Any]]:
    """Which model is first and which second: each one's ``name``, overall ``accuracy`` (None
    without labels) and full ``identity``, in that order."""
    return [
        {"name": model.get("name", "?"), "accuracy": accuracy, "identity": model}
        for model, accuracy in zip(pairing.models, accuracies(pairing), strict=True)
    ]


def flips(pairing: Pairing) -> dict[str, int]:
    """How many images fall in each flip cell."""
    return {name: len(rows) for name, rows in flip_groups(pairing).items()}


def per_class(pairing: Pairing) -> list[dict[str, Any]]:
    """One row per class: with labels each model's accuracy on its images and the difference
    (second minus first); without, how often each model predicts it."""
    classes = len(pairing.class_names)
    rows = []
    if pairing.labels is None:
        first = np.bincount(pairing.first, minlength=classes)
        second = np.bincount(pairing.second[pairing.second >= 0], minlength=classes)
        for index, name in enumerate(pairing.class_names):
            rows.append(
                {
                    "class": name,
                    "first_predicted": int(first[index]),
                    "second_predicted": int(second[index]),
                    "difference": int(second[index] - first[index]),
                }
            )
        return rows
    count = np.bincount(pairing.labels, minlength=classes)
    right = [
        np.bincount(pairing.labels[predictions == pairing.labels], minlength=classes)
        for predictions in (pairing.first, pairing.second)
    ]
    for index, name in enumerate(pairing.class_names):
        total = int(count[index])
        first_accuracy, second_accuracy = (
            float(r[index] / total) if total else float("nan") for r in right
        )
        rows.append(
            {
                "class": name,
                "count": total,
                "first_accuracy": first_accuracy,
                "second_accuracy": second_accuracy,
                "difference": second_accuracy - first_accuracy,
            }
        )
    return rows


def confusion_difference(pairing: Pairing) -> np.ndarray | None:
    """The second model's confusion matrix minus the first's [C, C] (rows: true class,
    columns: predicted; a second prediction of a class the first lacks is in no column);
    None without labels."""
    if pairing.labels is None:
        return None
    classes = len(pairing.class_names)

    def confusion(predictions: np.ndarray) -> np.ndarray:
        assert pairing.labels is not None
        kept = predictions >= 0
        cells = pairing.labels[kept] * classes + predictions[kept]
        return np.bincount(cells, minlength=classes * classes).reshape(classes, classes)

    return confusion(pairing.second) - confusion(pairing.first)


@dataclass(frozen=True)
class MapComparison:
    """Both models' maps of the picks for the same class, and how alike they are."""

    rows: tuple[int, ...]
    """Row indices into the pairing."""
    classes: tuple[int, ...]
    """The class each pick is mapped for, in the first model's classes."""
    method: str
    size: tuple[int, int]
    """The compared size: the smaller of the two input sizes."""
    maps: tuple[torch.Tensor, torch.Tensor]
    """|map| [k, H, W] of each model at ``size``, each divided by its own peak."""
    spearman: torch.Tensor
    """Spearman of |map| per pick [k]."""
    ssim: torch.Tensor
    """SSIM of the peak-normalised |map| per pick [k]."""
    class_names: tuple[str, ...] = ()
    """The first model's class names, for the displays."""
    layers: tuple[str | None, str | None] = (None, None)
    """Each model's layer for a layer method (None: its automatic one)."""
    names: tuple[str, str] | tuple[str, ...] = ()
    """The two models' names, first then second."""

    def __repr__(self) -> str:
        """One line, not the maps: a notebook cell ending in a comparison stays short."""
        return (
            f"MapComparison({self.method} maps of {len(self.rows)} picks at "
            f"{self.size[0]}x{self.size[1]}: mean Spearman {float(self.spearman.mean()):.3f}, "
            f"mean SSIM {float(self.ssim.mean()):.3f})"
        )

    def _repr_html_(self) -> str:
        """Jupyter shows both models' maps side by side (``gradpick.show.notebook``)."""
        return map_comparison_html(self, self.method in LAYER_METHODS)

    def records(self, pairing: Pairing) -> list[dict[str, Any]]:
        """One JSON row per pick."""
        return [
            {
                "index": row,
                "position": int(pairing.positions[row]),
                "name": pairing.names[row],
                "label": None if pairing.labels is None else int(pairing.labels[row]),
                "first_prediction": int(pairing.first[row]),
                "second_prediction": int(pairing.second[row]),
                "class": int(klass),
                "class_name": pairing.class_names[klass],
                "spearman": float(rho),
                "ssim": float(similarity),
            }
            for row, klass, rho, similarity in zip(
                self.rows, self.classes, self.spearman.tolist(), self.ssim.tolist(), strict=True
            )
        ]


def _maps_of(
    loaded: LoadedModel,
    source: ImageSource,
    positions: Sequence[int],
    classes: Sequence[int],
    method: str,
    settings: Mapping[str, Any],
    layer: str | None,
) -> torch.Tensor:
    images = as_model_input(source.at_spec(loaded.spec).read(positions))
    request = GradientRequest.build(
        loaded.module, images, list(range(len(positions))), target="logit", classes=list(classes)
    )
    return saliency(build(method, settings, layer).attribute(request).maps).cpu().double()


def _at(maps: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    if tuple(maps.shape[-2:]) == size:
        return maps
    return F.interpolate(maps.unsqueeze(1), size=size, mode="bilinear", align_corners=False)[:, 0]


def _peak_normalised(maps: torch.Tensor) -> torch.Tensor:
    peak = maps.flatten(1).amax(dim=1).clamp_min(torch.finfo(maps.dtype).tiny)
    return maps / peak.view(-1, 1, 1)


def compare_maps(
    first: LoadedModel,
    second: LoadedModel,
    source: ImageSource,
    pairing: Pairing,
    rows: Sequence[int],
    method: str = "gradient",
    settings: Mapping[str, Any] | None = None,
    layers: tuple[str | None, str | None] = (None, None),
) -> MapComparison:
    """Both models' maps of the pairing's ``rows`` for each row's reference class.

    Each model reads the images at its own spec; the larger maps are resized (bilinear,
    ``align_corners=False``) to the smaller input size before the comparison. ``layers``: each
    model's layer for a layer method (None: its automatic layer).
    """
    rows = [int(row) for row in rows]
    if not rows:
        raise InputError("Pick at least one image to compare the two models' maps.")
    if min(rows) < 0 or max(rows) >= len(pairing):
        raise InputError(f"Indices must be in 0..{len(pairing) - 1}; got {max(rows)}.")
    positions = [int(pairing.positions[row]) for row in rows]
    classes = [int(pairing.references[row]) for row in rows]
    chosen = dict(settings or {})
    a = _maps_of(first, source, positions, classes, method, chosen, layers[0])
    b = _maps_of(
        second,
        source,
        positions,
        [int(pairing.second_classes[c]) for c in classes],
        method,
        chosen,
        layers[1],
    )
    sizes = [(int(m.shape[-2]), int(m.shape[-1])) for m in (a, b)]
    size = min(sizes, key=lambda hw: hw[0] * hw[1])
    a, b = _peak_normalised(_at(a, size)), _peak_normalised(_at(b, size))
    return MapComparison(
        rows=tuple(rows),
        classes=tuple(classes),
        method=method,
        size=(int(size[0]), int(size[1])),
        maps=(a, b),
        spearman=spearman(a, b),
        ssim=ssim(a, b),
        class_names=tuple(pairing.class_names),
        layers=layers,
        names=tuple(model.get("name", "?") for model in pairing.models),
    )


def drift_table(pairing: Pairing, maps: MapComparison | None = None) -> Any:
    """Every image as one row of a pyarrow table, ranked: first the images both models
    predict alike ("stayed"), then those that flipped, each by how far the maps moved (1 -
    Spearman, for the mapped picks) and then by how far the reference class's probability
    moved. ``rank`` counts within each group from 1."""
    import pyarrow as pa

    count = len(pairing)
    map_change = np.full(count, np.nan)
    spearmans, ssims = np.full(count, np.nan), np.full(count, np.nan)
    if maps is not None:
        rows = np.asarray(maps.rows, dtype=np.int64)
        spearmans[rows] = maps.spearman.numpy()
        ssims[rows] = maps.ssim.numpy()
        map_change[rows] = 1 - spearmans[rows]
    stayed = pairing.first == pairing.second
    output_change = np.abs(pairing.probabilities[1] - pairing.probabilities[0])
    order, rank = ranked(stayed, map_change, output_change)
    outcome = np.asarray(_cells(pairing))[_cell_index(pairing)]
    columns = {
        "rank": rank[order],
        "kind": np.where(stayed, "stayed", "flipped")[order],
        "position": pairing.positions[order],
        "name": np.asarray(pairing.names, dtype=object)[order],
        "label": None if pairing.labels is None else pairing.labels[order],
        "first_prediction": pairing.first[order],
        "second_prediction": pairing.second[order],
        "outcome": outcome[order],
        "first_probability": pairing.probabilities[0][order].astype(np.float32),
        "second_probability": pairing.probabilities[1][order].astype(np.float32),
        "output_change": output_change[order].astype(np.float32),
        "map_change": map_change[order],
        "spearman": spearmans[order],
        "ssim": ssims[order],
    }
    if columns["label"] is None:
        columns["label"] = pa.nulls(count, type=pa.int64())
    return pa.table(columns)


def most_drifted(pairing: Pairing, count: int) -> list[int]:
    """The rows of the ``count`` images both models predict alike whose reference probability
    moved most: ``drift_table``'s first "stayed" rows without maps, found without building the
    table (a table of 1,280,000 rows, turned into Python lists, took 2.5 s a page run)."""
    stayed = pairing.first == pairing.second
    output_change = np.abs(pairing.probabilities[1] - pairing.probabilities[0])
    order, _ = ranked(stayed, np.full(len(pairing), np.nan), output_change)
    return [int(row) for row in order[:count] if stayed[row]]


def ranked(
    stayed: np.ndarray, map_change: np.ndarray, output_change: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The drift order (stayed first, then flipped; within each, the largest map change first,
    unmapped images after the mapped, then the largest output change) and each row's rank in
    its group, from 1."""
    mapped = ~np.isnan(map_change)
    order = np.lexsort((-output_change, -np.nan_to_num(map_change, nan=-np.inf), ~mapped, ~stayed))
    rank = np.empty(len(order), dtype=np.int64)
    for group in (stayed, ~stayed):
        members = order[group[order]]
        rank[members] = np.arange(1, len(members) + 1)
    return order, rank


def write_drift(table: Any, path: str | Path) -> Path:
    """The drift table as one Parquet file."""
    import pyarrow.parquet as pq

    path = Path(path)
    pq.write_table(table, path)
    return path
