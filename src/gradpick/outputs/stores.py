"""Inference outputs on disk: writing a source's outputs to a store, reopening a store, and
the explorer's own stores.

A store written by ``gradpick infer --out`` opens as a source of its own: its folder (read at
the store's input spec) gives the images, its rows give the outputs, so nothing is inferred
again. The app keeps each inference it runs as a store too, under
``data.cache_dir()/outputs/<key>``, the key naming the model's weights, the source's fingerprint,
the input spec and the batch: reopening the same folder with the same model finds it and shows
the batch at once, and a changed folder (another fingerprint) never finds a stale one.
``infer_to_store`` is the one writer of a source's outputs: ``gradpick infer --out`` streams
through it, and the explorer keeps its inferred batches with it. Plain functions without
Streamlit; ``gradpick.ui.cache`` adds the caching.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gradpick import data
from gradpick.data import ImageBatch, ImageSource
from gradpick.errors import DataError, InputError
from gradpick.models.spec import InputSpec
from gradpick.models.zoo import LoadedModel
from gradpick.outputs import store_format as store
from gradpick.outputs.inference import (
    InferenceResult,
    OutputChunk,
    infer,
    infer_chunks,
    result_from_logits,
    source_labels,
)
from gradpick.outputs.store_format import OpenedStore
from gradpick.runtime.devices import model_device
from gradpick.runtime.measure import Stopwatch

__all__ = [
    "INFERENCE_BATCH_SIZE",
    "OUTPUT_COLUMNS",
    "StoreRun",
    "infer_and_keep",
    "infer_to_store",
    "is_current",
    "open_stored",
    "own_store_path",
    "stored_result",
    "stored_source",
]

INFERENCE_BATCH_SIZE = 128
_WRITING = threading.Lock()
"""One writer of the app's own stores at a time: two sessions inferring the same batch would
otherwise clear each other's unfinished parts."""


OUTPUT_COLUMNS = ("position", "logits", "embedding")
"""The columns ``stored_result`` reads: a store opened for its outputs reads no others."""


def open_stored(path: str, columns: Sequence[str] | None = None) -> OpenedStore:
    """The store at ``path`` (only ``columns`` of it, when given), or a DataError that says
    what a store is."""
    if not path.strip():
        raise DataError(
            "Type the folder of stored outputs, as written by gradpick infer --model MODEL "
            "--data FOLDER --out DIR."
        )
    return store.open_store(path.strip(), columns)


def stored_source(opened: OpenedStore) -> ImageSource:
    """The images a store was written from, read at the spec they were inferred at."""
    origin = opened.metadata.get("source") or {}
    root = store.source_root(opened)
    if origin.get("kind") not in ("folder", "parquet") or not root:
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
    output = store.store_output(opened.metadata)
    return result_from_logits(logits, batch.labels, "stored", milliseconds, features, output)


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
        output=served.output,
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
    path.parent.mkdir(parents=True, exist_ok=True)
    with _WRITING:
        infer_to_store(served, source, batch.positions, path, inferred=result)


@dataclass(frozen=True)
class StoreRun:
    """What writing a store did."""

    out: Path
    rows: int
    notes: tuple[str, ...]
    """What the pass skipped (unreadable files) or adapted (upscaled images), by name."""
    seconds: float
    """Wall time of reading, inferring and writing, device synchronised."""
    replaced: str | None = None
    """A sentence naming the earlier store this one replaced, or None."""

    @property
    def images_per_second(self) -> float:
        return self.rows / max(self.seconds, 1e-9)


def infer_to_store(
    loaded: LoadedModel,
    source: ImageSource,
    positions: Sequence[int],
    out: str | Path,
    batch_size: int = 256,
    embeddings: bool = False,
    progress: data.ProgressCallback | None = None,
    inferred: InferenceResult | None = None,
    batch: dict[str, int | None] | None = None,
) -> StoreRun:
    """Stream the model's outputs for ``positions`` of ``source`` into the store at ``out``:
    one row per readable image, published whole or not at all.

    Unreadable files are skipped and listed in the store's metadata and the run's notes; labels
    are kept only when the source's classes are the model's (``source_labels``). ``inferred``:
    the outputs of exactly these positions, already computed (the explorer's batch, inferred
    for its page), written instead of inferring again; its features become the embeddings.
    ``batch`` (start, size, seed) is recorded so a reopened store shows the batch it holds.
    """
    report = data.ReadReport(source.spec)
    chunks: Iterable[OutputChunk]
    if inferred is None:
        chunks = infer_chunks(
            loaded.module,
            source,
            positions,
            batch_size,
            embeddings=embeddings,
            report=report,
            progress=progress,
        )
    else:
        embeddings = inferred.features is not None
        chunks = [OutputChunk(tuple(positions), inferred.logits, inferred.features)]
    metadata = store.store_metadata(loaded.identity(), source.spec, source, embeddings, batch)
    with (
        Stopwatch(model_device(loaded.module)) as watch,
        store.StoreWriter(out, metadata, embeddings=embeddings) as writer,
    ):
        started = time.perf_counter()
        for chunk in chunks:
            labels = source_labels(source, chunk.positions, int(chunk.logits.shape[1]))
            names = source.names(chunk.positions)
            writer.write(
                store.output_table(
                    chunk.positions,
                    names,
                    labels,
                    chunk.logits,
                    chunk.embeddings,
                    output=loaded.output,
                )
            )
        if writer.rows == 0:
            raise InputError("None of the images could be read:\n" + "\n".join(report.skipped))
        writer.annotate(
            skipped=report.skipped,
            notes=list(report.notes()),
            inference_seconds=(
                time.perf_counter() - started if inferred is None else inferred.milliseconds / 1000
            ),
        )
    return StoreRun(
        Path(out), writer.rows, report.notes(), watch.milliseconds / 1000, writer.replaced
    )
