"""Weights files in and out of a module: reading a state_dict safely, fitting it to an
architecture, digests for provenance, and freezing the module as gradpick serves it.

Both ``gradpick.models.shipped`` (the built-in architectures) and ``gradpick.models.zoo`` (every
other model
name) load weights through here, so a file is refused for the same reasons whichever name it
is loaded under.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gradpick.errors import ModelError

__all__ = [
    "BN_COUNTER",
    "apply_state_dict",
    "freeze",
    "read_state_dict",
    "sha256_bytes",
    "sha256_file",
]

BN_COUNTER = "num_batches_tracked"


def sha256_file(path: str | Path | Traversable) -> str:
    """The file's digest, read in 1 MiB blocks so a large checkpoint is never held whole."""
    digest = hashlib.sha256()
    with (Path(path) if isinstance(path, str) else path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(content: bytes) -> str:
    """The digest of uploaded weights, so they are named like a file of the same bytes."""
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


def read_state_dict(source: str | Path | Traversable | bytes) -> dict[str, torch.Tensor]:
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
