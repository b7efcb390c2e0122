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
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
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
    "SOURCE_COLUMNS",
    "FolderCheck",
    "StoreRun",
    "StoredResult",
    "infer_and_keep",
    "infer_to_store",
    "is_current",
    "fingerprint_now",
    "open_stored",
    "own_store_path",
    "stored_result",
    "stored_source",
]

INFERENCE_BATCH_SIZE = 128
_WRITING = threading.Lock()
"""One writer of the app's own stores at a time: two sessions inferring the same batch would
otherwise clear each other's unfinished parts."""


OUTPUT_COLUMNS = ("position", "logits")
"""The columns a page reads of the store it opens: its embeddings are read when first asked
for (``StoredResult``)."""


def open_stored(path: str, columns: Sequence[str] | None = None) -> OpenedStore:
    """The store at ``path`` (only ``columns`` of it, when given), or a DataError that says
    what a store is."""
    if not path.strip():
        raise DataError(
            "Type the folder of stored outputs, as written by gradpick infer --model MODEL "
            "--data FOLDER --out DIR."
        )
    return store.open_store(path.strip(), columns)


SOURCE_COLUMNS = ("position", "name")
"""The columns ``stored_source`` reads: with the names, a whole store's folder is not listed."""


def stored_source(opened: OpenedStore) -> ImageSource:
    """The images a store was written from, read at the spec they were inferred at.

    A store that holds every image of its folder (a row for each position the folder had
    when it was written, its ``name`` column read) gives the folder's listing itself: listing
    1,280,000 files and sorting them took 4 s on this project's 2-core machine, reading their
    names from the store 0.3 s. Whether the folder still holds those files is
    ``fingerprint_now``'s question. Any other store's folder is listed.
    """
    origin = opened.metadata.get("source") or {}
    root = store.source_root(opened)
    if origin.get("kind") not in ("folder", "parquet") or not root:
        raise DataError(
            f"{opened.path}: written from {origin.get('description', 'an unknown source')}, "
            "not a folder, so its images cannot be shown; store outputs of an image folder."
        )
    spec = InputSpec.from_json(opened.metadata.get("input_spec") or {})
    listed = _listing_of_whole_store(opened, root, spec)
    return data.open_source(root, spec=spec) if listed is None else listed


def _listing_of_whole_store(
    opened: OpenedStore, root: Path, spec: InputSpec
) -> data.FolderSource | None:
    """The ImageFolder source of ``root`` as the store's rows name it, or None unless the
    store has a row for every position of a folder tree (``data.image_folder``'s order)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    origin = opened.metadata.get("source") or {}
    table = opened.table
    count = int(origin.get("count") or 0)
    class_names = tuple(opened.metadata.get("class_names") or ())
    if origin.get("kind") != "folder" or "name" not in table.column_names or not class_names:
        return None
    positions = table["position"].to_numpy()
    if count == 0 or not np.array_equal(positions, np.arange(count)):
        return None
    names = table["name"].combine_chunks()
    folders = pc.list_element(pc.split_pattern(names, "/", max_splits=1), 0)
    labels = pc.index_in(folders, value_set=pa.array(class_names, pa.string()))
    if labels.null_count:
        return None  # a name outside the class folders: not a tree this store can list
    as_tensor = torch.from_numpy(labels.to_numpy().astype(np.int64))
    return data.image_tree(root, tuple(names.to_pylist()), as_tensor, class_names, spec)


def stored_result(opened: OpenedStore, batch: ImageBatch) -> InferenceResult:
    """The stored outputs of the batch's images, in the batch's order, derived as ``infer``
    derives them (the batch's labels give the losses). Embeddings the store holds but
    ``opened`` did not read are read when first asked for (``StoredResult``)."""
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
    result = result_from_logits(logits, batch.labels, "stored", milliseconds, features, output)
    if features is not None or "embedding" not in opened.held:
        return result
    return StoredResult(result, opened, stored_positions, rows)


def _embeddings_of(opened: OpenedStore, rows: np.ndarray) -> torch.Tensor:
    """``rows`` of the store's embeddings, read now; DataError when the store was written again
    since ``opened`` was read (its files are others: ``store_format.written_identity``)."""
    again = store.open_store(opened.path, ("embedding",))
    if again.written != opened.written:
        raise DataError(f"{opened.path} was written again since it was opened: reload the page.")
    return _rows_of(again.table["embedding"], rows)


class StoredResult(InferenceResult):
    """Stored outputs whose embeddings are read from the store when first asked for: a page
    that shows no feature space never reads them (1,280,000 of 64 numbers: 328 MB, a second
    to read on this project's 2-core machine, and as long to copy into place). Read once,
    under a lock, and shared by every thread that asks.

    ``store`` and ``rows_key`` (a digest of the store's files as opened and of the rows taken
    from it, in order) say where arrays computed from these rows may be kept and under what
    key (``sidecar.kept_arrays``: the feature space's projection is)."""

    store: Path
    rows_key: str
    _opened: OpenedStore
    _rows: np.ndarray
    _lock: threading.Lock
    _features: torch.Tensor | None
    _width: int | None

    def __init__(
        self, result: InferenceResult, opened: OpenedStore, positions: np.ndarray, rows: np.ndarray
    ) -> None:
        digest = hashlib.sha256(opened.written.encode())
        digest.update(np.ascontiguousarray(positions[rows], dtype=np.int64).tobytes())
        for name, value in (
            ("store", opened.path),
            ("rows_key", digest.hexdigest()),
            ("_opened", opened),
            ("_rows", rows),
            ("_lock", threading.Lock()),
            ("_features", None),
            ("_width", None),
        ):
            object.__setattr__(self, name, value)
        values = {field.name: getattr(result, field.name) for field in fields(result)}
        super().__init__(**{**values, "features": None})

    @property
    def features(self) -> torch.Tensor:
        with self._lock:
            features = self._features
            if features is None:
                features = _embeddings_of(self._opened, self._rows)
                object.__setattr__(self, "_features", features)
            return features

    @features.setter
    def features(self, value: torch.Tensor | None) -> None:
        """Called once, by the dataclass's ``__init__``, with None: the store is read instead."""

    @property
    def feature_width(self) -> int | None:
        """Read off the store's first row (once) while the embeddings are not read yet."""
        if self._features is not None:
            return int(self._features.shape[1])
        if self._width is None:
            object.__setattr__(self, "_width", store.embedding_width(self._opened))
        return self._width

    def __repr__(self) -> str:
        read = "read" if self._features is not None else "not read yet"
        return f"StoredResult({len(self):,} images, embeddings {read})"

    __eq__ = object.__eq__
    __hash__ = object.__hash__


def _rows_of(column: Any, rows: np.ndarray) -> torch.Tensor:
    """``rows`` of a list-of-float32 column as a [len(rows), D] tensor, copied once when the
    rows are all of them in order (a whole store's: its 1,280,000 embeddings are 328 MB, and on
    this project's 2-core machine each copy into new memory took 0.1 to 0.6 s)."""
    values = store.list_matrix(column)
    if not np.array_equal(rows, np.arange(len(values))):
        values = values[rows]
    return torch.from_numpy(values)


def is_current(opened: OpenedStore, source: ImageSource) -> bool:
    """Whether the store's folder still holds what it held when the store was written."""
    return store.store_is_current(opened, fingerprint_now(source))


def fingerprint_now(source: ImageSource) -> str:
    """The fingerprint of the source's images as they are now. A folder is listed again
    first: a source made from a store's names (``stored_source``) would otherwise only ever
    stat the files the store names, and miss an image added since."""
    if isinstance(source, data.FolderSource):
        return data.image_folder(source.root).fingerprint()
    return source.fingerprint()


CHECK_NICENESS = 10
"""The folder check's CPU priority (Linux's nice, of its thread alone): the page comes first."""


class FolderCheck:
    """Whether a source still holds its images: asked on every page run, answered by a
    background thread.

    Listing a folder and a ``stat`` per image take seconds at a million images (10 s at
    1,280,000 on this project's 2-core machine), too long to hold a page for. The check
    (``fingerprint_now``) runs in a daemon thread; ``fingerprint(wait)`` waits at most
    ``wait`` seconds (None: until it is done) and returns None while it runs, with no earlier
    answer. An answer is kept ``max_age`` seconds; the next call after that starts a new
    check and, while it runs, returns the last answer. A check that failed (the folder is
    gone) raises its error the same way.
    """

    def __init__(self, source: ImageSource, max_age: float = 30.0) -> None:
        self._source = source
        self._max_age = max_age
        self._lock = threading.Lock()
        self._answer: str | None = None
        self._error: Exception | None = None
        self._answered_at = -math.inf
        self._running: threading.Thread | None = None

    def fingerprint(self, wait: float | None = None) -> str | None:
        """The images' fingerprint as last checked, or None while the first check runs."""
        with self._lock:
            if self._running is None and time.monotonic() - self._answered_at > self._max_age:
                self._running = threading.Thread(
                    target=self._check, name="gradpick-folder-check", daemon=True
                )
                self._running.start()
            running, answered = self._running, self._answered_at > -math.inf
        if running is not None and not answered:
            running.join(wait)
        with self._lock:
            if self._error is not None:
                raise self._error
            return self._answer

    @property
    def checking(self) -> bool:
        """Whether a check is running now."""
        return self._running is not None

    def _check(self) -> None:
        answer: str | None = None
        error: Exception | None = DataError(
            f"{self._source.description}: its images could not be checked against the store."
        )  # what is said if the check fails in a way nobody foresaw (the thread prints it)
        with contextlib.suppress(OSError, AttributeError):  # Linux: a thread has its own
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), CHECK_NICENESS)
        try:
            answer, error = fingerprint_now(self._source), None
        except (DataError, OSError) as failure:
            error = failure
        finally:
            with self._lock:
                self._answer, self._error = answer, error
                self._answered_at, self._running = time.monotonic(), None


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
