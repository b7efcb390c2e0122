"""The one door from the trust checks to the attribution methods, and what every check shares.

``attribute_maps`` is the only place the checks call an attribution method; each check explains
the logit of a class held fixed per picked image (the original model's prediction unless given),
so a randomised model, a path point or a masked image is always asked about the same class.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

import torch
from torch import nn

from gradpick import attribution
from gradpick.errors import InputError
from gradpick.gradients.request import GradientRequest
from gradpick.outputs.inference import call_model
from gradpick.runtime.devices import device_for, modules_of

__all__ = [
    "MAX_SAMPLES",
    "MAX_STEPS",
    "METHODS",
    "MethodSettings",
    "attribute_maps",
    "check_count",
    "check_methods",
    "held_classes",
    "logits_of",
    "noise_std",
    "picked_images",
    "saliency",
    "scaled_saliency",
    "served_view",
]

METHODS: tuple[str, ...] = tuple(
    name
    for name, method in attribution.METHODS.items()
    if issubclass(method, attribution.InputGradientMethod)
)
"""The methods the checks run by default: the input-gradient ones (the perturbation methods
cost hundreds of forwards per pick, and a check repeats them per randomised layer)."""
CHECKABLE: tuple[str, ...] = attribution.METHOD_NAMES
"""Every method a check can be asked to run: the layer methods too (at ``MethodSettings.layer``).

A layer method's map is its upsampled class activation map, so each check reads it as it reads
an input gradient's saliency. A ReLU'd map can be all zero (a randomised head often gives no
positive evidence for the held class): its Spearman correlation is then NaN (null in the JSON),
since a constant map has no order, and its deletion order is the pixels' own order.
"""
MAX_SAMPLES = 1024
"""Most SmoothGrad copies per image a check may ask for."""
MAX_STEPS = 4096
"""Most Integrated Gradients path points per image a check may ask for."""


def _registered_default(name: str) -> float | int:
    """The attribution registry's default for parameter ``name``: the checks use the same."""
    return next(
        parameter.default
        for method in attribution.METHODS.values()
        for parameter in method.parameters
        if parameter.name == name
    )


@dataclass(frozen=True)
class MethodSettings:
    """How SmoothGrad and Integrated Gradients are run in every check.

    ``noise`` is the standard deviation of SmoothGrad's Gaussian noise as a fraction of each
    image's range (max - min); ``samples`` its noisy copies per image; ``steps`` the midpoint-rule
    path points of Integrated Gradients; ``seed`` seeds the noise by (seed, batch index).
    """

    samples: int = int(_registered_default("samples"))
    noise: float = float(_registered_default("noise"))
    steps: int = int(_registered_default("steps"))
    seed: int = int(_registered_default("seed"))
    layer: str | None = None
    """The layer of the layer methods, by its dotted name in the user's model (None: the
    automatic one); the input-gradient methods ignore it."""

    @classmethod
    def from_chosen(cls, chosen: Mapping[str, float | int]) -> MethodSettings:
        """The settings a user chose for the maps (the others keep their defaults)."""
        own = {field.name for field in fields(cls)}
        return cls(**{name: value for name, value in chosen.items() if name in own})  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        check_count("SmoothGrad samples", self.samples, MAX_SAMPLES)
        check_count("Integrated Gradients steps", self.steps, MAX_STEPS)
        if isinstance(self.noise, bool) or not isinstance(self.noise, int | float):
            raise InputError(f"SmoothGrad noise must be a number; got {self.noise!r}.")
        if not (math.isfinite(self.noise) and 0 <= self.noise <= 1):
            raise InputError(
                "SmoothGrad noise is a fraction of each image's range (max - min): give a "
                f"number from 0 to 1; got {self.noise!r}."
            )
        check_count("The seed", self.seed, None, least=0)
        if self.layer is not None and not isinstance(self.layer, str):
            raise InputError(f"The layer is a module's dotted name; got {self.layer!r}.")

    def of(self, method: str) -> dict[str, float | int]:
        """Those of these settings that the registered ``method`` takes (none for gradients)."""
        own = {parameter.name for parameter in attribution.get(method).parameters}
        return {
            name: value for name, value in vars(self).items() if name in own and name != "layer"
        }

    def layer_of(self, method: str) -> str | None:
        """The layer ``method`` runs at: ``layer`` for a layer method, None for the others."""
        return self.layer if method in attribution.LAYER_METHODS else None


def check_count(name: str, value: object, most: int | None, least: int = 1) -> int:
    """A whole number in [least, most] (no upper bound when ``most`` is None), else InputError."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < least
        or (most is not None and value > most)
    ):
        bound = f"from {least} to {most:,}" if most is not None else f"of at least {least}"
        raise InputError(f"{name} must be a whole number {bound}; got {value!r}.")
    return value


def check_methods(methods: Sequence[str]) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(methods))
    if not chosen:
        raise InputError(f"Choose at least one attribution method: {', '.join(CHECKABLE)}.")
    unknown = [method for method in chosen if method not in CHECKABLE]
    if unknown:
        raise InputError(
            f"Unknown attribution method '{unknown[0]}'; use one of {', '.join(CHECKABLE)}."
        )
    return chosen


def attribute_maps(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    method: str,
    classes: torch.Tensor,
    settings: MethodSettings,
) -> torch.Tensor:
    """Maps [k, C, H, W] of logit[classes] at images[indices] by ``method``: signed input
    gradients, or a layer method's upsampled map at ``settings.layer`` (in every channel)."""
    request = GradientRequest.build(model, images, list(indices), target="logit", classes=classes)
    chosen = attribution.build(method, settings.of(method), settings.layer_of(method))
    return chosen.attribute(request).maps


def noise_std(
    images: torch.Tensor, indices: Sequence[int], settings: MethodSettings
) -> torch.Tensor:
    """SmoothGrad's noise standard deviation for each pick [k]: noise x (max - min) of it."""
    picked = images[torch.tensor(list(indices), dtype=torch.long, device=images.device)]
    flat = picked.detach().flatten(1).cpu().double()
    return (settings.noise * (flat.amax(dim=1) - flat.amin(dim=1))).cpu()


def saliency(maps: torch.Tensor) -> torch.Tensor:
    """|attribution| [k, H, W], the largest over colour channels, as the explorer draws it."""
    return maps.detach().abs().amax(dim=1)


def scaled_saliency(maps: torch.Tensor) -> torch.Tensor:
    """``saliency`` in float64 on the CPU, each map divided by its maximum (SSIM's [0, 1] range)."""
    values = saliency(maps).cpu().double()
    peak = values.flatten(1).amax(dim=1).clamp_min(torch.finfo(values.dtype).tiny)
    return values / peak.view(-1, 1, 1)


def served_view(model: nn.Module) -> nn.Module:
    """The model as the checks explain it: itself in eval mode, else an eval() deep copy.

    A module in training mode (dropout, BatchNorm) would make every map depend on chance or on
    the other picked images, and switching the caller's model would change it for every other
    session, so a model not in eval mode is copied first.
    """
    if not any(module.training for module in modules_of(model)):
        return model
    return copy.deepcopy(model).eval()


def picked_images(model: nn.Module, images: torch.Tensor, indices: Sequence[int]) -> torch.Tensor:
    """``images[indices]`` detached, on the model's device."""
    rows = torch.tensor(list(indices), dtype=torch.long, device=images.device)
    return images[rows].detach().to(device_for(model, None))


def logits_of(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The model's logits [N, classes] without a graph, checked for shape."""
    with torch.no_grad():
        logits = call_model(model, images)
    if logits.dim() != 2 or logits.shape[0] != images.shape[0]:
        raise InputError(
            f"The model must map [N, C, H, W] to [N, classes]; it returned {tuple(logits.shape)}."
        )
    return logits


def held_classes(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    classes: int | Sequence[int] | torch.Tensor | None,
) -> torch.Tensor:
    """The class each pick is explained for [k] (CPU, long): given, or the model's prediction."""
    logits = logits_of(model, picked_images(model, images, indices))
    count, outputs = len(indices), int(logits.shape[1])
    if classes is None:
        return logits.argmax(dim=1).cpu()
    held = torch.as_tensor(classes).reshape(-1).to(torch.long).cpu()
    if held.numel() == 1:
        held = held.expand(count).clone()
    if held.numel() != count:
        raise InputError(f"Give one class, or one class per picked image ({count}).")
    outside = [value for value in held.tolist() if not 0 <= value < outputs]
    if outside:
        raise InputError(
            f"Class {outside[0]} is out of range for a model with {outputs} outputs "
            f"(valid classes 0 to {outputs - 1})."
        )
    return held
