"""Attribution methods over the one gradient engine: one class per method, one registry.

Input-gradient methods (``gradpick.attribution.gradient``: the gradient, gradient x input,
SmoothGrad, Integrated Gradients) give signed maps per pixel and channel; layer methods
(``gradpick.attribution.cam``: Grad-CAM, Grad-CAM++, HiResCAM, XGrad-CAM, LayerCAM, Score-CAM)
give class activation maps at one layer, upsampled to the input size; perturbation methods
(``gradpick.attribution.perturbation``: occlusion, RISE) score altered copies of the image.
Maps are computed per picked image and never depend on which other images were picked.

A method declares its label, its parameters (default, lower bound, the explorer's range, help)
and the unit of its maps; ``METHODS`` lists them by name, and the explorer builds its controls
from them. A new method is one subclass of ``AttributionMethod``, one entry, and its tests::

    method = get("smoothgrad")(samples=8)
    maps = method.attribute(GradientRequest.build(model, images, [3, 7], labels=labels)).maps
    cam = build("gradcam", {}, layer="layer3").attribute(request)  # .layer_maps [k, h, w]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from gradpick.attribution.base import Attribution, AttributionMethod, Parameter
from gradpick.attribution.cam import (
    GradCAM,
    GradCAMPlusPlus,
    HiResCAM,
    LayerCAM,
    LayerMethod,
    ScoreCAM,
    XGradCAM,
)
from gradpick.attribution.gradient import (
    Gradient,
    GradientXInput,
    InputGradientMethod,
    IntegratedGradients,
    SmoothGrad,
)
from gradpick.attribution.perturbation import Occlusion, PerturbationMethod, Rise
from gradpick.errors import InputError
from gradpick.gradients.request import GradientRequest

__all__ = [
    "LAYER_METHODS",
    "METHODS",
    "METHOD_NAMES",
    "Attribution",
    "AttributionMethod",
    "GradCAM",
    "GradCAMPlusPlus",
    "Gradient",
    "GradientXInput",
    "HiResCAM",
    "InputGradientMethod",
    "IntegratedGradients",
    "LayerCAM",
    "LayerMethod",
    "Occlusion",
    "Parameter",
    "PerturbationMethod",
    "Rise",
    "ScoreCAM",
    "SmoothGrad",
    "XGradCAM",
    "attribute",
    "build",
    "default_target",
    "forward_cost",
    "get",
]

METHODS: dict[str, type[AttributionMethod]] = {
    method.name: method
    for method in (
        Gradient,
        GradientXInput,
        SmoothGrad,
        IntegratedGradients,
        GradCAM,
        GradCAMPlusPlus,
        HiResCAM,
        XGradCAM,
        LayerCAM,
        ScoreCAM,
        Occlusion,
        Rise,
    )
}
METHOD_NAMES: tuple[str, ...] = tuple(METHODS)
"""Every registered method's name, the plain gradient first."""
LAYER_METHODS: tuple[str, ...] = tuple(name for name, m in METHODS.items() if m.takes_layer)
"""The methods that work at a layer (class activation maps)."""


def get(name: str) -> type[AttributionMethod]:
    """The registered method ``name``, or an InputError listing the known ones."""
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise InputError(
            f"Unknown attribution method '{name}'; use one of {', '.join(METHOD_NAMES)}."
        ) from None


def default_target(method: str, labelled: bool = True, class_given: bool = False) -> str:
    """The target ``method`` explains when none is given: the one rule of the library, the CLI,
    the explorer and the report.

    Layer methods (Grad-CAM and kin) explain the logit of the predicted class, as
    pytorch-grad-cam does; input-gradient methods the loss on the true label, or the predicted
    class's logit when the images have no labels (``labelled=False``). A chosen class
    (``class_given``) is always explained by its logit. Example::

        default_target("gradcam")   # 'logit'
        default_target("gradient")  # 'loss'
    """
    chosen = get(method).default_target
    return chosen if labelled and not class_given else "logit"


def forward_cost(method: AttributionMethod, request: GradientRequest) -> str | None:
    """What a method of many forwards per pick (Score-CAM, occlusion, RISE) will cost, said
    before it runs, the same words in the CLI and the explorer; None for a method of one forward
    (and backward) per pick. Example: ``forward_cost(Occlusion(), request)`` is 'Occlusion
    runs 3,152 forwards (197 per pick × 16 picks)' for 16 picks at 32 px."""
    if not isinstance(method, PerturbationMethod | LayerMethod):
        return None
    forwards = method.forwards(request)
    per_pick = forwards // request.count
    if per_pick <= 1:
        return None
    picks = f"{request.count:,} pick" + ("" if request.count == 1 else "s")
    rounded = " in bfloat16" if method.settings.get("bfloat16") else ""
    return f"{method.label} runs {forwards:,} forwards{rounded} ({per_pick:,} per pick × {picks})"


def build(name: str, settings: Mapping[str, Any], layer: str | None = None) -> AttributionMethod:
    """Method ``name`` with those of ``settings`` it takes (the others are for other methods),
    at ``layer`` for a layer method (None: the automatic layer)."""
    method = get(name)
    own = {parameter.name for parameter in method.parameters}
    chosen = {key: value for key, value in settings.items() if key in own}
    if issubclass(method, LayerMethod):
        return method(layer=layer, **chosen)
    if layer is not None:
        raise InputError(
            f"{method.label} works on the input pixels, not at a layer; the layer methods: "
            f"{', '.join(LAYER_METHODS)}."
        )
    return method(**chosen)


def attribute(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int] | torch.Tensor,
    labels: Sequence[int] | torch.Tensor | None = None,
    target: str | None = None,
    classes: int | Sequence[int] | torch.Tensor | None = None,
    method: str = "gradient",
    strategy: str = "recompute",
    device: str | torch.device | None = None,
    measure_memory: bool = False,
    samples: int = 16,
    noise: float = 0.15,
    steps: int = 32,
    baseline: float = 0.0,
    seed: int = 0,
    layer: str | None = None,
    batch_size: int | None = None,
) -> Attribution:
    """Attribution maps of ``images[indices]`` for ``target`` by ``method`` (see ``METHODS``).

    ``target`` None is the method's default (``default_target``): the logit of the predicted
    class for the layer methods, the loss for the others.

    * ``gradient``: d target / d image, the engine's plain result.
    * ``gradient_x_input``: the gradient times the image.
    * ``smoothgrad``: the mean gradient over ``samples`` copies with Gaussian noise of standard
      deviation ``noise`` x (max - min) of each image (not clamped), seeded by ``seed``.
    * ``integrated_gradients``: (image - baseline) x the path-average gradient along the straight
      line from a constant ``baseline`` image to the image, ``steps`` points, midpoint rule; the
      maps sum to about target(image) - target(baseline) (completeness).
    * ``gradcam``, ``gradcam_plus_plus``, ``hirescam``, ``xgradcam``, ``layercam``: class
      activation maps at ``layer`` (None: chosen automatically) from its activation and
      d target / d activation; ``scorecam`` from masked forwards, ``batch_size`` at a time
      (None: each method's default).
    * ``occlusion``, ``rise``: the target's drop when a square is hidden (grey), and the
      target under seeded random masks (``seed``), ``batch_size`` altered images at a time;
      their own settings (window, stride, masks, cell) through ``get(method)(...)``.

    Arguments shared with ``input_gradients`` mean the same there; ``strategy`` and
    ``measure_memory`` apply to both engine calls. The settings a method does not take are
    ignored. This builds the request and the method; ``get(method)(...).attribute(request)``
    is the same call for a request already built.
    """
    chosen = build(
        method,
        {
            "samples": samples,
            "noise": noise,
            "steps": steps,
            "baseline": baseline,
            "seed": seed,
            **({} if batch_size is None else {"batch_size": batch_size}),
        },
        layer,
    )
    request = GradientRequest.build(
        model,
        images,
        indices,
        labels=labels,
        target=target or default_target(method, labels is not None, classes is not None),
        classes=classes,
        strategy=strategy,
        device=device,
        measure_memory=measure_memory,
    )
    return chosen.attribute(request)
