"""Batched inference, run once per batch: logits, probabilities, predictions and losses.

The probabilities follow the model's output kind (``gradpick.models.zoo.OUTPUT_KINDS``): a
softmax over exclusive classes, or for a multi-label model each label's own sigmoid,
p_c = 1 / (1 + exp(-z_c)), whose loss is the binary cross-entropy against the label (present)
and every other (absent).

Runs under ``torch.inference_mode()`` so no graph is built or kept; the gradient step later
recomputes only the images a user picks (see ``gradpick.gradients.engine``). ``infer`` takes a
tensor
of images; ``infer_source`` and ``infer_chunks`` read straight from an image source, decoding
chunks in DataLoader workers while the model runs, so 50,000 images never sit in memory, and can
capture each image's embedding (``capture_embeddings``: the input of the model's last
``nn.Linear``) for stored outputs and the explorer's embedding view.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gradpick.data import CIFAR10_CLASSES, ImageBatch, ImageSource, ReadReport, stream
from gradpick.errors import InputError, ModelError
from gradpick.models.zoo import OUTPUT_KINDS
from gradpick.runtime.devices import device_for
from gradpick.runtime.measure import Stopwatch

__all__ = [
    "as_model_input",
    "call_model",
    "capture_embeddings",
    "check_images",
    "check_logits",
    "check_output",
    "embedding_layer",
    "fit_classes",
    "infer",
    "infer_chunks",
    "infer_source",
    "InferenceResult",
    "labels_fit",
    "logits_and_embeddings",
    "output_names",
    "probabilities_of",
    "OutputChunk",
    "ProgressCallback",
    "result_from_logits",
    "source_labels",
    "SourceInference",
]

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
    output: str = "softmax"
    """``softmax``: ``probabilities`` sum to one per image; ``sigmoid``: one per label,
    independent, the prediction the top label and the confidence its probability."""

    def __len__(self) -> int:
        return int(self.logits.shape[0])

    @property
    def feature_width(self) -> int | None:
        """How many numbers each image's features hold; None without features."""
        return None if self.features is None else int(self.features.shape[1])

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

    @property
    def entropies(self) -> torch.Tensor:
        """Entropy of each prediction in nats: 0 when certain, log(classes) when uniform; for
        independent labels the sum of each label's binary entropy (log 2 each at p = 0.5)."""
        probabilities = self.probabilities.clamp_min(1e-12)
        entropy = -(probabilities * probabilities.log())
        if self.output == "sigmoid":
            absent = (1 - self.probabilities).clamp_min(1e-12)
            entropy = entropy - absent * absent.log()
        return entropy.sum(dim=1)


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


def check_logits(logits: torch.Tensor, rows: int | None = None) -> None:
    """Models must map [N, C, H, W] to [N, classes] (``rows`` = N when known)."""
    if logits.dim() != 2 or (rows is not None and logits.shape[0] != rows):
        raise InputError(
            f"The model must map [N, C, H, W] to [N, classes]; it returned {tuple(logits.shape)}."
        )


def _model_dtype(model: nn.Module) -> torch.dtype:
    for parameter in model.parameters():
        if parameter.is_floating_point():
            return parameter.dtype
    return torch.float32


def infer(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | None = None,
    batch_size: int = 500,
    device: str | torch.device | None = None,
    progress: ProgressCallback | None = None,
    features: bool = False,
    output: str = "softmax",
) -> InferenceResult:
    """Run ``model`` over all images in batches without building a graph.

    ``images`` may be uint8 (converted per batch, so 50,000 images never exist as floats at once)
    or float in [0, 1], and are given to the model in its own dtype. Outputs come back on the
    CPU in float32. ``features=True`` also keeps the penultimate-layer features of the same
    pass (``capture_embeddings``); a model without an ``nn.Linear`` then has none. ``output``
    (``OUTPUT_KINDS``) says how the logits become probabilities.
    """
    check_output(output)
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
        capture_embeddings(model) if features and _has_linear(model) else nullcontext(nothing)
    )
    with capture as captured, Stopwatch(run_device) as watch, torch.inference_mode():
        for start in range(0, total, batch_size):
            batch = images[start : start + batch_size].to(run_device, non_blocking=True)
            chunks.append(call_model(model, as_model_input(batch, dtype).to(dtype)).float().cpu())
            if progress is not None:
                progress(min(start + batch_size, total), total)
    logits = torch.cat(chunks)
    first_bad = _first_unusable_row(logits)
    if first_bad is not None:
        # NaN images are found through their outputs ([N, classes]) instead of a scan of every
        # pixel before the pass, which would cost as much as a small model's forward.
        check_images(images[first_bad : first_bad + 1])
        raise InputError(f"The model's outputs for image {first_bad} are not finite.")
    _check_labels(labels, logits.shape[1])
    return result_from_logits(
        logits, labels, run_device, watch.milliseconds, _stacked(captured, total), output
    )


def _stacked(captured: list[torch.Tensor], total: int) -> torch.Tensor | None:
    """The captured features as one float32 CPU [N, D] tensor; None when nothing (or not one
    row per image, as for a model that skips its head for some inputs) was captured."""
    if not captured:
        return None
    stacked = torch.cat(captured).float().cpu()
    return stacked if stacked.shape[0] == total else None


def _first_unusable_row(logits: torch.Tensor) -> int | None:
    """Refuse outputs that are not [N, classes]; the first row that is not finite, if any."""
    check_logits(logits)
    finite = torch.isfinite(logits).all(dim=1)
    return None if bool(finite.all()) else int((~finite).nonzero()[0])


def _check_labels(labels: torch.Tensor | None, classes: int) -> None:
    if labels is None or labels.numel() == 0:
        return
    lowest, highest = int(labels.min()), int(labels.max())
    if lowest < 0 or highest >= classes:
        raise InputError(
            f"Labels must be classes 0 to {classes - 1} of this model; got {lowest} to {highest}."
        )


def check_output(output: str) -> None:
    """Refuse an output kind that is not one of ``OUTPUT_KINDS``."""
    if output not in OUTPUT_KINDS:
        raise InputError(f"Unknown output '{output}'; use one of {', '.join(OUTPUT_KINDS)}.")


def probabilities_of(logits: torch.Tensor, output: str = "softmax") -> torch.Tensor:
    """Scores of [N, classes] logits by the model's output kind: a softmax over exclusive
    classes, or each label's own sigmoid (``sigmoid``: independent labels)."""
    check_output(output)
    return torch.sigmoid(logits) if output == "sigmoid" else logits.softmax(dim=1)


def result_from_logits(
    logits: torch.Tensor,
    labels: torch.Tensor | None,
    device: torch.device | str,
    milliseconds: float,
    features: torch.Tensor | None = None,
    output: str = "softmax",
) -> InferenceResult:
    """Probabilities, predictions and losses derived from float32 CPU logits, one way only.

    ``softmax``: cross-entropy of the label. ``sigmoid``: p_c = sigmoid(z_c) per label, and the
    loss the mean over labels of the binary cross-entropy of a one-hot target (the label
    present, every other absent), as ``BCEWithLogitsLoss`` averages it.
    """
    probabilities = probabilities_of(logits, output)
    confidences, predictions = probabilities.max(dim=1)
    losses = None
    if labels is not None:
        target = labels.to(torch.long)
        if output == "sigmoid":
            present = F.one_hot(target, logits.shape[1]).to(logits.dtype)
            losses = F.binary_cross_entropy_with_logits(logits, present, reduction="none")
            losses = losses.mean(dim=1)
        else:
            losses = F.cross_entropy(logits, target, reduction="none")
    return InferenceResult(
        logits=logits,
        probabilities=probabilities,
        predictions=predictions,
        confidences=confidences,
        labels=labels,
        losses=losses,
        device=str(device),
        milliseconds=milliseconds,
        features=features,
        output=output,
    )


# ----------------------------------------------------------------------------- embeddings


def _has_linear(model: nn.Module) -> bool:
    return any(isinstance(module, nn.Linear) for module in model.modules())


def embedding_layer(model: nn.Module) -> nn.Linear:
    """The model's last ``nn.Linear`` (in module order): its input is the embedding.

    For a classifier that ends in one linear head (ResNets, ViTs, EfficientNets, the built-ins)
    this is the pooled penultimate feature vector, the representation the classes are read
    from; it needs no knowledge of the architecture's layer names.
    """
    layers = [module for module in model.modules() if isinstance(module, nn.Linear)]
    if not layers:
        raise InputError(
            f"{type(model).__name__} has no nn.Linear layer, so it has no penultimate features "
            "to use as embeddings; run without embeddings."
        )
    return layers[-1]


@contextmanager
def capture_embeddings(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Collect the input of ``embedding_layer(model)``, flattened to [N, D], per forward.

    A forward pre-hook, registered for the block and removed after it; it records only the
    calling thread's forwards, so other sessions sharing the (frozen) model are not captured.

    Example::

        with capture_embeddings(model) as features:
            logits = model(images)
        embeddings = features[-1]
    """
    owner = threading.get_ident()
    captured: list[torch.Tensor] = []

    def record(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        if threading.get_ident() == owner:
            captured.append(inputs[0].detach().flatten(1))

    handle = embedding_layer(model).register_forward_pre_hook(record)
    try:
        yield captured
    finally:
        handle.remove()


def logits_and_embeddings(
    model: nn.Module, images: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward of float images: the logits and the embeddings (see ``embedding_layer``)."""
    with capture_embeddings(model) as captured:
        logits = call_model(model, images)
    if not captured or captured[-1].shape[0] != logits.shape[0]:
        raise InputError(
            "The model's last nn.Linear did not see one row per image, so its input is not a "
            "per-image embedding; run without embeddings."
        )
    return logits, captured[-1]


# ----------------------------------------------------------------------------- from a source


@dataclass(frozen=True)
class OutputChunk:
    """The model's outputs for one chunk of a source, on the CPU in float32."""

    positions: tuple[int, ...]
    logits: torch.Tensor
    embeddings: torch.Tensor | None


def infer_chunks(
    model: nn.Module,
    source: ImageSource,
    positions: Sequence[int] | None = None,
    batch_size: int = 256,
    device: str | torch.device | None = None,
    embeddings: bool = False,
    workers: int | None = None,
    report: ReadReport | None = None,
    progress: ProgressCallback | None = None,
) -> Iterator[OutputChunk]:
    """The model's outputs for ``positions`` of ``source`` (default all), chunk by chunk.

    Chunks are decoded at ``source.spec`` by ``data.stream`` while the model runs on the
    previous one; on CUDA they arrive in pinned memory and are copied without blocking.
    Unreadable files are skipped (listed in ``report``), so a chunk may hold fewer positions.
    """
    if batch_size < 1:
        raise InputError(f"batch_size must be at least 1; got {batch_size}.")
    run_device = device_for(model, device)
    dtype = _model_dtype(model)
    wanted = list(range(len(source))) if positions is None else list(positions)
    done = 0
    chunks = stream(source, wanted, batch_size, workers, pin_memory=run_device.type == "cuda")
    with torch.inference_mode():
        for chunk in chunks:
            if report is not None:
                report.add(source, chunk)
            done += len(chunk) + len(chunk.skipped)
            if len(chunk):
                pixels = as_model_input(chunk.images.to(run_device, non_blocking=True), dtype)
                if embeddings:
                    logits, features = logits_and_embeddings(model, pixels)
                else:
                    logits, features = call_model(model, pixels), None
                logits = logits.float().cpu()
                bad = _first_unusable_row(logits)
                if bad is not None:
                    name = source.names([chunk.positions[bad]])[0]
                    raise InputError(f"The model's outputs for image {name} are not finite.")
                yield OutputChunk(
                    chunk.positions, logits, None if features is None else features.float().cpu()
                )
            if progress is not None:
                progress(done, len(wanted))


@dataclass(frozen=True)
class SourceInference:
    """Outputs for the images of a source that could be read: row i is ``positions[i]``."""

    result: InferenceResult
    positions: tuple[int, ...]
    embeddings: torch.Tensor | None
    notes: tuple[str, ...]
    """What was skipped (unreadable files) or adapted (upscaled images), by name."""


def infer_source(
    model: nn.Module,
    source: ImageSource,
    positions: Sequence[int] | None = None,
    batch_size: int = 256,
    device: str | torch.device | None = None,
    embeddings: bool = False,
    workers: int | None = None,
    progress: ProgressCallback | None = None,
    output: str = "softmax",
) -> SourceInference:
    """``infer`` straight from a source: only the outputs are kept, never the images.

    Labels come from the source (dropped when its classes are not the model's outputs).
    """
    check_output(output)
    run_device = device_for(model, device)
    report = ReadReport(source.spec)
    total = len(source) if positions is None else len(positions)
    kept: list[int] = []
    # Outputs go into buffers sized once: thousands of small per-chunk tensors kept alive
    # between the model's freed activations would pin glibc's heap, and resident memory would
    # creep up with the image count (790 -> 1,354 MB over 50,000 CIFAR images at 32 pixels).
    outputs: list[torch.Tensor] = []
    with Stopwatch(run_device) as watch:
        for chunk in infer_chunks(
            model, source, positions, batch_size, run_device, embeddings, workers, report, progress
        ):
            parts = [chunk.logits] if chunk.embeddings is None else [chunk.logits, chunk.embeddings]
            if not outputs:
                outputs = [torch.empty(total, part.shape[1]) for part in parts]
            for buffer, part in zip(outputs, parts, strict=True):
                buffer[len(kept) : len(kept) + len(part)] = part
            kept.extend(chunk.positions)
    if not kept:
        raise InputError("None of the images could be read:\n" + "\n".join(report.skipped))
    all_logits = outputs[0][: len(kept)]
    classes = int(all_logits.shape[1])
    labels = source_labels(source, kept, classes)
    notes = report.notes()
    if labels is None and source.labels() is not None:
        notes += (
            f"The images come with {len(source.class_names)} classes but the model predicts "
            f"{classes}; their labels are ignored.",
        )
    return SourceInference(
        result=result_from_logits(
            all_logits, labels, run_device, watch.milliseconds, output=output
        ),
        positions=tuple(kept),
        embeddings=outputs[1][: len(kept)] if len(outputs) > 1 else None,
        notes=notes,
    )


def source_labels(
    source: ImageSource, positions: Sequence[int], classes: int
) -> torch.Tensor | None:
    """The source's labels of ``positions``, or None when it has none or its classes are not
    the model's ``classes`` outputs (such labels would mean nothing to the model)."""
    labels = source.labels()
    if labels is None or not labels_fit(source.class_names, classes):
        return None
    return labels[torch.as_tensor(list(positions), dtype=torch.long)]


def fit_classes(
    batch: ImageBatch, classes: int, names: tuple[str, ...] = ()
) -> tuple[ImageBatch, str | None]:
    """The batch with class names for a model of ``classes`` outputs, and a note if adapted.

    A folder whose class sub-folders do not match the model's outputs has labels that mean
    nothing to the model: they are dropped (no loss, no accuracy) rather than misused.
    ``names`` (the user's --classes file) name the model's outputs when given.
    """
    if names and len(names) != classes:
        raise ModelError(
            f"The class-names file lists {len(names)} names but the model predicts {classes} "
            "classes; write one name per output."
        )
    if labels_fit(batch.class_names, classes):
        return (batch.relabelled(batch.labels, names) if names else batch), None
    ignored = "their labels are ignored" + (
        "" if names else " and the model's class names are used"
    )
    names = output_names(classes, names)
    fitted = batch.relabelled(None, names)
    if batch.labels is None:  # uploads: no labels to ignore, only the model's names to use
        return fitted, None
    note = (
        f"The images come with {len(batch.class_names)} classes but the model predicts "
        f"{classes}; {ignored}."
    )
    return fitted, note


def labels_fit(class_names: Sequence[str], classes: int) -> bool:
    """Whether images labelled in ``class_names`` keep their labels for a model of ``classes``
    outputs (``fit_classes`` drops them otherwise, and with them the loss target)."""
    return len(class_names) == classes


def output_names(classes: int, names: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Names of a model's ``classes`` outputs when the images' own do not fit: ``names`` when
    given, CIFAR-10's for ten outputs, else 'class 0', 'class 1', ..."""
    return names or (
        CIFAR10_CLASSES
        if classes == len(CIFAR10_CLASSES)
        else tuple(f"class {index}" for index in range(classes))
    )
