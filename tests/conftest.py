"""Fixtures shared by the whole suite: tiny seeded models, a random batch, generated image trees.

Everything here is small on purpose: the suite runs on two busy CPU cores.
"""

from __future__ import annotations

import copy
import os
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from gradpick import data
from gradpick.data import CIFAR10_CLASSES
from gradpick.models import shipped as models
from gradpick.models.shipped import freeze
from gradpick.ui import config

REPO_ROOT = Path(__file__).resolve().parents[1]
CIFAR10_DIR_ENV = "GRADPICK_CIFAR10_DIR"


def pytest_configure(config: pytest.Config) -> None:
    # The suite's tensors are tiny: one intra-op thread avoids thread start-up and contention
    # with other work on a small machine, and runs the suite several times faster there.
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def one_cpu_thread() -> None:
    """Each test starts on one intra-op thread again: a library that runs OpenMP code of its own
    (numba, through umap-learn) can leave the count torch reads at the core count, and every
    later test of that worker then ran several times slower with both cores busy."""
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def private_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point gradpick's cache at a temporary folder so no test writes to the user's cache."""
    folder = tmp_path_factory.mktemp("gradpick-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADPICK_CACHE_DIR", str(folder))
        yield folder


def _seeded(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    """Build a module under a fixed seed without disturbing the global random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def _tiny_cnn(batch_norm: bool) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, 4, 3, stride=2, padding=1)]
    if batch_norm:
        layers.append(nn.BatchNorm2d(4))
    layers += [
        nn.ReLU(),
        nn.Conv2d(4, 8, 3, stride=2, padding=1),
        nn.Tanh(),
        nn.Flatten(),
        nn.Linear(8 * 8 * 8, 10),
    ]
    model = nn.Sequential(*layers)
    if batch_norm:
        norm = model[1]
        assert isinstance(norm, nn.BatchNorm2d)
        # Non-trivial running statistics, so eval-mode BatchNorm is not close to the identity.
        norm.running_mean.uniform_(-0.5, 0.5)
        norm.running_var.uniform_(0.5, 2.0)
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.2, 0.2)
    return model


@pytest.fixture
def tiny_cnn() -> nn.Module:
    """A small float32 conv net without BatchNorm: [N, 3, 32, 32] -> [N, 10], eval, frozen."""
    return freeze(_seeded(lambda: _tiny_cnn(batch_norm=False), seed=0))


@pytest.fixture
def tiny_bn_cnn() -> nn.Module:
    """The tiny conv net with a BatchNorm2d after its first conv, eval mode, frozen."""
    return freeze(_seeded(lambda: _tiny_cnn(batch_norm=True), seed=1))


@pytest.fixture
def float64_cnn(tiny_bn_cnn: nn.Module) -> nn.Module:
    """A float64 copy of the tiny BatchNorm net (eval, frozen), for exact comparisons."""
    return freeze(copy.deepcopy(tiny_bn_cnn).double())


@pytest.fixture
def float64_images() -> torch.Tensor:
    """Seeded float64 images [6, 3, 32, 32] in [0, 1]."""
    return torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


class Batch(NamedTuple):
    images: torch.Tensor
    labels: torch.Tensor


@pytest.fixture
def random_batch() -> Batch:
    """Seeded float32 images [16, 3, 32, 32] in [0, 1] with int64 labels in 0..9."""
    generator = torch.Generator().manual_seed(1234)
    images = torch.rand(16, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (16,), generator=generator)
    return Batch(images, labels)


def write_image(
    path: Path,
    size: tuple[int, int] = (32, 32),
    mode: str = "RGB",
    seed: int = 0,
    format: str | None = None,
) -> Path:
    """A deterministic noise image of ``size`` (width, height) in ``mode``, saved at ``path``."""
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    pixels = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    image = Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format=format)
    return path


@pytest.fixture
def image_file() -> Callable[..., Path]:
    """The ``write_image`` helper, for tests that need single image files."""
    return write_image


def png_header_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height pixels, with almost no pixel data behind it:
    the shape of a decompression bomb, without spending memory to make one."""

    def chunk(kind: bytes, payload: bytes) -> bytes:
        body = kind + payload
        return struct.pack(">I", len(payload)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00" * (1 + 3 * width))  # one filter byte and one row of RGB
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


@pytest.fixture
def png_claiming() -> Callable[[int, int], bytes]:
    """The ``png_header_claiming`` helper: decompression-bomb-shaped PNG bytes."""
    return png_header_claiming


ImageFolderFactory = Callable[..., Path]


@pytest.fixture
def image_folder_factory(tmp_path: Path) -> ImageFolderFactory:
    """Returns ``make(classes, per_class, size, suffix, name)``: writes an ImageFolder tree.

    ``classes`` is a count (names class_00, class_01, ...) or a sequence of names; every image
    is seeded noise, so two trees made with the same arguments are identical.
    """

    def make(
        classes: int | Sequence[str] = 3,
        per_class: int = 2,
        size: tuple[int, int] = (32, 32),
        suffix: str = ".png",
        name: str = "folder",
    ) -> Path:
        root = tmp_path / name
        class_names = (
            [f"class_{index:02d}" for index in range(classes)]
            if isinstance(classes, int)
            else list(classes)
        )
        for label, class_name in enumerate(class_names):
            for item in range(per_class):
                write_image(
                    root / class_name / f"{item:04d}{suffix}",
                    size=size,
                    seed=label * 1000 + item,
                )
        return root

    return make


@pytest.fixture(scope="session")
def cifar_like_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Path]:
    """Returns ``make(per_split)``: a folder with train/ and test/ ImageFolder trees in
    CIFAR-10's class names, ``per_split`` seeded noise images each, dealt to classes in turn."""

    def make(per_split: int) -> Path:
        root = tmp_path_factory.mktemp("cifar-like")
        for split in ("test", "train"):
            for index in range(per_split):
                name = CIFAR10_CLASSES[index % len(CIFAR10_CLASSES)]
                write_image(root / split / name / f"{index:04d}.png", seed=index)
        return root

    return make


@pytest.fixture(scope="session")
def shared_cifar10_dir() -> Path:
    """The real CIFAR-10 JPEG folder (train/ and test/ ImageFolder trees), or skip."""
    configured = os.environ.get(CIFAR10_DIR_ENV)
    candidate = (
        Path(configured) if configured else REPO_ROOT.parent / "shared" / "data" / "cifar10-jpg"
    )
    if not (candidate / "test").is_dir():
        pytest.skip(
            f"real CIFAR-10 data not found at {candidate}; set ${CIFAR10_DIR_ENV} to a folder "
            "with train/ and test/ ImageFolder trees to run this test"
        )
    return candidate


@pytest.fixture(scope="session")
def generated_folder(cifar_like_factory: Callable[[int], Path]) -> Path:
    """A 64-image CIFAR-10-shaped folder (train/ and test/) for the page's tests."""
    return cifar_like_factory(64)


@pytest.fixture
def generated(generated_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The generated folder as the CIFAR-10 copy, no shipped weights, no hosted mode and no
    user model, whatever the environment running the tests says."""
    monkeypatch.setenv(data.CIFAR10_DIR_ENV, str(generated_folder))
    monkeypatch.setenv(models.ASSETS_DIR_ENV, str(tmp_path / "no-assets"))
    monkeypatch.setenv(config.HOSTED_ENV, "0")
    for name in (config.MODEL_ENV, config.WEIGHTS_ENV, config.CLASSES_ENV, config.OUTPUT_ENV):
        monkeypatch.delenv(name, raising=False)
    return generated_folder
