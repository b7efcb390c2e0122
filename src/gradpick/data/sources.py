"""Image sources at any model's input size: CIFAR-10, ImageFolder trees and uploads.

Every source reads at an ``InputSpec`` (``DEFAULT_SPEC``, 32x32, is the built-ins'): each image
is decoded, converted to RGB and resized and centre-cropped by ``spec.prepare`` into uint8
[3, H, W]; models receive floats in [0, 1] (``ImageBatch.float_images``) and normalise inside,
so every gradient is with respect to pixels. Folder and upload sources keep file references
(paths, or the uploaded bytes), never decoded pixels: ``stream`` decodes them chunk by chunk in
DataLoader workers while the model runs, so a folder of 50,000 photos costs the memory of a few
chunks. A file that cannot be decoded is skipped and listed (``ReadReport``), not fatal.

Example::

    source = image_folder("photos/", spec=InputSpec(size=(224, 224), resize=256))
    for chunk in stream(source, batch_size=64):
        logits = model(chunk.images.float() / 255)  # chunk.positions index into the source
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import pickle
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from gradpick.errors import DataError, DownloadError, InputError
from gradpick.spec import InputSpec

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
DEFAULT_SPEC = InputSpec()
"""The built-in models' input: 32x32 pixels, the shorter side resized to 32, centre crop."""
IMAGE_SIZE = DEFAULT_SPEC.height
"""The side of ``DEFAULT_SPEC`` (CIFAR-10's 32), for code about the built-in models only."""
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")
MAX_IMAGE_PIXELS = 40_000_000
"""Larger images are refused before decoding: a decompression bomb must not exhaust memory."""
NAMES_LISTED = 10
"""Notes about many files (skipped, upscaled) name this many and count the rest."""

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


@dataclass(frozen=True)
class DecodedImage:
    """One image's pixels at a spec and what was done to it on the way."""

    pixels: torch.Tensor
    upscaled: bool = False
    """The image was smaller than the model's input and was enlarged."""
    animated: bool = False
    """Only the first frame of an animated image was used."""


class ImageSource(Protocol):
    """Anything that hands out images by position at its ``spec``, labels known up front."""

    @property
    def description(self) -> str: ...

    @property
    def class_names(self) -> tuple[str, ...]: ...

    @property
    def spec(self) -> InputSpec: ...

    def __len__(self) -> int: ...

    def labels(self) -> torch.Tensor | None: ...

    def names(self, positions: Sequence[int]) -> list[str]: ...

    def read_one(self, position: int) -> DecodedImage:
        """The image at ``position``; DataError when its file cannot be decoded."""
        ...

    def read(self, positions: Sequence[int]) -> torch.Tensor:
        """uint8 [n, 3, H, W] of ``positions``; DataError if any cannot be decoded."""
        ...

    def at_spec(self, spec: InputSpec) -> ImageSource:
        """The same images read at another spec (a model of another input size)."""
        ...

    def fingerprint(self) -> str:
        """Changes whenever the images change: stored outputs are checked against it."""
        ...

    def origin(self) -> dict[str, Any]:
        """Where the images come from, as JSON for stored outputs' metadata."""
        ...


def read(source: ImageSource, positions: Sequence[int]) -> torch.Tensor:
    """uint8 [n, 3, H, W] of the given positions; DataError if any of them cannot be decoded.

    For images a user picked (their gradients need exactly these); a pass over many images
    uses ``stream``, which skips unreadable files instead.
    """
    positions = list(positions)
    if not positions:
        return torch.empty(0, 3, *source.spec.size, dtype=torch.uint8)
    return torch.stack([source.read_one(position).pixels for position in positions])


class _Reads:
    """``read`` for every source, from its ``read_one``."""

    def read(self, positions: Sequence[int]) -> torch.Tensor:
        return read(self, positions)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ArraySource(_Reads):
    """Images already decoded in memory as uint8 [N, 3, h, w] (CIFAR-10 batches).

    At a spec of the arrays' own size they are handed out as they are; at any other, each is
    prepared by ``spec.prepare`` like a decoded file.
    """

    images: torch.Tensor
    label_tensor: torch.Tensor | None
    class_names: tuple[str, ...]
    description: str
    image_names: tuple[str, ...] | None = None
    spec: InputSpec = DEFAULT_SPEC

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def labels(self) -> torch.Tensor | None:
        return self.label_tensor

    def names(self, positions: Sequence[int]) -> list[str]:
        if self.image_names is None:
            return [f"#{position}" for position in positions]
        return [self.image_names[position] for position in positions]

    @property
    def native(self) -> bool:
        """Whether the spec takes the arrays as they are (same size, nothing to resize)."""
        height, width = self.images.shape[2:]
        return self.spec.size == (height, width) and self.spec.shorter_side == min(height, width)

    def read_one(self, position: int) -> DecodedImage:
        pixels = self.images[position]
        if self.native:
            return DecodedImage(pixels)
        image = Image.fromarray(pixels.permute(1, 2, 0).numpy())
        prepared, note = self.spec.prepare(image, self.names([position])[0])
        return DecodedImage(prepared, upscaled=note is not None)

    def at_spec(self, spec: InputSpec) -> ArraySource:
        return replace(self, spec=spec)

    @functools.cached_property
    def _digest(self) -> str:
        digest = hashlib.sha256(self.images.contiguous().numpy().tobytes())
        if self.label_tensor is not None:
            digest.update(self.label_tensor.numpy().tobytes())
        return digest.hexdigest()

    def fingerprint(self) -> str:
        return self._digest

    def origin(self) -> dict[str, Any]:
        return {"kind": "arrays", "root": None, "description": self.description}


@dataclass(frozen=True)
class FolderSource(_Reads):
    """An ImageFolder tree (``root/<class>/<file>``): names only, each file decoded when read.

    The files are kept as relative names (``"cat/0001.jpg"``), plain strings: 50,000 ``Path``
    objects take most of a second to build and sort, the names a tenth of that.
    """

    root: Path
    relative_names: tuple[str, ...]
    label_tensor: torch.Tensor
    class_names: tuple[str, ...]
    description: str
    spec: InputSpec = DEFAULT_SPEC

    def __len__(self) -> int:
        return len(self.relative_names)

    @property
    def files(self) -> tuple[Path, ...]:
        """Every file's path, built when asked for."""
        return tuple(self.root / name for name in self.relative_names)

    def labels(self) -> torch.Tensor | None:
        return self.label_tensor

    def names(self, positions: Sequence[int]) -> list[str]:
        return [self.relative_names[p] for p in positions]

    def read_one(self, position: int) -> DecodedImage:
        # Named as the source names it (relative to its root): messages then say which image,
        # without the server's own folders.
        name = self.relative_names[position]
        try:
            content = (self.root / name).read_bytes()
        except OSError as error:
            raise DataError(f"{name}: cannot be read ({error.strerror or error}).") from None
        return decode(content, name, self.spec)

    def at_spec(self, spec: InputSpec) -> FolderSource:
        return replace(self, spec=spec)

    def fingerprint(self) -> str:
        from gradpick.store import source_fingerprint

        return source_fingerprint(self.root, self.relative_names)

    def origin(self) -> dict[str, Any]:
        return {"kind": "folder", "root": str(self.root), "description": self.description}


@dataclass(frozen=True)
class UploadSource(_Reads):
    """Uploaded (or given) files as (name, bytes): the bytes are kept, decoded when read."""

    files: tuple[tuple[str, bytes], ...] = field(repr=False)
    class_names: tuple[str, ...]
    description: str
    spec: InputSpec = DEFAULT_SPEC

    def __len__(self) -> int:
        return len(self.files)

    def labels(self) -> torch.Tensor | None:
        return None

    def names(self, positions: Sequence[int]) -> list[str]:
        return [self.files[p][0] for p in positions]

    def read_one(self, position: int) -> DecodedImage:
        name, content = self.files[position]
        return decode(content, name, self.spec)

    def at_spec(self, spec: InputSpec) -> UploadSource:
        return replace(self, spec=spec)

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for name, content in self.files:
            digest.update(f"{name}\0{hashlib.sha256(content).hexdigest()}\n".encode())
        return digest.hexdigest()

    def origin(self) -> dict[str, Any]:
        return {"kind": "upload", "root": None, "description": self.description}


def cache_dir() -> Path:
    """Where downloads and decoded caches live: $GRADPICK_CACHE_DIR, else the user cache dir."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gradpick"


# ----------------------------------------------------------------------------- single images


def decode(data: bytes, name: str = "image", spec: InputSpec = DEFAULT_SPEC) -> DecodedImage:
    """Decode PNG/JPEG/WebP/... bytes into uint8 [3, H, W] RGB at ``spec``.

    Any size is accepted up to ``MAX_IMAGE_PIXELS``: ``spec.prepare`` resizes the shorter side
    and crops the centre. Transparency is flattened onto white, grayscale is expanded to RGB,
    16-bit and float images are scaled to 8 bits, and an animated image gives its first frame.
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
                animated = getattr(opened, "n_frames", 1) > 1
                if animated:
                    opened.seek(0)
                opened.load()
                pixels, note = spec.prepare(opened, name)
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
    return DecodedImage(pixels, upscaled=note is not None, animated=animated)


def decode_image(
    data: bytes, name: str = "image", spec: InputSpec = DEFAULT_SPEC
) -> tuple[torch.Tensor, str | None]:
    """``decode`` as (pixels, a note when the image was adapted beyond resizing)."""
    decoded = decode(data, name, spec)
    notes = []
    if decoded.animated:
        notes.append(f"{name}: animated image, only its first frame is used.")
    if decoded.upscaled:
        notes.append(
            f"{name}: smaller than the model's input ({spec.width}x{spec.height}); it was upscaled."
        )
    return decoded.pixels, " ".join(notes) or None


def images_from_files(
    files: Sequence[tuple[str, bytes]],
    class_names: Sequence[str] = CIFAR10_CLASSES,
    spec: InputSpec = DEFAULT_SPEC,
) -> UploadSource:
    """An unlabelled source from uploaded or given files, as (name, bytes) pairs.

    Each file is decoded once to check it (the pixels are dropped again; the source keeps the
    bytes). Raises DataError naming every file that could not be read, so a user can fix all
    at once.
    """
    if not files:
        raise DataError("No images given: upload or name at least one image file.")
    problems: list[str] = []
    for name, content in files:
        try:
            decode(content, name, spec)
        except DataError as error:
            problems.append(str(error))
    if problems:
        raise DataError("Some images could not be used:\n" + "\n".join(problems))
    return UploadSource(
        files=tuple((name, content) for name, content in files),
        class_names=tuple(class_names),
        description=f"{len(files)} uploaded image(s)",
        spec=spec,
    )


def images_from_paths(paths: Sequence[str | Path], spec: InputSpec = DEFAULT_SPEC) -> UploadSource:
    """An unlabelled source from image files on disk."""
    files = []
    for path in map(Path, paths):
        if not path.is_file():
            raise DataError(f"{path}: no such file.")
        files.append((path.name, path.read_bytes()))
    return images_from_files(files, spec=spec)


# ----------------------------------------------------------------------------- folders


def image_folder(root: str | Path, spec: InputSpec = DEFAULT_SPEC) -> FolderSource:
    """An ImageFolder tree: one sub-folder per class (sorted names give the class order), its
    files sorted within each class, as ``torchvision.datasets.ImageFolder`` orders them."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataError(f"{root}: no such folder. Give a folder with one sub-folder per class.")
    class_names = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    names: list[str] = []
    labels: list[int] = []
    for label, class_name in enumerate(class_names):
        class_files = sorted(
            entry.name
            for entry in os.scandir(root / class_name)
            if os.path.splitext(entry.name)[1].lower() in IMAGE_SUFFIXES
        )
        names.extend(f"{class_name}/{name}" for name in class_files)
        labels.extend([label] * len(class_files))
    if not names:
        raise DataError(
            f"{root}: no images found. Expected the ImageFolder layout "
            "root/<class>/<image>.png|jpg|webp, for example .../cifar10-jpg/test."
        )
    return FolderSource(
        root=root,
        relative_names=tuple(names),
        label_tensor=torch.tensor(labels, dtype=torch.long),
        class_names=tuple(class_names),
        description=f"folder {root}",
        spec=spec,
    )


def cifar10_batches_folder(
    folder: str | Path, split: str = "test", spec: InputSpec = DEFAULT_SPEC
) -> ArraySource:
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
        spec=spec,
    )


def _check_split(split: str) -> None:
    if split not in ("train", "test"):
        raise InputError(f"Unknown split '{split}'; use 'train' or 'test'.")


def open_source(
    location: str | Path, split: str = "test", spec: InputSpec = DEFAULT_SPEC
) -> ImageSource:
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
            return cifar10_batches_folder(candidate, split, spec)
    if (path / split).is_dir():
        return image_folder(path / split, spec)
    return image_folder(path, spec)


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
    spec: InputSpec = DEFAULT_SPEC,
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
        source = cifar10_batches_folder(folder, split, spec)
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


def default_cifar10(
    split: str = "test",
    progress: ProgressCallback | None = None,
    spec: InputSpec = DEFAULT_SPEC,
) -> ImageSource:
    """CIFAR-10 from ``$GRADPICK_CIFAR10_DIR`` when set, else torchvision's cached download."""
    configured = os.environ.get(CIFAR10_DIR_ENV)
    if configured:
        return open_source(configured, split, spec)
    return cifar10(split, progress=progress, spec=spec)


# ----------------------------------------------------------------------------- streaming


@dataclass(frozen=True)
class Chunk:
    """Consecutive positions of a pass, decoded: the images that could be read, in order."""

    positions: tuple[int, ...]
    images: torch.Tensor
    """uint8 [len(positions), 3, H, W] at the source's spec."""
    skipped: tuple[tuple[int, str], ...] = ()
    """(position, why) of each file that could not be decoded."""
    upscaled: tuple[int, ...] = ()
    animated: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.positions)

    def pin_memory(self) -> Chunk:
        """Called by the DataLoader's pinning thread: page-locked pixels copy to a GPU
        asynchronously (``non_blocking=True``)."""
        return replace(self, images=self.images.pin_memory())


def read_chunk(source: ImageSource, positions: Sequence[int]) -> Chunk:
    """Decode ``positions`` of ``source``; unreadable files are skipped and reported."""
    if isinstance(source, ArraySource) and source.native:
        index = torch.as_tensor(list(positions), dtype=torch.long)
        return Chunk(tuple(positions), source.images[index])
    kept: list[int] = []
    pixels: list[torch.Tensor] = []
    skipped: list[tuple[int, str]] = []
    upscaled: list[int] = []
    animated: list[int] = []
    for position in positions:
        try:
            decoded = source.read_one(position)
        except DataError as error:
            skipped.append((position, str(error)))
            continue
        kept.append(position)
        pixels.append(decoded.pixels)
        if decoded.upscaled:
            upscaled.append(position)
        if decoded.animated:
            animated.append(position)
    images = (
        torch.stack(pixels) if pixels else torch.empty(0, 3, *source.spec.size, dtype=torch.uint8)
    )
    return Chunk(tuple(kept), images, tuple(skipped), tuple(upscaled), tuple(animated))


class _Chunks(torch.utils.data.Dataset[Chunk]):
    """A pass over positions as a map-style dataset of whole chunks: a worker decodes one
    chunk at a time and hands it over in one piece."""

    def __init__(self, source: ImageSource, positions: Sequence[int], chunk_size: int) -> None:
        self.source = source
        self.positions = list(positions)
        self.chunk_size = chunk_size

    def __len__(self) -> int:
        return -(-len(self.positions) // self.chunk_size)

    def __getitem__(self, index: int) -> Chunk:
        start = index * self.chunk_size
        return read_chunk(self.source, self.positions[start : start + self.chunk_size])


def default_workers(chunks: int) -> int:
    """Decoding processes for a pass of ``chunks`` chunks: one per CPU but one (left to the
    model), at most 8, and none for a single chunk, which nothing could overlap."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows
        cpus = os.cpu_count() or 1
    return 0 if chunks <= 1 else max(1, min(8, cpus - 1, chunks))


def stream(
    source: ImageSource,
    positions: Sequence[int] | None = None,
    chunk_size: int = 256,
    workers: int | None = None,
    pin_memory: bool = False,
) -> Iterator[Chunk]:
    """Chunks of ``positions`` (default: all) in order, decoded by DataLoader workers ahead of
    the consumer, so decoding overlaps the model and only a few chunks exist at once.

    ``workers`` defaults to ``default_workers``; in-memory arrays at their own size are sliced
    in this process. ``pin_memory`` page-locks each chunk for asynchronous copies to a GPU.
    """
    if chunk_size < 1:
        raise InputError(f"chunk_size must be at least 1; got {chunk_size}.")
    chunks = _Chunks(source, range(len(source)) if positions is None else positions, chunk_size)
    if workers is None:
        in_memory = isinstance(source, ArraySource) and source.native
        workers = 0 if in_memory else default_workers(len(chunks))
    loader = torch.utils.data.DataLoader(
        chunks,
        batch_size=None,
        shuffle=False,
        num_workers=workers,
        pin_memory=pin_memory and torch.cuda.is_available(),
    )
    yield from loader


@dataclass
class ReadReport:
    """What a pass over a source skipped or adapted, by image name, for the summary."""

    spec: InputSpec
    skipped: list[str] = field(default_factory=list)
    """One message per unreadable file (it names the file)."""
    upscaled: list[str] = field(default_factory=list)
    animated: list[str] = field(default_factory=list)

    def add(self, source: ImageSource, chunk: Chunk) -> None:
        self.skipped.extend(why for _, why in chunk.skipped)
        self.upscaled.extend(source.names(chunk.upscaled))
        self.animated.extend(source.names(chunk.animated))

    def notes(self) -> tuple[str, ...]:
        notes = []
        if self.skipped:
            notes.append(
                f"{len(self.skipped):,} file(s) could not be read and were skipped: "
                + _listed(self.skipped, "; ")
            )
        if self.upscaled:
            notes.append(
                f"{len(self.upscaled):,} image(s) smaller than the model's input "
                f"({self.spec.width}x{self.spec.height}) were upscaled: {_listed(self.upscaled)}"
            )
        if self.animated:
            notes.append(
                f"{len(self.animated):,} animated image(s), only the first frame used: "
                + _listed(self.animated)
            )
        return tuple(notes)


def _listed(items: Sequence[str], separator: str = ", ") -> str:
    shown = separator.join(item.rstrip(".") for item in items[:NAMES_LISTED])
    rest = len(items) - NAMES_LISTED
    return f"{shown}{separator}and {rest:,} more." if rest > 0 else f"{shown}."


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
    chunk_size: int = 256,
    progress: ProgressCallback | None = None,
    workers: int | None = None,
) -> ImageBatch:
    """A slice (or seeded sample) of a source decoded into memory, chunk by chunk with progress.

    Files that cannot be decoded are left out of the batch and named in its notes; the batch's
    ``positions`` say which images it holds.
    """
    wanted = batch_positions(len(source), start, size, seed)
    images = torch.empty(len(wanted), 3, *source.spec.size, dtype=torch.uint8)
    positions: list[int] = []
    report = ReadReport(source.spec)
    done = 0
    for chunk in stream(source, wanted, chunk_size, workers):
        images[len(positions) : len(positions) + len(chunk)] = chunk.images
        positions.extend(chunk.positions)
        report.add(source, chunk)
        done += len(chunk) + len(chunk.skipped)
        if progress is not None:
            progress(done, len(wanted))
    if not positions:
        raise DataError("None of the images could be read:\n" + "\n".join(report.skipped))
    all_labels = source.labels()
    labels = None if all_labels is None else all_labels[torch.tensor(positions)]
    return ImageBatch(
        images=images[: len(positions)],
        labels=labels,
        class_names=source.class_names,
        names=tuple(source.names(positions)),
        positions=tuple(positions),
        source=source.description,
        notes=report.notes(),
    )


def decoded_cache(source: ImageSource, progress: ProgressCallback | None = None) -> ImageBatch:
    """The whole source decoded once into a uint8 tensor file under the cache dir.

    Training reads 50,000 JPEGs every epoch otherwise; the cache key covers the file list and
    sizes and the spec, so editing the folder invalidates it.
    """
    key = hashlib.sha256(source.description.encode())
    key.update(str(len(source)).encode())
    key.update(repr(source.spec.to_json()).encode())
    if isinstance(source, FolderSource):
        for path in source.files:
            key.update(f"{path}:{path.stat().st_size}".encode())
    path = cache_dir() / "decoded" / f"{key.hexdigest()[:16]}.pt"
    if path.is_file():
        try:
            cached = torch.load(path, weights_only=True)
            positions = tuple(cached.get("positions", range(len(source))))
            return ImageBatch(
                images=cached["images"],
                labels=cached["labels"],
                class_names=tuple(cached["class_names"]),
                names=tuple(source.names(positions)),
                positions=positions,
                source=source.description,
            )
        except (RuntimeError, KeyError, EOFError, pickle.UnpicklingError):
            path.unlink(missing_ok=True)
    batch = load_batch(source, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    torch.save(
        {
            "images": batch.images,
            "labels": batch.labels,
            "class_names": list(batch.class_names),
            "positions": list(batch.positions),
        },
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
