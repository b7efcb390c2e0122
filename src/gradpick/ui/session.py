"""The types every section of the page shares: what the sidebar decided and what was loaded.

They live here, not in the panel that makes them, so no panel imports another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from gradpick.data import ImageBatch, ImageSource
from gradpick.models.zoo import LoadedModel
from gradpick.outputs.inference import InferenceResult
from gradpick.ui.heatmaps import HeatmapRequest
from gradpick.ui.service import DataChoice, ModelOption

__all__ = [
    "Loaded",
    "Settings",
]


@dataclass(frozen=True)
class Settings:
    """What the sidebar decided; ``data``/``source`` are None until a usable source exists."""

    data: DataChoice | None
    source: ImageSource | None
    model: ModelOption
    device: torch.device
    request: HeatmapRequest
    shared_scale: bool
    measure_memory: bool


@dataclass(frozen=True)
class Loaded:
    """A batch and its inference outputs: everything the sections below the sidebar share."""

    choice: DataChoice
    batch: ImageBatch
    option: ModelOption
    served: LoadedModel
    """The frozen model with its input spec and identity (what exports record)."""
    device: torch.device
    result: InferenceResult
    hover: Sequence[str]
    """One line per image: index, true and predicted class, confidence
    (``service.HoverLines``)."""
    fingerprint: str | None = None
    """The fingerprint a store's page takes its images to have: its folder check's answer, or,
    while that check runs beside the page, the one the store recorded. None: ask the check."""

    @property
    def model(self) -> nn.Module:
        return self.served.module

    @property
    def key(self) -> str:
        return self.choice.batch_key

    def __len__(self) -> int:
        return len(self.batch)
