"""Opening local folders: ImageFolder trees, train/test trees, ``cifar-10-batches-py`` and
Hugging Face Parquet datasets (``gradpick.data.parquet``).

Opening a folder lists and sorts its files (ImageFolder order) and decodes nothing; a
``cifar-10-batches-py`` folder is small enough to be read into memory at once.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from gradpick.data.decoding import DEFAULT_SPEC
from gradpick.data.parquet import is_parquet_dataset, parquet_folder
from gradpick.data.sources import CIFAR10_CLASSES, ArraySource, FolderSource, ImageSource
from gradpick.errors import DataError, InputError
from gradpick.models.spec import InputSpec

__all__ = [
    "IMAGE_SUFFIXES",
    "check_split",
    "cifar10_batches_folder",
    "image_folder",
    "image_tree",
    "open_source",
]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")


def image_folder(root: str | Path, spec: InputSpec = DEFAULT_SPEC) -> FolderSource:
    """An ImageFolder tree: one sub-folder per class (sorted names give the class order), its
    files sorted within each class, as ``torchvision.datasets.ImageFolder`` orders them."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataError(f"{root}: no such folder. Give a folder with one sub-folder per class.")
    class_names = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    names: list[str] = []
    counts: list[int] = []
    for class_name in class_names:
        class_files = sorted(
            name for name in os.listdir(root / class_name) if name.lower().endswith(IMAGE_SUFFIXES)
        )
        names.extend([f"{class_name}/{name}" for name in class_files])
        counts.append(len(class_files))
    if not names:
        raise DataError(
            f"{root}: no images found. Expected the ImageFolder layout "
            "root/<class>/<image>.png|jpg|webp, for example .../cifar10-jpg/test."
        )
    labels = torch.repeat_interleave(torch.arange(len(class_names)), torch.tensor(counts))
    return image_tree(root, tuple(names), labels, tuple(class_names), spec)


def image_tree(
    root: Path,
    names: tuple[str, ...],
    labels: torch.Tensor,
    class_names: tuple[str, ...],
    spec: InputSpec = DEFAULT_SPEC,
) -> FolderSource:
    """The source of an ImageFolder tree whose files are already known, in ``image_folder``'s
    order (``names`` relative to ``root``, ``labels`` indices into ``class_names``): what
    listing ``root`` would give, without listing it (a store's names stand in for it)."""
    return FolderSource(
        root=root,
        relative_names=names,
        label_tensor=labels,
        class_names=class_names,
        description=f"folder {root}",
        spec=spec,
    )


def cifar10_batches_folder(
    folder: str | Path, split: str = "test", spec: InputSpec = DEFAULT_SPEC
) -> ArraySource:
    """torchvision's extracted ``cifar-10-batches-py`` folder, read without any download."""
    folder = Path(folder).expanduser()
    names = ["test_batch"] if split == "test" else [f"data_batch_{i}" for i in range(1, 6)]
    check_split(split)
    images: list[np.ndarray] = []
    labels: list[int] = []
    for name in names:
        path = folder / name
        if not path.is_file():
            raise DataError(f"{folder}: missing {name}; is this a cifar-10-batches-py folder?")
        try:
            with path.open("rb") as handle:
                entry = pickle.load(handle, encoding="latin1")
            images.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            labels.extend(entry["labels"] if "labels" in entry else entry["fine_labels"])
        except (pickle.UnpicklingError, KeyError, ValueError, EOFError) as error:
            raise DataError(f"{path}: not a CIFAR-10 batch file ({error}).") from None
    class_names = CIFAR10_CLASSES
    meta = folder / "batches.meta"
    if meta.is_file():
        with meta.open("rb") as handle:
            class_names = tuple(pickle.load(handle, encoding="latin1")["label_names"])
    return ArraySource(
        images=torch.from_numpy(np.concatenate(images)),
        label_tensor=torch.tensor(labels, dtype=torch.long),
        class_names=class_names,
        description=f"CIFAR-10 {split} ({folder})",
        spec=spec,
        split=split,
    )


def check_split(split: str) -> None:
    """Refuse a split name CIFAR-10 and train/test folders do not have."""
    if split not in ("train", "test"):
        raise InputError(f"Unknown split '{split}'; use 'train' or 'test'.")


def open_source(
    location: str | Path, split: str = "test", spec: InputSpec = DEFAULT_SPEC
) -> ImageSource:
    """Open a local path of any supported kind.

    Accepts an ImageFolder tree, a folder holding ``train``/``test`` ImageFolder trees, a
    ``cifar-10-batches-py`` folder or the folder that contains one, or a Hugging Face dataset's
    Parquet shards (a folder as the Hub lays it out, or one .parquet file). ``split`` picks the
    tree, batches or shards of that split; a plain ImageFolder tree is read whole, and its
    ``split`` is None, so nothing downstream records a split the images are not.
    """
    check_split(split)
    path = Path(location).expanduser()
    if is_parquet_dataset(path):
        return parquet_folder(path, split, spec)
    if not path.is_dir():
        raise DataError(f"{path}: no such folder.")
    for candidate in (path, path / "cifar-10-batches-py"):
        if (candidate / "test_batch").is_file():
            return cifar10_batches_folder(candidate, split, spec)
    if (path / split).is_dir():
        return replace(image_folder(path / split, spec), split=split)
    return image_folder(path, spec)
