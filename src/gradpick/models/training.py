"""Training and evaluation of the built-in models, resumable epoch by epoch.

The recipe is a standard fast CIFAR run: SGD with Nesterov momentum, a one-cycle learning-rate
schedule, label smoothing and weight decay; random crop (4-pixel zero padding), horizontal
flips and optionally cutout on uint8 tensors. A run can learn from teachers as well as labels
(distillation from earlier runs' weights). A warm restart can instead run stochastic weight
averaging (SWA): a constant learning rate, the weights averaged over epochs, BatchNorm statistics
recomputed.
Images are decoded once into a tensor cache (``data.decoded_cache``). Every epoch writes an
atomic checkpoint, so an interrupted run loses at most the current epoch.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import platform
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from gradpick.data import (
    IMAGE_SIZE,
    FolderSource,
    ImageBatch,
    ImageSource,
    batch_positions,
    decoded_cache,
    load_batch,
)
from gradpick.errors import DataError, ModelError
from gradpick.models import shipped as models
from gradpick.models import weights as weights_io
from gradpick.outputs.inference import infer
from gradpick.runtime.devices import model_device, resolve_device

__all__ = [
    "CHECK_SLICE",
    "NUM_CLASSES",
    "augment_batch",
    "check_training_source",
    "compiled",
    "default_config",
    "evaluate",
    "Evaluation",
    "export",
    "ProgressLine",
    "teacher_probabilities",
    "train",
    "TrainConfig",
    "write_model_card",
]

NUM_CLASSES = 10
CHECK_SLICE = {"size": 1000, "seed": 0}
"""A fixed, seeded 1,000-image sample of the test split whose accuracy the card records, so a
test can re-check the shipped weights quickly (the split is ordered by class, so no plain slice)."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a run; stored in checkpoints so a resume cannot drift."""

    model: str
    epochs: int
    batch_size: int = 128
    max_lr: float = 0.1
    weight_decay: float = 5e-4
    momentum: float = 0.9
    label_smoothing: float = 0.1
    augment: bool = True
    seed: int = 0
    compile: bool = True
    warm_start_sha256: str = ""
    """The sha256 of the weights the run started from ("" for a fresh initialisation): a second
    one-cycle run from a finished one is a warm restart, and this pins which weights it took."""
    swa: bool = False
    """Stochastic weight averaging (Izmailov et al., 2018) instead of one-cycle: a constant
    learning rate of ``max_lr``, the weights averaged at the end of every epoch, and BatchNorm
    statistics recomputed for the average. It finds a flatter, better-generalising point than
    the last iterate; meant for a warm start from a finished one-cycle run."""
    cutout: int = 0
    """Side of a square erased at a random place in every augmented image (DeVries and Taylor,
    2017; 0: none). It makes the network use the whole object rather than one telling patch."""
    teachers: tuple[str, ...] = ()
    """The sha256 of each teacher's weights (knowledge distillation; none by default). The
    targets mix the labels with the teachers' mean probabilities on each training image, which
    carry what one-hot labels cannot: how alike the classes look in that image."""
    distill_weight: float = 0.5
    """The teachers' share of each target when there are teachers; the labels keep the rest."""


def default_config(model: str, epochs: int | None = None) -> TrainConfig:
    """Our recipe per model: the tutorial net is small and learns without augmentation."""
    if model == "tutorial":
        return TrainConfig(
            model, epochs or 20, batch_size=64, max_lr=0.05, augment=False, label_smoothing=0.0
        )
    # 30 epochs at batch 256 ended at 87.2% top-1 on the test split, 60 at batch 128 at 88.5%,
    # with training accuracy at 95%: more steps help, and so does regularising more (cutout).
    return TrainConfig(model, epochs or 150, batch_size=128, max_lr=0.1, cutout=16)


def check_training_source(source: ImageSource) -> None:
    """Refuse sources that are not CIFAR-10 shaped: 10 classes of 32x32 images."""
    if len(source.class_names) != NUM_CLASSES:
        raise DataError(
            f"{source.description}: {len(source.class_names)} classes found, but the built-in "
            f"models predict {NUM_CLASSES} (CIFAR-10). Check the folder layout."
        )
    if source.labels() is None:
        raise DataError(f"{source.description}: training needs labelled images.")
    if isinstance(source, FolderSource):
        for name in source.relative_names[:: max(1, len(source) // 20)]:
            path = source.root / name
            with Image.open(path) as image:
                if image.size != (IMAGE_SIZE, IMAGE_SIZE):
                    raise DataError(
                        f"{path}: {image.size[0]}x{image.size[1]} pixels; training expects "
                        f"{IMAGE_SIZE}x{IMAGE_SIZE} CIFAR-10 images."
                    )


def augment_batch(
    images: torch.Tensor, generator: torch.Generator, cutout: int = 0
) -> torch.Tensor:
    """Random 32x32 crops of the 4-pixel zero-padded images, then random horizontal flips.

    With ``cutout``, a ``cutout``-sided square centred anywhere in each image (so it may hang
    over the edge) is then set to zero, like the padding.
    """
    count = images.shape[0]
    padded = F.pad(images, (4, 4, 4, 4))
    offsets = torch.randint(0, 9, (count, 2), generator=generator).tolist()
    flips = torch.rand(count, generator=generator) < 0.5
    crops = torch.stack(
        [padded[i, :, y : y + IMAGE_SIZE, x : x + IMAGE_SIZE] for i, (y, x) in enumerate(offsets)]
    )
    crops[flips] = crops[flips].flip(-1)
    if cutout:
        centres = torch.randint(0, IMAGE_SIZE, (count, 2), generator=generator).tolist()
        for crop, (y, x) in zip(crops, centres, strict=True):
            top, left = max(0, y - cutout // 2), max(0, x - cutout // 2)
            crop[:, top : y - cutout // 2 + cutout, left : x - cutout // 2 + cutout] = 0
    return crops


class ProgressLine:
    """A one-line progress bar on stderr: batches done, loss, accuracy, images per second."""

    def __init__(self, epoch: int, epochs: int, steps: int) -> None:
        self.prefix = f"epoch {epoch}/{epochs}"
        self.steps = steps
        self.started = time.perf_counter()

    def update(self, step: int, loss: float, accuracy: float, images: int) -> None:
        rate = images / max(time.perf_counter() - self.started, 1e-9)
        filled = int(30 * step / self.steps)
        sys.stderr.write(
            f"\r{self.prefix} [{'#' * filled}{'.' * (30 - filled)}] {step}/{self.steps} "
            f"loss {loss:.3f} acc {accuracy:.3f} {rate:,.0f} img/s"
        )
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")


def _save_atomically(payload: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    torch.save(payload, temporary)
    temporary.replace(path)


_FIELD_DEFAULTS = {
    field.name: field.default for field in fields(TrainConfig) if field.default is not MISSING
}


def _load_checkpoint(path: Path, config: TrainConfig) -> dict[str, Any]:
    try:
        checkpoint: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
        stored = checkpoint["config"]
    except Exception as error:  # any unreadable file: say which and what to do
        raise ModelError(
            f"{path}: the checkpoint is corrupt or unreadable ({str(error)[:160]}). "
            "Delete it to start over, or restore a backup."
        ) from None
    if {**_FIELD_DEFAULTS, **stored} != asdict(config):  # settings added since count as defaults
        raise ModelError(
            f"{path}: the checkpoint was made with different settings {stored}; resume with "
            "the same settings or choose another --run-dir."
        )
    return checkpoint


def compiled(model: nn.Module) -> Callable[..., torch.Tensor]:
    """``torch.compile(model)``, quiet on a machine with CUDA's toolkit but no GPU.

    The compiler imports ``torch.utils.cpp_extension``, which looks for CUDA when imported and,
    finding a toolkit without a GPU, warns "No CUDA runtime is found": alarming on a CPU run,
    which never needs CUDA. Imported here first with that warning held back; a machine with a
    GPU keeps every message.
    """
    if not torch.cuda.is_available():
        logger = logging.getLogger("torch.utils.cpp_extension")
        level = logger.level
        logger.setLevel(logging.ERROR)
        try:
            importlib.import_module("torch.utils.cpp_extension")
        finally:
            logger.setLevel(level)
    step: Callable[..., torch.Tensor] = torch.compile(model)
    return step


def train(
    config: TrainConfig,
    source: ImageSource,
    run_dir: Path,
    resume: bool = False,
    device: str | None = None,
    log: Callable[[str], None] = print,
    warm_start: Path | None = None,
    teachers: Sequence[Path] = (),
) -> nn.Module:
    """Train ``config.model`` on ``source``; returns the model in eval mode.

    ``warm_start`` names weights to start from instead of a fresh initialisation; their sha256
    must be ``config.warm_start_sha256``. ``teachers`` name the weights to distil from, whose
    sha256s must be ``config.teachers``. Writes ``run_dir/checkpoint.pt`` after every epoch and
    ``run_dir/history.json``.
    """
    check_training_source(source)
    if [weights_io.sha256_file(path) for path in teachers] != list(config.teachers):
        raise ModelError("The teachers' sha256s differ from the run's: give the same files.")
    run_device = resolve_device(device)
    torch.manual_seed(config.seed)
    model = models.build(config.model)
    if warm_start is not None:
        if weights_io.sha256_file(warm_start) != config.warm_start_sha256:
            raise ModelError(f"{warm_start}: its sha256 differs from the run's warm start.")
        weights_io.apply_state_dict(model, weights_io.read_state_dict(warm_start), config.model)
    model = model.to(run_device)
    # torch.compile fuses the backward pass (about 25% faster for ResNet-20 on CPU); the
    # checkpoint keeps the plain module's state_dict so weights load without the wrapper.
    step_model = compiled(model) if config.compile else model
    log(f"decoding {source.description} into the tensor cache (once)...")
    data = decoded_cache(source)
    assert data.labels is not None
    steps = len(data) // config.batch_size
    if steps * config.epochs < 3:
        raise DataError(
            f"{len(data)} training images give {steps} step(s) of {config.batch_size} per epoch; "
            "a one-cycle schedule needs at least 3 steps in all. Lower --batch-size or add data."
        )
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=config.max_lr,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
        nesterov=True,
    )
    schedule: torch.optim.lr_scheduler.LRScheduler
    if config.swa:
        schedule = torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=0)
    else:
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer,
            max_lr=config.max_lr,
            epochs=config.epochs,
            steps_per_epoch=steps,
            pct_start=max(0.2, 2 / (steps * config.epochs)),  # a warm-up of at least one step
        )
    checkpoint_path = run_dir / "checkpoint.pt"
    history: list[dict[str, float]] = []
    first_epoch = 0
    average: dict[str, torch.Tensor] = {}
    if resume and checkpoint_path.is_file():
        checkpoint = _load_checkpoint(checkpoint_path, config)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        schedule.load_state_dict(checkpoint["schedule"])
        first_epoch = int(checkpoint["epoch"])
        history = json.loads(checkpoint["history"])
        average = checkpoint.get("average", {})
        warmed = "" if warm_start is None else f" (warm-started from {warm_start})"
        log(f"resuming {config.model} after epoch {first_epoch} of {config.epochs}{warmed}")
    elif resume or warm_start is not None:
        start = f"warm-starting from {warm_start}" if warm_start else "starting from scratch"
        log(f"no checkpoint in {run_dir}; {start}" if resume else start)
    targets = data.labels
    if teachers and first_epoch < config.epochs:  # a finished run resumed only exports
        log(f"the {len(teachers)} teachers' probabilities on every training image...")
        taught = teacher_probabilities(config.model, teachers, data, run_dir, run_device)
        one_hot = F.one_hot(data.labels, NUM_CLASSES).float()
        targets = (1 - config.distill_weight) * one_hot + config.distill_weight * taught
    started = time.perf_counter()
    for epoch in range(first_epoch, config.epochs):
        stats = _train_epoch(
            model, step_model, data, targets, config, optimizer, schedule, epoch, run_device
        )
        if config.swa:  # the running mean of every epoch's end weights, this one included
            _fold_into_average(average, model, averaged=epoch)
        stats["seconds"] = time.perf_counter() - started
        history.append(stats)
        _save_atomically(
            {
                "config": asdict(config),
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "schedule": schedule.state_dict(),
                "epoch": epoch + 1,
                "history": json.dumps(history),
                "average": average,
            },
            checkpoint_path,
        )
        started = time.perf_counter()
    if config.swa:
        log("recomputing BatchNorm statistics for the averaged weights...")
        model.load_state_dict(average, strict=False)
        _recompute_batchnorm(model, data, config, run_device)
    (run_dir / "history.json").write_text(json.dumps(history, indent=2))
    return weights_io.freeze(model)


def _fold_into_average(average: dict[str, torch.Tensor], model: nn.Module, averaged: int) -> None:
    """Update the running mean of ``averaged`` earlier weight snapshots with the model's own."""
    for name, parameter in model.named_parameters():
        current = parameter.detach()
        if name in average:
            average[name] += (current - average[name]) / (averaged + 1)
        else:
            average[name] = current.clone()


def _recompute_batchnorm(
    model: nn.Module, data: ImageBatch, config: TrainConfig, device: torch.device
) -> None:
    """BatchNorm statistics of averaged weights, over one more pass of training batches.

    Running statistics kept during training belong to the last iterate, not to the average;
    ``update_bn`` replaces them with plain averages over every batch. The batches must look like
    training's: shuffled, since a CIFAR folder is sorted by class and single-class batches miss
    the variance between classes, and augmented, since the weights learnt to expect the
    statistics of padded crops (on un-augmented images ResNet-20 loses about 2 points).
    """
    batches = (
        images.to(device).float() / 255.0
        for images, _ in _training_batches(data, config, epoch=config.epochs)
    )
    torch.optim.swa_utils.update_bn(batches, model, device)


def _training_batches(
    data: ImageBatch, config: TrainConfig, epoch: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """An epoch's full batches: uint8 images, shuffled and augmented (if the recipe augments),
    with their positions in ``data``.

    The order and augmentation depend only on (seed, epoch), so a resumed run matches.
    """
    generator = torch.Generator().manual_seed(config.seed * 1000 + epoch)
    order = torch.randperm(len(data), generator=generator)
    for step in range(len(data) // config.batch_size):
        chosen = order[step * config.batch_size : (step + 1) * config.batch_size]
        images = data.images[chosen]
        if config.augment:
            images = augment_batch(images, generator, config.cutout)
        yield images, chosen


def teacher_probabilities(
    name: str, teachers: Sequence[Path], data: ImageBatch, run_dir: Path, device: torch.device
) -> torch.Tensor:
    """The teachers' mean softmax over each image and its mirror image, one row per image.

    The teachers see whole images while the student sees augmented ones, so the targets say what
    the whole image looks like. Kept in ``run_dir`` for resumes (four ResNet-20 teachers take
    minutes on a CPU), keyed by the teachers' sha256s and the images' own sha256, since rows
    must line up with images (a folder and torchvision's download order them differently).
    """
    images_sha256 = hashlib.sha256(data.images.numpy().tobytes()).hexdigest()
    key = {"teachers": [weights_io.sha256_file(path) for path in teachers], "images": images_sha256}
    cached = run_dir / "teacher_probabilities.pt"
    if cached.is_file():
        stored = torch.load(cached, map_location="cpu", weights_only=True)
        if stored["key"] == key:
            return stored["probabilities"]
    total = torch.zeros(len(data), NUM_CLASSES)
    for path in teachers:
        teacher = models.load(name, path, device=device)
        with torch.inference_mode():
            for start in range(0, len(data), 1000):
                images = data.images[start : start + 1000].to(device).float() / 255.0
                for view in (images, images.flip(-1)):
                    total[start : start + 1000] += teacher(view).softmax(1).cpu()
    probabilities = total / (2 * len(teachers))
    _save_atomically({"key": key, "probabilities": probabilities}, cached)
    return probabilities


def _train_epoch(
    model: nn.Module,
    step_model: Callable[[torch.Tensor], torch.Tensor],
    data: ImageBatch,
    targets: torch.Tensor,
    config: TrainConfig,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    epoch: int,
    device: torch.device,
) -> dict[str, float]:
    """One epoch of steps over ``_training_batches``; returns its loss and training accuracy.

    ``targets`` holds each image's class index, or its class probabilities when distilling.
    """
    assert data.labels is not None
    model.train()
    steps = len(data) // config.batch_size
    bar = ProgressLine(epoch + 1, config.epochs, steps)
    loss_sum = correct = seen = 0.0
    for step, (images, chosen) in enumerate(_training_batches(data, config, epoch)):
        inputs = images.to(device).float() / 255.0
        labels = data.labels[chosen].to(device)
        logits = step_model(inputs)
        loss = F.cross_entropy(
            logits, targets[chosen].to(device), label_smoothing=config.label_smoothing
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        loss_sum += float(loss.detach()) * len(labels)
        correct += float((logits.argmax(1) == labels).sum())
        seen += len(labels)
        if step % 10 == 0 or step == steps - 1:
            bar.update(step + 1, loss_sum / seen, correct / seen, int(seen))
    bar.close()
    return {"epoch": epoch + 1, "loss": loss_sum / seen, "train_accuracy": correct / seen}


@dataclass(frozen=True)
class Evaluation:
    """Top-1 accuracy, per-class accuracy and the confusion matrix (rows: true, cols: predicted)."""

    accuracy: float
    per_class: dict[str, float]
    confusion: list[list[int]]
    images: int
    correct: torch.Tensor
    """Per-image correctness, in the batch's order."""

    def table(self) -> str:
        names = list(self.per_class)
        width = max(len(name) for name in names)
        lines = [f"top-1 accuracy: {self.accuracy:.2%} on {self.images:,} images", ""]
        lines += [f"{name:<{width}}  {value:.2%}" for name, value in self.per_class.items()]
        lines += ["", "confusion matrix (rows: true class, columns: predicted)"]
        lines.append(" " * (width + 2) + " ".join(f"{name[:5]:>5}" for name in names))
        for name, row in zip(names, self.confusion, strict=True):
            lines.append(f"{name:<{width}}  " + " ".join(f"{count:>5}" for count in row))
        return "\n".join(lines)


def evaluate(
    model: nn.Module, batch: ImageBatch, device: str | torch.device | None = None
) -> Evaluation:
    """Accuracy of a model on a labelled batch, computed with gradpick's own inference."""
    if batch.labels is None:
        raise DataError("Evaluation needs labelled images (a CIFAR-10 split or a class folder).")
    result = infer(model, batch.images, batch.labels, device=device)
    classes = len(batch.class_names)
    confusion = torch.zeros(classes, classes, dtype=torch.long)
    confusion.index_put_(
        (batch.labels, result.predictions),
        torch.ones(len(batch), dtype=torch.long),
        accumulate=True,
    )
    totals = confusion.sum(1).clamp(min=1)
    per_class = (confusion.diag().float() / totals).tolist()
    return Evaluation(
        accuracy=float(result.accuracy or 0.0),
        per_class=dict(zip(batch.class_names, per_class, strict=True)),
        confusion=confusion.tolist(),
        images=len(batch),
        correct=result.predictions == batch.labels,
    )


def write_model_card(
    config: TrainConfig,
    weights_path: Path,
    evaluation: Evaluation,
    evaluated_on: str,
    history: list[dict[str, float]],
    device: str,
    warm_start_card: dict[str, Any] | None = None,
) -> Path:
    """The JSON card beside the weights: what it is, how good, how made, and its checksum.

    A warm-started run carries the card of the weights it started from, so the whole training
    (both runs' recipes, epochs and time) stays on record.
    """
    model = models.build(config.model)
    check = {**CHECK_SLICE, "size": min(CHECK_SLICE["size"], evaluation.images)}
    check_positions = batch_positions(evaluation.images, **check)
    check_accuracy = float(evaluation.correct[check_positions].float().mean())
    card = {
        "name": config.model,
        "architecture": type(model).__name__,
        "parameters": sum(parameter.numel() for parameter in model.parameters()),
        "test_accuracy": round(evaluation.accuracy, 4),
        "evaluated_on": evaluated_on,
        "evaluated_images": evaluation.images,
        "per_class_accuracy": {
            name: round(value, 4) for name, value in evaluation.per_class.items()
        },
        "check_slice": {**check, "accuracy": round(check_accuracy, 4)},
        "recipe": {
            **asdict(config),
            "optimizer": "SGD, Nesterov momentum",
            "schedule": "constant; stochastic weight averaging of every epoch, BN recomputed"
            if config.swa
            else "one-cycle (cosine), 20% warm-up",
            "augmentation": "random crop with 4-pixel padding, horizontal flip"
            + (f", cutout {config.cutout}x{config.cutout}" if config.cutout else "")
            if config.augment
            else "none",
            "input": "RGB in [0, 1], normalised inside the model",
        },
        "epochs": len(history),
        "seed": config.seed,
        "training_seconds": round(sum(epoch["seconds"] for epoch in history), 1),
        "hardware": f"{device}; {platform.processor() or platform.machine()}; "
        f"{torch.get_num_threads()} threads; torch {torch.__version__}",
        "final_train_loss": round(history[-1]["loss"], 4) if history else None,
        "weights_file": weights_path.name,
        "sha256": weights_io.sha256_file(weights_path),
    }
    if config.warm_start_sha256:
        earlier = warm_start_card or {}
        card["warm_start"] = {"sha256": config.warm_start_sha256, "card": earlier or None}
        card["total_epochs"] = card["epochs"] + earlier.get(
            "total_epochs", earlier.get("epochs", 0)
        )
        card["total_training_seconds"] = round(
            card["training_seconds"]
            + earlier.get("total_training_seconds", earlier.get("training_seconds", 0.0)),
            1,
        )
    card_path = weights_path.with_suffix(".json")
    card_path.write_text(json.dumps(card, indent=2) + "\n")
    return card_path


def export(
    model: nn.Module,
    config: TrainConfig,
    run_dir: Path,
    export_dir: Path,
    test_source: ImageSource,
    warm_start_card: dict[str, Any] | None = None,
) -> tuple[Path, Path, Evaluation]:
    """Ship a trained model: its plain state_dict, evaluated on the test split, and its card."""
    export_dir.mkdir(parents=True, exist_ok=True)
    weights_path = export_dir / f"{config.model}.pt"
    torch.save({key: value.cpu() for key, value in model.state_dict().items()}, weights_path)
    evaluation = evaluate(model, load_batch(test_source))
    history = json.loads((run_dir / "history.json").read_text())
    card_path = write_model_card(
        config,
        weights_path,
        evaluation,
        test_source.description,
        history,
        str(model_device(model)),
        warm_start_card,
    )
    return weights_path, card_path, evaluation
