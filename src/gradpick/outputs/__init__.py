"""A batch's inference outputs: inferring, the Parquet store format, filling and reopening stores,
Ray.

``inference`` runs a model over a batch or a whole source under ``torch.inference_mode()``;
``store_format`` is the one Parquet layout and its writer; ``stores`` fills a store from a source
and reopens it; ``distributed`` fills the same store from a Ray Data cluster; ``sidecar`` is the
SQLite file beside a store that keeps what people add to it (verdicts, named selections).
Names resolve on first use (``gradpick._lazy``), so importing the package runs none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradpick._lazy import lazy_exports

if TYPE_CHECKING:
    from gradpick.outputs.distributed import infer_on_ray
    from gradpick.outputs.inference import InferenceResult, infer, infer_source
    from gradpick.outputs.store_format import OpenedStore, StoreWriter, open_store
    from gradpick.outputs.stores import infer_to_store, open_stored

__all__ = [
    "InferenceResult",
    "OpenedStore",
    "StoreWriter",
    "infer",
    "infer_on_ray",
    "infer_source",
    "infer_to_store",
    "open_store",
    "open_stored",
]

__getattr__, __dir__ = lazy_exports(__name__)
