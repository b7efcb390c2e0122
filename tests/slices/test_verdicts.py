"""Slice verdicts: kept in the store's verdicts file beside the triage's own, the latest in
force, and only on the slices of the store they were given on, with exactly those images."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from gradpick.errors import InputError
from gradpick.slices.verdicts import SliceVerdict, SliceVerdictBook, in_force, members_digest
from gradpick.triage.verdicts import Verdict, VerdictBook


def _kept(model: str = "resnet20:abc", fingerprint: str = "f1") -> dict[str, Any]:
    """A slices file's content: slice 1 of images 5, 9, 2; slice 2 of images 1, 3."""
    return {
        "model": model,
        "fingerprint": fingerprint,
        "slices": [
            {"rank": 1, "positions": [5, 9, 2]},
            {"rank": 2, "positions": [1, 3]},
        ],
    }


def test_slice_verdicts_share_the_triage_file_and_the_latest_is_in_force(tmp_path: Path) -> None:
    (tmp_path / "outputs").mkdir()
    book = SliceVerdictBook.beside(tmp_path / "outputs")
    assert book.path == VerdictBook.beside(tmp_path / "outputs").path
    assert book.history() == [] and not book.path.exists()
    kept = _kept()
    first, second = kept["slices"]
    book.record(SliceVerdict.of(kept, first, "ambiguous"))
    VerdictBook.beside(tmp_path / "outputs").record(Verdict(3, "cat/3.jpg", "fine"))
    book.record(SliceVerdict.of(kept, second, "fine", note="a pose the model reads right"))
    book.record(SliceVerdict.of(kept, first, "model_wrong", note="the patch"))
    # A new process, the same file: both kinds of verdict are there, each in its own table.
    again = SliceVerdictBook.beside(tmp_path / "outputs")
    current = in_force(kept, again.history())
    assert {rank: v.verdict for rank, v in current.items()} == {1: "model_wrong", 2: "fine"}
    assert current[1].note == "the patch"
    assert [v.verdict for v in again.history()] == ["ambiguous", "fine", "model_wrong"]
    assert VerdictBook.beside(tmp_path / "outputs").latest()[3].verdict == "fine"
    with sqlite3.connect(book.path) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert {"verdicts", "slice_verdicts"} <= tables


def test_a_verdict_follows_its_images_not_its_rank(tmp_path: Path) -> None:
    book = SliceVerdictBook(tmp_path / "v.sqlite")
    kept = _kept()
    book.record(SliceVerdict.of(kept, kept["slices"][0], "model_wrong"))
    # Run again: the same images (in another order) are now slice 2, slice 1 is new.
    rerun = _kept()
    rerun["slices"] = [{"rank": 1, "positions": [7, 8]}, {"rank": 2, "positions": [2, 9, 5]}]
    assert {r: v.verdict for r, v in in_force(rerun, book.history()).items()} == {2: "model_wrong"}
    # One image more or less is another slice: the verdict is not applied to it.
    grown = _kept()
    grown["slices"][0]["positions"] = [5, 9, 2, 11]
    assert in_force(grown, book.history()) == {}


def test_verdicts_of_another_store_are_ignored(tmp_path: Path) -> None:
    book = SliceVerdictBook(tmp_path / "v.sqlite")
    kept = _kept()
    book.record(SliceVerdict.of(kept, kept["slices"][0], "model_wrong"))
    assert in_force(_kept(fingerprint="other images"), book.history()) == {}
    assert in_force(_kept(model="another model"), book.history()) == {}
    assert set(in_force(kept, book.history())) == {1}


def test_a_digest_depends_on_the_members_only() -> None:
    assert members_digest([3, 1, 2]) == members_digest((1, 2, 3))
    assert members_digest([1, 2]) != members_digest([1, 2, 3])
    assert members_digest([12]) != members_digest([1, 2])


def test_an_unknown_verdict_is_refused() -> None:
    with pytest.raises(InputError, match="'broken' is no verdict; choose one of label_wrong"):
        SliceVerdict.of(_kept(), _kept()["slices"][0], "broken")
