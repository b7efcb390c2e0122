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
import os
import sqlite3
import uuid
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from gradpick.errors import DataError

__all__ = [
    "BUSY_SECONDS",
    "connect",
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
    of what they were computed from): read from there while it holds that key, else computed
    and written, whole or not at all (a temporary file renamed into place), as plain arrays read
    without pickle. Keeping is best effort: an unwritable place, or a file damaged or written
    for another key, costs the caller the computation, never an error."""
    with (
        contextlib.suppress(OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile),
        np.load(path, allow_pickle=False) as kept,
    ):
        if str(kept["key"]) == key:
            return {name: kept[name] for name in kept.files if name != "key"}
    found = compute()
    partial = path.with_name(f"{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial.npz")
    arrays: dict[str, Any] = {"key": np.asarray(key), **found}
    with contextlib.suppress(OSError):
        np.savez(partial, **arrays)
        os.replace(partial, path)
    partial.unlink(missing_ok=True)
    return found
