"""Files beside a store: arrays kept under a key, read back, found stale, never an error."""

from __future__ import annotations

import mmap
import zipfile
from pathlib import Path

import numpy as np
import pytest

from gradpick.outputs import sidecar
from gradpick.outputs.sidecar import kept_arrays


def test_kept_arrays_are_read_back_under_their_key_and_computed_again_otherwise(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.kept.npz"
    computed: list[str] = []

    def compute(value: float) -> dict[str, np.ndarray]:
        computed.append(str(value))
        return {"points": np.full((3, 2), value, dtype=np.float32), "flag": np.asarray(True)}

    first = kept_arrays(path, "a", lambda: compute(1.0))
    again = kept_arrays(path, "a", lambda: compute(2.0))
    assert computed == ["1.0"] and set(again) == {"points", "flag"}
    np.testing.assert_array_equal(again["points"], first["points"])
    assert again["points"].dtype == np.float32 and bool(again["flag"])
    other = kept_arrays(path, "b", lambda: compute(3.0))  # another key: stale, replaced
    assert computed == ["1.0", "3.0"] and float(other["points"][0, 0]) == 3.0
    assert float(kept_arrays(path, "b", lambda: compute(4.0))["points"][0, 0]) == 3.0
    path.write_bytes(b"damaged")
    assert float(kept_arrays(path, "b", lambda: compute(5.0))["points"][0, 0]) == 5.0
    unwritable = tmp_path / "missing-folder" / "store.kept.npz"
    assert float(kept_arrays(unwritable, "b", lambda: compute(6.0))["points"][0, 0]) == 6.0
    assert computed == ["1.0", "3.0", "5.0", "6.0"]
    assert not unwritable.exists() and not list(tmp_path.glob("*.partial*"))


KINDS = {
    "indices": np.arange(3 * 70_000, dtype=np.int64).reshape(70_000, 3),
    "fortran": np.asfortranarray(np.linspace(0, 1, 4 * 70_000, dtype=np.float32).reshape(-1, 4)),
    "shares": np.random.default_rng(0).random((40_000, 10)),
    "small": np.array([[1.5, -2.0]], dtype=np.float16),
    "empty": np.zeros((0, 7), dtype=np.int32),
    "flag": np.asarray(True),
}
"""Arrays as kept beside a store: large ones (mapped), C and Fortran order, small and empty
ones and a 0-d flag (read)."""


def test_kept_arrays_are_mapped_from_the_file_read_only_and_equal_to_what_was_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.kept.npz"
    kept_arrays(path, "k", lambda: dict(KINDS))
    again = kept_arrays(path, "k", lambda: pytest.fail("computed again"))
    assert set(again) == set(KINDS)
    for name, array in KINDS.items():
        read = again[name]
        assert type(read) is np.ndarray and read.dtype == array.dtype and read.shape == array.shape
        np.testing.assert_array_equal(read, array)
        assert not read.flags.writeable  # shared by every session: nobody writes to it
        mapped = array.nbytes >= sidecar.MAPPED_FROM_BYTES
        assert mapped == (name in {"indices", "fortran", "shares"})
        assert mapped == isinstance(_memory_under(read), mmap.mmap)
    assert again["fortran"].flags.f_contiguous


def _memory_under(array: np.ndarray) -> object:
    """What holds an array's memory: the first base that is not an array."""
    base: object = array
    while isinstance(base, np.ndarray):
        base = base.base
    return base


def test_a_compressed_or_truncated_file_is_computed_again(tmp_path: Path) -> None:
    """Only arrays stored whole can be mapped: a file written compressed (not by
    ``kept_arrays``) or cut short is recomputed and replaced, never an error."""
    path = tmp_path / "store.kept.npz"
    np.savez_compressed(path, key=np.asarray("k"), indices=KINDS["indices"])
    fresh = {"indices": KINDS["indices"] + 1}
    np.testing.assert_array_equal(
        kept_arrays(path, "k", lambda: fresh)["indices"], fresh["indices"]
    )
    with zipfile.ZipFile(path) as archive:
        assert {m.compress_type for m in archive.infolist()} == {zipfile.ZIP_STORED}
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    again = {"indices": KINDS["indices"] + 2}
    np.testing.assert_array_equal(
        kept_arrays(path, "k", lambda: again)["indices"], again["indices"]
    )
