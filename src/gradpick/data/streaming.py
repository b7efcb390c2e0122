"""Streaming a source through DataLoader workers, chunk by chunk, skipping unreadable files.

Decoding happens in worker processes ahead of the consumer, so it overlaps the model and only a
few chunks of pixels exist at once, whatever the source's size.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import torch

from gradpick.data.sources import ArraySource, ImageSource, check_positions
from gradpick.errors import DataError, InputError
from gradpick.models.spec import InputSpec

__all__ = ["NAMES_LISTED", "Chunk", "ReadReport", "default_workers", "read_chunk", "stream"]

NAMES_LISTED = 10
"""Notes about many files (skipped, upscaled) name this many and count the rest."""


@dataclass(frozen=True)
class Chunk:
    """Consecutive positions of a pass, decoded: the images that could be read, in order."""

    positions: tuple[int, ...]
    images: torch.Tensor
    """uint8 [len(positions), 3, H, W] at the source's spec."""
    skipped: tuple[tuple[int, str], ...] = ()
    """(position, why) of each file that could not be decoded."""
    upscaled: tuple[int, ...] = ()
    animated: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.positions)

    def pin_memory(self) -> Chunk:
        """Called by the DataLoader's pinning thread: page-locked pixels copy to a GPU
        asynchronously (``non_blocking=True``)."""
        return replace(self, images=self.images.pin_memory())


def read_chunk(source: ImageSource, positions: Sequence[int]) -> Chunk:
    """Decode ``positions`` of ``source``; unreadable files are skipped and reported."""
    if isinstance(source, ArraySource) and source.native:
        index = torch.as_tensor(list(positions), dtype=torch.long)
        return Chunk(tuple(positions), source.images[index])
    kept: list[int] = []
    pixels: list[torch.Tensor] = []
    skipped: list[tuple[int, str]] = []
    upscaled: list[int] = []
    animated: list[int] = []
    for position in positions:
        try:
            decoded = source.read_one(position)
        except DataError as error:
            skipped.append((position, str(error)))
            continue
        kept.append(position)
        pixels.append(decoded.pixels)
        if decoded.upscaled:
            upscaled.append(position)
        if decoded.animated:
            animated.append(position)
    images = (
        torch.stack(pixels) if pixels else torch.empty(0, 3, *source.spec.size, dtype=torch.uint8)
    )
    return Chunk(tuple(kept), images, tuple(skipped), tuple(upscaled), tuple(animated))


class _Chunks(torch.utils.data.Dataset[Chunk]):
    """A pass over positions as a map-style dataset of whole chunks: a worker decodes one
    chunk at a time and hands it over in one piece."""

    def __init__(self, source: ImageSource, positions: Sequence[int], chunk_size: int) -> None:
        self.source = source
        self.positions = list(positions)
        self.chunk_size = chunk_size

    def __len__(self) -> int:
        return -(-len(self.positions) // self.chunk_size)

    def __getitem__(self, index: int) -> Chunk:
        start = index * self.chunk_size
        return read_chunk(self.source, self.positions[start : start + self.chunk_size])


def default_workers(chunks: int) -> int:
    """Decoding processes for a pass of ``chunks`` chunks: one per CPU but one (left to the
    model), at most 8, and none for a single chunk, which nothing could overlap."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows
        cpus = os.cpu_count() or 1
    return 0 if chunks <= 1 else max(1, min(8, cpus - 1, chunks))


def stream(
    source: ImageSource,
    positions: Sequence[int] | None = None,
    chunk_size: int = 256,
    workers: int | None = None,
    pin_memory: bool = False,
) -> Iterator[Chunk]:
    """Chunks of ``positions`` (default: all) in order, decoded by DataLoader workers ahead of
    the consumer, so decoding overlaps the model and only a few chunks exist at once.

    ``workers`` defaults to ``default_workers``; in-memory arrays at their own size are sliced
    in this process. ``pin_memory`` page-locks each chunk for asynchronous copies to a GPU.
    """
    if chunk_size < 1:
        raise InputError(f"chunk_size must be at least 1; got {chunk_size}.")
    if positions is not None:
        check_positions(source, positions)
    chunks = _Chunks(source, range(len(source)) if positions is None else positions, chunk_size)
    if workers is None:
        in_memory = isinstance(source, ArraySource) and source.native
        workers = 0 if in_memory else default_workers(len(chunks))
    loader = torch.utils.data.DataLoader(
        chunks,
        batch_size=None,
        shuffle=False,
        num_workers=workers,
        pin_memory=pin_memory and torch.cuda.is_available(),
    )
    yield from loader


@dataclass
class ReadReport:
    """What a pass over a source skipped or adapted, by image name, for the summary."""

    spec: InputSpec
    skipped: list[str] = field(default_factory=list)
    """One message per unreadable file (it names the file)."""
    upscaled: list[str] = field(default_factory=list)
    animated: list[str] = field(default_factory=list)

    def add(self, source: ImageSource, chunk: Chunk) -> None:
        self.skipped.extend(why for _, why in chunk.skipped)
        self.upscaled.extend(source.names(chunk.upscaled))
        self.animated.extend(source.names(chunk.animated))

    def notes(self) -> tuple[str, ...]:
        notes = []
        if self.skipped:
            notes.append(
                f"{len(self.skipped):,} file(s) could not be read and were skipped: "
                + _listed(self.skipped, "; ")
            )
        if self.upscaled:
            notes.append(
                f"{len(self.upscaled):,} image(s) smaller than the model's input "
                f"({self.spec.width}x{self.spec.height}) were upscaled: {_listed(self.upscaled)}"
            )
        if self.animated:
            notes.append(
                f"{len(self.animated):,} animated image(s), only the first frame used: "
                + _listed(self.animated)
            )
        return tuple(notes)


def _listed(items: Sequence[str], separator: str = ", ") -> str:
    shown = separator.join(item.rstrip(".") for item in items[:NAMES_LISTED])
    rest = len(items) - NAMES_LISTED
    return f"{shown}{separator}and {rest:,} more." if rest > 0 else f"{shown}."
