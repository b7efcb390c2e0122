"""Choosing the compute device: cuda, then mps, then cpu, with a reason for every missing one."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from gradpick.errors import DeviceUnavailableError

__all__ = [
    "DEVICE_CHOICES",
    "PROCESS_CPU_THREADS",
    "cpu_threads",
    "device_availability",
    "device_for",
    "device_matching",
    "first_tensor",
    "model_device",
    "modules_of",
    "resolve_device",
    "settle_cpu_threads",
    "synchronize",
]

DEVICE_CHOICES = ("auto", "cuda", "mps", "cpu")
PROCESS_CPU_THREADS = torch.get_num_threads()
"""torch's intra-op thread count when gradpick was imported: the process's own setting."""


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def device_availability() -> dict[str, str | None]:
    """Map each concrete device kind to None when usable, or to the reason it is not."""
    cuda_reason = None if torch.cuda.is_available() else "no CUDA GPU visible to PyTorch"
    mps_reason = None if _mps_available() else "no Apple Metal (MPS) backend on this machine"
    return {"cuda": cuda_reason, "mps": mps_reason, "cpu": None}


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """Turn 'auto'/None into the best available device and check an explicit one exists."""
    if device is None or (isinstance(device, str) and device == "auto"):
        availability = device_availability()
        for kind in ("cuda", "mps"):
            if availability[kind] is None:
                return torch.device(kind)
        return torch.device("cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise DeviceUnavailableError(
            f"'{device}' is not a device name; use one of {', '.join(DEVICE_CHOICES)}."
        ) from error
    reason = device_availability().get(resolved.type, "unknown device type")
    if reason is not None:
        raise DeviceUnavailableError(
            f"Device '{device}' is not available: {reason}. Use 'auto' or 'cpu' instead."
        )
    if resolved.type == "cuda" and resolved.index is not None:
        count = torch.cuda.device_count()
        if resolved.index >= count:
            raise DeviceUnavailableError(
                f"Device '{device}' is not available: only {count} CUDA device(s) visible."
            )
    return resolved


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels so a clock read afterwards measures finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def modules_of(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """The model and its submodules, depth first, as ``model.modules()`` lists them.

    A walk over the modules' own dictionaries: ``modules()`` builds names and a memo set on the
    way, which on a cache-cold CPU costs tens of microseconds, paid on every gradient request.
    """
    pending = [model]
    seen: set[int] = set()
    while pending:
        module = pending.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        yield module
        pending.extend(child for child in reversed(module._modules.values()) if child is not None)


def first_tensor(model: torch.nn.Module) -> torch.Tensor | None:
    """A parameter or buffer of the model (the first one found), None for a stateless model."""
    for module in modules_of(model):
        for tensor in itertools.chain(module._parameters.values(), module._buffers.values()):
            if tensor is not None:
                return tensor
    return None


def _device_of(weights: torch.Tensor | None) -> torch.device:
    """The device of a model's first tensor; cpu for a stateless model (it runs anywhere)."""
    return torch.device("cpu") if weights is None else weights.device


def model_device(model: torch.nn.Module) -> torch.device:
    """The device a model's parameters (or buffers) live on; cpu for a stateless model."""
    return _device_of(first_tensor(model))


def device_for(model: torch.nn.Module, device: str | torch.device | None) -> torch.device:
    """The device to run on: the model's own unless one is named, which must then match it."""
    return device_matching(first_tensor(model), device)


def device_matching(
    weights: torch.Tensor | None, device: str | torch.device | None
) -> torch.device:
    """``device_for`` given the model's first tensor, for callers that already walked the model.

    gradpick never moves a caller's model (that would mutate it under other sessions), so a
    mismatch is an error that says how to load the model where it is wanted.
    """
    current = _device_of(weights)
    if device is None:
        return current
    wanted = resolve_device(device)
    if weights is not None and (wanted.type, wanted.index or 0) != (
        current.type,
        current.index or 0,
    ):
        raise DeviceUnavailableError(
            f"The model lives on {current} but device '{device}' was asked for; load the model "
            f"on that device (gradpick.models.load_model(..., device='{device}')) or pass "
            "device=None."
        )
    return wanted


@contextmanager
def cpu_threads(count: int | None) -> Iterator[None]:
    """Run the block with ``count`` torch intra-op threads on the calling thread (None: leave
    them), then restore the thread's previous count.

    OpenMP keeps the count per thread, so other threads (other Streamlit sessions) keep theirs.
    Small steps gain nothing from a second thread, and on busy cores two threads that spin at
    each barrier waiting for a descheduled partner make a millisecond step take a hundred.
    """
    if count is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def settle_cpu_threads() -> None:
    """Give the calling thread the process's intra-op thread count (``PROCESS_CPU_THREADS``).

    torch keeps one count for the process and hands it to each new thread at that thread's
    first parallel call, and ``cpu_threads`` sets it for its block. A thread started while
    another thread's block runs therefore keeps that block's count for its whole life, and its
    own block then restores the process's count to it. A Streamlit run is a new thread: after
    eight sessions at once, every later run of the server inferred on one thread (1,050 against
    1,400 img/s). A run that calls this first takes the process's count, whatever other
    sessions do meanwhile.
    """
    torch.set_num_threads(PROCESS_CPU_THREADS)
