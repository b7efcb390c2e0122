"""Inference outputs on disk for the explorer: stores the user opens, and the app's own.

A store written by ``gradpick infer --out`` opens as a source of its own: its folder (read at
the store's input spec) gives the images, its rows give the outputs, so nothing is inferred
again. The app keeps each inference it runs as a store too, under
``data.cache_dir()/outputs/<key>``, the key naming the model's weights, the source's fingerprint,
the input spec and the batch: reopening the same folder with the same model finds it and shows
the batch at once, and a changed folder (another fingerprint) never finds a stale one. Plain
functions without Streamlit; ``gradpick.ui.cache`` adds the caching.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gradpick import data, store
from gradpick.data import ImageBatch, ImageSource
from gradpick.errors import DataError
from gradpick.infer import InferenceResult, infer, result_from_logits
from gradpick.spec import InputSpec
from gradpick.store import OpenedStore
from gradpick.zoo import LoadedModel

INFERENCE_BATCH_SIZE = 128
_WRITING = threading.Lock()
"""One writer of the app's own stores at a time: two sessions inferring the same batch would
otherwise clear each other's unfinished parts."""


def open_stored(path: str) -> OpenedStore:
    """The store at ``path``, or a DataError that says what a store is."""
    if not path.strip():
        raise DataError(
            "Type the folder of stored outputs, as written by gradpick infer --model MODEL "
            "--data FOLDER --out DIR."
        )
    return store.open_store(path.strip())


def stored_source(opened: OpenedStore) -> ImageSource:
    """The images a store was written from, read at the spec they were inferred at."""
    origin = opened.metadata.get("source") or {}
    root = store.source_root(opened)
    if origin.get("kind") != "folder" or not root:
        raise DataError(
            f"{opened.path}: written from {origin.get('description', 'an unknown source')}, "
            "not a folder, so its images cannot be shown; store outputs of an image folder."
        )
    spec = InputSpec.from_json(opened.metadata.get("input_spec") or {})
    source = data.open_source(root, spec=spec)
    return source


def stored_result(opened: OpenedStore, batch: ImageBatch) -> InferenceResult:
    """The stored outputs of the batch's images, in the batch's order, derived as ``infer``
    derives them (the batch's labels give the losses)."""
    table = opened.table
    stored_positions = table["position"].to_numpy()
    wanted = np.asarray(batch.positions, dtype=np.int64)
    rows = np.searchsorted(stored_positions, wanted)
    found = (rows < len(stored_positions)) & (
        stored_positions[np.minimum(rows, len(stored_positions) - 1)] == wanted
    )
    if not bool(found.all()):
        missing = batch.names[int(np.flatnonzero(~found)[0])]
        raise DataError(
            f"{opened.path} holds no outputs for {missing} (and {int((~found).sum()) - 1} more "
            "of this batch): the folder changed since it was written. Re-infer."
        )
    logits = _rows_of(table["logits"], rows)
    features = _rows_of(table["embedding"], rows) if "embedding" in table.column_names else None
    seconds = float(opened.metadata.get("inference_seconds") or 0.0)
    milliseconds = seconds * 1000 * len(batch) / max(len(opened), 1)
    return result_from_logits(logits, batch.labels, "stored", milliseconds, features)


def _rows_of(column: Any, rows: np.ndarray) -> torch.Tensor:
    """``rows`` of a list-of-float32 column as a [len(rows), D] tensor, without a Python list
    per row."""
    flat = column.combine_chunks()
    width = len(flat[0]) if len(flat) else 0
    values = flat.flatten().to_numpy(zero_copy_only=False).reshape(len(flat), width)
    return torch.from_numpy(np.ascontiguousarray(values[rows], dtype=np.float32))


def is_current(opened: OpenedStore, source: ImageSource) -> bool:
    """Whether the store's folder still holds what it held when the store was written."""
    return store.store_is_current(opened, source.fingerprint())


def own_store_path(served: LoadedModel, source: ImageSource, batch: ImageBatch) -> Path:
    """Where the app keeps its inference of ``batch`` by this model (see the module doc)."""
    key = {
        "model": served.store_identity,
        "fingerprint": source.fingerprint(),
        "spec": source.spec.to_json(),
        "positions": hashlib.sha256(np.asarray(batch.positions).tobytes()).hexdigest(),
        "labels": batch.labels is not None,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return data.cache_dir() / "outputs" / digest


def infer_and_keep(
    served: LoadedModel,
    source: ImageSource,
    batch: ImageBatch,
    progress: data.ProgressCallback | None = None,
    keep: bool = True,
) -> InferenceResult:
    """The batch's outputs from the app's own store when it has them; else inferred and kept.

    Keeping is best effort: a store that cannot be written (a full disk, a read-only cache)
    costs only the next visit's wait, never this one's result. ``keep=False`` (a hosted demo,
    whose visitors' batches must not fill the server's disk) only infers.
    """
    path = own_store_path(served, source, batch) if keep else None
    if path is not None:
        try:
            opened = store.open_store(path)
            store.check_store(opened, served.store_identity)
            return stored_result(opened, batch)
        except DataError:
            pass
    result = infer(
        served.module,
        batch.images,
        batch.labels,
        batch_size=INFERENCE_BATCH_SIZE,
        progress=progress,
        features=True,
    )
    if path is not None:
        with contextlib.suppress(OSError, DataError):
            _keep(path, served, source, batch, result)
    return result


def _keep(
    path: Path,
    served: LoadedModel,
    source: ImageSource,
    batch: ImageBatch,
    result: InferenceResult,
) -> None:
    embeddings = result.features is not None
    metadata = store.store_metadata(served.identity(), source.spec, source, embeddings)
    metadata["inference_seconds"] = result.milliseconds / 1000
    path.parent.mkdir(parents=True, exist_ok=True)
    with _WRITING, store.StoreWriter(path, metadata, embeddings=embeddings) as writer:
        writer.write(
            store.output_table(
                batch.positions, batch.names, result.labels, result.logits, result.features
            )
        )
