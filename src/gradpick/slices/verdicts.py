"""Verdicts on slices, kept in the store's verdicts file beside the triage's verdicts.

A person reading a slice card says whether its errors are the *model wrong* (a real systematic
failure), *label wrong* (the images are labelled wrongly, not called wrongly), *ambiguous* or
*fine* (not a problem): the triage's words (``gradpick.triage.verdicts.VERDICTS``), said of a
group instead of an image. They go to the same SQLite file beside the store
(``outputs.verdicts.sqlite``, through ``gradpick.outputs.sidecar``), in a table of their own, so
they survive a restart and a new inference, and eight sessions judging at once lose nothing.
Rows are never updated: a later verdict on a slice supersedes the earlier one.

A slice's rank alone names nothing once ``gradpick slices`` runs again, so each verdict keeps
the store's model identity and source fingerprint and a digest of the slice's members: it is in
force only on the slices file of that store with a slice of exactly those images
(``in_force``). A verdicts file copied from another store, or a slice that changed, is ignored.

Example::

    book = SliceVerdictBook.beside("outputs/")
    kept, _ = read_beside(open_store("outputs/"))
    book.record(SliceVerdict.of(kept, kept["slices"][0], "model_wrong", note="the patch"))
    in_force(kept, book.history())[1].verdict  # 'model_wrong'
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gradpick.errors import InputError
from gradpick.outputs import sidecar as beside
from gradpick.triage.verdicts import VERDICTS, VerdictBook

__all__ = ["SliceVerdict", "SliceVerdictBook", "in_force", "members_digest"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS slice_verdicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    rank INTEGER NOT NULL,
    members TEXT NOT NULL,
    model TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    verdict TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT '',
    time TEXT NOT NULL
)
"""


def members_digest(positions: Iterable[int]) -> str:
    """A short digest of a slice's store positions (in any order): the same images, the same
    digest, whatever rank the slice has in a later run."""
    text = ",".join(str(p) for p in sorted(int(p) for p in positions))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SliceVerdict:
    """One person's judgement of one slice of one store."""

    rank: int
    members: str
    """``members_digest`` of the slice's store positions."""
    model: str
    """The store's model identity, as the slices file records it."""
    fingerprint: str
    """The store's source fingerprint, as the slices file records it."""
    verdict: str
    note: str = ""
    time: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise InputError(
                f"{self.verdict!r} is no verdict; choose one of {', '.join(VERDICTS)}."
            )

    @classmethod
    def of(
        cls, kept: Mapping[str, Any], row: Mapping[str, Any], verdict: str, note: str = ""
    ) -> SliceVerdict:
        """The verdict on slice ``row`` of the slices file ``kept`` (``read_beside``'s)."""
        return cls(
            int(row["rank"]),
            members_digest(row["positions"]),
            str(kept.get("model")),
            str(kept.get("fingerprint")),
            verdict,
            note,
        )


@dataclass(frozen=True)
class SliceVerdictBook:
    """The slice verdicts of one store: a table of its verdicts file."""

    path: Path

    @classmethod
    def beside(cls, store_path: str | Path) -> SliceVerdictBook:
        """The store's verdicts file (``VerdictBook.beside``'s), outside its folder."""
        return cls(VerdictBook.beside(store_path).path)

    def record(self, verdict: SliceVerdict) -> None:
        """Append one verdict, committed before this returns."""
        row = (
            verdict.rank,
            verdict.members,
            verdict.model,
            verdict.fingerprint,
            verdict.verdict,
            verdict.note,
            verdict.time,
        )
        with beside.writing(self.path, _SCHEMA, "verdicts", "verdict") as connection:
            connection.execute(
                "INSERT INTO slice_verdicts (rank, members, model, fingerprint, verdict, note, "
                "time) VALUES (?, ?, ?, ?, ?, ?, ?)",
                row,
            )

    def history(self) -> list[SliceVerdict]:
        """Every slice verdict ever recorded, oldest first; empty when there is no file yet."""
        query = (
            "SELECT rank, members, model, fingerprint, verdict, note, time "
            "FROM slice_verdicts ORDER BY id"
        )
        return [SliceVerdict(*row) for row in beside.rows(self.path, _SCHEMA, "verdicts", query)]


def in_force(kept: Mapping[str, Any], history: Sequence[SliceVerdict]) -> dict[int, SliceVerdict]:
    """Rank -> the latest verdict on that slice of the slices file ``kept``: only verdicts given
    on this store (its model and fingerprint) to a slice of exactly the same images."""
    model, fingerprint = str(kept.get("model")), str(kept.get("fingerprint"))
    by_members = {
        v.members: v for v in history if v.model == model and v.fingerprint == fingerprint
    }
    current = {}
    for row in kept.get("slices", []):
        found = by_members.get(members_digest(row["positions"]))
        if found is not None:
            current[int(row["rank"])] = found
    return current
