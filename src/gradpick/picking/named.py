"""Named selections: picks kept under a name, with a note and the link that reopens them.

Kept beside the batch's store (``outputs/`` keeps ``outputs.selections.sqlite``, as
``gradpick.triage.verdicts`` keeps its verdicts: ``gradpick.outputs.sidecar``), so they survive a
restart and
a new inference of the same store, and eight sessions saving at once lose nothing. A hosted
demo writes nothing to its disk: ``SessionShelf`` keeps them in the visitor's session instead,
with the same methods.

Example::

    shelf = SelectionShelf.beside("outputs/")
    shelf.save(NamedSelection("odd cats", (3, 417), note="all blurry"))
    shelf.get("odd cats").picks  # (3, 417)
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from gradpick.errors import InputError
from gradpick.outputs import sidecar as beside

__all__ = ["SUFFIX", "NamedSelection", "SelectionShelf", "SessionShelf", "Shelf"]

SUFFIX = ".selections.sqlite"
MAX_NAME = 80

_SCHEMA = """
CREATE TABLE IF NOT EXISTS selections (
    name TEXT PRIMARY KEY,
    picks TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT '',
    params TEXT NOT NULL DEFAULT '{}',
    time TEXT NOT NULL
)
"""


@dataclass(frozen=True)
class NamedSelection:
    """Picked images under a name; ``params`` are the deep link of the view they were saved in."""

    name: str
    picks: tuple[int, ...]
    note: str = ""
    params: Mapping[str, str] = field(default_factory=dict)
    time: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def __post_init__(self) -> None:
        _check_name(self.name)


def _check_name(name: str) -> None:
    if not name.strip() or len(name) > MAX_NAME:
        raise InputError(f"A selection needs a name of 1 to {MAX_NAME} characters; got {name!r}.")


class Shelf(Protocol):
    """Where named selections are kept: a file beside the store, or a hosted session."""

    def save(self, selection: NamedSelection) -> None: ...
    def all(self) -> list[NamedSelection]: ...
    def get(self, name: str) -> NamedSelection: ...
    def rename(self, name: str, new_name: str) -> None: ...
    def delete(self, name: str) -> None: ...


def _taken(name: str) -> InputError:
    return InputError(f"A selection named {name!r} exists already: choose another name.")


def _missing(name: str) -> InputError:
    return InputError(f"There is no selection named {name!r} (deleted in another session?).")


@dataclass(frozen=True)
class SelectionShelf:
    """The named selections of one store, in an SQLite file beside it."""

    path: Path

    @classmethod
    def beside(cls, store_path: str | Path) -> SelectionShelf:
        return cls(beside.sibling(store_path, SUFFIX))

    def save(self, selection: NamedSelection) -> None:
        """Add ``selection``, committed before this returns; a name in use is refused."""
        row = (
            selection.name,
            json.dumps(list(selection.picks)),
            selection.note,
            json.dumps(dict(selection.params), sort_keys=True),
            selection.time,
        )
        with beside.writing(self.path, _SCHEMA, "selections", "selection") as connection:
            _refuse_taken(connection, selection.name)
            connection.execute(
                "INSERT INTO selections (name, picks, note, params, time) VALUES (?, ?, ?, ?, ?)",
                row,
            )

    def all(self) -> list[NamedSelection]:
        """Every selection, by name; empty when none was saved yet."""
        if not self.path.exists():
            return []
        connection = beside.connect(self.path, _SCHEMA, "selections")
        try:
            rows = connection.execute(
                "SELECT name, picks, note, params, time FROM selections ORDER BY name"
            ).fetchall()
            return [
                NamedSelection(name, tuple(json.loads(picks)), note, json.loads(params), time)
                for name, picks, note, params, time in rows
            ]
        except (sqlite3.DatabaseError, ValueError, TypeError) as error:
            raise beside.unreadable(self.path, "selections", error) from None
        finally:
            connection.close()

    def get(self, name: str) -> NamedSelection:
        found = [selection for selection in self.all() if selection.name == name]
        if not found:
            raise _missing(name)
        return found[0]

    def rename(self, name: str, new_name: str) -> None:
        _check_name(new_name)
        with beside.writing(self.path, _SCHEMA, "selections", "new name") as connection:
            _refuse_taken(connection, new_name)
            changed = connection.execute(
                "UPDATE selections SET name = ? WHERE name = ?", (new_name, name)
            ).rowcount
            if not changed:
                raise _missing(name)

    def delete(self, name: str) -> None:
        with beside.writing(self.path, _SCHEMA, "selections", "deletion") as connection:
            if not connection.execute("DELETE FROM selections WHERE name = ?", (name,)).rowcount:
                raise _missing(name)


def _refuse_taken(connection: sqlite3.Connection, name: str) -> None:
    """Inside the write transaction, so two sessions saving one name cannot both pass."""
    if connection.execute("SELECT 1 FROM selections WHERE name = ?", (name,)).fetchone():
        raise _taken(name)


@dataclass
class SessionShelf:
    """Named selections kept in memory (a hosted visitor's session): the same rules, no disk."""

    kept: dict[str, NamedSelection] = field(default_factory=dict)

    def save(self, selection: NamedSelection) -> None:
        if selection.name in self.kept:
            raise _taken(selection.name)
        self.kept[selection.name] = selection

    def all(self) -> list[NamedSelection]:
        return sorted(self.kept.values(), key=lambda selection: selection.name)

    def get(self, name: str) -> NamedSelection:
        if name not in self.kept:
            raise _missing(name)
        return self.kept[name]

    def rename(self, name: str, new_name: str) -> None:
        _check_name(new_name)
        if new_name in self.kept:
            raise _taken(new_name)
        self.kept[new_name] = replace(self.get(name), name=new_name)
        del self.kept[name]

    def delete(self, name: str) -> None:
        self.get(name)
        del self.kept[name]
