"""Hugging Face datasets on disk, read lazily: the Hub's Parquet shards and ``save_to_disk``.

A Hub dataset (or ``datasets``' ``to_parquet``) keeps its images in shards such as
``data/train-00000-of-00002.parquet``, the image column a struct ``{bytes, path}`` and the
label a ``ClassLabel`` integer whose names are in the dataset card (``README.md``'s
``dataset_info`` YAML) and in each shard's ``huggingface`` schema metadata. Opening the folder
reads the shards' footers and the label column only; an image's bytes are read, with its row
group (a few kept per process), when it is read, so a dataset larger than memory streams.

``datasets``' ``save_to_disk`` writes the same columns as Arrow stream files
(``data-00000-of-00001.arrow``) listed in the folder's ``state.json``, with the features in
``dataset_info.json``; a ``DatasetDict`` holds one such folder per split beside
``dataset_dict.json``. They are read the same way, memory-mapped, a record batch standing for a
row group; ``datasets`` itself is not needed to read them.

Example::

    source = parquet_folder("cifar10-hub/", split="test", spec=InputSpec(size=(224, 224)))
    source.names([0]), source.class_names[:2]  # ['data/test-00000-of-00001.parquet#0'], ...
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from gradpick.data.decoding import DEFAULT_SPEC, DecodedImage, decode
from gradpick.data.sources import _Reads
from gradpick.errors import DataError
from gradpick.models.spec import InputSpec

__all__ = ["ParquetSource", "ShardRows", "is_parquet_dataset", "parquet_folder", "row_of_name"]

LABEL_NAMES = ("label", "labels", "fine_label", "coarse_label")
"""Integer columns taken as the label when no feature says ClassLabel."""
_SHARD = re.compile(r"(?:^|[/_-])(train|test|validation|valid|val|dev)(?:[-_./]|$)")
"""The split a shard belongs to, from its path as the Hub names them."""
_ROW_NAME = re.compile(r"^(.+\.parquet)#([0-9]+)$")
"""An image's name in a Parquet source: its shard (relative to the root) and row in it."""


SAVED_STATE = "state.json"
SAVED_SPLITS = "dataset_dict.json"
"""The files ``save_to_disk`` writes beside its Arrow files: a dataset's, a DatasetDict's."""


def is_parquet_dataset(path: Path) -> bool:
    """A .parquet file, a folder with Parquet shards where the Hub puts them (the folder
    itself, ``data/``, or any depth beside a dataset card), or a ``save_to_disk`` folder; an
    image folder is never scanned."""
    if path.is_file():
        return path.suffix == ".parquet"
    if (path / SAVED_STATE).is_file() or (path / SAVED_SPLITS).is_file():
        return True
    if any(path.glob("*.parquet")) or any(path.glob("data/*.parquet")):
        return True
    return (path / "README.md").is_file() and any(path.rglob("*.parquet"))


def _shards(root: Path) -> list[Path]:
    return sorted(root.rglob("*.parquet")) if root.is_dir() else [root]


def _split_of(relative: str) -> str | None:
    found = _SHARD.search(relative.lower())
    return None if found is None else found.group(1)


def _card_features(root: Path) -> list[dict[str, Any]]:
    """``dataset_info.features`` of the dataset card (its first config), or none."""
    card = root / "README.md"
    if not card.is_file():
        return []
    text = card.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return []
    try:
        import yaml

        header = yaml.safe_load(text.split("---", 2)[1]) or {}
    except (ImportError, IndexError, ValueError):  # no YAML reader, or a card it cannot read
        return []
    info = header.get("dataset_info") if isinstance(header, dict) else None
    if isinstance(info, list):
        info = info[0] if info else None
    features = info.get("features") if isinstance(info, dict) else None
    return features if isinstance(features, list) else []


def _card_names(features: list[dict[str, Any]], column: str) -> tuple[str, ...]:
    for feature in features:
        label = (feature.get("dtype") or {}) if feature.get("name") == column else {}
        names = label.get("class_label", {}).get("names") if isinstance(label, dict) else None
        if isinstance(names, dict):
            return tuple(str(names[key]) for key in sorted(names, key=lambda k: int(k)))
        if isinstance(names, list):
            return tuple(str(name) for name in names)
    return ()


def _saved_features(folder: Path) -> dict[str, Any]:
    """The features ``save_to_disk`` wrote in ``dataset_info.json``, or none."""
    info = folder / "dataset_info.json"
    try:
        features = json.loads(info.read_text()).get("features", {}) if info.is_file() else {}
    except (OSError, ValueError, AttributeError):
        return {}
    return features if isinstance(features, dict) else {}


def _schema_features(schema: pa.Schema) -> dict[str, Any]:
    """The ``datasets`` features a shard carries in its schema metadata, or none."""
    raw = (schema.metadata or {}).get(b"huggingface")
    if not raw:
        return {}
    try:
        features = json.loads(raw).get("info", {}).get("features", {})
    except (ValueError, AttributeError):
        return {}
    return features if isinstance(features, dict) else {}


def _image_column(schema: pa.Schema, features: dict[str, Any]) -> str:
    for name, feature in features.items():
        if isinstance(feature, dict) and feature.get("_type") == "Image":
            return str(name)
    for field in schema:
        if pa.types.is_struct(field.type) and {"bytes", "path"} <= {
            child.name for child in field.type
        }:
            return field.name
    raise DataError(
        "The Parquet files have no image column (a struct of bytes and path, as Hugging Face "
        f"datasets store images); their columns: {', '.join(schema.names)}."
    )


def _label_column(schema: pa.Schema, features: dict[str, Any]) -> str | None:
    for name, feature in features.items():
        if isinstance(feature, dict) and feature.get("_type") == "ClassLabel":
            return str(name)
    return next(
        (n for n in LABEL_NAMES if n in schema.names and pa.types.is_integer(schema.field(n).type)),
        None,
    )


def _stream(path: str | Path) -> pa.Table:
    """An Arrow stream file (``save_to_disk``'s), memory-mapped: nothing is read until used."""
    return pa.ipc.open_stream(pa.memory_map(str(path))).read_all()


@functools.lru_cache(maxsize=4)
def _row_group(path: str, stamp: int, group: int, column: str) -> pa.ChunkedArray:
    """One row group's image column (``stamp``: the file's mtime, so a rewrite is re-read); of
    an Arrow stream file, one record batch's."""
    if path.endswith(".arrow"):
        batch = _stream(path).to_batches()[group]
        return pa.chunked_array([batch.column(batch.schema.get_field_index(column))])
    import pyarrow.parquet as pq  # only once a Parquet dataset is read: 7 MB of the page's start

    return pq.ParquetFile(path).read_row_group(group, columns=[column]).column(0)


def _image_bytes(value: Any, name: str) -> bytes:
    """The encoded image of one row's image struct ``{bytes, path}``."""
    content = value.get("bytes") if isinstance(value, dict) else None
    if not content:
        raise DataError(f"{name}: the row holds no image bytes.")
    return bytes(content)


def row_of_name(name: str) -> tuple[str, int] | None:
    """(shard, row in it) of a Parquet source's image name (``ParquetSource.names``), or None
    for any other name (an image file's)."""
    match = _ROW_NAME.match(name)
    return None if match is None else (match[1], int(match[2]))


class ShardRows:
    """The images of one Parquet shard opened from any file handle (a local file, or a pyarrow
    file system's on a Ray worker), one row group kept at a time: a batch of consecutive rows
    costs one read. Safe to share between threads."""

    def __init__(self, handle: Any, shard: str) -> None:
        import pyarrow.parquet as pq

        try:
            self.file = pq.ParquetFile(handle)
        except (OSError, pa.ArrowException) as error:
            raise DataError(f"{shard}: cannot be read as Parquet ({error}).") from None
        schema = self.file.schema_arrow
        self.column = _image_column(schema, _schema_features(schema))
        rows = [self.file.metadata.row_group(g).num_rows for g in range(self.file.num_row_groups)]
        self.starts = np.cumsum([0, *rows])
        self._kept: tuple[int, pa.ChunkedArray] | None = None
        self._lock = threading.Lock()

    def image_bytes(self, row: int, name: str) -> bytes:
        """The encoded image of ``row`` (``name`` says which in a message)."""
        total = int(self.starts[-1])
        if not 0 <= row < total:
            raise DataError(f"{name}: the shard has {total} rows.")
        group = int(np.searchsorted(self.starts, row, side="right")) - 1
        with self._lock:
            if self._kept is None or self._kept[0] != group:
                column = self.file.read_row_group(group, columns=[self.column]).column(0)
                self._kept = (group, column)
            value = self._kept[1][row - int(self.starts[group])].as_py()
        return _image_bytes(value, name)


@dataclass(frozen=True)
class _Shard:
    """One file's schema, row-group lengths and label column, whichever format holds it."""

    schema: pa.Schema
    group_rows: list[int]
    read_column: Any


def _open_shard(path: Path) -> _Shard:
    if path.suffix == ".arrow":
        table = _stream(path)
        return _Shard(
            table.schema,
            [batch.num_rows for batch in table.to_batches()],
            lambda name: table.column(name),
        )
    import pyarrow.parquet as pq

    opened = pq.ParquetFile(path)
    rows = [opened.metadata.row_group(g).num_rows for g in range(opened.num_row_groups)]
    return _Shard(opened.schema_arrow, rows, lambda name: opened.read(columns=[name]).column(0))


def _saved_files(root: Path, split: str | None) -> tuple[list[Path], str | None, Path]:
    """A ``save_to_disk`` folder's Arrow files of ``split``, the split read and the folder
    holding its ``dataset_info.json``."""
    folder, chosen = root, None
    if (root / SAVED_SPLITS).is_file():
        splits = json.loads((root / SAVED_SPLITS).read_text()).get("splits", [])
        wanted = str(split) if split is not None else (splits[0] if splits else "")
        if wanted not in splits:
            raise DataError(f"{root}: no '{split}' split; its splits: {', '.join(splits)}.")
        folder, chosen = root / wanted, wanted
    state = json.loads((folder / SAVED_STATE).read_text())
    files = [folder / entry["filename"] for entry in state.get("_data_files", [])]
    if not files:
        raise DataError(f"{folder}: its {SAVED_STATE} lists no data files.")
    return files, chosen, folder


@dataclass(frozen=True)
class ParquetSource(_Reads):
    """Images in Parquet shards, Hub layout: row positions across the shards in name order."""

    root: Path
    shards: tuple[str, ...]
    """Paths relative to ``root`` (the file itself when ``root`` is one file)."""
    starts: tuple[tuple[int, ...], ...]
    """Per shard, the first position of each row group, and one past its last row."""
    image_column: str
    label_tensor: torch.Tensor | None
    class_names: tuple[str, ...]
    description: str
    spec: InputSpec = DEFAULT_SPEC
    split: str | None = None

    def __len__(self) -> int:
        return self.starts[-1][-1] if self.starts else 0

    def labels(self) -> torch.Tensor | None:
        return self.label_tensor

    def _locate(self, position: int) -> tuple[int, int, int]:
        """(shard, row group, row within it) of ``position``."""
        ends = [bounds[-1] for bounds in self.starts]
        shard = int(np.searchsorted(ends, position, side="right"))
        bounds = self.starts[shard]
        group = int(np.searchsorted(bounds, position, side="right")) - 1
        return shard, group, position - bounds[group]

    def names(self, positions: Sequence[int]) -> list[str]:
        named = []
        for position in positions:
            shard, _, _ = self._locate(position)
            first = self.starts[shard][0]
            named.append(f"{self.shards[shard]}#{position - first}")
        return named

    def _path(self, shard: int) -> Path:
        return self.root if self.root.is_file() else self.root / self.shards[shard]

    def read_one(self, position: int) -> DecodedImage:
        shard, group, row = self._locate(position)
        name = self.names([position])[0]
        path = self._path(shard)
        try:
            column = _row_group(str(path), path.stat().st_mtime_ns, group, self.image_column)
        except (OSError, pa.ArrowException) as error:
            raise DataError(f"{name}: cannot be read ({error}).") from None
        return decode(_image_bytes(column[row].as_py(), name), name, self.spec)

    def at_spec(self, spec: InputSpec) -> ParquetSource:
        return replace(self, spec=spec)

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for shard in range(len(self.shards)):
            status = os.stat(self._path(shard))
            digest.update(
                f"{self.shards[shard]}\0{status.st_size}\0{status.st_mtime_ns}\n".encode()
            )
        return digest.hexdigest()

    def origin(self) -> dict[str, Any]:
        return {
            "kind": "parquet",
            "root": str(self.root),
            "description": self.description,
            "split": self.split,
        }


def parquet_folder(
    location: str | Path, split: str | None = "test", spec: InputSpec = DEFAULT_SPEC
) -> ParquetSource:
    """The Parquet shards of ``location`` (a folder as the Hub lays a dataset out, or one
    file) of ``split``; a folder whose shards name no split is read whole (split None)."""
    root = Path(location).expanduser()
    saved = root.is_dir() and ((root / SAVED_STATE).is_file() or (root / SAVED_SPLITS).is_file())
    info_folder = root
    if saved:
        every, chosen_split, info_folder = _saved_files(root, split)
    else:
        every = _shards(root)
        chosen_split = None
    if not every:
        raise DataError(f"{root}: no .parquet files found.")
    relative = [str(p.relative_to(root)) if root.is_dir() else p.name for p in every]
    splits = {_split_of(name) for name in relative}
    if not saved and root.is_dir() and splits != {None}:
        wanted = {"test": ("test",), "train": ("train",)}.get(str(split), (str(split),))
        kept = [i for i, name in enumerate(relative) if _split_of(name) in wanted]
        if not kept:
            known = ", ".join(sorted(s for s in splits if s))
            raise DataError(f"{root}: no '{split}' shards; its splits: {known}.")
        every, relative, chosen_split = [every[i] for i in kept], [relative[i] for i in kept], split
    files = [_open_shard(path) for path in every]
    schema = files[0].schema
    features = _schema_features(schema) or _saved_features(info_folder)
    image_column = _image_column(schema, features)
    label_column = _label_column(schema, features)
    starts: list[tuple[int, ...]] = []
    position = 0
    labels: list[np.ndarray] = []
    for path, opened in zip(every, files, strict=True):
        if image_column not in opened.schema.names:
            raise DataError(f"{path}: no column '{image_column}' as in the first shard.")
        bounds = [position]
        for rows in opened.group_rows:
            position += rows
            bounds.append(position)
        starts.append(tuple(bounds))
        if label_column is not None:
            column = opened.read_column(label_column)
            labels.append(column.to_numpy(zero_copy_only=False).astype(np.int64))
    label_tensor = torch.from_numpy(np.concatenate(labels)) if labels else None
    if label_tensor is not None and bool((label_tensor < 0).any()):
        label_tensor = None  # -1 marks an unlabelled split (a Hub test set without answers)
    names = _card_names(_card_features(root if root.is_dir() else root.parent), label_column or "")
    feature = features.get(label_column or "", {})
    if not names and isinstance(feature, dict) and isinstance(feature.get("names"), list):
        names = tuple(str(name) for name in feature["names"])
    if not names and label_tensor is not None and len(label_tensor):
        names = tuple(str(index) for index in range(int(label_tensor.max()) + 1))
    which = f" {chosen_split}" if chosen_split else ""
    kind = "Hugging Face dataset (save_to_disk)" if saved else "Parquet dataset"
    return ParquetSource(
        root=root,
        shards=tuple(relative),
        starts=tuple(starts),
        image_column=image_column,
        label_tensor=label_tensor,
        class_names=names,
        description=f"{kind}{which} {root}",
        spec=spec,
        split=chosen_split,
    )
