"""Is it the label or the model? Suspect labels ranked, and the verdicts people give them.

``ranking`` ranks suspect labels by confident learning and neighbour agreement, from stored
outputs; ``verdicts`` keeps what a person decided about each, beside the store.
Names resolve on first use (``gradpick._lazy``), so importing the package runs none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradpick._lazy import lazy_exports

if TYPE_CHECKING:
    from gradpick.triage.ranking import Triage, triage, triage_store
    from gradpick.triage.verdicts import VERDICTS, Verdict, VerdictBook

__all__ = ["Triage", "VERDICTS", "Verdict", "VerdictBook", "triage", "triage_store"]

__getattr__, __dir__ = lazy_exports(__name__)
