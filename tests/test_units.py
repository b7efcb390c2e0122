"""Every byte readout speaks decimal megabytes, named."""

from __future__ import annotations

import pytest

from gradpick import units
from gradpick.runtime.measure import MemoryFigure


def test_a_megabyte_is_ten_to_the_sixth_bytes() -> None:
    assert units.MB == 1_000_000 and units.UNIT == "MB"
    assert units.megabytes(4_200_000) == pytest.approx(4.2)
    assert units.megabytes(None) is None


def test_format_bytes_names_the_unit() -> None:
    assert units.format_bytes(4_200_000) == "4.20 MB"
    assert units.format_bytes(1_234_567_890, 1, "GB") == "1.2 GB"
    assert units.format_bytes(5 * units.MB, 0) == "5 MB"
    assert units.format_bytes(None) == "not measured"
    assert units.format_bytes(None, missing="n/a") == "n/a"


def test_memory_figures_use_the_same_unit() -> None:
    assert MemoryFigure(2_500_000, "x").megabytes == units.megabytes(2_500_000)
