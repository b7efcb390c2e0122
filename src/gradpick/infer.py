"""Batched inference, run once per batch: logits, probabilities, predictions and losses.

Runs under ``torch.inference_mode()`` so no graph is built or kept; the gradient step later
recomputes only the images a user picks (see ``gradpick.gradients``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gradpick.devices import device_for
from gradpick.errors import InputError, ModelError
from gradpick.measure import Stopwatch

ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class InferenceResult:
    """Per-image outputs on the CPU, plus how long the pass took."""

    logits: torch.Tensor
    probabilities: torch.Tensor
    predictions: torch.Tensor
    confidences: torch.Tensor
    labels: torch.Tensor | None
    losses: torch.Tensor | None
    device: str
    milliseconds: float
    features: torch.Tensor | None = None
    """Penultimate-layer features [N, D] (the input of the model's last ``nn.Linear``), when
    asked for (``infer(..., features=True)``) and the model has such a layer."""

    def __len__(self) -> int:
        return int(self.logits.shape[0])

    @property
    def images_per_second(self) -> float:
        return len(self) / max(self.milliseconds / 1000.0, 1e-9)

    @property
    def correct(self) -> torch.Tensor | None:
        return None if self.labels is None else self.predictions == self.labels

    @property
    def accuracy(self) -> float | None:
        correct = self.correct
        return None if correct is None else float(correct.float().mean())


def as_model_input(images: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """uint8 images become floats in [0, 1]; float images pass through unchanged."""
    if images.dtype == torch.uint8:
        return images.to(dtype) / 255.0
    if not images.is_floating_point():
        raise InputError(f"Images must be uint8 or floating point, not {images.dtype}.")
    return images


def check_images(images: torch.Tensor, check_values: bool = True) -> None:
    """Reject what no image model can take, with a message that says what was expected.

    ``check_values=False`` skips the NaN scan, which reads every pixel: the gradient step checks
    only the images it picks, so its cost stays independent of the batch size.
    """
    if not isinstance(images, torch.Tensor):
        raise InputError(f"Images must be a torch.Tensor, not {type(images).__name__}.")
    if images.dim() != 4:
        raise InputError(
            f"Images must have shape [N, C, H, W]; got {tuple(images.shape)}. "
            "Add a batch dimension with images.unsqueeze(0) for a single image."
        )
    if images.shape[0] == 0:
        raise InputError("The batch holds no images.")
    if check_values and images.is_floating_point() and not torch.isfinite(images).all():
        raise InputError("Images contain NaN or infinite values.")


def call_model(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Call the model, turning its complaint about the images into an error a user can act on."""
    try:
        return model(batch)
    except torch.cuda.OutOfMemoryError:
        raise
    except RuntimeError as error:
        raise InputError(
            f"The model could not process images of shape {tuple(batch.shape[1:])} "
            f"({str(error)[:200]}); give images of the size and channel count it expects."
        ) from None


def _model_dtype(model: nn.Module) -> torch.dtype:
    for parameter in model.parameters():
        if parameter.is_floating_point():
            return parameter.dtype
    return torch.float32


def last_linear(model: nn.Module) -> nn.Linear | None:
    """The model's last ``nn.Linear`` in registration order: the classifier head of the usual
    "features, then a linear layer" network (None when it has none)."""
    found = None
    for module in model.modules():
        if isinstance(module, nn.Linear):
            found = module
    return found


@contextmanager
def penultimate_features(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Collect the penultimate-layer features of every forward run inside the block.

    A forward pre-hook on the model's last ``nn.Linear`` keeps its input (flattened to
    [batch, D], float32, on the CPU) once per forward; the yielded list holds one such tensor
    per forward, in order, so ``torch.cat`` of it lines up with the outputs. The hook is removed
    on exit, so the model is left as it was. Raises ``ModelError`` when there is no
    ``nn.Linear`` to hook.

    Example::

        with penultimate_features(model) as captured:
            logits = model(images)
        features = torch.cat(captured)  # [N, D]
    """
    head = last_linear(model)
    if head is None:
        raise ModelError(
            "The model has no nn.Linear layer, so there are no penultimate-layer features to "
            "read (the embedding view needs a linear classifier head)."
        )
    captured: list[torch.Tensor] = []
    latest: list[torch.Tensor] = []

    def keep(_module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        latest[:] = [inputs[0]]

    def forward_done(_module: nn.Module, _inputs: object, _output: object) -> None:
        if latest:
            value = latest.pop()
            captured.append(value.detach().reshape(value.shape[0], -1).float().cpu())

    handles = [head.register_forward_pre_hook(keep), model.register_forward_hook(forward_done)]
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def infer(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | None = None,
    batch_size: int = 500,
    device: str | torch.device | None = None,
    progress: ProgressCallback | None = None,
    features: bool = False,
) -> InferenceResult:
    """Run ``model`` over all images in batches without building a graph.

    ``images`` may be uint8 (converted per batch, so 50,000 images never exist as floats at once)
    or float in [0, 1], and are given to the model in its own dtype. Outputs come back on the
    CPU in float32. ``features=True`` also keeps the penultimate-layer features of the same
    pass (``penultimate_features``); a model without an ``nn.Linear`` then has none.
    """
    check_images(images, check_values=False)
    if labels is not None and labels.shape != (images.shape[0],):
        raise InputError(f"Expected {images.shape[0]} labels, got shape {tuple(labels.shape)}.")
    if batch_size < 1:
        raise InputError(f"batch_size must be at least 1; got {batch_size}.")
    run_device = device_for(model, device)
    dtype = _model_dtype(model)
    total = int(images.shape[0])
    chunks: list[torch.Tensor] = []
    nothing: list[torch.Tensor] = []
    capture: AbstractContextManager[list[torch.Tensor]] = (
        penultimate_features(model)
        if features and last_linear(model) is not None
        else nullcontext(nothing)
    )
    with capture as captured, Stopwatch(run_device) as watch, torch.inference_mode():
        for start in range(0, total, batch_size):
            batch = images[start : start + batch_size].to(run_device, non_blocking=True)
            chunks.append(call_model(model, as_model_input(batch, dtype).to(dtype)).float().cpu())
            if progress is not None:
                progress(min(start + batch_size, total), total)
    logits = torch.cat(chunks)
    if logits.dim() != 2:
        raise InputError(
            f"The model must map [N, C, H, W] to [N, classes]; it returned {tuple(logits.shape)}."
        )
    # NaN images are found through their outputs ([N, classes]) instead of a scan of every
    # pixel before the pass, which would cost as much as a small model's forward.
    finite = torch.isfinite(logits).all(dim=1)
    if not bool(finite.all()):
        first = int((~finite).nonzero()[0])
        check_images(images[first : first + 1])
        raise InputError(f"The model's outputs for image {first} are not finite.")
    if labels is not None:
        lowest, highest = int(labels.min()), int(labels.max())
        if lowest < 0 or highest >= logits.shape[1]:
            raise InputError(
                f"Labels must be classes 0 to {logits.shape[1] - 1} of this model; got "
                f"{lowest} to {highest}."
            )
    probabilities = logits.softmax(dim=1)
    confidences, predictions = probabilities.max(dim=1)
    losses = None
    if labels is not None:
        losses = F.cross_entropy(logits, labels.to(torch.long), reduction="none")
    return InferenceResult(
        logits=logits,
        probabilities=probabilities,
        predictions=predictions,
        confidences=confidences,
        labels=labels,
        losses=losses,
        device=str(run_device),
        milliseconds=watch.milliseconds,
        features=_stacked(captured, total),
    )


def _stacked(captured: list[torch.Tensor], total: int) -> torch.Tensor | None:
    """The captured features as one [N, D] tensor; None when nothing (or not one row per
    image, as for a model that skips its head for some inputs) was captured."""
    if not captured:
        return None
    stacked = torch.cat(captured)
    return stacked if stacked.shape[0] == total else None
