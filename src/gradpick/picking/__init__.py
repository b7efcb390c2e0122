"""Choosing which images to explain: rules, typed indices and chart clicks, named selections,
feature space.

``rules`` are the pickers (misclassified, least confident, a confusion cell, ...) and the
parsers of typed indices and chart selections; ``named`` keeps picks under a name beside the
store; ``feature_space`` projects the batch's embeddings to two dimensions to pick from.
Names resolve on first use (``gradpick._lazy``), so importing the package runs none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradpick._lazy import lazy_exports

if TYPE_CHECKING:
    from gradpick.picking.feature_space import nearest_neighbours, project
    from gradpick.picking.named import NamedSelection, SelectionShelf
    from gradpick.picking.rules import RULES, merge, parse_indices, pick

__all__ = [
    "NamedSelection",
    "RULES",
    "SelectionShelf",
    "merge",
    "nearest_neighbours",
    "parse_indices",
    "pick",
    "project",
]

__getattr__, __dir__ = lazy_exports(__name__)
