"""Verdicts on suspect labels, kept beside the store they judge.

A person triaging says of an image *label wrong* (with the right class), *model wrong*,
*ambiguous* or *fine*, with an optional note. Each verdict is one row of an SQLite file beside
the store (``outputs/`` keeps ``outputs.verdicts.sqlite``): SQLite commits each row atomically,
serialises writers from any number of sessions or processes, and survives a process killed
mid-write, so no verdict is lost and none is half-written. Rows are never updated: a later
verdict on the same image supersedes the earlier one, and the history stays.

Outside the store's folder on purpose: replacing a store by inferring again never deletes the
verdicts, and they are matched to the new rows by position and name. Nothing here moves or
rewrites the user's images; ``relabelling`` lists what a training script should change.

Example::

    book = VerdictBook.beside("outputs/")
    book.record(Verdict(position=417, name="cat/0417.jpg", verdict="label_wrong", new_label=5))
    book.latest()[417].new_label  # 5
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gradpick.errors import InputError
from gradpick.outputs import sidecar as beside

__all__ = [
    "ACCEPTED_NOTE",
    "VERDICTS",
    "Verdict",
    "VerdictBook",
    "accept_suggestions",
    "split_stale",
    "write_relabelling",
]

VERDICTS = {
    "label_wrong": "label wrong",
    "model_wrong": "model wrong",
    "ambiguous": "ambiguous",
    "fine": "fine",
}
"""Each verdict's stored name and how the page says it."""
SUFFIX = ".verdicts.sqlite"
ACCEPTED_NOTE = "suggested label accepted in bulk (gradpick triage --accept flagged)"
"""The note of a verdict recorded by ``accept_suggestions``, so it reads as such later."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    verdict TEXT NOT NULL,
    new_label INTEGER,
    note TEXT NOT NULL DEFAULT '',
    time TEXT NOT NULL
)
"""


@dataclass(frozen=True)
class Verdict:
    """One person's judgement of one image's label."""

    position: int
    name: str
    verdict: str
    new_label: int | None = None
    """The right class when the label is wrong; None otherwise."""
    note: str = ""
    time: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise InputError(
                f"{self.verdict!r} is no verdict; choose one of {', '.join(VERDICTS)}."
            )
        if (self.verdict == "label_wrong") != (self.new_label is not None):
            raise InputError(
                "A 'label_wrong' verdict names the right class (new_label), and only it does."
            )


@dataclass(frozen=True)
class VerdictBook:
    """The verdicts file of one store."""

    path: Path

    @classmethod
    def beside(cls, store_path: str | Path) -> VerdictBook:
        """The verdicts of the store at ``store_path``: a sibling file, outside its folder."""
        return cls(beside.sibling(store_path, SUFFIX))

    def record(self, verdict: Verdict) -> None:
        """Append one verdict, committed before this returns."""
        self.record_all([verdict])

    def record_all(self, verdicts: Iterable[Verdict]) -> None:
        """Append several verdicts in one transaction: all of them or none."""
        rows = [(v.position, v.name, v.verdict, v.new_label, v.note, v.time) for v in verdicts]
        with beside.writing(self.path, _SCHEMA, "verdicts", "verdict") as connection:
            connection.executemany(
                "INSERT INTO verdicts (position, name, verdict, new_label, note, time) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )

    def history(self) -> list[Verdict]:
        """Every verdict ever recorded, oldest first; empty when there is no file yet."""
        query = "SELECT position, name, verdict, new_label, note, time FROM verdicts ORDER BY id"
        return [Verdict(*row) for row in beside.rows(self.path, _SCHEMA, "verdicts", query)]

    def latest(self) -> dict[int, Verdict]:
        """The verdict in force for each judged position (the most recent one)."""
        return {verdict.position: verdict for verdict in self.history()}


def accept_suggestions(
    book: VerdictBook, suggestions: Iterable[tuple[int, str, int]]
) -> tuple[list[Verdict], list[Verdict]]:
    """Record 'label wrong' with the suggested class for each ``(position, name, suggested)``
    that has no verdict in force on that image yet, in one transaction; a verdict already given
    (a person's 'fine', say) is kept, never overruled. Returns (recorded, kept). The explorer
    shows the recorded ones as it shows any verdict; ``write_relabelling`` exports them."""
    latest = book.latest()
    recorded, kept = [], []
    for position, name, suggested in suggestions:
        earlier = latest.get(int(position))
        if earlier is not None and earlier.name == name:
            kept.append(earlier)
            continue
        recorded.append(
            Verdict(int(position), name, "label_wrong", int(suggested), note=ACCEPTED_NOTE)
        )
    if recorded:
        book.record_all(recorded)
    return recorded, kept


def split_stale(
    verdicts: Mapping[int, Verdict], names: Mapping[int, str]
) -> tuple[dict[int, Verdict], list[Verdict]]:
    """The verdicts on these images (``names``: position -> name, of any subset of a source),
    split into those still in force and the stale ones, whose image is no longer at its
    position; verdicts on other positions are neither."""
    ours = {p: v for p, v in verdicts.items() if p in names}
    stale = [verdict for position, verdict in ours.items() if names[position] != verdict.name]
    return {p: v for p, v in ours.items() if v not in stale}, stale


def write_relabelling(
    verdicts: Mapping[int, Verdict],
    given: Mapping[int, int],
    class_names: Sequence[str],
    out: str | Path,
) -> int:
    """A CSV of ``name,old,new`` (class names) for every image judged 'label wrong', for a
    training script to apply; returns the number of rows. The images are never touched."""
    rows = [
        (v.name, class_names[given[v.position]], class_names[v.new_label])
        for v in sorted(verdicts.values(), key=lambda v: v.position)
        if v.verdict == "label_wrong" and v.new_label is not None and v.position in given
    ]
    out = Path(out)
    partial = out.with_name(f".{out.name}.partial")
    with partial.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "old", "new"])
        writer.writerows(rows)
    partial.replace(out)
    return len(rows)
