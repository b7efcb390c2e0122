"""The explorer's work without Streamlit: data choices, models, devices and the batch table.

Plain functions over gradpick's library, so tests call them directly; the page only adds
caching (``gradpick.ui.cache``) and drawing. Every identity used as a cache key is built here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd
import torch
from torch import nn

from gradpick import data, devices, models
from gradpick.data import ImageBatch, ImageSource, ProgressCallback
from gradpick.errors import DataError, InputError
from gradpick.infer import InferenceResult

DEFAULT_BATCH_SIZE = 1000
SOURCE_KINDS = ("cifar10", "folder", "upload")
SOURCE_LABELS = {"cifar10": "CIFAR-10", "folder": "Local folder", "upload": "Uploaded images"}
RANDOM_WEIGHTS_SEED = 0
"""Seed of the stand-in model offered while no trained weights ship: same model every run."""


@dataclass(frozen=True)
class Upload:
    """One uploaded file; ``identity`` (Streamlit's file id) keys caches instead of the bytes."""

    name: str
    data: bytes = field(repr=False)
    identity: str


@dataclass(frozen=True)
class DataChoice:
    """Which images to infer: a source and a slice (or seeded sample) of it."""

    kind: str = "cifar10"
    split: str = "test"
    folder: str = ""
    start: int = 0
    size: int | None = DEFAULT_BATCH_SIZE
    """None takes the whole source (uploads always do)."""
    seed: int | None = None
    """A seeded random sample of ``size`` images instead of the slice from ``start``."""
    uploads: tuple[Upload, ...] = ()

    @property
    def source_key(self) -> str:
        if self.kind == "upload":
            return "upload:" + ",".join(upload.identity for upload in self.uploads)
        if self.kind == "folder":
            return f"folder:{self.folder.strip()}:{self.split}"
        origin = os.environ.get(data.CIFAR10_DIR_ENV) or "torchvision"
        return f"cifar10:{self.split}:{origin}"

    @property
    def batch_key(self) -> str:
        return f"{self.source_key}|start={self.start}|size={self.size}|seed={self.seed}"


def open_source(choice: DataChoice, progress: ProgressCallback | None = None) -> ImageSource:
    """The image source a choice names; ``progress`` follows a CIFAR-10 download."""
    if choice.kind == "cifar10":
        return data.default_cifar10(choice.split, progress=progress)
    if choice.kind == "folder":
        if not choice.folder.strip():
            raise DataError(
                "Type the path of a folder: an ImageFolder tree (one sub-folder per class), a "
                "folder holding train/ and test/ trees, or an extracted cifar-10-batches-py."
            )
        return data.open_source(choice.folder.strip(), choice.split)
    if choice.kind == "upload":
        return data.images_from_files([(upload.name, upload.data) for upload in choice.uploads])
    raise InputError(f"Unknown data source '{choice.kind}'; use one of {', '.join(SOURCE_KINDS)}.")


def read_batch(
    source: ImageSource, choice: DataChoice, progress: ProgressCallback | None = None
) -> ImageBatch:
    """The batch a choice names, decoded chunk by chunk with progress."""
    return data.load_batch(
        source, start=choice.start, size=choice.size, seed=choice.seed, progress=progress
    )


def sorted_by_class(source: ImageSource) -> bool:
    """Whether the source lists its images class by class (an ImageFolder tree does).

    A slice of such a source holds one or two classes, so the page then defaults to a seeded
    random sample instead.
    """
    labels = source.labels()
    if labels is None or len(labels) < 2 or bool(labels[0] == labels[-1]):
        return False
    return bool((labels[1:] >= labels[:-1]).all())


# ----------------------------------------------------------------------------- models


@dataclass(frozen=True)
class ModelOption:
    """A built-in model as the sidebar offers it: shipped weights with a card, or stand-in."""

    name: str
    card: dict[str, Any] | None = field(default=None, compare=False)
    shipped: bool = False

    @property
    def accuracy(self) -> float | None:
        value = None if self.card is None else self.card.get("test_accuracy")
        return None if value is None else float(value)

    @property
    def identity(self) -> str:
        """Names the exact weights, so caches never mix two trainings of one architecture."""
        if not self.shipped:
            return f"{self.name}:random-seed{RANDOM_WEIGHTS_SEED}"
        digest = None if self.card is None else self.card.get("sha256")
        return f"{self.name}:{digest or 'shipped'}"

    @property
    def label(self) -> str:
        if not self.shipped:
            return f"{self.name} · random weights (no trained weights shipped yet)"
        if self.accuracy is None:
            return f"{self.name} · shipped weights (no model card)"
        return f"{self.name} · {self.accuracy:.1%} test accuracy"


def model_options() -> list[ModelOption]:
    """Every built-in architecture, the ones with shipped weights first (best first)."""
    shipped = models.shipped_models()
    options = [ModelOption(name, models.model_card(name), shipped=True) for name in shipped]
    options += [ModelOption(name) for name in models.ARCHITECTURES if name not in shipped]
    return options


def load_model(option: ModelOption, device: torch.device) -> nn.Module:
    """The model, eval mode and frozen, on ``device``; seeded random weights when none ship."""
    if option.shipped:
        return models.load(option.name, device=device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RANDOM_WEIGHTS_SEED)
        model = models.build(option.name)
    return models.freeze(model).to(device)


# ----------------------------------------------------------------------------- devices


@dataclass(frozen=True)
class DeviceOption:
    kind: str
    reason: str | None
    """Why the device cannot be used here; None when it can."""

    @property
    def label(self) -> str:
        return self.kind if self.reason is None else f"{self.kind} (unavailable)"


def device_options() -> list[DeviceOption]:
    """auto plus every concrete device, each with the reason it is missing, if it is."""
    availability = devices.device_availability()
    return [DeviceOption("auto", None)] + [
        DeviceOption(kind, reason) for kind, reason in availability.items()
    ]


# ----------------------------------------------------------------------------- outputs


def output_count(model: nn.Module, device: torch.device) -> int:
    """How many classes the model predicts (one probe image through it)."""
    with torch.inference_mode():
        probe = torch.zeros(1, 3, data.IMAGE_SIZE, data.IMAGE_SIZE, device=device)
        return int(model(probe).shape[1])


def fit_classes(batch: ImageBatch, classes: int) -> tuple[ImageBatch, str | None]:
    """The batch with class names for a model of ``classes`` outputs, and a note if adapted.

    A folder whose class sub-folders do not match the model's outputs has labels that mean
    nothing to the model: they are dropped (no loss, no accuracy) rather than misused.
    """
    if len(batch.class_names) == classes:
        return batch, None
    names = (
        data.CIFAR10_CLASSES
        if classes == len(data.CIFAR10_CLASSES)
        else tuple(f"class {index}" for index in range(classes))
    )
    note = (
        f"The images come with {len(batch.class_names)} classes but the model predicts "
        f"{classes}; their labels are ignored and the model's class names are used."
    )
    return replace(batch, labels=None, class_names=names), note


def batch_table(batch: ImageBatch, result: InferenceResult) -> pd.DataFrame:
    """One row per image of the batch (row i is index i), for the table and the report."""
    names = batch.class_names
    table = pd.DataFrame(
        {
            "index": range(len(batch)),
            "name": batch.names,
            "predicted": [names[int(p)] for p in result.predictions],
            "confidence": result.confidences.numpy().round(4),
        }
    )
    if result.labels is not None and result.losses is not None and result.correct is not None:
        table.insert(2, "true", [names[int(label)] for label in result.labels])
        table["loss"] = result.losses.numpy().round(4)
        table["correct"] = result.correct.numpy()
    return table


def describe_indices(
    batch: ImageBatch, result: InferenceResult, indices: Sequence[int]
) -> list[str]:
    """A short title per picked image: index, true and predicted class, confidence."""
    names = batch.class_names
    rows = torch.as_tensor(list(indices), dtype=torch.long)
    predicted = result.predictions[rows].tolist()
    confidence = result.confidences[rows].tolist()
    if result.labels is None:
        return [
            f"#{i} {names[p]} ({c:.0%})"
            for i, p, c in zip(indices, predicted, confidence, strict=True)
        ]
    true = result.labels[rows].tolist()
    return [
        f"#{i} {names[t]}→{names[p]} ({c:.0%}) {'✓' if t == p else '✗'}"
        for i, t, p, c in zip(indices, true, predicted, confidence, strict=True)
    ]
