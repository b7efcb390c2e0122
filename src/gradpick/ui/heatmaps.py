"""Gradients of the picked images as the explorer shows and exports them (no Streamlit).

``compute`` calls the attribution engine on the picked indices; ``tiles`` turns the maps into
pictures (nearest-neighbour enlarged, so no pixel is blurred); the download builders and
``report`` write the same numbers to .pt, .npz, PNG and JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from gradpick import attribution, units
from gradpick.attribution import Attribution
from gradpick.data import ImageBatch
from gradpick.errors import InputError
from gradpick.gradients import engine as gradients
from gradpick.gradients import strategies
from gradpick.gradients.request import GradientRequest
from gradpick.outputs.inference import as_model_input
from gradpick.runtime import devices
from gradpick.runtime.devices import model_device
from gradpick.runtime.measure import MemoryReport
from gradpick.share import export
from gradpick.show import render
from gradpick.trust.agreement import PeakAgreement, occlusion_agreement
from gradpick.trust.engine import MethodSettings
from gradpick.trust.quick import QuickChecks
from gradpick.trust.quick import quick_checks as run_quick_checks

__all__ = [
    "APP_LIBRARIES",
    "DISPLAY_SIDE",
    "STEP_CPU_THREADS",
    "TARGET_LABELS",
    "TARGET_MODES",
    "WHOLE_BATCH_BUDGET",
    "at_batch_indices",
    "colourbar",
    "compute",
    "cost",
    "engine_images",
    "export_of",
    "gradient_request",
    "occlusion_cost",
    "occlusion_notes",
    "HeatmapRequest",
    "map_strip",
    "quantity",
    "quick_checks",
    "resolved_mode",
    "step_memory",
    "step_threads",
    "strip",
    "tiles",
    "Tiles",
    "unit",
    "whole_batch_bytes",
]

TARGET_MODES = ("auto", "loss", "predicted", "class")
"""The sidebar's targets; 'auto' is the method's default (``attribution.default_target``) and
never reaches a ``HeatmapRequest``: ``resolved_mode`` turns it into 'loss' or 'predicted'."""
TARGET_LABELS = {
    "auto": "The method's default",
    "loss": "Loss on the true label",
    "predicted": "Logit of the predicted class",
    "class": "Logit of a chosen class",
}
WHOLE_BATCH_BUDGET = 4 << 30
"""Saved-activation bytes above which a whole-batch strategy is refused rather than run."""
DISPLAY_SIDE = 128
"""Panels are shown this many pixels high: 32-pixel inputs enlarged 4x by whole pixels, 224-pixel
ones averaged down (``render.fit``); exports keep the model's full resolution."""
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
    settings: tuple[tuple[str, float | int], ...] = ()
    """The method's settings that differ from its defaults, as (name, value) pairs."""
    layer: str | None = None
    """A layer method's layer by its dotted name (None: the automatic one)."""
    output: str = "softmax"
    """The model's output kind: a sigmoid model's loss is its true label's binary
    cross-entropy, and a chosen class is a label."""

    def engine_target(self) -> tuple[str, int | None]:
        """(target, classes) as ``input_gradients`` takes them; a sigmoid model's loss is
        ``bce`` (of each pick's true label, present, as the engine takes it without classes)."""
        if self.target_mode == "loss":
            return ("bce" if self.output == "sigmoid" else "loss"), None
        if self.target_mode == "predicted":
            return "logit", None
        if self.target_mode == "class":
            return "logit", self.target_class
        raise InputError(
            f"Unknown target '{self.target_mode}'; use one of {', '.join(TARGET_MODES)}."
        )


def resolved_mode(mode: str, method: str, labelled: bool) -> str:
    """The sidebar's target ``mode`` with 'auto' replaced by ``method``'s default target: the
    predicted class's logit for a layer method (or unlabelled images), else the loss."""
    if mode != "auto":
        return mode
    return "loss" if attribution.default_target(method, labelled) == "loss" else "predicted"


def quantity(request: HeatmapRequest, class_names: Sequence[str]) -> str:
    """The differentiated quantity in words, e.g. 'loss' or 'logit[cat]'."""
    target, chosen = request.engine_target()
    return export.quantity(target, chosen, class_names)


def unit(request: HeatmapRequest, class_names: Sequence[str]) -> str:
    """What one map value is, for colourbar titles (pixels are intensities in [0, 1])."""
    return attribution.get(request.method).unit.format(quantity=quantity(request, class_names))


def whole_batch_bytes(model: nn.Module, images: torch.Tensor) -> int:
    """Activation bytes a whole-batch strategy keeps for backward over all of ``images``."""
    probe = as_model_input(images[:1])
    return gradients.saved_bytes_per_image(model, probe, model_device(model)) * len(images)


def _check_whole_batch_cost(model: nn.Module, batch: ImageBatch, strategy: str) -> None:
    """Refuse a whole-batch strategy whose saved activations alone would exceed the budget."""
    needed = whole_batch_bytes(model, batch.rows(slice(0, 1))) * len(batch)
    if needed > WHOLE_BATCH_BUDGET:
        raise InputError(
            f"The '{strategy}' strategy forwards all {len(batch):,} images with gradients, "
            f"which would keep about {units.format_bytes(needed, 1, 'GB')} of activations. "
            "Use 'recompute' (its cost depends on the picked images only) or a smaller batch."
        )


def gradient_request(
    model: nn.Module,
    batch: ImageBatch,
    indices: Sequence[int],
    request: HeatmapRequest,
    measure_memory: bool = False,
    contrast: tuple[int, int] | None = None,
) -> GradientRequest:
    """The engine's request for ``batch[indices]`` under the sidebar's ``request``.

    A whole-batch strategy gets all N images, so that it pays its true cost, and so does a
    method seeded by the batch index (SmoothGrad's noise); otherwise the engine reads the picks
    alone and gets them alone, at positions 0 to k - 1 (``engine_images``): a click converts k
    images to floats, not N (about 100 ms at N = 10,000 on this project's machine).
    ``at_batch_indices`` names the result's rows by batch index again. A ``contrast`` (A, B)
    replaces the sidebar's target with the logit difference z[A] - z[B].
    """
    target, classes = request.engine_target()
    versus = None
    if contrast is not None:
        target, classes, versus = "logit", contrast[0], contrast[1]
    whole = strategies.get(request.strategy).whole_batch or _seeded(request.method)
    images, positions, labels = engine_images(batch, indices, whole)
    return GradientRequest.build(
        model,
        images,
        positions,
        labels=labels,
        target=target,
        classes=classes,
        strategy=request.strategy,
        measure_memory=measure_memory,
        versus=versus,
    )


def _seeded(method: str) -> bool:
    """Whether the method's randomness is seeded by each pick's batch index."""
    return any(parameter.name == "seed" for parameter in attribution.get(method).parameters)


def engine_images(
    batch: ImageBatch, indices: Sequence[int], whole: bool
) -> tuple[torch.Tensor, list[int], torch.Tensor | None]:
    """The images for the engine as floats in [0, 1], the picks' positions among them and their
    labels: all N with the batch indices when ``whole``, else the picks alone at 0 to k - 1."""
    if whole:
        return batch.float_images(), list(indices), batch.labels
    rows = torch.tensor(list(indices), dtype=torch.long)
    images = batch.rows(rows).to(torch.float32) / 255.0
    labels = None if batch.labels is None else batch.labels.index_select(0, rows)
    return images, list(range(len(rows))), labels


def at_batch_indices(result: Attribution, indices: Sequence[int]) -> Attribution:
    """``result`` with its gradients' rows named by the picks' batch indices (the engine may
    have been given the picks alone, at 0 to k - 1)."""
    named = replace(result.gradients, indices=tuple(int(index) for index in indices))
    return replace(result, gradients=named)


def compute(
    model: nn.Module,
    batch: ImageBatch,
    indices: Sequence[int],
    request: HeatmapRequest,
    contrast: tuple[int, int] | None = None,
) -> Attribution:
    """The attribution maps of ``batch[indices]`` for ``request``, over the whole batch (of the
    logit difference z[A] - z[B] for a ``contrast`` (A, B), by the request's method)."""
    if not indices:
        raise InputError("No images picked: click, box-select or use a picker first.")
    if contrast is None and request.target_mode == "loss" and batch.labels is None:
        raise InputError(
            "These images have no labels, so there is no loss to explain; choose the logit "
            "of the predicted class or of a chosen class as the target."
        )
    layer = request.layer if request.method in attribution.LAYER_METHODS else None
    method = attribution.build(request.method, dict(request.settings), layer)
    if strategies.get(request.strategy).whole_batch:
        _check_whole_batch_cost(model, batch, request.strategy)
    with step_threads(model):
        shown = method.attribute(
            gradient_request(model, batch, indices, request, contrast=contrast)
        )
    return at_batch_indices(shown, indices)


def cost(
    model: nn.Module, batch: ImageBatch, indices: Sequence[int], request: HeatmapRequest
) -> str | None:
    """What the request's method will cost the picks in forwards, when it runs many per pick
    (``attribution.forward_cost``), said before the maps are computed; None otherwise."""
    if not indices:
        return None
    layer = request.layer if request.method in attribution.LAYER_METHODS else None
    method = attribution.build(request.method, dict(request.settings), layer)
    return attribution.forward_cost(method, gradient_request(model, batch, indices, request))


def occlusion_cost(
    model: nn.Module, batch: ImageBatch, indices: Sequence[int], request: HeatmapRequest
) -> str:
    """What checking the picks' maps against occlusion (its default window and stride) costs."""
    said = attribution.forward_cost(
        attribution.Occlusion(), gradient_request(model, batch, indices, request)
    )
    assert said is not None  # occlusion always runs many forwards per pick
    return said


def occlusion_notes(
    model: nn.Module,
    batch: ImageBatch,
    indices: Sequence[int],
    request: HeatmapRequest,
    shown: Attribution,
) -> list[PeakAgreement]:
    """Per pick, whether the shown map's peak lies in occlusion's strongest region
    (``gradpick.trust.agreement``), occlusion explaining the same target, on one CPU thread
    like the step."""
    with step_threads(model):
        return occlusion_agreement(gradient_request(model, batch, indices, request), shown)


def step_threads(model: nn.Module) -> AbstractContextManager[None]:
    """A click's step on the picks: ``STEP_CPU_THREADS`` on the CPU, the device's own way
    elsewhere."""
    on_cpu = model_device(model).type == "cpu"
    return devices.cpu_threads(STEP_CPU_THREADS if on_cpu else None)


def quick_checks(
    model: nn.Module,
    batch: ImageBatch,
    indices: Sequence[int],
    request: HeatmapRequest,
    shown: Attribution,
    budget_s: float,
    logits: torch.Tensor | None = None,
) -> QuickChecks:
    """The trust badges' checks of the shown maps (``gradpick.trust.quick``), for what they
    explain (``shown.gradients``: its target and each pick's class), on one CPU thread like
    the step.

    Only a method seeded by the batch index (SmoothGrad's noise) needs the whole batch as
    floats; the others get the picked images alone (ROAD's noise still seeded by each pick's
    batch index), so a click converts k images, not N.
    ``logits``: the batch's logits [N, classes] from inference (they name each runner-up).
    """
    settings = replace(MethodSettings.from_chosen(dict(request.settings)), layer=shown.layer)
    rows = torch.tensor(list(indices), dtype=torch.long)
    with step_threads(model):  # index_select: advanced indexing spins on busy cores
        images, positions, _ = engine_images(batch, indices, _seeded(request.method))
        checks = run_quick_checks(
            model,
            images,
            positions,
            request.method,
            shown.gradients.target,
            shown.gradients.classes,
            settings,
            shown,
            budget_s,
            None if logits is None else logits.index_select(0, rows),
            list(indices),
            output=request.output,
        )
    picks = (replace(pick, index=int(i)) for i, pick in zip(indices, checks.picks, strict=True))
    return replace(checks, picks=tuple(picks))


def step_memory(
    model: nn.Module, batch: ImageBatch, indices: Sequence[int], request: HeatmapRequest
) -> MemoryReport | None:
    """Memory of the plain gradient step, from a run of its own with measurement on.

    Kept apart from ``compute`` so the profiler's overhead reaches neither the step's timing
    nor the time to the heatmaps.
    """
    with step_threads(model):
        return gradients.compute(
            gradient_request(model, batch, indices, request, measure_memory=True)
        ).memory


@dataclass(frozen=True)
class Tiles:
    """The pictures of one picked image at ``DISPLAY_SIDE`` pixels (``render.fit``)."""

    image: np.ndarray
    heat: np.ndarray
    overlay: np.ndarray
    channels: tuple[np.ndarray, ...]
    saliency: np.ndarray
    """The un-coloured saliency values [H, W], for the detailed view's values on hover."""
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
                image=render.fit(original, DISPLAY_SIDE),
                heat=render.fit(heat_rgb, DISPLAY_SIDE),
                overlay=render.fit(render.overlay(original, heat_rgb), DISPLAY_SIDE),
                channels=tuple(
                    render.fit(channel, DISPLAY_SIDE)
                    for channel in render.channel_maps(signed, float(channel_limit))
                ),
                saliency=values,
                limit=float(limit),
                channel_limit=float(channel_limit),
            )
        )
    return result


def strip(tile: Tiles, compact: bool = False, gap: int = 6, channels: bool = True) -> np.ndarray:
    """One picked image's panels side by side as RGBA, transparent between them: image,
    heatmap, overlay and the signed red, green and blue maps; ``compact`` keeps the first three
    at half the size (every other row and column of a whole-pixel enlargement: still sharp);
    ``channels=False`` leaves the channel maps out (a layer map is the same in every one)."""
    panels = [tile.image, tile.heat, tile.overlay]
    if compact:
        panels = [panel[::2, ::2] for panel in panels]
    elif channels:
        panels += tile.channels
    return _side_by_side(panels, gap)


def map_strip(tile: Tiles, gap: int = 6) -> np.ndarray:
    """The detailed view's picture: the saliency map, then the signed red, green and blue maps,
    as RGBA side by side (``gradpick.ui.browser.pixels`` reads their values under the mouse)."""
    return _side_by_side([tile.heat, *tile.channels], gap)


def _side_by_side(panels: Sequence[np.ndarray], gap: int) -> np.ndarray:
    """RGB ``panels`` of one height as one opaque RGBA row, ``gap`` transparent columns apart."""
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


def export_of(
    result: Attribution,
    batch: ImageBatch,
    indices: Sequence[int],
    request: HeatmapRequest,
    memory: MemoryReport | None,
    model: dict[str, Any],
    source: dict[str, Any],
    explorer: dict[str, Any],
) -> export.Export:
    """The export schema's content for one gradient step of the explorer; ``explorer`` adds
    what only the page knows (its settings)."""
    return export.of_picks(
        result,
        batch,
        indices,
        request.engine_target()[1],
        model,
        source,
        memory=memory,
        libraries=APP_LIBRARIES,
        extra={
            "explorer": {
                "target_mode": request.target_mode,
                "target_label": TARGET_LABELS[request.target_mode],
                "request": asdict(request),
                **explorer,
            }
        },
    )
