"""One convention for byte counts in every readout: decimal megabytes, 1 MB = 10**6 bytes.

The benchmark tables, the CLI, the explorer's readouts, its upload limits and the README all
speak of MB in this one sense, so a figure read in one place means the same in another.
"""

from __future__ import annotations

__all__ = ["BYTES_PER", "MB", "UNIT", "UNIT_NOTE", "format_bytes", "megabytes"]

MB = 10**6
UNIT = "MB"
UNIT_NOTE = "1 MB = 10^6 bytes"
BYTES_PER = {"kB": 10**3, "MB": MB, "GB": 10**9}
"""The decimal units a readout may use; ``MB`` is the default."""


def megabytes(count: int | None) -> float | None:
    """``count`` bytes in MB, or None when nothing was counted."""
    return None if count is None else count / MB


def format_bytes(
    count: int | None, digits: int = 2, unit: str = UNIT, missing: str = "not measured"
) -> str:
    """E.g. ``format_bytes(4_200_000) == '4.20 MB'``; ``missing`` when ``count`` is None."""
    if count is None:
        return missing
    return f"{count / BYTES_PER[unit]:,.{digits}f} {unit}"
