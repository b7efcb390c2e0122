"""Attribution methods over the one gradient engine: one class per method, one registry.

Every method is a function of ``gradpick.gradients.compute``: the plain gradient is one call at
the original images; SmoothGrad and Integrated Gradients stack all their noisy copies or path
points into one tensor and make a single further call, so the engine's chunking, device
handling and model safety apply to them too. The target class of each picked image is fixed at
the original image and held for every copy, so noise or the path never switches it.

Maps are computed per picked image and never depend on which other images were picked: the noise
of SmoothGrad is drawn from a generator seeded by (seed, index), not by position in the pick.

A method declares its label, its parameters (default, lower bound, the explorer's range, help)
and the unit of its maps; ``METHODS`` lists them by name, and the explorer builds its controls
from them. A new method is one subclass of ``AttributionMethod``, one entry, and its tests::

    method = get("smoothgrad")(samples=8)
    maps = method.attribute(GradientRequest.build(model, images, [3, 7], labels=labels)).maps
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.gradients import GradientResult, compute
from gradpick.measure import Stopwatch
from gradpick.request import GradientRequest

__all__ = [
    "METHODS",
    "METHOD_NAMES",
    "Attribution",
    "AttributionMethod",
    "Gradient",
    "GradientXInput",
    "IntegratedGradients",
    "Parameter",
    "SmoothGrad",
    "attribute",
    "build",
    "get",
]

Settings = dict[str, float | int]


@dataclass(frozen=True)
class Parameter:
    """One setting of a method: what it is called, its default, and which values it takes."""

    name: str
    label: str
    default: float | int
    help: str
    whole: bool = False
    """A whole number (an int) rather than any finite number."""
    least: float | None = None
    """The smallest value accepted (None: any)."""
    shown: tuple[float, float] | None = None
    """The explorer's slider range; None keeps the setting at its default there."""

    def check(self, value: object) -> float | int:
        """``value`` as the method uses it, or an InputError saying what is wrong with it."""
        if self.whole:
            least = int(self.least or 0)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least:
                raise InputError(
                    f"{self.name} must be a whole number of at least {least}; got {value!r}."
                )
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise InputError(f"{self.name} must be a number; got {value!r}.")
        number = float(value)
        if not math.isfinite(number) or (self.least is not None and number < self.least):
            bound = f" of at least {self.least}" if self.least is not None else ""
            raise InputError(f"{self.name} must be a finite number{bound}; got {value!r}.")
        return number


@dataclass(frozen=True)
class Attribution:
    """Signed attribution maps [k, C, H, W] of the picked images, and how they were made."""

    maps: torch.Tensor
    method: str
    gradients: GradientResult
    milliseconds: float
    settings: Settings
    stacked: GradientResult | None = None
    """The one engine call over all noisy copies or path points (None for gradient views)."""

    def _repr_html_(self) -> str:
        """Jupyter shows one map per pick and the method's readouts (``gradpick.notebook``)."""
        from gradpick.notebook import attribution_html  # the notebook module imports this one

        return attribution_html(self)


_MethodOutput = tuple[torch.Tensor, GradientResult | None]
"""(maps [k, C, H, W], the stacked engine call or None)."""


class AttributionMethod(ABC):
    """A way to turn the engine's gradients into attribution maps.

    Subclasses set ``name``, ``label``, ``unit`` (with ``{quantity}`` for the differentiated
    quantity, e.g. 'loss') and ``parameters``, and implement ``_maps``. Instances hold validated
    settings; ``attribute(request)`` is the one call.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    unit: ClassVar[str]
    parameters: ClassVar[tuple[Parameter, ...]] = ()

    def __init__(self, **settings: object) -> None:
        known = {parameter.name for parameter in self.parameters}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise InputError(
                f"{self.label} takes no setting '{unknown[0]}'; "
                f"its settings: {', '.join(sorted(known)) or 'none'}."
            )
        self.settings: Settings = {
            parameter.name: parameter.check(settings.get(parameter.name, parameter.default))
            for parameter in self.parameters
        }

    def attribute(self, request: GradientRequest) -> Attribution:
        """Maps of ``request``'s picked images; ``milliseconds`` is the whole method's wall
        time, device synchronised. Maps come back in the images' dtype on their device."""
        with Stopwatch(request.device) as watch:
            plain = compute(request)
            maps, stacked = self._maps(request, plain)
        return Attribution(
            maps=maps.detach(),
            method=self.name,
            gradients=plain,
            milliseconds=watch.milliseconds,
            settings=dict(self.settings),
            stacked=stacked,
        )

    @abstractmethod
    def _maps(self, request: GradientRequest, plain: GradientResult) -> _MethodOutput:
        """The maps from the plain engine result (and any further engine call)."""


def _stacked_gradients(
    request: GradientRequest, plain: GradientResult, copies: torch.Tensor
) -> GradientResult:
    """Gradients of [k, S, C, H, W] copies in one engine call, each keeping its image's class.

    Every copy is picked, so 'recompute' and 'summed' cost the same there, and 'retain_graph'
    (the naive loop, kept as a reference) runs one backward per copy.
    """
    k, samples = copies.shape[:2]
    held = plain.classes.repeat_interleave(samples)
    stacked = GradientRequest.build(
        request.model,
        copies.reshape(k * samples, *copies.shape[2:]),
        torch.arange(k * samples),
        # The held class is the label for target='loss' and the logit's class for 'logit'.
        labels=held,
        target=request.target,
        classes=held,
        strategy=request.strategy,
        device=request.device,
        measure_memory=request.measure_memory,
    )
    return compute(stacked)


def _per_copy(result: GradientResult, k: int) -> torch.Tensor:
    return result.gradients.reshape(k, -1, *result.gradients.shape[1:])


class Gradient(AttributionMethod):
    """The plain gradient, d target / d image: the engine's own result (saliency).

    Simonyan, Vedaldi and Zisserman, "Deep Inside Convolutional Networks" (2014).

    Example: ``Gradient().attribute(request).maps``.
    """

    name = "gradient"
    label = "Gradient"
    unit = "d {quantity} / d pixel"

    def _maps(self, request: GradientRequest, plain: GradientResult) -> _MethodOutput:
        return plain.gradients, None


class GradientXInput(AttributionMethod):
    """x ⊙ d target / d x: the gradient times the image.

    Shrikumar et al., "Not Just a Black Box: Learning Important Features Through Propagating
    Activation Differences" (2016).

    Example: ``GradientXInput().attribute(request).maps``.
    """

    name = "gradient_x_input"
    label = "Gradient × input"
    unit = "pixel × d {quantity} / d pixel"

    def _maps(self, request: GradientRequest, plain: GradientResult) -> _MethodOutput:
        return plain.gradients * request.picked_images, None


def _smoothgrad_noise(
    picked: torch.Tensor, indices: Sequence[int], samples: int, noise: float, seed: int
) -> torch.Tensor:
    """Gaussian noise [k, S, C, H, W] with std = noise x (max - min) of each image.

    Drawn on the CPU from a generator per image, seeded by (seed, index), so an image gets the
    same noise on every device and whichever other images are picked with it.
    """
    draws = []
    for image, index in zip(picked, indices, strict=True):
        state = int(np.random.SeedSequence((seed, index)).generate_state(1)[0])
        generator = torch.Generator().manual_seed(state)
        unit = torch.randn((samples, *image.shape), generator=generator, dtype=picked.dtype)
        spread = float(image.max() - image.min())
        draws.append(unit * (noise * spread))
    return torch.stack(draws).to(picked.device)


class SmoothGrad(AttributionMethod):
    """(1/S) Σ_s d target / d x (x + ε_s), ε_s ~ N(0, (noise · (max x − min x))²), not clamped.

    Smilkov et al., "SmoothGrad: removing noise by adding noise" (2017). The noise of image j
    is seeded by (seed, batch index j).

    Example: ``SmoothGrad(samples=32, noise=0.1).attribute(request).maps``.
    """

    name = "smoothgrad"
    label = "SmoothGrad"
    unit = "mean d {quantity} / d pixel (SmoothGrad)"
    parameters = (
        Parameter("samples", "Noisy copies", 16, "noisy copies averaged", True, 1, (4, 64)),
        Parameter(
            "noise",
            "Noise (fraction of range)",
            0.15,
            "noise std / image range",
            least=0.0,
            shown=(0.0, 0.5),
        ),
        Parameter("seed", "Seed", 0, "seeds the noise with each image's index", True, 0),
    )

    def _maps(self, request: GradientRequest, plain: GradientResult) -> _MethodOutput:
        picked = request.picked_images
        noise = _smoothgrad_noise(
            picked,
            plain.indices,
            int(self.settings["samples"]),
            float(self.settings["noise"]),
            int(self.settings["seed"]),
        )
        stacked = _stacked_gradients(request, plain, picked.unsqueeze(1) + noise)
        return _per_copy(stacked, len(picked)).mean(dim=1), stacked


def _midpoints(steps: int, like: torch.Tensor) -> torch.Tensor:
    """Alphas of the midpoint rule on [0, 1]: the centres of ``steps`` equal intervals.

    Each point weighs 1 / steps. The rule is exact for a linear path integrand and its error
    falls as 1 / steps^2 for smooth ones; it is captum's ``riemann_middle``. (captum's
    ``riemann_trapezoid`` weighs its points 1/n with halved ends, which sum to (n - 1) / n
    rather than 1, so it misses completeness by a factor; the midpoint rule does not.)
    """
    return (torch.arange(steps, dtype=like.dtype, device=like.device) + 0.5) / steps


class IntegratedGradients(AttributionMethod):
    """(x − b) ⊙ (1/m) Σ_i d target / d x (b + α_i (x − b)), α_i = (i + ½) / m (midpoint rule).

    Sundararajan, Taly and Yan, "Axiomatic Attribution for Deep Networks" (2017). The baseline b
    is a constant image; the maps sum to about target(x) − target(b) (completeness).

    Example: ``IntegratedGradients(steps=64).attribute(request).maps``.
    """

    name = "integrated_gradients"
    label = "Integrated Gradients"
    unit = "{quantity} attribution (IG)"
    parameters = (
        Parameter("steps", "Path steps", 32, "points on the straight path", True, 1, (4, 128)),
        Parameter("baseline", "Baseline", 0.0, "the constant image the path starts from"),
    )

    def _maps(self, request: GradientRequest, plain: GradientResult) -> _MethodOutput:
        picked = request.picked_images
        baseline = self.settings["baseline"]
        alphas = _midpoints(int(self.settings["steps"]), picked)
        difference = picked - baseline
        path = baseline + alphas.view(1, -1, 1, 1, 1) * difference.unsqueeze(1)
        stacked = _stacked_gradients(request, plain, path)
        return difference * _per_copy(stacked, len(picked)).mean(dim=1), stacked


METHODS: dict[str, type[AttributionMethod]] = {
    method.name: method for method in (Gradient, GradientXInput, SmoothGrad, IntegratedGradients)
}
METHOD_NAMES: tuple[str, ...] = tuple(METHODS)
"""Every registered method's name, the plain gradient first."""


def get(name: str) -> type[AttributionMethod]:
    """The registered method ``name``, or an InputError listing the known ones."""
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise InputError(
            f"Unknown attribution method '{name}'; use one of {', '.join(METHOD_NAMES)}."
        ) from None


def build(name: str, settings: Mapping[str, Any]) -> AttributionMethod:
    """Method ``name`` with those of ``settings`` it takes (the others are for other methods)."""
    method = get(name)
    own = {parameter.name for parameter in method.parameters}
    return method(**{key: value for key, value in settings.items() if key in own})


def attribute(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int] | torch.Tensor,
    labels: Sequence[int] | torch.Tensor | None = None,
    target: str = "loss",
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
) -> Attribution:
    """Attribution maps of ``images[indices]`` for ``target`` by ``method`` (see ``METHODS``).

    * ``gradient``: d target / d image, the engine's plain result.
    * ``gradient_x_input``: the gradient times the image.
    * ``smoothgrad``: the mean gradient over ``samples`` copies with Gaussian noise of standard
      deviation ``noise`` x (max - min) of each image (not clamped), seeded by ``seed``.
    * ``integrated_gradients``: (image - baseline) x the path-average gradient along the straight
      line from a constant ``baseline`` image to the image, ``steps`` points, midpoint rule; the
      maps sum to about target(image) - target(baseline) (completeness).

    Arguments shared with ``input_gradients`` mean the same there; ``strategy`` and
    ``measure_memory`` apply to both engine calls. The settings a method does not take are
    ignored. This builds the request and the method; ``get(method)(...).attribute(request)``
    is the same call for a request already built.
    """
    chosen = build(
        method,
        {"samples": samples, "noise": noise, "steps": steps, "baseline": baseline, "seed": seed},
    )
    request = GradientRequest.build(
        model,
        images,
        indices,
        labels=labels,
        target=target,
        classes=classes,
        strategy=strategy,
        device=device,
        measure_memory=measure_memory,
    )
    return chosen.attribute(request)
