"""CIFAR-10 through torchvision's download, cached, with progress; or a configured local copy.

torchvision is imported only to download: a complete cached copy is read as a plain
``cifar-10-batches-py`` folder, which keeps torchvision (and its memory) out of a server.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

from gradpick.data.decoding import DEFAULT_SPEC
from gradpick.data.folders import check_split, cifar10_batches_folder, open_source
from gradpick.data.sources import ArraySource, ImageSource, ProgressCallback, cache_dir
from gradpick.errors import DataError, DownloadError
from gradpick.models.spec import InputSpec

__all__ = [
    "CIFAR10_DIR_ENV",
    "CIFAR10_FILES",
    "CIFAR10_FOLDER",
    "Cifar10Mirror",
    "cifar10",
    "default_cifar10",
]

CIFAR10_DIR_ENV = "GRADPICK_CIFAR10_DIR"


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
    check_split(split)
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
            f"cached copy is there. Offline? Then {_local_copy(split)}"
        ) from None
    except RuntimeError as error:  # torchvision: "Dataset not found or corrupted"
        raise DownloadError(
            f"No CIFAR-10 copy in {root} ({error}). Enable the download, or {_local_copy(split)}"
        ) from None


def _local_copy(split: str) -> str:
    """The two ways to an existing copy: nothing else finds one, such as a shared folder."""
    return (
        "point gradpick at a local copy: a folder in ImageFolder layout (e.g. "
        f".../cifar10-jpg/{split}, or .../cifar10-jpg holding train/ and test/) or an extracted "
        f"cifar-10-batches-py folder, named by ${CIFAR10_DIR_ENV}=FOLDER (read by the library, "
        "every command and the explorer) or by a command's --data FOLDER (in the explorer: the "
        "'Local folder' source)."
    )


def default_cifar10(
    split: str = "test",
    progress: ProgressCallback | None = None,
    spec: InputSpec = DEFAULT_SPEC,
) -> ImageSource:
    """CIFAR-10 from ``$GRADPICK_CIFAR10_DIR`` when set, else torchvision's cached download."""
    configured = os.environ.get(CIFAR10_DIR_ENV)
    if configured:
        if not Path(configured).expanduser().is_dir():
            raise DataError(
                f"{configured}: no such folder, named by ${CIFAR10_DIR_ENV}. Point it at a "
                "CIFAR-10 copy, or unset it to download one."
            )
        return open_source(configured, split, spec)
    return cifar10(split, progress=progress, spec=spec)
