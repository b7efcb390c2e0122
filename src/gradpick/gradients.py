"""Exact input gradients of the images a user picked out of an already-inferred batch.

The question this answers: after batched inference, for each picked index j we want
d target_j / d images[j]. Four strategies compute the same numbers at very different costs:

* ``recompute`` (default): forward only the k picked images with gradients on and take one
  ``torch.autograd.grad`` of their summed targets. For a model whose samples are independent
  (eval mode) the sum's gradient row j is exactly d target_j / d image_j, and the cost depends
  on k alone, never on the batch size N.
* ``summed``: the usual forum answer: one forward of all N with gradients, one backward of the
  summed picked targets. Right with a sum, but it pays for all N.
* ``retain_graph``: the question's loop, one backward per index through the graph of all N,
  kept alive with ``retain_graph=True``.
* ``vmap``: ``torch.func.vmap(torch.func.grad(...))`` over the picked images, one image per call.

The model is only ever read: no training flag, ``requires_grad`` flag or ``.grad`` changes, so
one model can serve several threads (Streamlit sessions) at once.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from gradpick import measure
from gradpick.devices import device_for
from gradpick.errors import InputError, SampleCouplingError, SelectionError
from gradpick.infer import check_images
from gradpick.measure import MemoryReport, SavedTensorCounter, Stopwatch

Strategy = Literal["recompute", "summed", "retain_graph", "vmap"]
Target = Literal["loss", "logit"]
Reduction = Literal["sum", "mean"]
STRATEGIES: tuple[Strategy, ...] = ("recompute", "summed", "retain_graph", "vmap")
TARGETS: tuple[Target, ...] = ("loss", "logit")
REDUCTIONS: tuple[Reduction, ...] = ("sum", "mean")
DEFAULT_MEMORY_BUDGET = 1 << 30
"""Bytes autograd may save for one chunk of picked images before the rest waits its turn."""

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
    strategy: Strategy
    reduction: Reduction
    device: str
    timing: float
    memory: MemoryReport | None
    coupled: bool = False
    chunks: int = 1


@dataclass(frozen=True)
class _Request:
    """Validated arguments, shared by every strategy."""

    model: nn.Module
    images: torch.Tensor
    indices: torch.Tensor
    labels: torch.Tensor | None
    classes: torch.Tensor | None
    target: Target
    reduction: Reduction
    device: torch.device

    @property
    def count(self) -> int:
        return int(self.indices.numel())


def coupling_modules(model: nn.Module) -> list[str]:
    """Names of modules that mix samples across the batch in the model's current mode."""
    return [
        name or type(module).__name__
        for name, module in model.named_modules()
        if isinstance(module, COUPLING_MODULES) and module.training
    ]


def _as_index_tensor(indices: Sequence[int] | torch.Tensor, size: int) -> torch.Tensor:
    try:
        tensor = torch.as_tensor(indices)
    except (TypeError, ValueError, RuntimeError) as error:
        raise SelectionError(f"Indices must be whole numbers; got {indices!r} ({error}).") from None
    if tensor.numel() == 0:
        raise SelectionError("No images selected: pick at least one index.")
    if tensor.is_floating_point() or tensor.dtype == torch.bool:
        raise SelectionError(f"Indices must be whole numbers, not {tensor.dtype}.")
    tensor = tensor.reshape(-1).to(torch.long).cpu()
    bad = tensor[(tensor < 0) | (tensor >= size)]
    if bad.numel():
        raise SelectionError(
            f"Index {int(bad[0])} is out of range: the batch holds {size} images "
            f"(valid indices 0 to {size - 1})."
        )
    return tensor


def _validate(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int] | torch.Tensor,
    labels: Sequence[int] | torch.Tensor | None,
    target: str,
    classes: int | Sequence[int] | torch.Tensor | None,
    reduction: str,
    device: str | torch.device | None,
) -> _Request:
    check_images(images)
    if not images.is_floating_point():
        raise InputError(
            f"Images must be floating point to take gradients, not {images.dtype}; "
            "convert uint8 images with images.float() / 255."
        )
    if target not in TARGETS:
        raise InputError(f"Unknown target '{target}'; use one of {', '.join(TARGETS)}.")
    if reduction not in REDUCTIONS:
        raise InputError(f"Unknown reduction '{reduction}'; use 'sum' or 'mean'.")
    run_device = device_for(model, device)
    parameter = next(model.parameters(), None)
    if parameter is not None and parameter.is_floating_point() and parameter.dtype != images.dtype:
        raise InputError(
            f"Images are {images.dtype} but the model's parameters are {parameter.dtype}; "
            f"convert one to match (e.g. model.to({images.dtype}) on a copy)."
        )
    if run_device.type == "mps" and images.dtype == torch.float64:
        raise InputError("The MPS device has no float64; use float32 or the CPU.")
    index_tensor = _as_index_tensor(indices, int(images.shape[0]))
    label_tensor = None
    if labels is not None:
        label_tensor = torch.as_tensor(labels).reshape(-1).to(torch.long).cpu()
        if label_tensor.numel() != images.shape[0]:
            raise InputError(
                f"Got {label_tensor.numel()} labels for {images.shape[0]} images; "
                "give one label per image."
            )
    elif target == "loss":
        raise InputError(
            "target='loss' needs the true labels; pass labels=..., or use target='logit' "
            "for unlabelled images."
        )
    class_tensor = None
    if classes is not None:
        class_tensor = torch.as_tensor(classes).reshape(-1).to(torch.long).cpu()
        if class_tensor.numel() == 1:
            class_tensor = class_tensor.expand(index_tensor.numel())
        elif class_tensor.numel() != index_tensor.numel():
            raise InputError(
                f"Give one class, or one class per index ({index_tensor.numel()}); "
                f"got {class_tensor.numel()}."
            )
    return _Request(
        model=model,
        images=images,
        indices=index_tensor,
        labels=label_tensor,
        classes=class_tensor,
        target=target,
        reduction=reduction,
        device=run_device,
    )


def _check_logits(logits: torch.Tensor, rows: int) -> None:
    if logits.dim() != 2 or logits.shape[0] != rows:
        raise InputError(
            f"The model must map [N, C, H, W] to [N, classes]; it returned {tuple(logits.shape)}."
        )


def _picked_targets(
    request: _Request, logits: torch.Tensor, order: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Target values of the picked rows (positions ``order`` into ``request.indices``).

    Returns (targets, classes): the class whose logit or loss each target is.
    """
    _check_logits(logits, int(order.numel()))
    num_classes = logits.shape[1]
    if request.target == "loss":
        assert request.labels is not None
        classes = request.labels[request.indices[order]].to(logits.device)
    elif request.classes is not None:
        classes = request.classes[order].to(logits.device)
    else:
        classes = logits.detach().argmax(dim=1)
    outside = classes[(classes < 0) | (classes >= num_classes)]
    if outside.numel():
        raise InputError(
            f"Class {int(outside[0])} is out of range for a model with {num_classes} outputs "
            f"(valid classes 0 to {num_classes - 1})."
        )
    if request.target == "loss":
        values = F.cross_entropy(logits, classes, reduction="none")
    else:
        values = logits.gather(1, classes.unsqueeze(1)).squeeze(1)
    return values, classes


def _scale(request: _Request) -> float:
    return 1.0 / request.count if request.reduction == "mean" else 1.0


# ----------------------------------------------------------------------------- strategies

_StepOutput = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""(gradients [k, C, H, W], target values [k], classes [k]) on the run device."""


def _recompute(request: _Request, order: torch.Tensor) -> _StepOutput:
    picked = request.images[request.indices[order]].to(request.device).requires_grad_(True)
    values, classes = _picked_targets(request, request.model(picked), order)
    (gradients,) = torch.autograd.grad(values.sum() * _scale(request), picked)
    return gradients, values.detach(), classes


def _vmap(request: _Request, order: torch.Tensor) -> _StepOutput:
    """``vmap(grad(f))``: each picked image runs through the model as a batch of one."""
    from torch.func import grad, vmap

    picked = request.images[request.indices[order]].to(request.device)
    if request.target == "loss":
        assert request.labels is not None
        given = request.labels[request.indices[order]]
    elif request.classes is not None:
        given = request.classes[order]
        with torch.no_grad():
            _picked_targets(request, request.model(picked[:1]).expand(len(order), -1), order)
    else:
        given = torch.full((len(order),), -1)  # -1: use the predicted class
    scale = _scale(request)

    def target_of_one(
        image: torch.Tensor, wanted: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        logits = request.model(image.unsqueeze(0))[0]
        chosen = torch.where(wanted >= 0, wanted, logits.detach().argmax())
        if request.target == "loss":
            value = F.cross_entropy(logits.unsqueeze(0), chosen.unsqueeze(0))
        else:
            value = logits.gather(0, chosen.unsqueeze(0))[0]
        return value * scale, (value.detach(), chosen)

    try:
        gradients, (values, classes) = vmap(grad(target_of_one, has_aux=True))(
            picked, given.to(request.device)
        )
    except RuntimeError as error:
        raise InputError(
            f"vmap could not run this model ({str(error)[:160]}); use strategy='recompute'."
        ) from None
    return gradients, values, classes


def _summed(request: _Request, order: torch.Tensor) -> _StepOutput:
    """One forward of all N, one backward of the picked targets, each distinct index once."""
    everything = request.images.to(request.device).requires_grad_(True)
    unique, inverse = torch.unique(request.indices[order], return_inverse=True)
    logits = request.model(everything)
    _check_logits(logits, int(everything.shape[0]))
    first = torch.zeros(unique.numel(), dtype=torch.long)
    first.scatter_(0, inverse, torch.arange(order.numel()))
    unique_values, unique_classes = _picked_targets(
        request, logits[unique.to(logits.device)], order[first]
    )
    (gradients,) = torch.autograd.grad(unique_values.sum() * _scale(request), everything)
    rows = inverse.to(request.device)
    return (
        gradients[unique.to(request.device)][rows],
        unique_values.detach()[rows],
        unique_classes[rows],
    )


def _retain_graph(request: _Request, order: torch.Tensor) -> _StepOutput:
    """The question's loop: one backward per picked index through the whole batch's graph."""
    everything = request.images.to(request.device).requires_grad_(True)
    logits = request.model(everything)
    _check_logits(logits, int(everything.shape[0]))
    rows = request.indices[order].to(request.device)
    values, classes = _picked_targets(request, logits[rows], order)
    gradients = []
    for position, row in enumerate(rows.tolist()):
        (gradient,) = torch.autograd.grad(
            values[position] * _scale(request), everything, retain_graph=True
        )
        gradients.append(gradient[row])
    return torch.stack(gradients), values.detach(), classes


_STEPS: dict[str, Callable[[_Request, torch.Tensor], _StepOutput]] = {
    "recompute": _recompute,
    "summed": _summed,
    "retain_graph": _retain_graph,
    "vmap": _vmap,
}
_CHUNKED = frozenset({"recompute", "vmap"})


# ----------------------------------------------------------------------------- chunking

_SAVED_BYTES_PER_IMAGE: weakref.WeakKeyDictionary[nn.Module, dict[tuple, int]] = (
    weakref.WeakKeyDictionary()
)


def saved_bytes_per_image(model: nn.Module, image: torch.Tensor) -> int:
    """Bytes autograd saves for one image of this shape, measured once per model and shape."""
    key = (tuple(image.shape), image.dtype, str(image.device))
    per_model = _SAVED_BYTES_PER_IMAGE.setdefault(model, {})
    if key not in per_model:
        counter = SavedTensorCounter()
        probe = image.detach().unsqueeze(0).requires_grad_(True)
        with counter.track():
            model(probe)
        per_model[key] = max(counter.bytes, probe.numel() * probe.element_size())
    return per_model[key]


def _chunk_size(request: _Request, strategy: str, budget: int, chunk_size: int | None) -> int:
    if strategy not in _CHUNKED:
        return request.count
    if chunk_size is not None:
        if chunk_size < 1:
            raise InputError(f"chunk_size must be at least 1; got {chunk_size}.")
        return chunk_size
    first = request.images[int(request.indices[0])].to(request.device)
    return max(1, min(request.count, budget // saved_bytes_per_image(request.model, first)))


def _run_chunks(request: _Request, strategy: str, chunk: int) -> tuple[list[_StepOutput], int]:
    """Run the strategy chunk by chunk; on CUDA out-of-memory, halve the chunk and retry."""
    step = _STEPS[strategy]
    while True:
        try:
            outputs = [
                step(request, torch.arange(start, min(start + chunk, request.count)))
                for start in range(0, request.count, chunk)
            ]
            return outputs, chunk
        except torch.cuda.OutOfMemoryError:
            if chunk == 1 or strategy not in _CHUNKED:
                raise
            torch.cuda.empty_cache()
            chunk = max(1, chunk // 2)


def _serving_model(request: _Request, allow_coupled: bool) -> tuple[_Request, bool]:
    """The model to run: the caller's own, or a private copy when training mode would mutate it."""
    coupled = coupling_modules(request.model)
    if coupled and not allow_coupled:
        raise SampleCouplingError(
            f"The model is in training mode and '{coupled[0]}' "
            f"({type(request.model.get_submodule(coupled[0])).__name__}) mixes samples across "
            "the batch, so one image's gradient depends on the others. Call model.eval() "
            "first, or pass allow_coupled=True to compute coupled gradients on purpose."
        )
    if request.model.training:
        # Training-mode forwards update running statistics; work on a copy so the caller's
        # model, and every other thread using it, never sees a change.
        copied = copy.deepcopy(request.model)
        return _Request(**{**request.__dict__, "model": copied}), bool(coupled)
    return request, False


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
    if strategy not in STRATEGIES:
        raise InputError(f"Unknown strategy '{strategy}'; use one of {', '.join(STRATEGIES)}.")
    request = _validate(model, images, indices, labels, target, classes, reduction, device)
    request, coupled = _serving_model(request, allow_coupled)
    chunk = _chunk_size(request, strategy, memory_budget, chunk_size)
    memory = measure.measure_memory(
        request.device, enabled=measure_memory, count_saved=strategy != "vmap"
    )
    with memory as reports, Stopwatch(request.device) as watch:
        outputs, chunk = _run_chunks(request, strategy, chunk)
    gradients = torch.cat([output[0] for output in outputs]).to(images.device)
    return GradientResult(
        gradients=gradients.detach(),
        indices=tuple(request.indices.tolist()),
        target_values=torch.cat([output[1] for output in outputs]).cpu(),
        classes=torch.cat([output[2] for output in outputs]).cpu(),
        target=request.target,
        strategy=strategy,
        reduction=request.reduction,
        device=str(request.device),
        timing=watch.milliseconds,
        memory=reports[0] if reports else None,
        coupled=coupled,
        chunks=len(outputs),
    )


def naive_loop_error(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int] | torch.Tensor,
    labels: Sequence[int] | torch.Tensor | None = None,
    target: str = "loss",
    classes: int | Sequence[int] | torch.Tensor | None = None,
) -> RuntimeError | None:
    """Run the question's naive loop and return the RuntimeError PyTorch raises, if any.

    One forward of all N with gradients, then one backward per picked index without
    ``retain_graph``: the first backward frees the saved tensors the second one needs. Uses
    ``torch.autograd.grad`` rather than ``.backward()`` so no parameter ``.grad`` is touched;
    the error is the same. With a single index the loop succeeds and None is returned.
    """
    request = _validate(model, images, indices, labels, target, classes, "sum", None)
    request, _ = _serving_model(request, allow_coupled=True)
    everything = request.images.to(request.device).requires_grad_(True)
    logits = request.model(everything)
    _check_logits(logits, int(everything.shape[0]))
    values, _ = _picked_targets(
        request, logits[request.indices.to(request.device)], torch.arange(request.count)
    )
    try:
        for value in values:
            torch.autograd.grad(value, everything)
    except RuntimeError as error:
        return error
    return None


@dataclass(frozen=True)
class LeakageReport:
    """How much target j's gradient reaches the other images i != j of the same batch."""

    max_cross: float
    max_self: float
    relative: float
    per_index: tuple[float, ...]
    coupled_modules: tuple[str, ...]


def cross_sample_leakage(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int] | torch.Tensor,
    labels: Sequence[int] | torch.Tensor | None = None,
    target: str = "loss",
    classes: int | Sequence[int] | torch.Tensor | None = None,
) -> LeakageReport:
    """Forward the picked images as one batch in the model's current mode and measure leakage.

    ``per_index[j]`` is the largest |d target_j / d image_i| over i != j, divided by the
    largest |d target_j / d image_j|. Zero for independent samples (eval mode); non-zero when
    a module such as BatchNorm in training mode mixes the batch.
    """
    request = _validate(model, images, indices, labels, target, classes, "sum", None)
    unique = torch.unique(request.indices)
    if unique.numel() < 2:
        raise SelectionError("Leakage needs at least two different images.")
    request = _Request(**{**request.__dict__, "indices": unique})
    request, _ = _serving_model(request, allow_coupled=True)
    batch = request.images[unique].to(request.device).requires_grad_(True)
    values, _ = _picked_targets(request, request.model(batch), torch.arange(unique.numel()))
    ratios: list[float] = []
    max_cross = max_self = 0.0
    for position in range(unique.numel()):
        (gradient,) = torch.autograd.grad(values[position], batch, retain_graph=True)
        magnitude = gradient.detach().abs().flatten(1).amax(dim=1)
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
