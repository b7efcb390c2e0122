"""Verdicts are kept: concurrent writers, a killed writer, a corrupt file, the relabelling."""

from __future__ import annotations

import csv
import textwrap
from pathlib import Path

import pytest

from gradpick.errors import DataError, InputError
from gradpick.triage.verdicts import Verdict, VerdictBook, split_stale, write_relabelling
from tests.writers import kill_after, write_at_once

_WRITER = textwrap.dedent(
    """
    import sys
    from gradpick.triage.verdicts import Verdict, VerdictBook
    book = VerdictBook(__import__("pathlib").Path(sys.argv[1]))
    writer, count = int(sys.argv[2]), int(sys.argv[3])
    for i in range(count):
        book.record(Verdict(position=writer * 1000 + i, name=f"w{writer}/{i}", verdict="fine"))
        if count > 10000:
            print(i, flush=True)
    """
)


def test_a_book_sits_beside_its_store_and_keeps_the_latest(tmp_path: Path) -> None:
    (tmp_path / "outputs").mkdir()
    book = VerdictBook.beside(tmp_path / "outputs")
    assert book.path == (tmp_path / "outputs.verdicts.sqlite").resolve()
    assert book.history() == [] and not book.path.exists()
    book.record(Verdict(3, "cat/3.jpg", "label_wrong", new_label=5, note="a dog"))
    book.record(Verdict(4, "cat/4.jpg", "ambiguous"))
    book.record(Verdict(3, "cat/3.jpg", "fine"))
    latest = VerdictBook.beside(tmp_path / "outputs").latest()
    assert latest[3].verdict == "fine" and latest[4].verdict == "ambiguous"
    assert [v.verdict for v in book.history()] == ["label_wrong", "ambiguous", "fine"]
    assert book.history()[0].note == "a dog" and book.history()[0].new_label == 5


def test_eight_writers_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.verdicts.sqlite"
    assert write_at_once(_WRITER, path, 8, 40) == [0] * 8
    recorded = {(v.position, v.name) for v in VerdictBook(path).history()}
    assert recorded == {(w * 1000 + i, f"w{w}/{i}") for w in range(8) for i in range(40)}


def test_a_writer_killed_mid_write_leaves_every_committed_verdict(tmp_path: Path) -> None:
    path = tmp_path / "s.verdicts.sqlite"
    confirmed = kill_after(_WRITER, path, 200)
    positions = [v.position for v in VerdictBook(path).history()]
    assert positions == list(range(len(positions)))
    assert len(positions) > confirmed >= 200


def test_a_corrupt_file_is_reported_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "s.verdicts.sqlite"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(DataError, match="the store itself is fine"):
        VerdictBook(path).latest()
    with pytest.raises(DataError):
        VerdictBook(path).record(Verdict(0, "a", "fine"))
    assert path.read_bytes() == b"not a database at all" * 100


@pytest.mark.parametrize(
    ("verdict", "new_label", "message"),
    [
        ("wrong", None, "no verdict"),
        ("label_wrong", None, "names the right class"),
        ("fine", 3, "names the right class"),
    ],
)
def test_a_verdict_is_one_of_four(verdict: str, new_label: int | None, message: str) -> None:
    with pytest.raises(InputError, match=message):
        Verdict(0, "a", verdict, new_label=new_label)


def test_stale_verdicts_are_the_ones_whose_image_moved() -> None:
    verdicts = {0: Verdict(0, "a", "fine"), 1: Verdict(1, "b", "fine"), 5: Verdict(5, "f", "fine")}
    current, stale = split_stale(verdicts, {0: "a", 1: "x", 2: "c"})
    assert list(current) == [0] and [v.position for v in stale] == [1]  # 5: not these images
    current, stale = split_stale(verdicts, {5: "f", 1: "b"})
    assert sorted(current) == [1, 5] and not stale


def test_the_relabelling_lists_only_wrong_labels_by_class_name(tmp_path: Path) -> None:
    verdicts = {
        2: Verdict(2, "cat/2.jpg", "label_wrong", new_label=1),
        0: Verdict(0, "dog/0.jpg", "label_wrong", new_label=0),
        1: Verdict(1, "cat/1.jpg", "model_wrong"),
    }
    out = tmp_path / "relabel.csv"
    written = write_relabelling(verdicts, {0: 1, 1: 0, 2: 0}, ["cat", "dog"], out)
    with out.open() as handle:
        rows = list(csv.reader(handle))
    assert rows == [
        ["name", "old", "new"],
        ["dog/0.jpg", "dog", "cat"],
        ["cat/2.jpg", "cat", "dog"],
    ]
    assert written == 2
