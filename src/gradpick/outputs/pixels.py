"""A store's decoded images: kept in one file beside the store, and decoded lazily until then.

The first server to open a large store shows its first page from the few images that page
draws (``data.batches.LazyBatch``), while a background process (``gradpick.outputs.pixels_job``,
at the lowest CPU priority, in a session of its own whose scheduling group yields to the
browser too, one per store at a time: a lock file beside it) decodes every image and writes
them beside the store (``STORE.pixels.pt``); the server takes that file over when it is
complete, and a second server, or this one restarted, loads it in a fraction of a second
instead of decoding 50,000 JPEGs again (12 s on two cores).
The file is written whole or not at all: a temporary file renamed once complete, so a job
stopped halfway leaves no file that reads as complete. Its names are one string (joined by
NUL, which no file name holds) and its positions one tensor: as 50,000 Python strings and ints
they took ``torch.load``'s safe unpickler 0.26 s, about all of the load (0.015 s now).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pickle
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from gradpick.data import ImageBatch, ImageSource
from gradpick.data.batches import LazyBatch, LazyPixels, read_positions
from gradpick.outputs.sidecar import sibling
from gradpick.outputs.stores import SOURCE_COLUMNS, open_stored, stored_source

__all__ = [
    "KEEP_PIXELS_AT_MOST",
    "LAZY_ABOVE",
    "PIXELS_SUFFIX",
    "keep",
    "lazy_batch",
    "load_kept",
    "main",
]

KEEP_PIXELS_AT_MOST = 1 << 30
"""A store's decoded batch is kept beside it up to this many bytes of pixels (50,000 CIFAR-10
images: 154 MB); a larger one (ImageNet at 224 pixels) is decoded again, image by image as
views show them, by each server."""
LAZY_ABOVE = 10_000
"""A store's batch of more images than this is decoded lazily (``lazy_batch``); a smaller one
at once, in a few seconds at most."""
PIXELS_SUFFIX = ".pixels.pt"
_NAMES_SEPARATOR = "\0"
_UNREADABLE = (
    OSError, EOFError, RuntimeError, ValueError, TypeError, KeyError, pickle.UnpicklingError
)  # fmt: skip
"""What a missing, damaged or foreign kept file raises: it is then decoded again."""


def load_kept(store_path: str | Path, key: str, mmap: bool = False) -> ImageBatch | None:
    """The batch kept beside the store under ``key`` (the folder's fingerprint, the input spec,
    the batch), or None when there is none, it is damaged, or it holds other pixels. Loaded
    with ``weights_only`` (the file holds only tensors, strings and numbers); ``mmap`` maps the
    pixels instead of reading them."""
    path = sibling(store_path, PIXELS_SUFFIX)
    if not path.is_file():
        return None
    with contextlib.suppress(*_UNREADABLE):
        kept = torch.load(path, weights_only=True, mmap=mmap)
        if kept.get("key") == key:
            kept.pop("key")
            names, positions = kept["names"], kept["positions"]
            if isinstance(names, str):  # as ``keep`` writes them (a file of before: tuples)
                kept["names"] = tuple(names.split(_NAMES_SEPARATOR)) if names else ()
                kept["positions"] = tuple(positions.tolist())
            if len(kept["names"]) != len(kept["images"]):
                return None
            return ImageBatch(**kept)
    return None


def keep(
    batch: ImageBatch, store_path: str | Path, key: str, at_most: int = KEEP_PIXELS_AT_MOST
) -> bool:
    """Write ``batch`` beside the store under ``key``, whole or not at all (a temporary file
    renamed when complete); best effort: False when it is over ``at_most`` bytes or the disk
    refuses it."""
    images = batch.images
    if images.numel() * images.element_size() > at_most:
        return False
    path = sibling(store_path, PIXELS_SUFFIX)
    fields = {name: getattr(batch, name) for name in ImageBatch.__dataclass_fields__}
    fields["names"] = _NAMES_SEPARATOR.join(batch.names)
    fields["positions"] = torch.tensor(batch.positions, dtype=torch.int64)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        torch.save({**fields, "images": images, "key": key}, partial)
        os.replace(partial, path)
        return True
    except (OSError, RuntimeError):
        return False
    finally:
        partial.unlink(missing_ok=True)


def lazy_batch(
    store_path: str | Path,
    key: str,
    source: ImageSource,
    wanted: Sequence[int],
    at_most: int = KEEP_PIXELS_AT_MOST,
) -> LazyBatch:
    """The store's images at ``wanted`` positions, none decoded yet; a background process
    decodes them all and keeps them beside the store (when they fit ``at_most``), and the batch
    takes its file over once complete.

    Only positions the store holds are in the batch (an unreadable file has no row), and the
    store's own notes (skipped, upscaled files) are the batch's, as a full decode would say."""
    opened = open_stored(str(store_path), ["position"])
    held = opened.table["position"].to_numpy()
    wanted_array = np.asarray(wanted, dtype=np.int64)
    whole = np.array_equal(wanted_array, held)  # a whole store's batch: no lookup of each
    positions = wanted_array if whole else wanted_array[np.isin(wanted_array, held)]
    pixels = LazyPixels(source, positions)
    labels = source.labels()
    batch = LazyBatch(
        pixels,
        None if labels is None else labels[torch.from_numpy(positions)],
        source.class_names,
        tuple(source.names(positions.tolist())),
        source.description,
        tuple(opened.metadata.get("notes") or ()),
        source.origin().get("split"),
    )
    if pixels.buffer.numel() <= at_most:
        pixels.finished = _keep_in_background(store_path, key, positions)
    return batch


def _keep_in_background(
    store_path: str | Path, key: str, positions: np.ndarray
) -> Callable[[], torch.Tensor | None]:
    """What asks whether the process that decodes and keeps the pixels is done (its pixels,
    mapped from the kept file, or None). The process starts when that is first asked, as a
    page first shows the batch's images, not when the batch is opened: a server's warm-up opens
    the store named on its command line before it serves, and the job's start (importing
    torch) would then meet its first visitor's browser loading the page."""
    lock = threading.Lock()
    process: list[subprocess.Popen[bytes] | None] = []
    outcome: list[torch.Tensor | None] = []

    def finished() -> torch.Tensor | None:
        with lock:
            if not process:
                process.append(_start_job(store_path, key, positions))
            job = process[0]
            if job is None:
                return None  # no process: the views decode what they show
            if not outcome:
                if job.poll() is None:
                    return None
                kept = load_kept(store_path, key, mmap=True)
                same = kept is not None and np.array_equal(kept.positions, positions)
                outcome.append(kept.images if kept is not None and same else None)
            return outcome[0]

    return finished


def _start_job(
    store_path: str | Path, key: str, positions: np.ndarray
) -> subprocess.Popen[bytes] | None:
    """The process that decodes and keeps the pixels (``main``, run by ``pixels_job``), or None
    when it cannot be started."""
    job = {"store": str(Path(store_path).resolve()), "key": key, "positions": positions.tolist()}
    try:
        # A file, not a pipe: the job's 50,000 positions would fill a pipe's buffer, and the
        # write would wait for the process to import torch before it reads them.
        handle, name = tempfile.mkstemp(prefix="gradpick-pixels-", suffix=".json")
        with os.fdopen(handle, "w") as written:
            json.dump(job, written)
        return subprocess.Popen(
            [sys.executable, "-m", "gradpick.outputs.pixels_job", str(os.getpid()), name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a scheduling group of its own (``pixels_job``)
        )
    except OSError:
        return None


def main(job_file: str) -> None:
    """The background job: read ``{"store", "key", "positions"}`` from the JSON ``job_file``
    (then removed), decode those images of the store's folder and keep them beside the store."""
    job = json.loads(Path(job_file).read_text())
    Path(job_file).unlink(missing_ok=True)
    lock = sibling(job["store"], PIXELS_SUFFIX + ".lock")
    with lock.open("w") as held:
        try:  # one job per store: a second server's, or a restarted one's, leaves it to the first
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return
        if load_kept(job["store"], job["key"], mmap=True) is not None:
            return  # kept by the job that held the lock before
        source = stored_source(open_stored(job["store"], SOURCE_COLUMNS))
        batch = read_positions(source, job["positions"], workers=0)
        keep(batch, job["store"], job["key"])
