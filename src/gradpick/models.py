"""The two CIFAR-10 architectures, their shipped weights and model cards.

Both models take float images in [0, 1] and normalise inside, so input gradients are with
respect to pixels. ``load`` returns a model in ``eval()`` with every parameter frozen: a request
never trains or mutates it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.resources
import io
import json
import os
import pickle
from collections.abc import Callable
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

import torch
import torch.nn.functional as F
from torch import nn

from gradpick.devices import resolve_device
from gradpick.errors import ModelError

if TYPE_CHECKING:
    from gradpick.zoo import LoadedModel, SpecOverrides

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
ASSETS_DIR_ENV = "GRADPICK_ASSETS_DIR"
BN_COUNTER = "num_batches_tracked"


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


def sha256_file(path: str | Traversable) -> str:
    digest = hashlib.sha256()
    with (Path(path) if isinstance(path, str) else path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _refused_global(error: pickle.UnpicklingError) -> str | None:
    """The weights-only unpickler's line naming a refused Python global, if that was the cause."""
    for line in str(error).splitlines():
        if "GLOBAL" in line:
            return line.strip()[:200]
    return None


def _unreadable(label: str, error: Exception) -> ModelError:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [""]
    detail = next((line for line in lines if "Unsupported" in line), lines[0])
    return ModelError(
        f"{label}: not a readable PyTorch weights file; it is corrupt, truncated or not made by "
        f"torch.save ({type(error).__name__}: {detail[:160]})."
    )


def _is_safetensors(source: str | Path | bytes) -> bool:
    """A ``.safetensors`` path, or bytes that open like one: an 8-byte header size, then JSON."""
    if not isinstance(source, bytes):
        return Path(source).suffix.lower() == ".safetensors"
    if len(source) < 10 or source[8:9] != b"{":
        return False
    return int.from_bytes(source[:8], "little") <= len(source) - 8


def _read_safetensors(source: str | Path | bytes, label: str) -> dict[str, torch.Tensor]:
    """A safetensors file holds tensors only, so reading it can never run code."""
    from safetensors import SafetensorError
    from safetensors.torch import load, load_file

    try:
        return load(source) if isinstance(source, bytes) else load_file(source, device="cpu")
    except (SafetensorError, OSError, ValueError) as error:
        raise ModelError(
            f"{label}: not a readable safetensors file; it is corrupt or truncated ({error})."
        ) from None


def read_state_dict(source: str | Traversable | bytes) -> dict[str, torch.Tensor]:
    """Read a weights file: ``.safetensors``, or a torch.save file with ``weights_only=True``
    (a file that carries code is refused unrun).

    ``source`` is a path, a package resource (which may live inside a zip) or the file's bytes.
    """
    label = "uploaded weights" if isinstance(source, bytes) else str(source)
    if not isinstance(source, bytes | str | Path):
        # A package resource, perhaps inside a zip: read it whole, like an upload.
        if not source.is_file():
            raise ModelError(f"{label}: no such weights file.")
        source = source.read_bytes()
    elif not isinstance(source, bytes) and not Path(source).is_file():
        raise ModelError(f"{label}: no such weights file.")
    if _is_safetensors(source):
        return _read_safetensors(source, label)
    handle: Any = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        state = torch.load(handle, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        refused = _refused_global(error)
        if refused is not None:
            raise ModelError(
                f"{label}: refused, the file holds Python objects other than tensors (it could "
                f"run code when loaded). Save a plain state_dict instead. Detail: {refused}"
            ) from None
        raise _unreadable(label, error) from None
    except Exception as error:  # arbitrary bytes make torch.load raise almost any type
        raise _unreadable(label, error) from None
    if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
        state = state["model"]
    if not isinstance(state, dict) or not all(
        isinstance(value, torch.Tensor) for value in state.values()
    ):
        raise ModelError(f"{label}: expected a state_dict (a dict of tensors).")
    return state


def apply_state_dict(model: nn.Module, state: dict[str, torch.Tensor], name: str) -> None:
    """Load weights, explaining an architecture mismatch and refusing non-finite weights."""
    expected = model.state_dict()
    # BatchNorm's step counter is not used in eval and absent from files older than PyTorch
    # 0.4.1 (torchvision's published weights among them); load_state_dict fills it in.
    missing = sorted(key for key in set(expected) - set(state) if not key.endswith(BN_COUNTER))
    unexpected = sorted(set(state) - set(expected))
    mismatched = [
        key
        for key in set(expected) & set(state)
        if tuple(expected[key].shape) != tuple(state[key].shape)
    ]
    if missing or unexpected or mismatched:
        details = []
        if missing:
            details.append(f"missing {len(missing)} (e.g. {missing[0]})")
        if unexpected:
            details.append(f"unexpected {len(unexpected)} (e.g. {unexpected[0]})")
        if mismatched:
            details.append(f"wrong shape for {sorted(mismatched)[0]}")
        raise ModelError(
            f"These weights are not for the '{name}' architecture: {'; '.join(details)}."
        )
    bad = [
        key
        for key, value in state.items()
        if value.is_floating_point() and not value.isfinite().all()
    ]
    if bad:
        raise ModelError(f"These weights contain NaN or infinite values (first in '{bad[0]}').")
    model.load_state_dict(state)


def freeze(model: nn.Module) -> nn.Module:
    """Put a model in eval mode with every parameter frozen, as gradpick serves models."""
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model


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


def load_model(
    name: str,
    weights: str | Path | bytes | None = None,
    device: str | torch.device | None = None,
    **overrides: Unpack[SpecOverrides],
) -> LoadedModel:
    """Any classifier by name with its input spec; ``gradpick.zoo.load_model`` documents it.

    ``load`` stays the plain module of a built-in; this is the one resolver for every name.
    """
    from gradpick import zoo  # zoo builds on this module, so it is imported when first used

    return zoo.load_model(name, weights, device, **overrides)


def from_factory(
    spec: str,
    weights: str | Path | bytes | None = None,
    device: str | torch.device | None = None,
) -> nn.Module:
    """A user's own model from ``package.module:factory`` (a callable returning an nn.Module).

    The factory's code runs with the user's rights, so only local, non-hosted runs offer this.
    Weights, when given, are read with ``weights_only=True`` like every other weights file.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ModelError(f"'{spec}' is not of the form package.module:factory.")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ModelError(
            f"Cannot import '{spec}': {error}. Is its package on PYTHONPATH?"
        ) from None
    try:
        model = factory()
    except Exception as error:  # the user's code: report whatever it raised, in one line
        raise ModelError(f"'{spec}' raised {type(error).__name__}: {error}") from None
    if not isinstance(model, nn.Module):
        raise ModelError(f"'{spec}' returned {type(model).__name__}, not a torch.nn.Module.")
    if weights is not None:
        apply_state_dict(model, read_state_dict(weights), spec)
    return freeze(model).to(resolve_device(device))
