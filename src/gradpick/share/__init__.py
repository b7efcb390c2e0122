"""Findings that travel: the one export schema and the self-contained HTML report.

``export`` writes the picks' arrays and JSON the same way from every front end; ``report``
turns that content into one HTML file someone without gradpick can open.
Names resolve on first use (``gradpick._lazy``), so importing the package runs none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradpick._lazy import lazy_exports

if TYPE_CHECKING:
    from gradpick.share.export import Export, of_picks
    from gradpick.share.report import build_report, of_batch, write_report

__all__ = ["Export", "build_report", "of_batch", "of_picks", "write_report"]

__getattr__, __dir__ = lazy_exports(__name__)
