"""Image sources: CIFAR-10 (torchvision download or extracted batches), ImageFolder trees, uploads.

Every source hands out uint8 images [N, 3, 32, 32]; models receive them as floats in [0, 1]
(``ImageBatch.float_images``) and normalise inside, so every gradient is with respect to pixels.
Folder sources decode only the images a batch asks for, chunk by chunk, so memory stays bounded.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from gradpick.errors import DataError, DownloadError, InputError

CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
IMAGE_SIZE = 32
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")
MAX_IMAGE_PIXELS = 40_000_000
"""Larger images are refused before decoding: a decompression bomb must not exhaust memory."""

CIFAR10_DIR_ENV = "GRADPICK_CIFAR10_DIR"
CACHE_DIR_ENV = "GRADPICK_CACHE_DIR"

ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)``; total is 0 when unknown."""


@dataclass(frozen=True)
class ImageBatch:
    """A batch of images with optional labels; ``positions`` index into the source it came from."""

    images: torch.Tensor
    labels: torch.Tensor | None
    class_names: tuple[str, ...]
    names: tuple[str, ...]
    positions: tuple[int, ...]
    source: str
    notes: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def float_images(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The images as [N, 3, H, W] floats in [0, 1], the form every model takes."""
        return self.images.to(dtype) / 255.0


class ImageSource(Protocol):
    """Anything that can hand out images by position, with labels known up front."""

    @property
    def description(self) -> str: ...

    @property
    def class_names(self) -> tuple[str, ...]: ...

    def __len__(self) -> int: ...

    def labels(self) -> torch.Tensor | None: ...

    def names(self, positions: Sequence[int]) -> list[str]: ...

    def read(self, positions: Sequence[int]) -> torch.Tensor: ...


@dataclass(frozen=True)
class ArraySource:
    """Images already decoded in memory as uint8 [N, 3, 32, 32] (CIFAR-10 batches, uploads)."""

    images: torch.Tensor
    label_tensor: torch.Tensor | None
    class_names: tuple[str, ...]
    description: str
    image_names: tuple[str, ...] | None = None
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def labels(self) -> torch.Tensor | None:
        return self.label_tensor

    def names(self, positions: Sequence[int]) -> list[str]:
        if self.image_names is None:
            return [f"#{position}" for position in positions]
        return [self.image_names[position] for position in positions]

    def read(self, positions: Sequence[int]) -> torch.Tensor:
        return self.images[torch.as_tensor(list(positions), dtype=torch.long)]


@dataclass(frozen=True)
class FolderSource:
    """An ImageFolder tree (``root/<class>/<file>``); images are decoded only when read."""

    root: Path
    files: tuple[Path, ...]
    label_tensor: torch.Tensor
    class_names: tuple[str, ...]
    description: str

    def __len__(self) -> int:
        return len(self.files)

    def labels(self) -> torch.Tensor | None:
        return self.label_tensor

    def names(self, positions: Sequence[int]) -> list[str]:
        return [str(self.files[p].relative_to(self.root)) for p in positions]

    def read(self, positions: Sequence[int]) -> torch.Tensor:
        decoded = [
            decode_image(self.files[p].read_bytes(), str(self.files[p]))[0] for p in positions
        ]
        if not decoded:
            return torch.empty(0, 3, IMAGE_SIZE, IMAGE_SIZE, dtype=torch.uint8)
        return torch.stack(decoded)


def cache_dir() -> Path:
    """Where downloads and decoded caches live: $GRADPICK_CACHE_DIR, else the user cache dir."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gradpick"


# ----------------------------------------------------------------------------- single images


def decode_image(data: bytes, name: str = "image") -> tuple[torch.Tensor, str | None]:
    """Decode PNG/JPEG/WebP/... bytes into uint8 [3, 32, 32] RGB, with a note when we adapted it.

    Any size is accepted up to ``MAX_IMAGE_PIXELS``: the shorter side is resized to 32 and the
    centre cropped. Transparency is flattened onto white, grayscale is expanded to RGB, and an
    animated image contributes its first frame.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as opened:
                width, height = opened.size
                if width * height > MAX_IMAGE_PIXELS:
                    raise DataError(
                        f"{name}: {width}x{height} pixels is too large "
                        f"(limit {MAX_IMAGE_PIXELS:,} pixels); downscale it first."
                    )
                note = None
                if getattr(opened, "n_frames", 1) > 1:
                    note = f"{name}: animated image, only its first frame is used."
                    opened.seek(0)
                opened.load()
                image = _to_rgb(opened)
    except DataError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise DataError(
            f"{name}: the image is too large to decode safely (limit {MAX_IMAGE_PIXELS:,} "
            "pixels); downscale it first."
        ) from None
    except UnidentifiedImageError:
        raise DataError(
            f"{name}: not a readable image (expected PNG, JPEG, WebP, BMP, GIF or TIFF)."
        ) from None
    except (OSError, SyntaxError, ValueError, EOFError) as error:
        raise DataError(f"{name}: the image file is corrupt or truncated ({error}).") from None
    return _resize_and_crop(image), note


def _to_rgb(image: Image.Image) -> Image.Image:
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def _resize_and_crop(image: Image.Image) -> torch.Tensor:
    width, height = image.size
    if (width, height) != (IMAGE_SIZE, IMAGE_SIZE):
        scale = IMAGE_SIZE / min(width, height)
        new_size = (max(IMAGE_SIZE, round(width * scale)), max(IMAGE_SIZE, round(height * scale)))
        image = image.resize(new_size, Image.Resampling.BICUBIC, reducing_gap=3.0)
        left = (new_size[0] - IMAGE_SIZE) // 2
        top = (new_size[1] - IMAGE_SIZE) // 2
        image = image.crop((left, top, left + IMAGE_SIZE, top + IMAGE_SIZE))
    array = np.asarray(image, dtype=np.uint8).copy()
    return torch.from_numpy(array).permute(2, 0, 1).contiguous()


def images_from_files(
    files: Sequence[tuple[str, bytes]], class_names: Sequence[str] = CIFAR10_CLASSES
) -> ArraySource:
    """An unlabelled source from uploaded or given files, as (name, bytes) pairs.

    Raises DataError naming every file that could not be read, so a user can fix all at once.
    """
    if not files:
        raise DataError("No images given: upload or name at least one image file.")
    decoded: list[torch.Tensor] = []
    names: list[str] = []
    notes: list[str] = []
    problems: list[str] = []
    for name, data in files:
        try:
            image, note = decode_image(data, name)
        except DataError as error:
            problems.append(str(error))
            continue
        decoded.append(image)
        names.append(name)
        if note:
            notes.append(note)
    if problems:
        raise DataError("Some images could not be used:\n" + "\n".join(problems))
    return ArraySource(
        images=torch.stack(decoded),
        label_tensor=None,
        class_names=tuple(class_names),
        description=f"{len(decoded)} uploaded image(s)",
        image_names=tuple(names),
        notes=tuple(notes),
    )


def images_from_paths(paths: Sequence[str | Path]) -> ArraySource:
    """An unlabelled source from image files on disk."""
    files = []
    for path in map(Path, paths):
        if not path.is_file():
            raise DataError(f"{path}: no such file.")
        files.append((path.name, path.read_bytes()))
    return images_from_files(files)


# ----------------------------------------------------------------------------- folders


def image_folder(root: str | Path) -> FolderSource:
    """An ImageFolder tree: one sub-folder per class (sorted names give the class order)."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataError(f"{root}: no such folder. Give a folder with one sub-folder per class.")
    class_dirs = sorted(entry for entry in root.iterdir() if entry.is_dir())
    files: list[Path] = []
    labels: list[int] = []
    for label, class_dir in enumerate(class_dirs):
        class_files = sorted(
            path for path in class_dir.iterdir() if path.suffix.lower() in IMAGE_SUFFIXES
        )
        files.extend(class_files)
        labels.extend([label] * len(class_files))
    if not files:
        raise DataError(
            f"{root}: no images found. Expected the ImageFolder layout "
            "root/<class>/<image>.png|jpg|webp, for example .../cifar10-jpg/test."
        )
    return FolderSource(
        root=root,
        files=tuple(files),
        label_tensor=torch.tensor(labels, dtype=torch.long),
        class_names=tuple(class_dir.name for class_dir in class_dirs),
        description=f"folder {root}",
    )


def cifar10_batches_folder(folder: str | Path, split: str = "test") -> ArraySource:
    """torchvision's extracted ``cifar-10-batches-py`` folder, read without any download."""
    folder = Path(folder).expanduser()
    names = ["test_batch"] if split == "test" else [f"data_batch_{i}" for i in range(1, 6)]
    _check_split(split)
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
    )


def _check_split(split: str) -> None:
    if split not in ("train", "test"):
        raise InputError(f"Unknown split '{split}'; use 'train' or 'test'.")


def open_source(location: str | Path, split: str = "test") -> ImageSource:
    """Open a local path of any supported kind.

    Accepts an ImageFolder tree, a folder holding ``train``/``test`` ImageFolder trees, a
    ``cifar-10-batches-py`` folder or the folder that contains one.
    """
    _check_split(split)
    path = Path(location).expanduser()
    if not path.is_dir():
        raise DataError(f"{path}: no such folder.")
    for candidate in (path, path / "cifar-10-batches-py"):
        if (candidate / "test_batch").is_file():
            return cifar10_batches_folder(candidate, split)
    if (path / split).is_dir():
        return image_folder(path / split)
    return image_folder(path)


# ----------------------------------------------------------------------------- CIFAR-10 download


@dataclass(frozen=True)
class Cifar10Mirror:
    """Where the CIFAR-10 archive comes from and the checksums torchvision verifies."""

    url: str
    archive_md5: str
    file_md5: dict[str, str]


def _torchvision_mirror() -> Cifar10Mirror:
    from torchvision.datasets import CIFAR10

    return Cifar10Mirror(
        url=CIFAR10.url,
        archive_md5=CIFAR10.tgz_md5,
        file_md5=dict(
            CIFAR10.train_list
            + CIFAR10.test_list
            + [[CIFAR10.meta["filename"], CIFAR10.meta["md5"]]]
        ),
    )


def _streaming_cifar10_class(mirror: Cifar10Mirror, progress: ProgressCallback | None) -> type:
    """torchvision's CIFAR10, pointed at ``mirror`` and downloading with a progress callback."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity, extract_archive

    class StreamingCIFAR10(CIFAR10):
        url = mirror.url
        tgz_md5 = mirror.archive_md5
        train_list = [[n, mirror.file_md5[n]] for n, _ in CIFAR10.train_list]
        test_list = [[n, mirror.file_md5[n]] for n, _ in CIFAR10.test_list]
        meta = {**CIFAR10.meta, "md5": mirror.file_md5[CIFAR10.meta["filename"]]}

        def download(self) -> None:
            if self._check_integrity():
                return
            archive = Path(self.root) / self.filename
            if not check_integrity(str(archive), self.tgz_md5):
                _download_file(self.url, archive, progress)
            if not check_integrity(str(archive), self.tgz_md5):
                archive.unlink(missing_ok=True)
                raise DownloadError(
                    f"The CIFAR-10 archive from {self.url} failed its checksum; try again."
                )
            extract_archive(str(archive), str(self.root))

    return StreamingCIFAR10


def _download_file(url: str, target: Path, progress: ProgressCallback | None) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(target.suffix + ".part")
    with urllib.request.urlopen(url, timeout=30) as response, partial.open("wb") as handle:
        total = int(response.headers.get("Content-Length") or 0)
        done = 0
        while chunk := response.read(1 << 20):
            handle.write(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, total)
    partial.replace(target)


CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_FILES = ("batches.meta", "test_batch", *(f"data_batch_{i}" for i in range(1, 6)))


def cifar10(
    split: str = "test",
    root: str | Path | None = None,
    download: bool = True,
    progress: ProgressCallback | None = None,
    mirror: Cifar10Mirror | None = None,
) -> ArraySource:
    """CIFAR-10 through ``torchvision.datasets.CIFAR10`` with a progress callback.

    ``root`` defaults to ``<cache dir>/cifar10``. torchvision downloads, verifies and extracts the
    archive once; a complete extracted copy is then read directly, like any cache, which keeps
    torchvision (and its memory) out of a server that only serves the cached data. Offline with
    no cached copy, the DownloadError says how to use a local folder instead.
    """
    _check_split(split)
    root = Path(root) if root is not None else cache_dir() / "cifar10"
    folder = root / CIFAR10_FOLDER
    if not all((folder / name).is_file() for name in CIFAR10_FILES):
        _fetch_cifar10(root, split, download, progress, mirror)
    try:
        source = cifar10_batches_folder(folder, split)
    except DataError as error:
        raise DataError(f"{error} Delete {folder} to download CIFAR-10 again.") from None
    return replace(source, description=f"CIFAR-10 {split} (torchvision, {root})")


def _fetch_cifar10(
    root: Path,
    split: str,
    download: bool,
    progress: ProgressCallback | None,
    mirror: Cifar10Mirror | None,
) -> None:
    """Let torchvision download, check and extract the archive into ``root``."""
    dataset_class = _streaming_cifar10_class(mirror or _torchvision_mirror(), progress)
    try:
        dataset_class(str(root), train=split == "train", download=download)
    except (urllib.error.URLError, OSError, TimeoutError) as error:
        raise DownloadError(
            f"Could not download CIFAR-10 into {root} ({getattr(error, 'reason', error)}) and no "
            f"cached copy is there. Offline? Point gradpick at a local copy instead: a folder in "
            f"ImageFolder layout (e.g. .../cifar10-jpg/{split}) or an extracted "
            f"cifar-10-batches-py folder, via the 'Local folder' source, --data, or "
            f"${CIFAR10_DIR_ENV}."
        ) from None
    except RuntimeError as error:  # torchvision: "Dataset not found or corrupted"
        raise DownloadError(
            f"No CIFAR-10 copy in {root} ({error}). Enable the download, or point "
            f"${CIFAR10_DIR_ENV} at a local folder."
        ) from None


def default_cifar10(split: str = "test", progress: ProgressCallback | None = None) -> ImageSource:
    """CIFAR-10 from ``$GRADPICK_CIFAR10_DIR`` when set, else torchvision's cached download."""
    configured = os.environ.get(CIFAR10_DIR_ENV)
    if configured:
        return open_source(configured, split)
    return cifar10(split, progress=progress)


# ----------------------------------------------------------------------------- batches


def batch_positions(
    source_length: int, start: int = 0, size: int | None = None, seed: int | None = None
) -> list[int]:
    """Positions of a batch: ``size`` images from ``start``, or a seeded sample when seed is set."""
    if source_length <= 0:
        raise DataError("The image source is empty.")
    size = source_length if size is None else size
    if not 1 <= size <= source_length:
        raise InputError(f"Batch size must be between 1 and {source_length:,}; got {size:,}.")
    if seed is not None:
        generator = torch.Generator().manual_seed(seed)
        # Random order, not sorted: a class-sorted folder would otherwise show one class first.
        return torch.randperm(source_length, generator=generator)[:size].tolist()
    if not 0 <= start < source_length:
        raise InputError(f"Start must be between 0 and {source_length - 1:,}; got {start:,}.")
    if start + size > source_length:
        raise InputError(
            f"Start {start:,} + size {size:,} runs past the end of the source "
            f"({source_length:,} images); lower one of them."
        )
    return list(range(start, start + size))


def load_batch(
    source: ImageSource,
    start: int = 0,
    size: int | None = None,
    seed: int | None = None,
    chunk_size: int = 1024,
    progress: ProgressCallback | None = None,
) -> ImageBatch:
    """Read a slice (or seeded sample) of a source in chunks, reporting progress per chunk."""
    if chunk_size < 1:
        raise InputError(f"chunk_size must be at least 1; got {chunk_size}.")
    positions = batch_positions(len(source), start, size, seed)
    images = torch.empty(len(positions), 3, IMAGE_SIZE, IMAGE_SIZE, dtype=torch.uint8)
    for offset in range(0, len(positions), chunk_size):
        chunk = positions[offset : offset + chunk_size]
        images[offset : offset + len(chunk)] = source.read(chunk)
        if progress is not None:
            progress(offset + len(chunk), len(positions))
    all_labels = source.labels()
    labels = None if all_labels is None else all_labels[torch.tensor(positions)]
    return ImageBatch(
        images=images,
        labels=labels,
        class_names=source.class_names,
        names=tuple(source.names(positions)),
        positions=tuple(positions),
        source=source.description,
        notes=tuple(getattr(source, "notes", ())),
    )


def decoded_cache(source: ImageSource, progress: ProgressCallback | None = None) -> ImageBatch:
    """The whole source decoded once into a uint8 tensor file under the cache dir.

    Training reads 50,000 JPEGs every epoch otherwise; the cache key covers the file list and
    sizes, so editing the folder invalidates it.
    """
    key = hashlib.sha256(source.description.encode())
    key.update(str(len(source)).encode())
    if isinstance(source, FolderSource):
        for path in source.files:
            key.update(f"{path}:{path.stat().st_size}".encode())
    path = cache_dir() / "decoded" / f"{key.hexdigest()[:16]}.pt"
    if path.is_file():
        try:
            cached = torch.load(path, weights_only=True)
            return ImageBatch(
                images=cached["images"],
                labels=cached["labels"],
                class_names=tuple(cached["class_names"]),
                names=tuple(source.names(range(len(source)))),
                positions=tuple(range(len(source))),
                source=source.description,
            )
        except (RuntimeError, KeyError, EOFError, pickle.UnpicklingError):
            path.unlink(missing_ok=True)
    batch = load_batch(source, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    torch.save(
        {"images": batch.images, "labels": batch.labels, "class_names": list(batch.class_names)},
        temporary,
    )
    temporary.replace(path)
    return batch


def read_class_names(path: str | Path) -> tuple[str, ...]:
    """Class names from a text file, one per line in output order (blank lines ignored)."""
    path = Path(path).expanduser()
    try:
        names = tuple(line.strip() for line in path.read_text().splitlines() if line.strip())
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: cannot read class names ({error}).") from None
    if not names:
        raise DataError(f"{path}: no class names found; write one name per line.")
    return names
