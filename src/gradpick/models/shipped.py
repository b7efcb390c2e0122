"""The two CIFAR-10 architectures, their shipped weights and model cards.

Both models take float images in [0, 1] and normalise inside, so input gradients are with
respect to pixels. ``load`` returns a model in ``eval()`` with every parameter frozen: a request
never trains or mutates it. Weights are read and checked by ``gradpick.models.weights``; every model
name, these two included, is resolved with its input spec by ``gradpick.models.zoo.load_model``.
"""

from __future__ import annotations

import importlib.resources
import json
import os
from collections.abc import Callable
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gradpick.errors import ModelError
from gradpick.models.weights import (
    apply_state_dict,
    freeze,
    read_state_dict,
    sha256_bytes,
    sha256_file,
)
from gradpick.runtime.devices import resolve_device

__all__ = [
    "ARCHITECTURES",
    "ASSETS_DIR_ENV",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "BasicBlock",
    "Normalize",
    "ResNet20",
    "TutorialNet",
    "apply_state_dict",
    "assets_dir",
    "build",
    "freeze",
    "load",
    "model_card",
    "read_state_dict",
    "sha256_bytes",
    "sha256_file",
    "shipped_models",
    "shipped_weights_path",
]
"""The weights helpers are ``gradpick.models.weights``'s, named here too: ``models.freeze`` and
``models.sha256_file`` are how the library has always offered them."""

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
ASSETS_DIR_ENV = "GRADPICK_ASSETS_DIR"


class Normalize(nn.Module):
    """Per-channel standardisation; its constants are not weights, so not in the state_dict."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return (images - self.mean.to(images.dtype)) / self.std.to(images.dtype)


class TutorialNet(nn.Module):
    """The network of PyTorch's CIFAR-10 tutorial, behind a normalisation step."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.normalize = Normalize(CIFAR10_MEAN, CIFAR10_STD)
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.normalize(images)
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class BasicBlock(nn.Module):
    """A ResNet basic block; the CIFAR variant's shortcut subsamples and zero-pads (option A)."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.pad_channels = planes - in_planes
        self.stride = stride

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1 and self.pad_channels == 0:
            return x
        x = x[:, :, :: self.stride, :: self.stride]
        half = self.pad_channels // 2
        return F.pad(x, (0, 0, 0, 0, half, self.pad_channels - half))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    """The CIFAR ResNet-20 of He et al. (2016): 3 stages of 16/32/64 channels, 3 blocks each."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.normalize = Normalize(CIFAR10_MEAN, CIFAR10_STD)
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        stages: list[nn.Module] = []
        in_planes = 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            blocks = []
            for block_index in range(3):
                blocks.append(BasicBlock(in_planes, planes, stride if block_index == 0 else 1))
                in_planes = planes
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.fc = nn.Linear(64, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                nn.init.kaiming_normal_(module.weight)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(self.normalize(images))))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


ARCHITECTURES: dict[str, Callable[[], nn.Module]] = {
    "resnet20": ResNet20,
    "tutorial": TutorialNet,
}
"""Built-in models, best first: the first one with shipped weights is the app's default."""


def build(name: str) -> nn.Module:
    """A freshly initialised model of a built-in architecture (training mode, trainable)."""
    if name not in ARCHITECTURES:
        raise ModelError(f"Unknown model '{name}'; choose one of {', '.join(ARCHITECTURES)}.")
    return ARCHITECTURES[name]()


def assets_dir() -> Traversable:
    """Folder of shipped weights and cards: $GRADPICK_ASSETS_DIR, else the package's own assets/.

    The shipped files are package data, read through ``importlib.resources``, so they are found
    from a wheel (even a zipped one), not only from a source checkout.
    """
    configured = os.environ.get(ASSETS_DIR_ENV)
    if configured:
        return Path(configured)
    return importlib.resources.files("gradpick") / "assets"


def shipped_weights_path(name: str) -> Traversable:
    return assets_dir() / f"{name}.pt"


def model_card(name: str) -> dict[str, Any] | None:
    """The shipped model card (JSON) of a built-in model, or None when none ships yet."""
    path = assets_dir() / f"{name}.json"
    if not path.is_file():
        return None
    card: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return card


def shipped_models() -> list[str]:
    """Built-in models that have weights in the assets folder, best first."""
    return [name for name in ARCHITECTURES if shipped_weights_path(name).is_file()]


def load(
    name: str,
    weights: str | Traversable | bytes | None = None,
    device: str | torch.device | None = None,
) -> nn.Module:
    """A ready model: shipped weights (or ``weights``) loaded, eval mode, frozen, on ``device``."""
    model = build(name)
    if weights is None:
        path = shipped_weights_path(name)
        if not path.is_file():
            raise ModelError(
                f"No shipped weights for '{name}' in {assets_dir()}; train them with "
                f"'gradpick train {name}' or pass a weights file."
            )
        weights = path
    apply_state_dict(model, read_state_dict(weights), name)
    return freeze(model).to(resolve_device(device))
