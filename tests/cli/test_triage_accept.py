"""``gradpick triage --accept flagged``: the suggested labels of the flagged images recorded as
verdicts in one go (a person's earlier verdict kept), so ``--export`` lists them and the
explorer shows them."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pytest

from gradpick import data
from gradpick.cli import main
from gradpick.triage.verdicts import ACCEPTED_NOTE, Verdict, VerdictBook
from tests.cli.test_triage_cli import MISLABELLED, write_store


@pytest.fixture
def cifar_like(cifar_like_factory: Callable[[int], Path]) -> Path:
    return cifar_like_factory(40)


def test_accepting_the_flagged_records_their_suggestions_and_exports_them(
    cifar_like: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    opened = write_store(cifar_like / "test", tmp_path / "outputs")
    source = data.image_folder(cifar_like / "test")
    given, names, classes = source.labels(), source.names(range(len(source))), source.class_names
    book = VerdictBook.beside(opened.path)
    # A person already looked at row 17 and called it fine: bulk acceptance must keep that.
    book.record(Verdict(17, names[17], "fine"))
    out = tmp_path / "relabel.csv"
    arguments = ["triage", "--outputs", str(opened.path), "--accept", "flagged"]
    assert main([*arguments, "--export", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "accepted 2 suggested label(s) of 3 flagged as verdicts" in printed
    assert "1 already judged, kept as they were" in printed
    # By construction the mislabelled rows' outputs point at the next class.
    expected = [
        [names[row], classes[int(given[row])], classes[(int(given[row]) + 1) % len(classes)]]
        for row in MISLABELLED
        if row != 17
    ]
    with out.open(newline="") as handle:
        assert list(csv.reader(handle)) == [["name", "old", "new"], *expected]
    latest = book.latest()
    assert latest[17].verdict == "fine"
    for row in (3, 28):
        assert latest[row].verdict == "label_wrong" and latest[row].note == ACCEPTED_NOTE
    # Accepting again records nothing new: each flagged image has its verdict now.
    assert main(arguments) == 0
    assert "accepted 0 suggested label(s) of 3 flagged" in capsys.readouterr().out
    assert len(book.history()) == 3
