"""The input-gradient methods: the plain gradient, gradient x input, SmoothGrad and IG.

Every one is a function of ``gradpick.gradients.engine.compute``: the plain gradient is one call at
the original images; SmoothGrad and Integrated Gradients stack all their noisy copies or path
points into one tensor and make a single further call, so the engine's chunking, device
handling and model safety apply to them too. The target class of each picked image is fixed at
the original image and held for every copy, so noise or the path never switches it.

Maps are computed per picked image and never depend on which other images were picked: the noise
of SmoothGrad is drawn from a generator seeded by (seed, index), not by position in the pick.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

import numpy as np
import torch

from gradpick.attribution.base import Attribution, AttributionMethod, Parameter
from gradpick.gradients.engine import GradientResult, compute
from gradpick.gradients.request import GradientRequest
from gradpick.runtime.measure import Stopwatch

__all__ = ["Gradient", "GradientXInput", "InputGradientMethod", "IntegratedGradients", "SmoothGrad"]

MethodOutput = tuple[torch.Tensor, GradientResult | None]
"""(maps [k, C, H, W], the stacked engine call or None)."""


class InputGradientMethod(AttributionMethod):
    """A method made of the plain gradient and, at most, one further engine call."""

    def attribute(self, request: GradientRequest) -> Attribution:
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
    def _maps(self, request: GradientRequest, plain: GradientResult) -> MethodOutput:
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
        versus=None if request.versus is None else request.versus.repeat_interleave(samples),
    )
    return compute(stacked)


def _per_copy(result: GradientResult, k: int) -> torch.Tensor:
    return result.gradients.reshape(k, -1, *result.gradients.shape[1:])


class Gradient(InputGradientMethod):
    """The plain gradient, d target / d image: the engine's own result (saliency).

    Simonyan, Vedaldi and Zisserman, "Deep Inside Convolutional Networks" (2014).

    Example: ``Gradient().attribute(request).maps``.
    """

    name = "gradient"
    label = "Gradient"
    unit = "d {quantity} / d pixel"

    def _maps(self, request: GradientRequest, plain: GradientResult) -> MethodOutput:
        return plain.gradients, None


class GradientXInput(InputGradientMethod):
    """x ⊙ d target / d x: the gradient times the image.

    Shrikumar et al., "Not Just a Black Box: Learning Important Features Through Propagating
    Activation Differences" (2016).

    Example: ``GradientXInput().attribute(request).maps``.
    """

    name = "gradient_x_input"
    label = "Gradient × input"
    unit = "pixel × d {quantity} / d pixel"

    def _maps(self, request: GradientRequest, plain: GradientResult) -> MethodOutput:
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


class SmoothGrad(InputGradientMethod):
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

    def _maps(self, request: GradientRequest, plain: GradientResult) -> MethodOutput:
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


class IntegratedGradients(InputGradientMethod):
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

    def _maps(self, request: GradientRequest, plain: GradientResult) -> MethodOutput:
        picked = request.picked_images
        baseline = self.settings["baseline"]
        alphas = _midpoints(int(self.settings["steps"]), picked)
        difference = picked - baseline
        path = baseline + alphas.view(1, -1, 1, 1, 1) * difference.unsqueeze(1)
        stacked = _stacked_gradients(request, plain, path)
        return difference * _per_copy(stacked, len(picked)).mean(dim=1), stacked
