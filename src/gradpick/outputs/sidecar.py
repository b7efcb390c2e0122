"""Files beside a store: an SQLite file for what people add to it (verdicts, named
selections), and arrays kept so that a second session or server does not compute them again.

Beside the store's folder, not in it: inferring again replaces the folder, never what people
added. SQLite commits each transaction atomically, serialises writers from any number of
sessions or processes (each write takes the lock with ``BEGIN IMMEDIATE``), and survives a
process killed mid-write, so nothing committed is lost and nothing is half-written. Kept arrays
(``kept_arrays``) are only ever a saving: a missing, stale or damaged file is computed again.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import struct
import uuid
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gradpick.errors import DataError

__all__ = [
    "BUSY_SECONDS",
    "MAPPED_FROM_BYTES",
    "connect",
    "holds",
    "kept_arrays",
    "rows",
    "sibling",
    "unreadable",
    "writing",
]

BUSY_SECONDS = 30.0
"""How long a writer waits for another to finish: eight sessions at once wait milliseconds."""


def sibling(store_path: str | Path, suffix: str) -> Path:
    """The file beside the store at ``store_path``: ``outputs/`` → ``outputs<suffix>``."""
    store = Path(store_path).expanduser().resolve()
    return store.with_name(store.name + suffix)


def unreadable(path: Path, what: str, error: Exception) -> DataError:
    """The error of a damaged file: which one, and that the store itself is untouched."""
    return DataError(
        f"{path}: the {what} file cannot be read ({error}); the store itself is fine. Move the "
        "file aside to start a new one."
    )


def connect(path: Path, schema: str, what: str) -> sqlite3.Connection:
    """A connection in autocommit mode with the table of ``schema`` made if missing."""
    try:
        connection = sqlite3.connect(path, timeout=BUSY_SECONDS, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(schema)
    except sqlite3.DatabaseError as error:
        raise unreadable(path, what, error) from None
    return connection


def rows(path: Path, schema: str, what: str, query: str) -> list[Any]:
    """Every row ``query`` selects; none when the file is not there yet."""
    if not path.exists():
        return []
    connection = connect(path, schema, what)
    try:
        return connection.execute(query).fetchall()
    except sqlite3.DatabaseError as error:
        raise unreadable(path, what, error) from None
    finally:
        connection.close()


@contextmanager
def writing(path: Path, schema: str, what: str, saving: str) -> Iterator[sqlite3.Connection]:
    """One transaction holding the write lock: committed when the block ends, else undone
    (``saving`` names what was being saved, for the error). The folder is made when missing:
    the app's own store of a batch may not be written yet, and its verdicts still are."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataError(f"{path}: the {saving} was not saved ({error}).") from None
    connection = connect(path, schema, what)
    try:
        with connection:
            connection.execute("BEGIN IMMEDIATE")
            yield connection
    except sqlite3.DatabaseError as error:
        raise DataError(f"{path}: the {saving} was not saved ({error}).") from None
    finally:
        connection.close()


def kept_arrays(
    path: Path, key: str, compute: Callable[[], dict[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """The arrays ``compute`` gives, kept in the ``.npz`` file ``path`` under ``key`` (a digest
    of what they were computed from): read from there while it holds that key (mapped, read-only:
    ``_mapped``), else computed and written, whole or not at all (a temporary file renamed into
    place), as plain arrays read without pickle. Keeping is best effort: an unwritable place,
    or a file damaged or written for another key, costs the caller the computation, never an
    error."""
    kept = _kept_under(path, key)
    if kept is not None:
        return kept
    found = compute()
    partial = path.with_name(f"{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial.npz")
    arrays: dict[str, Any] = {"key": np.asarray(key), **found}
    with contextlib.suppress(OSError):
        np.savez(partial, **arrays)
        os.replace(partial, path)
    partial.unlink(missing_ok=True)
    return found


def holds(path: Path, key: str) -> bool:
    """Whether ``kept_arrays(path, key, ...)`` would read its arrays rather than compute them."""
    return _kept_under(path, key) is not None


def _kept_under(path: Path, key: str) -> dict[str, np.ndarray] | None:
    """The arrays kept in ``path`` under ``key`` (mapped), or None: no file, a damaged one, or
    one kept under another key."""
    with contextlib.suppress(OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        kept = _mapped(path)
        if str(kept["key"]) == key:
            return {name: array for name, array in kept.items() if name != "key"}
    return None


MAPPED_FROM_BYTES = 1 << 20
"""A kept array at least this large is mapped from its file rather than read."""


def _mapped(path: Path) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` file ``path``, each of at least ``MAPPED_FROM_BYTES`` mapped
    read-only from the file instead of read: the pages a caller touches are read when touched.
    A store's kept neighbours at 1,280,000 rows are 700 MB, which ``np.load`` took 3.6 s to
    copy, while the Triage tab reads a row's shares of labels and the neighbours of the few
    suspects it shows.

    ``np.savez`` stores each array uncompressed, as a ``.npy`` file inside the zip: its data
    starts after the zip's local header (30 bytes, then the member's name and extra field) and
    the ``.npy`` header. Everything is read through one open file, so a file replaced meanwhile
    (``os.replace``) is never mixed with its successor. A compressed member, or one of objects
    (which only pickle reads), raises ``ValueError``, like any damage the caller recomputes."""
    arrays: dict[str, np.ndarray] = {}
    with path.open("rb") as raw, zipfile.ZipFile(raw) as archive:
        for member in archive.infolist():
            if member.compress_type != zipfile.ZIP_STORED or not member.filename.endswith(".npy"):
                raise ValueError(f"{path}: {member.filename} is not an array stored whole")
            raw.seek(member.header_offset)
            header = raw.read(30)
            if header[:4] != b"PK\x03\x04":
                raise ValueError(f"{path}: no zip member at {member.header_offset}")
            name_length, extra_length = struct.unpack("<HH", header[26:30])
            raw.seek(member.header_offset + 30 + name_length + extra_length)
            version = np.lib.format.read_magic(raw)
            if version not in ((1, 0), (2, 0)):  # 3.0: a dtype's names in UTF-8, never here
                raise ValueError(f"{path}: {member.filename} is a .npy file of version {version}")
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(raw)
            if dtype.hasobject:
                raise ValueError(f"{path}: {member.filename} holds objects")
            name = member.filename.removesuffix(".npy")
            order: Literal["C", "F"] = "F" if fortran else "C"
            count = math.prod(shape)
            if count * dtype.itemsize < MAPPED_FROM_BYTES:
                data = raw.read(count * dtype.itemsize)
                arrays[name] = np.frombuffer(data, dtype, count).reshape(shape, order=order)
                continue
            mapped = np.memmap(raw, dtype, "r", offset=raw.tell(), shape=shape, order=order)
            arrays[name] = mapped.view(np.ndarray)
    return arrays
