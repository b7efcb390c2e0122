"""Exact input gradients of the images a user picked out of an already-inferred batch.

What this answers: after batched inference, for each picked index j we want
d target_j / d images[j]. ``compute`` runs one validated ``GradientRequest`` through the
strategy it names (see ``gradpick.gradients.strategies`` for the four and what each costs);
``input_gradients`` is the convenience form that builds the request from plain arguments.

The model is only ever read: no training flag, ``requires_grad`` flag or ``.grad`` changes, so
one model can serve several threads (Streamlit sessions) at once.
"""

from __future__ import annotations

import copy
import math
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from gradpick.errors import DeviceMemoryError, InputError, SampleCouplingError, SelectionError
from gradpick.gradients import strategies
from gradpick.gradients.request import REDUCTIONS, TARGETS, GradientRequest, Reduction, Target
from gradpick.outputs.inference import call_model, check_logits
from gradpick.runtime import measure
from gradpick.runtime.devices import modules_of
from gradpick.runtime.measure import MemoryReport, SavedTensorCounter, Stopwatch
from gradpick.show.notebook import gradient_html

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "REDUCTIONS",
    "STRATEGIES",
    "TARGETS",
    "GradientRequest",
    "GradientResult",
    "LeakageReport",
    "compute",
    "compute_with",
    "coupling_modules",
    "cross_sample_leakage",
    "input_gradients",
    "leakage",
    "naive_loop",
    "naive_loop_error",
    "saved_bytes_per_image",
]

STRATEGIES = strategies.NAMES
"""The registered strategies' names (``gradpick.gradients.strategies.REGISTRY``), default first."""
DEFAULT_MEMORY_BUDGET = 1 << 30
"""Bytes autograd may save for one chunk of picked images before the rest waits its turn."""

AnyStep = Callable[[GradientRequest, slice], tuple[torch.Tensor, ...]]
"""A step: (gradients, target values, classes) of rows ``order``, then any per-row extras."""

COUPLING_MODULES: tuple[type[nn.Module], ...] = (nn.modules.batchnorm._BatchNorm,)
"""Modules that, in training mode, mix samples: each output depends on the whole batch."""


@dataclass(frozen=True)
class GradientResult:
    """Row i of ``gradients`` is d target_i / d images[indices[i]] (times 1/k for 'mean')."""

    gradients: torch.Tensor
    indices: tuple[int, ...]
    target_values: torch.Tensor
    classes: torch.Tensor
    target: Target
    strategy: str
    reduction: Reduction
    device: str
    timing: float
    memory: MemoryReport | None
    coupled: bool = False
    chunks: int = 1

    def _repr_html_(self) -> str:
        """Jupyter shows one saliency map per pick (``gradpick.show.notebook``)."""
        return gradient_html(self)


def _training_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every (name, module) in training mode; names are only built when there is one."""
    if not any(module.training for module in modules_of(model)):
        return []
    return [
        (name or type(module).__name__, module)
        for name, module in model.named_modules()
        if module.training
    ]


def _coupling(training: list[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module]]:
    return [(name, module) for name, module in training if isinstance(module, COUPLING_MODULES)]


def coupling_modules(model: nn.Module) -> list[str]:
    """Names of modules that mix samples across the batch in the model's current mode."""
    return [name for name, _ in _coupling(_training_modules(model))]


def _check_finite(request: GradientRequest, values: torch.Tensor) -> None:
    """A NaN or infinite picked image makes its target, and so its gradient, meaningless.

    Checked on the k target values after the step rather than by scanning the images first: the
    per-call cost must stay negligible next to a forward of one image. A finite sum settles it
    in one reduction; only a non-finite one (or an overflowing sum of finite values) looks closer.
    """
    if math.isfinite(float(values.sum())):
        return
    finite = torch.isfinite(values)
    if bool(finite.all()):
        return
    position = int((~finite).nonzero()[0])
    index = int(request.indices[position])
    image = request.images[index]
    if not bool(torch.isfinite(image).all()):
        raise InputError(
            f"Image {index} contains NaN or infinite values; its gradient would be meaningless."
        )
    raise InputError(f"The model's {request.target} for image {index} is not finite.")


# ----------------------------------------------------------------------------- chunking

_SAVED_BYTES_PER_IMAGE: weakref.WeakKeyDictionary[nn.Module, dict[tuple, int]] = (
    weakref.WeakKeyDictionary()
)
_SAVED_BYTES_LOCK = threading.Lock()
"""Guards the cache above: several threads may probe one shared model at once."""


def saved_bytes_per_image(model: nn.Module, images: torch.Tensor, device: torch.device) -> int:
    """Bytes autograd saves for one image of ``images``' shape and dtype on ``device``.

    Measured once per model, image shape, dtype and device (one forward of one image), then
    looked up, so the per-call cost is a dictionary read.
    """
    key = (images.shape[1:], images.dtype, device)
    with _SAVED_BYTES_LOCK:
        known = _SAVED_BYTES_PER_IMAGE.get(model, {}).get(key)
    if known is None:
        counter = SavedTensorCounter()
        probe = images[:1].detach().to(device).requires_grad_(True)
        with torch.enable_grad(), counter.track():
            call_model(model, probe)
        known = max(counter.bytes, probe.numel() * probe.element_size())
        with _SAVED_BYTES_LOCK:
            _SAVED_BYTES_PER_IMAGE.setdefault(model, {})[key] = known
    return known


def _chunk_size(request: GradientRequest, budget: int, chunk_size: int | None) -> int:
    if chunk_size is not None and chunk_size < 1:
        raise InputError(f"chunk_size must be at least 1; got {chunk_size}.")
    if not strategies.get(request.strategy).chunks or request.count == 1:
        return request.count
    if chunk_size is not None:
        return chunk_size
    per_image = saved_bytes_per_image(request.model, request.images, request.device)
    return max(1, min(request.count, budget // per_image))


def _run_chunks(
    request: GradientRequest, chunk: int, step: AnyStep
) -> tuple[list[tuple[torch.Tensor, ...]], int]:
    """Run ``step`` chunk by chunk; on CUDA out-of-memory, halve the chunk and retry."""
    strategy = strategies.get(request.strategy)
    while True:
        try:
            outputs = [
                step(request, slice(start, start + chunk))
                for start in range(0, request.count, chunk)
            ]
            return outputs, chunk
        except torch.cuda.OutOfMemoryError as error:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            if chunk == 1 or not strategy.chunks:
                smallest = "one image at a time" if chunk == 1 else f"strategy '{strategy.name}'"
                raise DeviceMemoryError(
                    f"{request.device} ran out of memory with {smallest} ({str(error)[:120]}). "
                    "Pick fewer images, use strategy='recompute', or run on the CPU."
                ) from None
            chunk = max(1, chunk // 2)


def _serving_model(request: GradientRequest, allow_coupled: bool) -> tuple[GradientRequest, bool]:
    """The model to run: the caller's own, or a private copy when training mode would mutate it."""
    training = _training_modules(request.model)
    if not training:
        return request, False
    coupled = _coupling(training)
    if coupled and not allow_coupled:
        name, module = coupled[0]
        raise SampleCouplingError(
            f"'{name}' ({type(module).__name__}) is in training mode, where it mixes samples "
            "across the batch, so one image's gradient depends on the others. Call "
            "model.eval() first, or pass allow_coupled=True to compute coupled gradients on "
            "purpose."
        )
    # Training-mode forwards update running statistics; work on a copy so the caller's model,
    # and every other thread using it, never sees a change.
    return request.but(model=copy.deepcopy(request.model)), bool(coupled)


def compute(
    request: GradientRequest,
    allow_coupled: bool = False,
    chunk_size: int | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> GradientResult:
    """The gradients a built request asks for (see ``input_gradients`` for the arguments)."""
    step = strategies.get(request.strategy).step
    return compute_with(request, step, allow_coupled, chunk_size, memory_budget)[0]


def compute_with(
    request: GradientRequest,
    step: AnyStep,
    allow_coupled: bool = False,
    chunk_size: int | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> tuple[GradientResult, tuple[torch.Tensor, ...]]:
    """``compute`` with another step function in the request's strategy's place.

    ``step`` returns the three tensors of a strategy's step (gradients, target values, classes)
    and any further per-row tensors; those come back second, concatenated in row order on the
    images' device. Model safety, chunking under ``memory_budget``, the out-of-memory retry,
    timing and the finiteness check are the ones every strategy gets: layer gradients
    (``gradpick.gradients.layers``) run through here with a step that also captures an activation.
    """
    request, coupled = _serving_model(request, allow_coupled)
    memory = measure.measure_memory(
        request.device,
        enabled=request.measure_memory,
        count_saved=strategies.get(request.strategy).counts_saved,
    )
    # Gradients are the point of the call, so a caller's no_grad() block must not switch them off.
    with torch.enable_grad():
        chunk = _chunk_size(request, memory_budget, chunk_size)
        with memory as reports, Stopwatch(request.device) as watch:
            outputs, chunk = _run_chunks(request, chunk, step)
    gradients, values, picked_classes, *extras = (
        outputs[0]
        if len(outputs) == 1
        else [torch.cat(parts) for parts in zip(*outputs, strict=True)]
    )
    _check_finite(request, values)
    result = GradientResult(
        gradients=gradients.detach().to(request.images.device),
        indices=tuple(request.indices.tolist()),
        target_values=values.cpu(),
        classes=picked_classes.cpu(),
        target=request.target,
        strategy=request.strategy,
        reduction=request.reduction,
        device=str(request.device),
        timing=watch.milliseconds,
        memory=reports[0] if reports else None,
        coupled=coupled,
        chunks=len(outputs),
    )
    return result, tuple(extra.detach().to(request.images.device) for extra in extras)


def input_gradients(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int] | torch.Tensor,
    labels: Sequence[int] | torch.Tensor | None = None,
    target: str = "loss",
    classes: int | Sequence[int] | torch.Tensor | None = None,
    strategy: str = "recompute",
    reduction: str = "sum",
    device: str | torch.device | None = None,
    measure_memory: bool = False,
    allow_coupled: bool = False,
    chunk_size: int | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> GradientResult:
    """Gradients of each picked image's target with respect to that image's pixels.

    ``indices`` may repeat and come in any order; rows follow the order given. ``target='loss'``
    is the cross-entropy with ``labels``; ``target='logit'`` the logit of ``classes`` (one class,
    one per index, or the predicted class when None). ``reduction='mean'`` reproduces a
    mean-reduced loss (every row times 1/k). Chunked strategies process at most ``chunk_size``
    images at a time (default: as many as fit ``memory_budget`` bytes of saved activations).
    Gradients come back on the images' device, in their dtype.
    """
    request = GradientRequest.build(
        model, images, indices, labels, target, classes, strategy, reduction, device, measure_memory
    )
    return compute(request, allow_coupled, chunk_size, memory_budget)


def naive_loop(request: GradientRequest) -> RuntimeError | None:
    """Run the naive loop and return the RuntimeError PyTorch raises, if any.

    One forward of all N with gradients, then one backward per picked index without
    ``retain_graph``: the first backward frees the saved tensors the second one needs. Uses
    ``torch.autograd.grad`` rather than ``.backward()`` so no parameter ``.grad`` is touched;
    the error is the same. With a single index the loop succeeds and None is returned.
    """
    request, _ = _serving_model(request.but(reduction="sum"), allow_coupled=True)
    with torch.enable_grad():
        everything = request.images.to(request.device).requires_grad_(True)
        logits = call_model(request.model, everything)
        check_logits(logits, int(everything.shape[0]))
        values, _ = request.picked_targets(logits[request.indices.to(request.device)], slice(None))
        try:
            for value in values:
                torch.autograd.grad(value, everything)
        except RuntimeError as error:
            return error
    return None


def naive_loop_error(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int] | torch.Tensor,
    labels: Sequence[int] | torch.Tensor | None = None,
    target: str = "loss",
    classes: int | Sequence[int] | torch.Tensor | None = None,
) -> RuntimeError | None:
    """``naive_loop`` of a request built from these arguments."""
    return naive_loop(GradientRequest.build(model, images, indices, labels, target, classes))


@dataclass(frozen=True)
class LeakageReport:
    """How much target j's gradient reaches the other images i != j of the same batch."""

    max_cross: float
    max_self: float
    relative: float
    per_index: tuple[float, ...]
    coupled_modules: tuple[str, ...]


def leakage(request: GradientRequest) -> LeakageReport:
    """Forward the picked images as one batch in the model's current mode and measure leakage.

    ``per_index[j]`` is the largest |d target_j / d image_i| over i != j, divided by the
    largest |d target_j / d image_j|. Zero for independent samples (eval mode); non-zero when
    a module such as BatchNorm in training mode mixes the batch.
    """
    unique = torch.unique(request.indices)
    if unique.numel() < 2:
        raise SelectionError("Leakage needs at least two different images.")
    classes = request.classes
    if classes is not None:  # each image keeps the class given at its first occurrence
        first: dict[int, int] = {}
        for position, index in enumerate(request.indices.tolist()):
            first.setdefault(index, position)
        classes = classes[[first[index] for index in unique.tolist()]]
    model = request.model
    request, _ = _serving_model(request.but(indices=unique, classes=classes), allow_coupled=True)
    with torch.enable_grad():
        batch = request.images[unique].to(request.device).requires_grad_(True)
        logits = call_model(request.model, batch)
        values, _ = request.picked_targets(logits, slice(None))
        magnitudes = [
            torch.autograd.grad(values[position], batch, retain_graph=True)[0]
            .abs()
            .flatten(1)
            .amax(dim=1)
            for position in range(unique.numel())
        ]
    ratios: list[float] = []
    max_cross = max_self = 0.0
    for position, magnitude in enumerate(magnitudes):
        own = float(magnitude[position])
        others = float(torch.cat([magnitude[:position], magnitude[position + 1 :]]).max())
        max_cross, max_self = max(max_cross, others), max(max_self, own)
        ratios.append(others / own if own > 0 else float("inf") if others > 0 else 0.0)
    return LeakageReport(
        max_cross=max_cross,
        max_self=max_self,
        relative=max(ratios),
        per_index=tuple(ratios),
        coupled_modules=tuple(coupling_modules(model)),
    )


def cross_sample_leakage(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int] | torch.Tensor,
    labels: Sequence[int] | torch.Tensor | None = None,
    target: str = "loss",
    classes: int | Sequence[int] | torch.Tensor | None = None,
) -> LeakageReport:
    """``leakage`` of a request built from these arguments."""
    return leakage(GradientRequest.build(model, images, indices, labels, target, classes))
