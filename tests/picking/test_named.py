"""Named selections are kept: both shelves alike, concurrent writers, a killed writer, a corrupt
file."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gradpick.errors import DataError, InputError
from gradpick.picking.named import NamedSelection, SelectionShelf, SessionShelf, Shelf
from tests.writers import kill_after, write_at_once

_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from gradpick.picking.named import NamedSelection, SelectionShelf
    shelf = SelectionShelf(Path(sys.argv[1]))
    writer, count = int(sys.argv[2]), int(sys.argv[3])
    for i in range(count):
        shelf.save(NamedSelection(f"w{writer}-{i}", (writer, i), note=f"by {writer}"))
        if count > 10000:
            print(i, flush=True)
    """
)


@pytest.fixture(params=["file", "session"])
def shelf(request: pytest.FixtureRequest, tmp_path: Path) -> Shelf:
    if request.param == "file":
        return SelectionShelf.beside(tmp_path / "outputs")
    return SessionShelf()


def test_a_shelf_saves_lists_renames_and_deletes(shelf: Shelf) -> None:
    shelf.save(NamedSelection("odd cats", (3, 417), note="blurry", params={"picks": "3,417"}))
    shelf.save(NamedSelection("birds", (9,)))
    assert [s.name for s in shelf.all()] == ["birds", "odd cats"]
    kept = shelf.get("odd cats")
    assert (kept.picks, kept.note, dict(kept.params)) == ((3, 417), "blurry", {"picks": "3,417"})
    shelf.rename("odd cats", "blurry cats")
    assert shelf.get("blurry cats").picks == (3, 417)
    with pytest.raises(InputError, match="no selection"):
        shelf.get("odd cats")
    shelf.delete("birds")
    assert [s.name for s in shelf.all()] == ["blurry cats"]


def test_names_are_unique_and_not_empty(shelf: Shelf) -> None:
    shelf.save(NamedSelection("a", (1,)))
    shelf.save(NamedSelection("b", (2,)))
    with pytest.raises(InputError, match="exists already"):
        shelf.save(NamedSelection("a", (5,)))
    with pytest.raises(InputError, match="exists already"):
        shelf.rename("b", "a")
    with pytest.raises(InputError, match="name of 1 to"):
        shelf.rename("b", "  ")
    with pytest.raises(InputError, match="no selection"):
        shelf.delete("zzz")
    assert {s.name: s.picks for s in shelf.all()} == {"a": (1,), "b": (2,)}


def test_the_file_sits_beside_the_store_and_survives_a_new_shelf(tmp_path: Path) -> None:
    SelectionShelf.beside(tmp_path / "outputs").save(NamedSelection("kept", (7,)))
    assert (tmp_path / "outputs.selections.sqlite").is_file()
    assert not (tmp_path / "outputs").exists()
    assert SelectionShelf.beside(tmp_path / "outputs").get("kept").picks == (7,)


def test_eight_writers_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.selections.sqlite"
    assert write_at_once(_WRITER, path, 8, 30) == [0] * 8
    kept = {(s.name, s.picks, s.note) for s in SelectionShelf(path).all()}
    assert kept == {(f"w{w}-{i}", (w, i), f"by {w}") for w in range(8) for i in range(30)}


def test_a_writer_killed_mid_write_leaves_every_committed_selection(tmp_path: Path) -> None:
    path = tmp_path / "s.selections.sqlite"
    confirmed = kill_after(_WRITER, path, 100)
    numbers = sorted(s.picks[1] for s in SelectionShelf(path).all())
    assert numbers == list(range(len(numbers)))
    assert len(numbers) > confirmed >= 100


def test_a_corrupt_file_is_reported_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.selections.sqlite"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(DataError, match="the store itself is fine"):
        SelectionShelf(path).all()
    with pytest.raises(DataError):
        SelectionShelf(path).save(NamedSelection("a", (1,)))
    assert path.read_bytes() == b"not a database at all" * 100
