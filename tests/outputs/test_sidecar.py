"""Files beside a store: arrays kept under a key, read back, found stale, never an error."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
