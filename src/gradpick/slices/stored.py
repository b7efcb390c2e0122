"""Slices of a store: map the rows that matter, cluster, verify, and keep the result beside it.

``find_slices`` reads a store written with embeddings (``gradpick infer --embeddings``),
maps every error and a seeded sample of ``per_class`` correct rows per predicted class (each
standing for its class's other correct rows in the error rates), describes and clusters them
(``gradpick.slices.discover``) and tests each slice by intervention
(``gradpick.slices.verify``) on up to ``tested`` of its errors: the evidence window for
every slice, and the colour change too for a slice whose errors are clearly greyer or more
colourful than the correctly called images of their label (at least ``COLOUR_NOTABLE``
standard deviations of image saturation apart). The model is the store's own
(its name and weights as recorded), unless one is given; a store another model wrote is refused.

The result is kept beside the store like the triage verdicts (``outputs/`` keeps
``outputs.slices.json``), with the store's model identity and source fingerprint, so
``gradpick triage`` reads it only while it still describes that store.

Example::

    opened = open_store("outputs/")
    found = find_slices(opened)
    found.to_json()["slices"][0]["verified"]
    found.write_beside()
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from gradpick.errors import DataError, InputError
from gradpick.models.zoo import LoadedModel, load_model
from gradpick.outputs import sidecar
from gradpick.outputs.store_format import OpenedStore, check_store
from gradpick.outputs.stores import stored_source
from gradpick.show.notebook import found_slices_html
from gradpick.slices.discover import (
    CLUSTERS,
    Slice,
    cluster,
    clustering_space,
    summarise,
)
from gradpick.slices.features import CHUNK_ROWS, DESCRIPTORS, METHOD, descriptors, evidence_maps
from gradpick.slices.verify import (
    SIGNIFICANCE,
    Effect,
    colour_interventions,
    interventions,
    judged,
)

__all__ = [
    "COLOUR_NOTABLE",
    "MAP_SIDE",
    "PER_CLASS",
    "SUFFIX",
    "TESTED",
    "Found",
    "colour_rows",
    "find_slices",
    "read_beside",
    "store_model",
]

PER_CLASS = 60
"""Correct rows mapped per predicted class, for contrast."""
TESTED = 64
"""Errors of a slice tested by intervention (a seeded sample of larger slices)."""
MAP_SIDE = 32
"""Mean maps are kept at most this many pixels on a side (averaged down)."""
SUFFIX = ".slices.json"
COLOUR_NOTABLE = 1.0
"""Standard deviations of image saturation (over the mapped rows) between a slice's errors and
the correctly called images of their label from which the colour is tested too."""


def _matrix(column: Any) -> np.ndarray:
    flat = column.combine_chunks()
    width = len(flat[0]) if len(flat) else 0
    values = flat.flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(values.reshape(len(flat), width), dtype=np.float32)


def store_model(opened: OpenedStore, device: str | None = None) -> LoadedModel:
    """The model that wrote the store, by its recorded name and weights file (the shipped
    weights when the file is not there: the identity check then says whether they match)."""
    model = opened.metadata.get("model") or {}
    name, weights = model.get("name"), model.get("weights")
    if not name:
        raise DataError(f"{opened.path}: the store does not name its model; give one with --model.")
    found = weights if weights and Path(weights).is_file() else None
    loaded = load_model(name, found, device)
    if loaded.store_identity != model.get("identity"):
        raise DataError(
            f"{opened.path}: written by {name} with weights {weights}, which cannot be found "
            "again; give the model with --model and --weights."
        )
    return loaded


@dataclass(frozen=True)
class Found:
    """The slices of one store, and the rows they were found among."""

    store: Path
    positions: np.ndarray
    """[N] store positions of the labelled rows."""
    names: tuple[str, ...]
    labels: np.ndarray
    predictions: np.ndarray
    mapped: np.ndarray
    """[m] indices (into the N rows) of the mapped rows, the errors and the sample."""
    table: np.ndarray
    """[m, len(DESCRIPTORS)] descriptors of the mapped rows."""
    maps: torch.Tensor
    """[m, H, W] float16 maps of the mapped rows' predicted classes."""
    slices: tuple[Slice, ...]
    effects: tuple[Effect | None, ...]
    """Per slice, the evidence removal's effect (None for a slice without errors)."""
    colour_effects: tuple[Effect | None, ...]
    """Per slice, the colour change's effect (None where its colour is not notable)."""
    class_names: tuple[str, ...]
    method: str
    metadata: dict[str, Any]

    def slice_of_rows(self) -> np.ndarray:
        """[N] each labelled row's slice rank, 0 for rows not mapped."""
        ranks = np.zeros(len(self.positions), dtype=np.int64)
        for found in self.slices:
            ranks[self.mapped[found.members]] = found.rank
        return ranks

    def frame(self) -> Any:
        """A pandas DataFrame, one row per labelled image, with its slice (null when the row
        was not mapped) and its descriptors."""
        import pandas as pd

        ranks = self.slice_of_rows()
        frame = pd.DataFrame(
            {
                "position": self.positions,
                "name": list(self.names),
                "label": self.labels,
                "prediction": self.predictions,
                "error": self.labels != self.predictions,
                "slice": pd.array([int(r) if r > 0 else None for r in ranks], dtype="Int64"),
            }
        )
        verified = {s.rank for s in self.slices if self.verified(s.rank)}
        frame["verified"] = frame["slice"].isin(verified).astype(bool)
        for number, column in enumerate(DESCRIPTORS):
            values = np.full(len(self.positions), np.nan)
            values[self.mapped] = self.table[:, number]
            frame[column] = values
        return frame

    def verified(self, rank: int) -> bool:
        """Whether slice ``rank`` (from 1) verified by either intervention."""
        tests = (self.effects[rank - 1], self.colour_effects[rank - 1])
        return any(effect is not None and effect.verified for effect in tests)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: the run's settings and each slice ranked from 1."""
        rows = []
        for found, effect, colour in zip(
            self.slices, self.effects, self.colour_effects, strict=True
        ):
            members = self.mapped[found.members]
            rows.append(
                {
                    "rank": found.rank,
                    "size": found.size,
                    "errors": found.errors,
                    "error_rate": round(found.error_rate, 6),
                    "prediction": found.prediction,
                    "positions": [int(p) for p in self.positions[members]],
                    "names": [self.names[i] for i in members],
                    "confusions": [
                        {
                            "label": given,
                            "prediction": called,
                            "label_name": self._name(given),
                            "prediction_name": self._name(called),
                            "count": count,
                        }
                        for given, called, count in found.confusions
                    ],
                    "description": found.description,
                    "typical": [int(p) for p in self.positions[self.mapped[found.typical]]],
                    "mean_map": _shrunk(found.mean_map),
                    "effect": None if effect is None else effect.to_json(),
                    "colour_effect": None if colour is None else colour.to_json(),
                    "verified": self.verified(found.rank),
                }
            )
        return {**self.metadata, "slices": rows}

    def _name(self, index: int) -> str:
        names = self.class_names
        return names[index] if 0 <= index < len(names) else f"class {index}"

    def __repr__(self) -> str:
        """One line, not the arrays: a notebook cell ending in slices stays short."""
        verified = sum(self.verified(s.rank) for s in self.slices)
        errors = int((self.labels != self.predictions).sum())
        first = (
            ""
            if not self.slices
            else f"; slice 1: {self.slices[0].size:,} images, error rate "
            f"{self.slices[0].error_rate:.0%}"
        )
        return (
            f"Found({len(self.slices)} slices of {errors:,} errors among "
            f"{len(self.positions):,} images, {verified} verified{first})"
        )

    def _repr_html_(self) -> str:
        """Jupyter shows the ranked slices and their cards (``gradpick.show.notebook``)."""
        return found_slices_html(self.to_json(), self.store.name)

    def write_beside(self) -> Path:
        """The JSON beside the store (``outputs.slices.json``), written atomically."""
        path = sidecar.sibling(self.store, SUFFIX)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps(self.to_json()) + "\n", encoding="utf-8")
        partial.replace(path)
        return path


def _shrunk(mean_map: np.ndarray) -> list[list[float]]:
    tensor = torch.as_tensor(mean_map, dtype=torch.float64)[None, None]
    height, width = mean_map.shape
    if max(height, width) > MAP_SIDE:
        tensor = F.adaptive_avg_pool2d(tensor, (min(height, MAP_SIDE), min(width, MAP_SIDE)))
    return [[round(float(v), 6) for v in row] for row in tensor[0, 0]]


def _sample(
    labels: np.ndarray, predictions: np.ndarray, per_class: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Rows mapped (every error, ``per_class`` correct rows per predicted class) and the number
    of rows each stands for."""
    generator = np.random.default_rng(seed)
    errors = labels != predictions
    chosen = [np.flatnonzero(errors)]
    weights = [np.ones(int(errors.sum()))]
    for called in np.unique(predictions):
        right = np.flatnonzero(~errors & (predictions == called))
        if not len(right):
            continue
        taken = np.sort(generator.choice(right, min(per_class, len(right)), replace=False))
        chosen.append(taken)
        weights.append(np.full(len(taken), len(right) / len(taken)))
    rows = np.concatenate(chosen)
    order = np.argsort(rows, kind="stable")
    return rows[order], np.concatenate(weights)[order]


def find_slices(
    opened: OpenedStore,
    model: LoadedModel | None = None,
    clusters: int = CLUSTERS,
    per_class: int = PER_CLASS,
    method: str = METHOD,
    layer: str | None = None,
    tested: int = TESTED,
    verify: bool = True,
    seed: int = 0,
    chunk_rows: int = CHUNK_ROWS,
) -> Found:
    """The ranked slices of ``opened`` (see the module's docstring)."""
    table = opened.table
    if "embedding" not in table.column_names:
        raise InputError(
            f"{opened.path}: the store has no embeddings; slices need them. Write it with "
            "gradpick infer --embeddings (e.g. gradpick infer --model resnet20 --data FOLDER "
            "--out DIR --embeddings)."
        )
    if table.column("label").null_count == len(table):
        raise InputError(
            f"{opened.path}: these images have no labels, so there are no errors to group; "
            "store a labelled folder (one subfolder per class)."
        )
    loaded = store_model(opened) if model is None else model
    check_store(opened, loaded.store_identity)
    labelled = np.flatnonzero(~np.asarray(table.column("label").is_null()))
    table = table.take(labelled)
    logits = _matrix(table.column("logits"))
    labels = np.asarray(table.column("label").to_numpy(), dtype=np.int64)
    predictions = logits.argmax(axis=1)
    positions = np.asarray(table.column("position").to_numpy(), dtype=np.int64)
    names = tuple(table.column("name").to_pylist())
    class_names = tuple(opened.metadata.get("class_names") or ())
    mapped, weights = _sample(labels, predictions, per_class, seed)
    source = stored_source(opened)
    described_chunks, maps_chunks = [], []
    for start in range(0, len(mapped), chunk_rows):
        rows = mapped[start : start + chunk_rows]
        images = source.read(positions[rows].tolist()).float() / 255.0
        found_maps = evidence_maps(
            loaded.module,
            images,
            torch.as_tensor(predictions[rows]),
            method,
            layer=layer,
            chunk_rows=chunk_rows,
        )
        described_chunks.append(descriptors(images, found_maps))
        maps_chunks.append(found_maps.half())
    maps = torch.cat(maps_chunks) if maps_chunks else torch.empty(0, *source.spec.size)
    described = (
        np.concatenate(described_chunks) if described_chunks else np.zeros((0, len(DESCRIPTORS)))
    )
    classes = int(logits.shape[1])
    sub_labels, sub_predictions = labels[mapped], predictions[mapped]
    space = clustering_space(described, sub_labels, sub_predictions, classes)
    assignment = cluster(
        described, sub_labels, sub_predictions, classes, clusters, seed, space=space
    )
    slices = summarise(
        assignment,
        described,
        maps,
        sub_labels,
        sub_predictions,
        weights,
        class_names,
        space,
    )
    effects: list[Effect | None] = []
    colour_effects: list[Effect | None] = []
    generator = np.random.default_rng(seed + 1)
    for found in slices:
        wrong = found.members[sub_labels[found.members] != sub_predictions[found.members]]
        if not verify or not len(wrong):
            effects.append(None)
            colour_effects.append(None)
            continue
        every = wrong
        if len(wrong) > tested:
            wrong = np.sort(generator.choice(wrong, tested, replace=False))
        recolour = colour_rows(every, described, sub_labels, sub_predictions, tested, generator)
        alpha = SIGNIFICANCE / (2 if recolour else 1)
        images = source.read(positions[mapped[wrong]].tolist()).float() / 255.0
        changed, control = interventions(
            loaded.module,
            images,
            maps[wrong].float(),
            torch.as_tensor(sub_predictions[wrong]),
            seed=seed + found.rank,
        )
        effects.append(judged(changed, control, alpha=alpha))
        if recolour is None:
            colour_effects.append(None)
            continue
        treated, others, target, factor = recolour
        changed, control = colour_interventions(
            loaded.module,
            source.read(positions[mapped[treated]].tolist()).float() / 255.0,
            source.read(positions[mapped[others]].tolist()).float() / 255.0,
            target,
            factor,
        )
        colour_effects.append(judged(changed, control, alpha=alpha, on_odds=True))
    metadata = {
        "store": str(opened.path),
        "model": (opened.metadata.get("model") or {}).get("identity"),
        "fingerprint": (opened.metadata.get("source") or {}).get("fingerprint"),
        "rows": int(len(labels)),
        "errors": int((labels != predictions).sum()),
        "mapped": int(len(mapped)),
        "method": method,
        "layer": layer,
        "clusters": clusters,
        "per_class": per_class,
        "seed": seed,
    }
    return Found(
        store=Path(opened.path),
        positions=positions,
        names=names,
        labels=labels,
        predictions=predictions,
        mapped=mapped,
        table=described,
        maps=maps,
        slices=tuple(slices),
        effects=tuple(effects),
        colour_effects=tuple(colour_effects),
        class_names=class_names,
        method=method,
        metadata=metadata,
    )


def colour_rows(
    wrong: np.ndarray,
    described: np.ndarray,
    labels: np.ndarray,
    predictions: np.ndarray,
    tested: int,
    generator: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, int, float] | None:
    """What the colour test of a slice with errors ``wrong`` (mapped rows) changes: up to
    ``tested`` correctly called rows of its errors' commonest label (treated) and of the other
    classes but the one they are called (control), that call, and the saturation factor that
    gives the treated rows the errors' mean saturation. None when there are no such rows or
    the saturation is not ``COLOUR_NOTABLE``."""
    column = described[:, DESCRIPTORS.index("image_saturation")]
    label = int(np.bincount(labels[wrong]).argmax())
    target = int(np.bincount(predictions[wrong]).argmax())
    right = labels == predictions
    treated = np.flatnonzero(right & (labels == label))
    others = np.flatnonzero(right & (labels != label) & (labels != target))
    spread = float(column.std())
    if not len(treated) or not len(others) or spread <= 0:
        return None
    theirs, ours = float(column[treated].mean()), float(column[wrong].mean())
    if abs(ours - theirs) < COLOUR_NOTABLE * spread or theirs <= 0:
        return None
    chosen = [
        np.sort(generator.choice(rows, tested, replace=False)) if len(rows) > tested else rows
        for rows in (treated, others)
    ]
    return chosen[0], chosen[1], target, ours / theirs


def read_beside(opened: OpenedStore) -> tuple[dict[str, Any] | None, Path]:
    """The slices kept beside the store, or None when there are none or they describe another
    model or other images (then the store changed since; run gradpick slices again)."""
    path = sidecar.sibling(opened.path, SUFFIX)
    if not path.is_file():
        return None, path
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise sidecar.unreadable(path, "slices", error) from None
    model = (opened.metadata.get("model") or {}).get("identity")
    fingerprint = (opened.metadata.get("source") or {}).get("fingerprint")
    if kept.get("model") != model or kept.get("fingerprint") != fingerprint:
        return None, path
    return kept, path
