"""The markdown table every benchmark prints: one header, one alignment line, one line a row.

The benchmarks' rows differ in kind (a strategy's time against the floor, an inference pass, a
browser step, an engine's run) and each is written to its JSON file field by field, so each
keeps its own row type; what they share is how a table of formatted cells is written.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

__all__ = ["markdown_table"]


def markdown_table(
    columns: Sequence[str], rows: Iterable[Sequence[object]], right: Collection[str] = ()
) -> list[str]:
    """The table's lines; ``right`` names the columns aligned right (numbers)."""
    alignment = ("---:" if column in right else "---" for column in columns)
    return [_line(columns), "|" + "|".join(alignment) + "|", *(_line(row) for row in rows)]


def _line(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"
