"""The explorer's work without Streamlit: data choices, models, devices and the batch table.

Plain functions over gradpick's library, so tests call them directly; the page only adds
caching (``gradpick.ui.cache``) and drawing. Every identity used as a cache key is built here.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, overload

import numpy as np
import pandas as pd
import torch

from gradpick import data, units
from gradpick.data import ImageBatch, ImageSource, ProgressCallback
from gradpick.errors import DataError, DownloadError, InputError, ModelError
from gradpick.models import shipped as models
from gradpick.models import zoo
from gradpick.models.spec import InputSpec
from gradpick.models.zoo import RANDOM_WEIGHTS_SEED, LoadedModel, SpecOverrides, given_overrides
from gradpick.outputs.inference import InferenceResult
from gradpick.outputs.inference import fit_classes as fit_classes
from gradpick.outputs.inference import labels_fit as labels_fit
from gradpick.runtime import devices
from gradpick.share import export
from gradpick.ui.config import MAX_WEIGHTS_BYTES, UserModelArgs

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "LOCAL_KINDS",
    "LOG",
    "SOURCE_KINDS",
    "SOURCE_LABELS",
    "batch_table",
    "default_batch",
    "check_batch_size",
    "DataChoice",
    "describe_indices",
    "HoverLines",
    "device_options",
    "DeviceOption",
    "load_model",
    "model_options",
    "ModelOption",
    "named_outputs",
    "open_source",
    "option_named",
    "read_batch",
    "scatter_values",
    "screen_uploads",
    "sorted_by_class",
    "source_record",
    "Upload",
    "uploaded_weights_option",
    "user_model_option",
    "with_spec_text",
]

DEFAULT_BATCH_SIZE = 1000
SOURCE_KINDS = ("cifar10", "folder", "parquet", "upload", "stored")
SOURCE_LABELS = {
    "cifar10": "CIFAR-10",
    "folder": "Local folder",
    "parquet": "Hugging Face dataset",
    "upload": "Uploaded images",
    "stored": "Stored outputs",
}
LOCAL_KINDS = ("folder", "parquet", "stored")
FOLDER_KINDS = ("folder", "parquet")
"""Sources typed as a path on the server: an image folder, or a dataset's Parquet shards."""
"""Sources that read the server's file system: off in hosted mode."""
LOG = logging.getLogger("gradpick.ui")


@dataclass(frozen=True)
class Upload:
    """One uploaded file; ``identity`` keys caches instead of the bytes."""

    name: str
    data: bytes = field(repr=False)
    identity: str

    @classmethod
    def of(cls, name: str, content: bytes) -> Upload:
        """An upload named by its content, so the same file uploaded again (or kept while a
        bad one is added next to it) hits the same caches and keeps the user's picks."""
        return cls(name, content, f"{name}#{hashlib.sha256(content).hexdigest()[:16]}")


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
    hosted: bool = False
    """A hosted page names CIFAR-10 by ``public_name``, never by the server's folder, in what it
    shows and in its error messages."""
    outputs: str = ""
    """The folder of stored outputs (``gradpick infer --out``), for the 'stored' kind."""

    @property
    def source_key(self) -> str:
        if self.kind == "stored":
            return f"stored:{self.outputs.strip()}"
        if self.kind == "upload":
            return "upload:" + ",".join(upload.identity for upload in self.uploads)
        if self.kind in FOLDER_KINDS:
            return f"{self.kind}:{self.folder.strip()}:{self.split}"
        origin = os.environ.get(data.CIFAR10_DIR_ENV) or "torchvision"
        return f"cifar10:{self.split}:{origin}" + (":hosted" if self.hosted else "")

    @property
    def public_name(self) -> str:
        """E.g. 'CIFAR-10, test split': what a visitor needs to know, wherever it is stored."""
        return f"CIFAR-10, {self.split} split"

    @property
    def batch_key(self) -> str:
        return f"{self.source_key}|start={self.start}|size={self.size}|seed={self.seed}"


def open_source(
    choice: DataChoice,
    progress: ProgressCallback | None = None,
    spec: InputSpec = data.DEFAULT_SPEC,
) -> ImageSource:
    """The image source a choice names, read at the model's ``spec``; ``progress`` follows a
    CIFAR-10 download. Stored outputs are read at the spec they were inferred at."""
    if choice.kind == "cifar10":
        with _named_for_visitors(choice):
            source = data.default_cifar10(choice.split, progress=progress, spec=spec)
        if not choice.hosted:
            return source
        assert isinstance(source, data.ArraySource | data.FolderSource), type(source)
        return replace(source, description=choice.public_name)
    if choice.kind == "folder":
        if not choice.folder.strip():
            raise DataError(
                "Type the path of a folder: an ImageFolder tree (one sub-folder per class), a "
                "folder holding train/ and test/ trees, or an extracted cifar-10-batches-py."
            )
        return data.open_source(choice.folder.strip(), choice.split, spec)
    if choice.kind == "parquet":
        path = choice.folder.strip()
        if not path or not data.is_parquet_dataset(Path(path).expanduser()):
            raise DataError(
                "Type the path of a Hugging Face dataset's Parquet files: its folder as the Hub "
                "lays it out (data/train-00000-of-00001.parquet, ...) or one .parquet file."
            )
        return data.parquet_folder(path, choice.split, spec)
    if choice.kind == "upload":
        files = [(upload.name, upload.data) for upload in choice.uploads]
        return data.images_from_files(files, spec=spec)
    if choice.kind == "stored":
        from gradpick.outputs import stores as stored

        # the source needs the store's metadata and names only, not the outputs
        return stored.stored_source(stored.open_stored(choice.outputs, stored.SOURCE_COLUMNS))
    raise InputError(f"Unknown data source '{choice.kind}'; use one of {', '.join(SOURCE_KINDS)}.")


def screen_uploads(
    uploads: Sequence[Upload], max_files: int | None = None, max_bytes: int | None = None
) -> tuple[tuple[Upload, ...], list[str]]:
    """The uploads that can be used, and one message per file (or limit) that stopped one.

    Each file is decoded on its own, so one bad file costs only itself: the usable ones keep
    the same identity as before it arrived, and with it the batch, its results and the picks.
    """
    problems: list[str] = []
    if max_files is not None and len(uploads) > max_files:
        problems.append(
            f"This demo takes at most {max_files} images per upload; the first {max_files} of "
            f"{len(uploads)} are used."
        )
        uploads = uploads[:max_files]
    usable: list[Upload] = []
    for upload in uploads:
        if max_bytes is not None and len(upload.data) > max_bytes:
            problems.append(
                f"{upload.name}: {units.format_bytes(len(upload.data), 1)} is over this demo's "
                f"limit of {units.format_bytes(max_bytes, 0)} per image."
            )
            continue
        try:
            data.decode_image(upload.data, upload.name)
        except DataError as error:
            problems.append(str(error))
            continue
        usable.append(upload)
    return tuple(usable), problems


def check_batch_size(requested: int, total: int, cap: int | None = None) -> int:
    """A batch size within 1..total (and the host's cap), or an InputError saying why not."""
    limit = total if cap is None else min(total, cap)
    if requested < 1:
        raise InputError(f"Batch size {requested} is too small: use 1 to {limit:,} images.")
    if requested > limit:
        reason = f"this split has {total:,} images" if limit == total else "this demo's cap"
        raise InputError(
            f"Batch size {requested:,} is too large: {reason}; use 1 to {limit:,} images."
        )
    return requested


def read_batch(
    source: ImageSource,
    choice: DataChoice,
    progress: ProgressCallback | None = None,
    fingerprint: str | None = None,
) -> ImageBatch:
    """The batch a choice names, decoded chunk by chunk with progress. A store's is loaded from
    the pixels kept beside it (``fingerprint``: the source's, when the caller has it already);
    without them, past ``pixels.LAZY_ABOVE`` images it is decoded lazily, as views show its
    images, while a background process keeps them (``pixels.lazy_batch``), and a smaller one is
    decoded now and kept."""

    def decode() -> ImageBatch:
        with _named_for_visitors(choice):
            return data.load_batch(
                source, start=choice.start, size=choice.size, seed=choice.seed, progress=progress
            )

    if choice.kind != "stored":
        return decode()
    from gradpick.outputs import pixels

    path = choice.outputs.strip()
    batch = f"start={choice.start}|size={choice.size}|seed={choice.seed}"  # not the path typed
    key = f"{fingerprint or source.fingerprint()}|{source.spec.describe()}|{batch}"
    found = pixels.load_kept(path, key, mmap=True)
    if found is not None:
        return found
    wanted = data.batch_positions(len(source), choice.start, choice.size, choice.seed)
    if len(wanted) > pixels.LAZY_ABOVE:
        return pixels.lazy_batch(path, key, source, wanted)
    decoded = decode()
    pixels.keep(decoded, path, key)
    return decoded


@contextmanager
def _named_for_visitors(choice: DataChoice) -> Iterator[None]:
    """On a hosted page, a CIFAR-10 copy that cannot be downloaded or read is reported by its
    public name; the message with the server's paths goes to the server's log only."""
    if not (choice.hosted and choice.kind == "cifar10"):
        yield
        return
    try:
        yield
    except (DataError, OSError) as error:
        LOG.warning("%s: %s: %s", choice.public_name, type(error).__name__, error)
        kind = type(error) if isinstance(error, DataError) else DataError
        problem = "downloaded" if isinstance(error, DownloadError) else "read"
        raise kind(
            f"{choice.public_name}: the images could not be {problem} on this server just now. "
            "Try again later, or upload your own images meanwhile."
        ) from None


def default_batch(
    base: DataChoice,
    source: ImageSource,
    cap: int | None = None,
    held: dict[str, int | None] | None = None,
) -> DataChoice:
    """The batch the sidebar opens a source on before anything is typed, at most ``cap``
    images: a store's own batch (``held``, as ``store_format.stored_batch`` reads it); else
    ``DEFAULT_BATCH_SIZE`` images, a seeded sample (seed 0) when the source lists its images
    class by class, else the first ones."""
    total = len(source)
    if held is not None:
        size = min(held["size"] or DEFAULT_BATCH_SIZE, total, cap or total)
        if held["seed"] is not None:
            return replace(base, size=size, seed=int(held["seed"]))
        return replace(base, start=min(int(held["start"] or 0), total - 1), size=size)
    size = min(DEFAULT_BATCH_SIZE, total, cap or total)
    if sorted_by_class(source):
        return replace(base, size=size, seed=0)
    return replace(base, start=0, size=size)


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
    """A model as the sidebar offers it: a built-in architecture (shipped weights with a card,
    seeded stand-in weights, or weights the user uploaded) or the user's own factory."""

    name: str
    card: dict[str, Any] | None = field(default=None, compare=False)
    shipped: bool = False
    upload: Upload | None = None
    """Weights uploaded for the built-in architecture ``name``; its identity is their digest."""
    factory: str = ""
    """The user's own model (local runs only): any name ``gradpick.models.zoo.load_model`` takes,
    torchvision:NAME[:WEIGHTS], timm:NAME or package.module:factory; ``name`` is it."""
    weights_path: str = ""
    weights_stamp: float = 0.0
    """Modification time of ``weights_path``: a re-saved file is a different model."""
    class_names: tuple[str, ...] = field(default=(), compare=False)
    """Output names from the user's --classes file; empty means the page chooses."""
    input_size: str = ""
    resize: int | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    """The user's input spec settings; unset ones come from the model's own metadata."""
    output: str | None = None
    """The user's ``--output`` (``sigmoid``: independent labels); None: the model's own."""

    @property
    def spec_overrides(self) -> SpecOverrides:
        return given_overrides(
            self.input_size,
            self.resize,
            self.mean,
            self.std,
            self.class_names,
            output=self.output,
        )

    @property
    def accuracy(self) -> float | None:
        value = None if self.card is None else self.card.get("test_accuracy")
        return None if value is None else float(value)

    @property
    def identity(self) -> str:
        """Names the exact weights, so caches never mix two trainings of one architecture."""
        if self.factory:
            identity = f"user:{self.factory}:{self.weights_path}@{self.weights_stamp}"
            if self.output is not None:
                identity += f"|output={self.output}"
            spec = (self.input_size, self.resize, self.mean, self.std)
            return identity if spec == ("", None, None, None) else f"{identity}|spec={spec}"
        if self.upload is not None:
            return f"{self.name}:upload-{self.upload.identity}"
        if not self.shipped:
            return f"{self.name}:random-seed{RANDOM_WEIGHTS_SEED}"
        digest = None if self.card is None else self.card.get("sha256")
        return f"{self.name}:{digest or 'shipped'}"

    @property
    def label(self) -> str:
        if self.factory:
            return f"Your model: {self.factory}"
        if self.upload is not None:
            return f"{self.name} · your uploaded weights ({self.upload.name})"
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


def option_named(name: str, current: ModelOption) -> ModelOption:
    """``current`` when it is architecture ``name`` (whatever its weights), else the built-in
    option of that name."""
    if current.name == name:
        return current
    return next(option for option in model_options() if option.name == name)


def user_model_option(args: UserModelArgs) -> ModelOption:
    """The option for ``--model`` (with ``--weights``/``--classes``); files are checked here so
    a wrong path is explained before any of the user's code runs."""
    stamp = 0.0
    if args.weights:
        weights = Path(args.weights).expanduser()
        if not weights.is_file():
            raise ModelError(f"{weights}: no such weights file (given with --weights).")
        stamp = weights.stat().st_mtime
    names = data.read_class_names(args.classes) if args.classes else ()
    return ModelOption(
        name=args.factory,
        factory=args.factory,
        weights_path=str(Path(args.weights).expanduser()) if args.weights else "",
        weights_stamp=stamp,
        class_names=names,
        input_size=args.input_size or "",
        resize=args.resize,
        mean=args.mean,
        std=args.std,
        output=args.output,
    )


def _channel_values(what: str, text: str) -> tuple[float, ...] | None:
    pieces = text.replace(",", " ").split()
    try:
        return tuple(float(piece) for piece in pieces) or None
    except ValueError:
        raise InputError(
            f"{what} '{text}' is not a list of numbers (e.g. 0.485, 0.456, 0.406)."
        ) from None


def with_spec_text(
    option: ModelOption, input_size: str, resize: str, mean: str, std: str
) -> ModelOption:
    """``option`` with the spec typed in the sidebar; an empty field keeps the model's own.

    Only the text is read here; whether the spec fits the model is checked when it loads.
    """
    try:
        resize_value = int(resize) if resize.strip() else None
    except ValueError:
        raise InputError(f"Resize '{resize}' is not a whole number of pixels.") from None
    return replace(
        option,
        input_size=input_size.strip(),
        resize=resize_value,
        mean=_channel_values("Mean", mean),
        std=_channel_values("Std", std),
    )


def uploaded_weights_option(option: ModelOption, upload: Upload) -> ModelOption:
    """``option``'s architecture with uploaded weights, keyed by the bytes' digest."""
    if option.factory:
        raise ModelError("Uploaded weights apply to the built-in architectures only.")
    if len(upload.data) > MAX_WEIGHTS_BYTES:
        raise ModelError(
            f"{upload.name}: {units.format_bytes(len(upload.data), 0)} is too large for weights "
            f"of a built-in architecture (limit {units.format_bytes(MAX_WEIGHTS_BYTES, 0)})."
        )
    return ModelOption(option.name, upload=upload)


def load_model(option: ModelOption, device: torch.device) -> LoadedModel:
    """The model with its input spec, eval mode and frozen, on ``device``; seeded random
    weights when none ship.

    Uploaded weights are read with ``weights_only=True`` (a file carrying code is refused
    unrun) or as safetensors, and must fit the architecture and be finite.
    """
    if option.factory:
        weights = option.weights_path or None
        return zoo.load_model(option.factory, weights, device, **option.spec_overrides)
    if option.upload is not None:
        return zoo.load_model(option.name, option.upload.data, device)
    return zoo.load_model(option.name, device=device, stand_in=not option.shipped)


def named_outputs(option: ModelOption, loaded: LoadedModel) -> ModelOption:
    """Your model with the class names its weights' metadata gives, unless --classes named
    them; a built-in keeps the page's choice (a 10-class folder keeps its own names)."""
    if not option.factory or option.class_names or not loaded.spec.class_names:
        return option
    return replace(option, class_names=loaded.spec.class_names)


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


def batch_table(
    batch: ImageBatch, result: InferenceResult, rows: range | None = None
) -> pd.DataFrame:
    """One row per image of the batch (row i is index i), for the table and the report;
    ``rows``: only these images (a page of the table), their indices kept."""
    rows = range(len(batch)) if rows is None else rows
    part = slice(rows.start, rows.stop)
    names = np.asarray(batch.class_names, dtype=object)
    table = pd.DataFrame(
        {
            "index": rows,
            "name": batch.names[part],
            "predicted": names[result.predictions[part].numpy()],
            "confidence": result.confidences[part].numpy().round(4),
        }
    )
    if result.labels is not None and result.losses is not None and result.correct is not None:
        table.insert(2, "true", names[result.labels[part].numpy()])
        table["loss"] = result.losses[part].numpy().round(4)
        table["correct"] = result.correct[part].numpy()
    return table


class HoverLines(Sequence[str]):
    """One short line per image of a batch (index, true and predicted class, confidence),
    each made when it is read: a page reads those of its thumbnails and of the points its
    scatters draw, never all 1,280,000 of a large store's (2 s to make them)."""

    def __init__(self, batch: ImageBatch, result: InferenceResult) -> None:
        self._names = batch.class_names
        self._predicted = result.predictions.numpy()
        self._confidence = result.confidences.numpy()
        self._true = None if result.labels is None else result.labels.numpy()

    def __len__(self) -> int:
        return len(self._predicted)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self._line(i) for i in range(len(self))[index]]
        return self._line(range(len(self))[index])  # negative, or out of range, as a list's

    def _line(self, index: int) -> str:
        names, predicted = self._names, int(self._predicted[index])
        confidence = f"{float(self._confidence[index]):.0%}"
        if self._true is None:
            return f"#{index} {names[predicted]} ({confidence})"
        true = int(self._true[index])
        mark = "✓" if true == predicted else "✗"
        return f"#{index} {names[true]}→{names[predicted]} ({confidence}) {mark}"


def describe_indices(
    batch: ImageBatch, result: InferenceResult, indices: Sequence[int]
) -> list[str]:
    """A short title per picked image: index, true and predicted class, confidence."""
    lines = HoverLines(batch, result)
    return [lines[index] for index in indices]


def source_record(choice: DataChoice, batch: ImageBatch) -> dict[str, Any]:
    """The export schema's ``source`` field: the batch and how it was cut from its source."""
    if choice.kind == "upload":
        return export.source_record(batch.source, len(batch))
    return export.source_record(
        batch.source, len(batch), batch.split, choice.start, choice.size, choice.seed
    )


def scatter_values(result: InferenceResult) -> tuple[np.ndarray, str]:
    """The outputs scatter's vertical values and their name: each image's loss on its true
    label, or the entropy of its prediction when there are no labels."""
    if result.losses is not None:
        return result.losses.numpy(), "loss on the true label"
    return result.entropies.numpy(), "entropy of the prediction (no labels)"
