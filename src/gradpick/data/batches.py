"""Batches: which positions a batch holds, reading them into memory, and the decoded cache.

A batch is what the explorer and the commands show and pick from: a slice or a seeded sample of
a source, decoded into one uint8 tensor with the notes of what was skipped or adapted.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gradpick.data.sources import (
    FolderSource,
    ImageBatch,
    ImageSource,
    ProgressCallback,
    cache_dir,
)
from gradpick.data.streaming import ReadReport, stream
from gradpick.errors import DataError, InputError

__all__ = [
    "LazyBatch",
    "LazyPixels",
    "batch_positions",
    "decoded_cache",
    "load_batch",
    "read_class_names",
    "read_positions",
]


def batch_positions(
    source_length: int, start: int = 0, size: int | None = None, seed: int | None = None
) -> list[int]:
    """Positions of a batch: ``size`` images from ``start``, or a seeded sample when seed is set."""
    if source_length <= 0:
        raise DataError("The image source is empty.")
    size = source_length if size is None else size
    if not 1 <= size <= source_length:
        raise InputError(f"Batch size must be between 1 and {source_length:,}; got {size:,}.")
    if seed is not None:
        generator = torch.Generator().manual_seed(seed)
        # Random order, not sorted: a class-sorted folder would otherwise show one class first.
        return torch.randperm(source_length, generator=generator)[:size].tolist()
    if not 0 <= start < source_length:
        raise InputError(f"Start must be between 0 and {source_length - 1:,}; got {start:,}.")
    if start + size > source_length:
        raise InputError(
            f"Start {start:,} + size {size:,} runs past the end of the source "
            f"({source_length:,} images); lower one of them."
        )
    return list(range(start, start + size))


def load_batch(
    source: ImageSource,
    start: int = 0,
    size: int | None = None,
    seed: int | None = None,
    chunk_size: int = 256,
    progress: ProgressCallback | None = None,
    workers: int | None = None,
) -> ImageBatch:
    """A slice (or seeded sample) of a source decoded into memory, chunk by chunk with progress.

    Files that cannot be decoded are left out of the batch and named in its notes; the batch's
    ``positions`` say which images it holds.
    """
    wanted = batch_positions(len(source), start, size, seed)
    return read_positions(source, wanted, chunk_size, progress, workers)


def read_positions(
    source: ImageSource,
    wanted: Sequence[int],
    chunk_size: int = 256,
    progress: ProgressCallback | None = None,
    workers: int | None = None,
) -> ImageBatch:
    """``wanted`` positions of a source decoded into memory as a batch (``load_batch``)."""
    images = torch.empty(len(wanted), 3, *source.spec.size, dtype=torch.uint8)
    positions: list[int] = []
    report = ReadReport(source.spec)
    done = 0
    for chunk in stream(source, wanted, chunk_size, workers):
        images[len(positions) : len(positions) + len(chunk)] = chunk.images
        positions.extend(chunk.positions)
        report.add(source, chunk)
        done += len(chunk) + len(chunk.skipped)
        if progress is not None:
            progress(done, len(wanted))
    if not positions:
        raise DataError("None of the images could be read:\n" + "\n".join(report.skipped))
    all_labels = source.labels()
    labels = None if all_labels is None else all_labels[torch.tensor(positions)]
    return ImageBatch(
        images=images[: len(positions)],
        labels=labels,
        class_names=source.class_names,
        names=tuple(source.names(positions)),
        positions=tuple(positions),
        source=source.description,
        notes=report.notes(),
        split=source.origin().get("split"),
    )


def decoded_cache(source: ImageSource, progress: ProgressCallback | None = None) -> ImageBatch:
    """The whole source decoded once into a uint8 tensor file under the cache dir.

    Training reads 50,000 JPEGs every epoch otherwise; the cache key covers the file list and
    sizes and the spec, so editing the folder invalidates it.
    """
    key = hashlib.sha256(source.description.encode())
    key.update(str(len(source)).encode())
    key.update(repr(source.spec.to_json()).encode())
    if isinstance(source, FolderSource):
        for path in source.files:
            key.update(f"{path}:{path.stat().st_size}".encode())
    path = cache_dir() / "decoded" / f"{key.hexdigest()[:16]}.pt"
    if path.is_file():
        try:
            cached = torch.load(path, weights_only=True)
            positions = tuple(cached.get("positions", range(len(source))))
            return ImageBatch(
                images=cached["images"],
                labels=cached["labels"],
                class_names=tuple(cached["class_names"]),
                names=tuple(source.names(positions)),
                positions=positions,
                source=source.description,
                split=source.origin().get("split"),
            )
        except (RuntimeError, KeyError, EOFError, pickle.UnpicklingError):
            path.unlink(missing_ok=True)
    batch = load_batch(source, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    torch.save(
        {
            "images": batch.images,
            "labels": batch.labels,
            "class_names": list(batch.class_names),
            "positions": list(batch.positions),
        },
        temporary,
    )
    temporary.replace(path)
    return batch


class LazyPixels:
    """A batch's pixels decoded row by row when first asked for, so a page that shows a few
    of 50,000 images decodes those few, not all (12 s of JPEGs on two cores).

    ``rows`` decodes the rows it is asked for that are not decoded yet; ``complete`` decodes
    the rest. ``finished``, when set, is asked before each: it returns all the pixels once a
    job elsewhere has decoded them (the copy kept beside a store), which then replace these.
    Safe to share between threads: two readers of one row decode it twice, into equal pixels.
    """

    def __init__(
        self, source: ImageSource, positions: Sequence[int] | np.ndarray, chunk_size: int = 256
    ):
        self.source = source
        self.positions = np.asarray(positions, dtype=np.int64)
        self.buffer = torch.empty(len(self.positions), 3, *source.spec.size, dtype=torch.uint8)
        self.ready = np.zeros(len(self.positions), dtype=bool)
        self.chunk_size = chunk_size
        self.finished: Callable[[], torch.Tensor | None] | None = None

    @property
    def decoded(self) -> int:
        """How many rows are in memory."""
        self._poll()
        return int(self.ready.sum())

    def rows(self, index: Any) -> torch.Tensor:
        """``images[index]`` (an int, slice, list, array or tensor), decoding only those rows."""
        self._poll()
        if isinstance(index, torch.Tensor):
            index = index.cpu().numpy()
        elif isinstance(index, list | tuple):
            index = np.asarray(index, dtype=np.int64)
        wanted = np.unique(np.atleast_1d(np.arange(len(self.ready))[index]))
        self._decode(wanted[~self.ready[wanted]])
        return self.buffer[torch.as_tensor(index) if isinstance(index, np.ndarray) else index]

    def complete(self) -> torch.Tensor:
        """All the pixels, the rows not decoded yet decoded now."""
        self._poll()
        self._decode(np.flatnonzero(~self.ready))
        return self.buffer

    def _poll(self) -> None:
        if self.finished is None or bool(self.ready.all()):
            return
        images = self.finished()
        if images is not None and images.shape == self.buffer.shape:
            self.buffer = images
            self.ready[:] = True

    def _decode(self, rows: np.ndarray) -> None:
        for start in range(0, len(rows), self.chunk_size):
            part = rows[start : start + self.chunk_size]
            pixels = self.source.read(self.positions[part].tolist())
            self.buffer[torch.from_numpy(part)] = pixels
            self.ready[part] = True


class LazyBatch(ImageBatch):
    """A batch whose images are decoded when shown (``LazyPixels``): ``rows`` decodes the
    rows asked for; reading ``images`` whole decodes them all, so code that needs every image
    gets every image."""

    pixels: LazyPixels

    def __init__(
        self,
        pixels: LazyPixels,
        labels: torch.Tensor | None,
        class_names: tuple[str, ...],
        names: tuple[str, ...],
        source: str,
        notes: tuple[str, ...] = (),
        split: str | None = None,
    ) -> None:
        object.__setattr__(self, "pixels", pixels)
        positions = tuple(pixels.positions.tolist())
        super().__init__(pixels.buffer, labels, class_names, names, positions, source, notes, split)

    @property
    def images(self) -> torch.Tensor:
        return self.pixels.complete()

    @images.setter
    def images(self, value: torch.Tensor) -> None:
        """Called once, by the dataclass's ``__init__``, with ``pixels.buffer``: kept there."""

    def __len__(self) -> int:
        return len(self.positions)

    def __repr__(self) -> str:
        return f"LazyBatch({len(self):,} images of {self.source}, {self.pixels.decoded:,} decoded)"

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    @property
    def image_size(self) -> tuple[int, int]:
        height, width = self.pixels.buffer.shape[-2:]
        return int(height), int(width)

    @property
    def all_decoded(self) -> bool:
        return self.pixels.decoded == len(self)

    def rows(self, index: Any) -> torch.Tensor:
        return self.pixels.rows(index)

    def relabelled(self, labels: torch.Tensor | None, class_names: tuple[str, ...]) -> ImageBatch:
        return LazyBatch(
            self.pixels, labels, class_names, self.names, self.source, self.notes, self.split
        )


def read_class_names(path: str | Path) -> tuple[str, ...]:
    """Class names from a text file, one per line in output order (blank lines ignored)."""
    path = Path(path).expanduser()
    try:
        names = tuple(line.strip() for line in path.read_text().splitlines() if line.strip())
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: cannot read class names ({error}).") from None
    if not names:
        raise DataError(f"{path}: no class names found; write one name per line.")
    return names
