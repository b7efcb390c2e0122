"""Where does the model fail systematically, and why? Error-aware slices with located evidence.

``features`` turns the map of each row's predicted class into translation-invariant descriptors
of its evidence; ``discover`` clusters them with the label, the prediction and the error
(Domino's idea) into ranked, described slices; ``verify`` tests each slice by removing its
evidence against removing the same area at random; ``stored`` runs all of it over a store and
keeps the result beside it; ``verdicts`` keeps people's verdicts on slices in the store's
verdicts file. Names resolve on first use (``gradpick._lazy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradpick._lazy import lazy_exports

if TYPE_CHECKING:
    from gradpick.slices.discover import Slice, cluster, summarise
    from gradpick.slices.features import descriptors, evidence_maps
    from gradpick.slices.stored import Found, find_slices, read_beside
    from gradpick.slices.verdicts import SliceVerdict, SliceVerdictBook
    from gradpick.slices.verify import Effect, interventions, judged

__all__ = [
    "Effect",
    "Found",
    "Slice",
    "SliceVerdict",
    "SliceVerdictBook",
    "cluster",
    "descriptors",
    "evidence_maps",
    "find_slices",
    "interventions",
    "judged",
    "read_beside",
    "summarise",
]

__getattr__, __dir__ = lazy_exports(__name__)
