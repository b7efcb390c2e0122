"""The one request object of a gradient step: built once, validated once, passed down.

``GradientRequest.build`` checks every argument with gradpick's own errors and turns indices,
labels and classes into tensors; everything downstream (the strategies, the attribution
methods, the comparisons, the explorer) takes the built request and never re-checks it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from gradpick.errors import InputError, SelectionError
from gradpick.gradients import strategies
from gradpick.outputs.inference import check_images, check_logits
from gradpick.runtime.devices import device_matching, first_tensor

__all__ = [
    "REDUCTIONS",
    "TARGETS",
    "GradientRequest",
    "Reduction",
    "Target",
]

Target = Literal["loss", "logit", "bce"]
Reduction = Literal["sum", "mean"]
TARGETS: tuple[Target, ...] = ("loss", "logit", "bce")
"""``loss``: softmax cross-entropy of the label; ``logit``: a class's logit; ``bce``: a label's
binary cross-entropy, ``log(1 + exp(-z))`` when present, ``log(1 + exp(z))`` when absent (a
sigmoid, multi-label model's own loss, one label at a time)."""
REDUCTIONS: tuple[Reduction, ...] = ("sum", "mean")

Indices = Sequence[int] | torch.Tensor
Labels = Sequence[int] | torch.Tensor | None
Classes = int | Sequence[int] | torch.Tensor | None


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


def _multi_hot(labels: Sequence[int] | torch.Tensor, count: int) -> torch.Tensor:
    """[N, labels] of 0 and 1, one row per image: which labels each image has."""
    tensor = torch.as_tensor(labels)
    if tensor.shape[0] != count or not bool(((tensor == 0) | (tensor == 1)).all()):
        raise InputError(
            f"Multi-hot labels must be [images, labels] of 0 and 1 with one row per image "
            f"({count}); got {list(tensor.shape)}."
        )
    return tensor.to(torch.long).cpu()


def _as_index_tensor(indices: Indices, size: int) -> torch.Tensor:
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


def _per_index(values: Classes, indices: torch.Tensor, what: str) -> torch.Tensor:
    """One class, or one per index, as one per index."""
    tensor = _class_tensor(values, what.capitalize() + "es")  # type: ignore[arg-type]
    if tensor.numel() == 1:
        return tensor.expand(indices.numel())
    if tensor.numel() != indices.numel():
        raise InputError(
            f"Give one {what}, or one {what} per index ({indices.numel()}); got {tensor.numel()}."
        )
    return tensor


@dataclass(frozen=True, eq=False)
class GradientRequest:
    """What to differentiate, of which images, how: d target_j / d images[indices[j]].

    Build it with ``GradientRequest.build`` (which validates); the fields are then in the form
    the engine uses: ``indices`` a long tensor on the CPU, ``labels`` one per image and
    ``classes`` one per index (or None), ``device`` the resolved run device. ``images`` is a
    detached alias of the caller's tensor: gradpick never flips its ``requires_grad``.

    Example::

        request = GradientRequest.build(model, images, [3, 7], labels=labels)
        result = gradpick.gradients.engine.compute(request)
    """

    model: nn.Module
    images: torch.Tensor
    indices: torch.Tensor
    labels: torch.Tensor | None
    classes: torch.Tensor | None
    target: Target
    strategy: str
    reduction: Reduction
    device: torch.device
    measure_memory: bool = False
    versus: torch.Tensor | None = None
    """One class per index whose logit is subtracted (target 'logit' with ``classes``): the
    target is then the logit difference z[class] - z[versus], the same for every method."""

    @classmethod
    def build(
        cls,
        model: nn.Module,
        images: torch.Tensor,
        indices: Indices,
        labels: Labels = None,
        target: str = "loss",
        classes: Classes = None,
        strategy: str = "recompute",
        reduction: str = "sum",
        device: str | torch.device | None = None,
        measure_memory: bool = False,
        versus: Classes = None,
    ) -> GradientRequest:
        """Validate the arguments of ``input_gradients`` once, with messages that say what to do.

        ``versus`` (with target 'logit' and ``classes``) makes each target the difference of
        two logits, z[class] - z[versus]: a contrast such as "suggested label over given"."""
        chosen = strategies.get(strategy)
        if target in TARGETS and target not in chosen.targets:
            raise InputError(
                f"Strategy '{strategy}' takes targets {' and '.join(chosen.targets)}; use "
                f"recompute for {target}."
            )
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
        if labels is not None and target == "bce" and torch.as_tensor(labels).dim() == 2:
            label_tensor = _multi_hot(labels, int(images.shape[0]))
        elif labels is not None:
            label_tensor = _class_tensor(labels, "Labels")
            if label_tensor.numel() != images.shape[0]:
                raise InputError(
                    f"Got {label_tensor.numel()} labels for {images.shape[0]} images; "
                    "give one label per image."
                )
        elif target in ("loss", "bce"):
            raise InputError(
                f"target='{target}' needs the true labels; pass labels=..., or use "
                "target='logit' for unlabelled images."
            )
        class_tensor = None if classes is None else _per_index(classes, index_tensor, "class")
        versus_tensor = None
        if versus is not None:
            if target != "logit" or class_tensor is None:
                raise InputError(
                    "A logit difference (versus=...) needs target='logit' and the classes whose "
                    "logit it starts from (classes=...)."
                )
            versus_tensor = _per_index(versus, index_tensor, "versus class")
        return cls(
            model=model,
            images=images.detach(),
            indices=index_tensor,
            labels=label_tensor,
            classes=class_tensor,
            target=target,
            strategy=strategy,
            reduction=reduction,
            device=run_device,
            measure_memory=measure_memory,
            versus=versus_tensor,
        )

    def but(self, **changes: Any) -> GradientRequest:
        """This request with some fields changed, already in engine form (not re-validated)."""
        return dataclasses.replace(self, **changes)

    @property
    def count(self) -> int:
        """k, the number of picked rows (repeats included)."""
        return int(self.indices.numel())

    @property
    def picked_images(self) -> torch.Tensor:
        """The picked images [k, C, H, W], on the images' own device."""
        return self.images[self.indices.to(self.images.device)]

    @property
    def scale(self) -> float:
        """What each gradient row is multiplied by: 1/k for 'mean', 1 for 'sum'."""
        return 1.0 / self.count if self.reduction == "mean" else 1.0

    def scaled_sum(self, values: torch.Tensor) -> torch.Tensor:
        """The objective whose gradient is wanted: the sum of targets, times 1/k for 'mean'."""
        total = values.sum()
        return total / self.count if self.reduction == "mean" else total

    def given_classes(self, order: slice) -> torch.Tensor | None:
        """The class each target of rows ``order`` is fixed to (label or class), or None when
        the predicted class is used."""
        if self.target == "loss" or (
            self.target == "bce"
            and self.classes is None
            and self.labels is not None
            and self.labels.dim() == 1
        ):
            assert self.labels is not None
            return self.labels[self.indices[order]]
        if self.classes is not None:
            return self.classes[order]
        return None

    def _present(self, rows: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
        """Whether label ``classes[i]`` is present in image ``rows[i]`` (0 or 1): a multi-hot
        row's entry, or for one label per image whether it is that label."""
        assert self.labels is not None
        labels = self.labels.to(classes.device)
        if labels.dim() == 2:
            return labels[rows.to(classes.device), classes]
        return (labels[rows.to(classes.device)] == classes).long()

    def picked_targets(
        self, logits: torch.Tensor, order: slice
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Target values of the picked rows (positions ``order`` into ``indices``).

        Returns (targets, classes): the class whose logit or loss each target is.
        """
        rows = self.indices[order]
        check_logits(logits, int(rows.numel()))
        num_classes = logits.shape[1]
        given = self.given_classes(order)
        versus = None if self.versus is None else self.versus[order]
        if given is not None:
            # Given classes are checked on the CPU before they reach the device: an out-of-range
            # class would be a device-side assert on CUDA, which no error message can explain.
            checked = given.tolist() + ([] if versus is None else versus.tolist())
            outside = [value for value in checked if not 0 <= value < num_classes]
            if outside:
                raise InputError(
                    f"Class {outside[0]} is out of range for a model with {num_classes} outputs "
                    f"(valid classes 0 to {num_classes - 1})."
                )
            classes = given.to(logits.device)
        else:
            classes = logits.detach().argmax(dim=1)
        if self.target == "loss":
            values = F.cross_entropy(logits, classes, reduction="none")
        elif self.target == "bce":
            assert self.labels is not None
            values = F.binary_cross_entropy_with_logits(
                logits.gather(1, classes.unsqueeze(1)).squeeze(1),
                self._present(rows, classes).to(logits.dtype),
                reduction="none",
            )
        else:
            values = logits.gather(1, classes.unsqueeze(1)).squeeze(1)
            if versus is not None:
                values = values - logits.gather(1, versus.to(logits.device).unsqueeze(1)).squeeze(1)
        return values, classes
