"""Gradients of the picked images as the explorer shows and exports them (no Streamlit).

``compute`` calls the attribution engine on the picked indices; ``tiles`` turns the maps into
pictures (nearest-neighbour enlarged, so no pixel is blurred); the download builders and
``report`` write the same numbers to .pt, .npz, PNG and JSON.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from gradpick import attribution, devices, gradients, render, versions
from gradpick.attribution import Attribution
from gradpick.bench import FORWARD_PASSES
from gradpick.data import ImageBatch
from gradpick.devices import model_device
from gradpick.errors import InputError
from gradpick.infer import as_model_input
from gradpick.measure import MemoryReport

TARGET_MODES = ("loss", "predicted", "class")
TARGET_LABELS = {
    "loss": "Loss on the true label",
    "predicted": "Logit of the predicted class",
    "class": "Logit of a chosen class",
}
METHOD_LABELS = {
    "gradient": "Gradient",
    "gradient_x_input": "Gradient × input",
    "smoothgrad": "SmoothGrad",
    "integrated_gradients": "Integrated Gradients",
}
WHOLE_BATCH_STRATEGIES = tuple(FORWARD_PASSES)
"""Strategies that forward the whole batch with gradients (summed, retain_graph); the others
touch only the picked images."""
WHOLE_BATCH_BUDGET = 4 << 30
"""Saved-activation bytes above which a whole-batch strategy is refused rather than run."""
ENLARGE = 4
STEP_CPU_THREADS = 1
"""torch intra-op threads for a gradient step on the CPU (see ``devices.cpu_threads``):
measured on two busy cores, ResNet-20's k = 1 step took 41 ms with one thread and 703 ms with
two; the inference pass over the whole batch keeps torch's default."""
APP_LIBRARIES = ("streamlit", "plotly", "pillow")


@dataclass(frozen=True)
class HeatmapRequest:
    """Everything besides the picked indices that decides the maps (a cache key)."""

    target_mode: str = "loss"
    target_class: int = 0
    method: str = "gradient"
    strategy: str = "recompute"
    samples: int = 16
    noise: float = 0.15
    steps: int = 32

    def engine_target(self) -> tuple[str, int | None]:
        """(target, classes) as ``input_gradients`` takes them."""
        if self.target_mode == "loss":
            return "loss", None
        if self.target_mode == "predicted":
            return "logit", None
        if self.target_mode == "class":
            return "logit", self.target_class
        raise InputError(
            f"Unknown target '{self.target_mode}'; use one of {', '.join(TARGET_MODES)}."
        )


def quantity(request: HeatmapRequest, class_names: Sequence[str]) -> str:
    """The differentiated quantity in words, e.g. 'loss' or 'logit[cat]'."""
    if request.target_mode == "loss":
        return "loss"
    if request.target_mode == "predicted":
        return "logit[predicted]"
    return f"logit[{class_names[request.target_class]}]"


def unit(request: HeatmapRequest, class_names: Sequence[str]) -> str:
    """What one map value is, for colourbar titles (pixels are intensities in [0, 1])."""
    q = quantity(request, class_names)
    return {
        "gradient": f"d {q} / d pixel",
        "gradient_x_input": f"pixel × d {q} / d pixel",
        "smoothgrad": f"mean d {q} / d pixel (SmoothGrad)",
        "integrated_gradients": f"{q} attribution (IG)",
    }[request.method]


def whole_batch_bytes(model: nn.Module, images: torch.Tensor) -> int:
    """Activation bytes a whole-batch strategy keeps for backward over all of ``images``."""
    probe = as_model_input(images[:1])
    return gradients.saved_bytes_per_image(model, probe, model_device(model)) * len(images)


def _check_whole_batch_cost(model: nn.Module, batch: ImageBatch, strategy: str) -> None:
    """Refuse a whole-batch strategy whose saved activations alone would exceed the budget."""
    needed = whole_batch_bytes(model, batch.images)
    if needed > WHOLE_BATCH_BUDGET:
        raise InputError(
            f"The '{strategy}' strategy forwards all {len(batch):,} images with gradients, "
            f"which would keep about {needed / 1e9:.1f} GB of activations. Use 'recompute' "
            "(its cost depends on the picked images only) or a smaller batch."
        )


def compute(
    model: nn.Module, batch: ImageBatch, indices: Sequence[int], request: HeatmapRequest
) -> Attribution:
    """The attribution maps of ``batch[indices]`` for ``request``, over the whole batch.

    The engine gets all N images so that every strategy pays its true cost (the whole-batch
    ones need them; recompute forwards only the picks) and SmoothGrad's noise stays seeded by
    the batch index.
    """
    if not indices:
        raise InputError("No images picked: click, box-select or use a picker first.")
    if request.target_mode == "loss" and batch.labels is None:
        raise InputError(
            "These images have no labels, so there is no loss to explain; choose the logit "
            "of the predicted class or of a chosen class as the target."
        )
    if request.strategy in WHOLE_BATCH_STRATEGIES:
        _check_whole_batch_cost(model, batch, request.strategy)
    target, classes = request.engine_target()
    with _step_threads(model):
        return attribution.attribute(
            model,
            batch.float_images(),
            list(indices),
            labels=batch.labels,
            target=target,
            classes=classes,
            method=request.method,
            strategy=request.strategy,
            samples=request.samples,
            noise=request.noise,
            steps=request.steps,
        )


def _step_threads(model: nn.Module) -> AbstractContextManager[None]:
    on_cpu = model_device(model).type == "cpu"
    return devices.cpu_threads(STEP_CPU_THREADS if on_cpu else None)


def step_memory(
    model: nn.Module, batch: ImageBatch, indices: Sequence[int], request: HeatmapRequest
) -> MemoryReport | None:
    """Memory of the plain gradient step, from a run of its own with measurement on.

    Kept apart from ``compute`` so the profiler's overhead reaches neither the step's timing
    nor the time to the heatmaps.
    """
    target, classes = request.engine_target()
    with _step_threads(model):
        return gradients.input_gradients(
            model,
            batch.float_images(),
            list(indices),
            labels=batch.labels,
            target=target,
            classes=classes,
            strategy=request.strategy,
            measure_memory=True,
        ).memory


@dataclass(frozen=True)
class Tiles:
    """The pictures of one picked image, each enlarged ``ENLARGE`` times without blurring."""

    image: np.ndarray
    heat: np.ndarray
    overlay: np.ndarray
    channels: tuple[np.ndarray, ...]
    saliency: np.ndarray
    """The un-coloured saliency values [H, W], for the detailed plotly view."""
    limit: float
    """Upper end of the saliency colour scale."""
    channel_limit: float
    """The signed channel maps run from -channel_limit to +channel_limit."""


def tiles(images: torch.Tensor, maps: torch.Tensor, shared_scale: bool) -> list[Tiles]:
    """Pictures of k picked images (uint8 [k, 3, H, W]) and their maps [k, C, H, W].

    A shared scale uses one limit for all k images (magnitudes comparable), else one each.
    """
    maps = maps.detach().cpu()
    heat = render.saliency(maps)
    limits = render.scale_limits(heat, shared=shared_scale)
    channel_limits = render.scale_limits(maps.numpy(), shared=shared_scale)
    result = []
    for image, values, limit, channel_limit, signed in zip(
        images, heat, limits, channel_limits, maps, strict=True
    ):
        original = render.as_hwc(image)
        heat_rgb = render.colorize(values, float(limit))
        result.append(
            Tiles(
                image=render.enlarge(original, ENLARGE),
                heat=render.enlarge(heat_rgb, ENLARGE),
                overlay=render.enlarge(render.overlay(original, heat_rgb), ENLARGE),
                channels=tuple(
                    render.enlarge(channel, ENLARGE)
                    for channel in render.channel_maps(signed, float(channel_limit))
                ),
                saliency=values,
                limit=float(limit),
                channel_limit=float(channel_limit),
            )
        )
    return result


def strip(tile: Tiles, compact: bool = False, gap: int = 6) -> np.ndarray:
    """One picked image's panels side by side as RGBA, transparent between them: image,
    heatmap, overlay and the signed red, green and blue maps; ``compact`` keeps the first three
    at half the size (every other row and column of a whole-pixel enlargement: still sharp)."""
    panels = [tile.image, tile.heat, tile.overlay]
    if compact:
        panels = [panel[::2, ::2] for panel in panels]
    else:
        panels += tile.channels
    height = panels[0].shape[0]
    spacer = np.zeros((height, gap, 4), dtype=np.uint8)
    pieces: list[np.ndarray] = []
    for panel in panels:
        opaque = np.concatenate([panel, np.full((height, panel.shape[1], 1), 255, np.uint8)], 2)
        pieces += [opaque, spacer]
    return np.concatenate(pieces[:-1], axis=1)


def colourbar(cmap: str = "inferno", signed: bool = False, width: int = 256) -> np.ndarray:
    """A horizontal colour strip [12, width, 3] of a scale, lowest value on the left."""
    values = np.linspace(-1.0 if signed else 0.0, 1.0, width)
    return np.repeat(render.colorize(values[None, :], 1.0, cmap, signed), 12, axis=0)


# ----------------------------------------------------------------------------- exports


def _export_arrays(
    result: Attribution, batch: ImageBatch, indices: Sequence[int]
) -> dict[str, np.ndarray]:
    """Positions and names say where each picked image came from, so anyone can recompute its
    gradient from the source itself."""
    return {
        "indices": np.asarray(indices, dtype=np.int64),
        "positions": np.asarray([batch.positions[i] for i in indices], dtype=np.int64),
        "names": np.asarray([batch.names[i] for i in indices], dtype=np.str_),
        "gradients": result.gradients.gradients.detach().cpu().numpy(),
        "maps": result.maps.detach().cpu().numpy(),
        "classes": result.gradients.classes.numpy(),
        "target_values": result.gradients.target_values.numpy(),
    }


def gradients_npz(result: Attribution, batch: ImageBatch, indices: Sequence[int]) -> bytes:
    """indices, source positions and names [k], gradients and maps [k, C, H, W], classes and
    target values [k]."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, allow_pickle=False, **_export_arrays(result, batch, indices))
    return buffer.getvalue()


def gradients_pt(result: Attribution, batch: ImageBatch, indices: Sequence[int]) -> bytes:
    """The same content as the .npz, as a dict for ``torch.load(..., weights_only=True)``."""
    buffer = io.BytesIO()
    arrays = _export_arrays(result, batch, indices)
    names = [str(name) for name in arrays.pop("names")]
    tensors = {name: torch.from_numpy(array) for name, array in arrays.items()}
    extras = {"names": names, "method": result.method, "target": result.gradients.target}
    torch.save({**tensors, **extras}, buffer)
    return buffer.getvalue()


def library_versions() -> dict[str, str]:
    """The versions gradpick records beside every result, plus the app's own libraries."""
    return {
        **versions.library_versions(),
        **{name: versions.installed_version(name) for name in APP_LIBRARIES},
    }


def report(
    result: Attribution,
    indices: Sequence[int],
    request: HeatmapRequest,
    class_names: Sequence[str],
    memory: MemoryReport | None,
    context: dict[str, Any],
) -> dict[str, Any]:
    """A JSON-ready account of one gradient step: what was asked, what came out, what it cost.

    ``context`` adds what only the page knows (data source, N, model card, inference time).
    """
    step = result.gradients
    return {
        "indices": [int(index) for index in indices],
        "k": len(indices),
        "target": {
            "mode": request.target_mode,
            "label": TARGET_LABELS[request.target_mode],
            "quantity": quantity(request, class_names),
            "classes": [class_names[int(c)] for c in step.classes],
            "values": [float(v) for v in step.target_values],
        },
        "method": {"name": result.method, "settings": dict(result.settings)},
        "strategy": step.strategy,
        "device": step.device,
        "timings_ms": {"gradient_step": step.timing, "method_total": result.milliseconds},
        "memory": None if memory is None else memory.as_dict(),
        "request": asdict(request),
        **context,
        "versions": library_versions(),
    }


def report_json(report_dict: dict[str, Any]) -> bytes:
    return json.dumps(report_dict, indent=2, default=str).encode()
