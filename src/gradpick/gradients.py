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
import math
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from gradpick import measure
from gradpick.devices import device_matching, first_tensor, modules_of
from gradpick.errors import DeviceMemoryError, InputError, SampleCouplingError, SelectionError
from gradpick.infer import call_model, check_images
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


def _is_integral(tensor: torch.Tensor) -> bool:
    return not (tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool)


def _class_tensor(values: Sequence[int] | torch.Tensor | int, what: str) -> torch.Tensor:
    """Labels or classes as a flat long tensor on the CPU; fractions are refused, not truncated."""
    try:
        tensor = torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError) as error:
        raise InputError(f"{what} must be whole numbers; got {values!r} ({error}).") from None
    if not _is_integral(tensor):
        raise InputError(f"{what} must be whole numbers (class indices), not {tensor.dtype}.")
    return tensor.reshape(-1).to(torch.long).cpu()


def _as_index_tensor(indices: Sequence[int] | torch.Tensor, size: int) -> torch.Tensor:
    if isinstance(indices, list | tuple | range) and all(type(i) is int for i in indices):
        # Plain Python ints, the usual case, are checked without tensor ops: for a handful of
        # indices those cost more than the check, and this runs on every click.
        values: Sequence[int] = indices
    else:
        try:
            tensor = torch.as_tensor(indices)
        except (TypeError, ValueError, RuntimeError) as error:
            raise SelectionError(
                f"Indices must be whole numbers; got {indices!r} ({error})."
            ) from None
        if not _is_integral(tensor):
            raise SelectionError(f"Indices must be whole numbers, not {tensor.dtype}.")
        values = tensor.reshape(-1).tolist()
    if not values:
        raise SelectionError("No images selected: pick at least one index.")
    if min(values) < 0 or max(values) >= size:
        bad = next(index for index in values if not 0 <= index < size)
        raise SelectionError(
            f"Index {bad} is out of range: the batch holds {size} images "
            f"(valid indices 0 to {size - 1})."
        )
    return torch.tensor(values, dtype=torch.long)


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
    check_images(images, check_values=False)
    if not images.is_floating_point():
        raise InputError(
            f"Images must be floating point to take gradients, not {images.dtype}; "
            "convert uint8 images with images.float() / 255."
        )
    if target not in TARGETS:
        raise InputError(f"Unknown target '{target}'; use one of {', '.join(TARGETS)}.")
    if reduction not in REDUCTIONS:
        raise InputError(f"Unknown reduction '{reduction}'; use 'sum' or 'mean'.")
    weights = first_tensor(model)
    run_device = device_matching(weights, device)
    if weights is not None and weights.is_floating_point() and weights.dtype != images.dtype:
        raise InputError(
            f"Images are {images.dtype} but the model's parameters are {weights.dtype}; "
            f"convert one to match (e.g. model.to({images.dtype}) on a copy)."
        )
    if run_device.type == "mps" and images.dtype == torch.float64:
        raise InputError("The MPS device has no float64; use float32 or the CPU.")
    index_tensor = _as_index_tensor(indices, int(images.shape[0]))
    label_tensor = None
    if labels is not None:
        label_tensor = _class_tensor(labels, "Labels")
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
        class_tensor = _class_tensor(classes, "Classes")
        if class_tensor.numel() == 1:
            class_tensor = class_tensor.expand(index_tensor.numel())
        elif class_tensor.numel() != index_tensor.numel():
            raise InputError(
                f"Give one class, or one class per index ({index_tensor.numel()}); "
                f"got {class_tensor.numel()}."
            )
    return _Request(
        model=model,
        images=images.detach(),  # an alias: gradpick never flips the caller's requires_grad
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
    request: _Request, logits: torch.Tensor, order: slice
) -> tuple[torch.Tensor, torch.Tensor]:
    """Target values of the picked rows (positions ``order`` into ``request.indices``).

    Returns (targets, classes): the class whose logit or loss each target is.
    """
    rows = request.indices[order]
    _check_logits(logits, int(rows.numel()))
    num_classes = logits.shape[1]
    if request.target == "loss" or request.classes is not None:
        # Given classes are checked on the CPU before they reach the device: an out-of-range
        # class would be a device-side assert on CUDA, which no error message can explain.
        if request.target == "loss":
            assert request.labels is not None
            given = request.labels[rows]
        else:
            assert request.classes is not None
            given = request.classes[order]
        outside = [value for value in given.tolist() if not 0 <= value < num_classes]
        if outside:
            raise InputError(
                f"Class {outside[0]} is out of range for a model with {num_classes} outputs "
                f"(valid classes 0 to {num_classes - 1})."
            )
        classes = given.to(logits.device)
    else:
        classes = logits.detach().argmax(dim=1)
    if request.target == "loss":
        values = F.cross_entropy(logits, classes, reduction="none")
    else:
        values = logits.gather(1, classes.unsqueeze(1)).squeeze(1)
    return values, classes


def _check_finite(request: _Request, values: torch.Tensor) -> None:
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


def _scaled_sum(request: _Request, values: torch.Tensor) -> torch.Tensor:
    """The objective whose gradient is wanted: the sum of targets, times 1/k for 'mean'."""
    total = values.sum()
    return total / request.count if request.reduction == "mean" else total


def _scale(request: _Request) -> float:
    return 1.0 / request.count if request.reduction == "mean" else 1.0


# ----------------------------------------------------------------------------- strategies

_StepOutput = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""(gradients [k, C, H, W], target values [k], classes [k]) on the run device."""


def _recompute(request: _Request, order: slice) -> _StepOutput:
    picked = request.images[request.indices[order]].to(request.device).requires_grad_(True)
    values, classes = _picked_targets(request, call_model(request.model, picked), order)
    (gradients,) = torch.autograd.grad(_scaled_sum(request, values), picked)
    return gradients, values.detach(), classes


def _vmap(request: _Request, order: slice) -> _StepOutput:
    """``vmap(grad(f))``: each picked image runs through the model as a batch of one."""
    from torch.func import grad, vmap

    picked = request.images[request.indices[order]].to(request.device)
    if request.target == "loss":
        assert request.labels is not None
        given = request.labels[request.indices[order]]
    elif request.classes is not None:
        given = request.classes[order]
    else:
        given = torch.full((picked.shape[0],), -1)  # -1: use the predicted class
    if request.target == "loss" or request.classes is not None:
        # Out-of-range classes must fail with a clear message here, not as an indexing error
        # deep inside vmap: one image's logits give the number of classes.
        with torch.no_grad():
            logits = call_model(request.model, picked[:1])
        _picked_targets(request, logits.expand(picked.shape[0], -1), order)
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


def _summed(request: _Request, order: slice) -> _StepOutput:
    """One forward of all N, one backward of the summed picked targets, each distinct one once.

    Two targets of one image (an index picked with two classes) would add up in that image's
    gradient, so backward pass r takes the r-th distinct target of each image: a single pass
    in the usual case of one target per image. A repeated target reuses its gradient.
    """
    everything = request.images.to(request.device).requires_grad_(True)
    logits = call_model(request.model, everything)
    _check_logits(logits, int(everything.shape[0]))
    rows = request.indices[order]
    values, classes = _picked_targets(request, logits[rows.to(logits.device)], order)
    targets = list(zip(rows.tolist(), classes.tolist(), strict=True))  # (image, class)
    pass_of_target: dict[tuple[int, int], int] = {}
    targets_of_image: dict[int, int] = {}
    passes: list[list[int]] = []  # positions of the targets each backward pass sums
    for position, target in enumerate(targets):
        if target not in pass_of_target:
            pass_index = targets_of_image.get(target[0], 0)
            targets_of_image[target[0]] = pass_index + 1
            pass_of_target[target] = pass_index
            if pass_index == len(passes):
                passes.append([])
            passes[pass_index].append(position)
    pass_of_row = torch.tensor([pass_of_target[target] for target in targets])
    gradients = torch.empty(
        (len(rows), *everything.shape[1:]), dtype=everything.dtype, device=everything.device
    )
    for pass_index, positions in enumerate(passes):
        summed = values[torch.tensor(positions, device=values.device)].sum() * _scale(request)
        (gradient,) = torch.autograd.grad(
            summed, everything, retain_graph=pass_index < len(passes) - 1
        )
        filled = (pass_of_row == pass_index).nonzero().flatten()
        gradients[filled.to(gradients.device)] = gradient[rows[filled].to(gradient.device)]
    return gradients, values.detach(), classes


def _retain_graph(request: _Request, order: slice) -> _StepOutput:
    """The question's loop: one backward per picked index through the whole batch's graph."""
    everything = request.images.to(request.device).requires_grad_(True)
    logits = call_model(request.model, everything)
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


_STEPS: dict[str, Callable[[_Request, slice], _StepOutput]] = {
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


def _chunk_size(request: _Request, strategy: str, budget: int, chunk_size: int | None) -> int:
    if chunk_size is not None and chunk_size < 1:
        raise InputError(f"chunk_size must be at least 1; got {chunk_size}.")
    if strategy not in _CHUNKED or request.count == 1:
        return request.count
    if chunk_size is not None:
        return chunk_size
    per_image = saved_bytes_per_image(request.model, request.images, request.device)
    return max(1, min(request.count, budget // per_image))


def _run_chunks(request: _Request, strategy: str, chunk: int) -> tuple[list[_StepOutput], int]:
    """Run the strategy chunk by chunk; on CUDA out-of-memory, halve the chunk and retry."""
    step = _STEPS[strategy]
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
            if chunk == 1 or strategy not in _CHUNKED:
                smallest = "one image at a time" if chunk == 1 else f"strategy '{strategy}'"
                raise DeviceMemoryError(
                    f"{request.device} ran out of memory with {smallest} ({str(error)[:120]}). "
                    "Pick fewer images, use strategy='recompute', or run on the CPU."
                ) from None
            chunk = max(1, chunk // 2)


def _serving_model(request: _Request, allow_coupled: bool) -> tuple[_Request, bool]:
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
    copied = copy.deepcopy(request.model)
    return _Request(**{**request.__dict__, "model": copied}), bool(coupled)


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
    memory = measure.measure_memory(
        request.device, enabled=measure_memory, count_saved=strategy != "vmap"
    )
    # Gradients are the point of the call, so a caller's no_grad() block must not switch them off.
    with torch.enable_grad():
        chunk = _chunk_size(request, strategy, memory_budget, chunk_size)
        with memory as reports, Stopwatch(request.device) as watch:
            outputs, chunk = _run_chunks(request, strategy, chunk)
    gradients, values, picked_classes = (
        outputs[0]
        if len(outputs) == 1
        else [torch.cat(parts) for parts in zip(*outputs, strict=True)]
    )
    _check_finite(request, values)
    return GradientResult(
        gradients=gradients.detach().to(images.device),
        indices=tuple(request.indices.tolist()),
        target_values=values.cpu(),
        classes=picked_classes.cpu(),
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
    with torch.enable_grad():
        everything = request.images.to(request.device).requires_grad_(True)
        logits = call_model(request.model, everything)
        _check_logits(logits, int(everything.shape[0]))
        values, _ = _picked_targets(
            request, logits[request.indices.to(request.device)], slice(None)
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
    classes = request.classes
    if classes is not None:  # each image keeps the class given at its first occurrence
        first: dict[int, int] = {}
        for position, index in enumerate(request.indices.tolist()):
            first.setdefault(index, position)
        classes = classes[[first[index] for index in unique.tolist()]]
    request = _Request(**{**request.__dict__, "indices": unique, "classes": classes})
    request, _ = _serving_model(request, allow_coupled=True)
    with torch.enable_grad():
        batch = request.images[unique].to(request.device).requires_grad_(True)
        logits = call_model(request.model, batch)
        values, _ = _picked_targets(request, logits, slice(None))
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
