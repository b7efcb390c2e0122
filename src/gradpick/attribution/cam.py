"""Class activation maps: the Grad-CAM family and Score-CAM at one layer of the model.

Each method turns the activation A [C, h, w] of a layer and, for the gradient ones,
G = d target / d A (``gradpick.gradients.layers.layer_gradients``: the picks only, chunked, the
model
only read) into a map at the layer's grid, ReLU'd, then upsampled to the input size (bilinear,
``align_corners=False``). The layer is chosen automatically when none is given (see
``gradpick.gradients.layers``). Sums run over the grid positions (i, j) and channels c::

    GradCAM(layer="layer3").attribute(request).layer_maps   # [k, h, w]
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

import torch
import torch.nn.functional as F

from gradpick.attribution.base import Attribution, AttributionMethod, Parameter
from gradpick.errors import InputError
from gradpick.gradients.layers import LayerGradients, layer_gradients, resolve
from gradpick.gradients.request import GradientRequest
from gradpick.outputs.inference import call_model
from gradpick.runtime.measure import Stopwatch

__all__ = [
    "GradCAM",
    "GradCAMPlusPlus",
    "HiResCAM",
    "LayerCAM",
    "LayerMethod",
    "ScoreCAM",
    "XGradCAM",
    "upsampled",
]


def upsampled(layer_maps: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """[k, h, w] maps at the input size [k, H, W]: bilinear, ``align_corners=False``."""
    return F.interpolate(
        layer_maps.unsqueeze(1), size=size, mode="bilinear", align_corners=False
    ).squeeze(1)


def _weighted(weights: torch.Tensor, activations: torch.Tensor) -> torch.Tensor:
    """ReLU(Σ_c w_c A_c): [k, C] channel weights and [k, C, h, w] activations -> [k, h, w]."""
    return torch.relu((weights[:, :, None, None] * activations).sum(dim=1))


class LayerMethod(AttributionMethod):
    """A class activation map at one layer: ``layer`` by its dotted name, None for automatic."""

    takes_layer: ClassVar[bool] = True
    default_target: ClassVar[str] = "logit"
    """The explained class's logit, as pytorch-grad-cam does: a map keeps only the activations
    that raise its target (a ReLU), and a confident, correct image has almost nothing that
    raises its loss, so the loss would leave most maps all zero."""

    def __init__(self, layer: str | None = None, **settings: object) -> None:
        super().__init__(**settings)
        self.layer = layer

    def forwards(self, request: GradientRequest) -> int:
        """Single-image forward passes the method runs for ``request`` (a backward costs
        about two more for the gradient methods)."""
        return request.count

    def attribute(self, request: GradientRequest) -> Attribution:
        with Stopwatch(request.device) as watch:
            captured = layer_gradients(request, self.layer)
            layer_maps = self._layer_maps(request, captured)
            size = (int(request.images.shape[-2]), int(request.images.shape[-1]))
            maps = upsampled(layer_maps, size)
        channels = int(request.images.shape[1])
        return Attribution(
            maps=maps.unsqueeze(1).expand(-1, channels, -1, -1).contiguous(),
            method=self.name,
            gradients=captured.result,
            milliseconds=watch.milliseconds,
            settings=dict(self.settings),
            layer_maps=layer_maps,
            layer=captured.layer.name,
        )

    @abstractmethod
    def _layer_maps(self, request: GradientRequest, captured: LayerGradients) -> torch.Tensor:
        """The ReLU'd maps [k, h, w] at the layer's grid."""


class GradCAM(LayerMethod):
    """L = ReLU(Σ_c α_c A_c), α_c = (1/hw) Σ_ij ∂y/∂A_cij: channels weighed by mean gradient.

    Selvaraju et al., "Grad-CAM: Visual Explanations from Deep Networks via Gradient-based
    Localization" (ICCV 2017).

    Example: ``GradCAM(layer="layer3").attribute(request).maps``.
    """

    name = "gradcam"
    label = "Grad-CAM"
    unit = "Grad-CAM of the {quantity} (ReLU'd)"

    def _layer_maps(self, request: GradientRequest, captured: LayerGradients) -> torch.Tensor:
        return _weighted(captured.gradients.mean(dim=(2, 3)), captured.activations)


class GradCAMPlusPlus(LayerMethod):
    """L = ReLU(Σ_c w_c A_c), w_c = Σ_ij a_cij ReLU(g_cij), a = g² / (2g² + (Σ_ab A_cab) g³).

    Chattopadhay et al., "Grad-CAM++: Generalized Gradient-based Visual Explanations for Deep
    Convolutional Networks" (WACV 2018), with the paper's exponential-output closed form for the
    higher derivatives (g = ∂y/∂A); a = 0 where g = 0 or the denominator vanishes.

    Example: ``GradCAMPlusPlus().attribute(request).maps``.
    """

    name = "gradcam_plus_plus"
    label = "Grad-CAM++"
    unit = "Grad-CAM++ of the {quantity} (ReLU'd)"

    def _layer_maps(self, request: GradientRequest, captured: LayerGradients) -> torch.Tensor:
        g, activations = captured.gradients, captured.activations
        totals = activations.sum(dim=(2, 3), keepdim=True)
        denominator = 2 * g**2 + totals * g**3
        usable = (g != 0) & (denominator != 0)
        alphas = torch.where(usable, g**2 / torch.where(usable, denominator, 1), 0)
        return _weighted((alphas * torch.relu(g)).sum(dim=(2, 3)), activations)


class HiResCAM(LayerMethod):
    """L = ReLU(Σ_c ∂y/∂A_c ⊙ A_c): the gradient times the activation, position by position.

    Draelos and Carin, "Use HiResCAM instead of Grad-CAM for faithful explanations of
    convolutional neural networks" (2020).

    Example: ``HiResCAM().attribute(request).maps``.
    """

    name = "hirescam"
    label = "HiResCAM"
    unit = "HiResCAM of the {quantity} (ReLU'd)"

    def _layer_maps(self, request: GradientRequest, captured: LayerGradients) -> torch.Tensor:
        return torch.relu((captured.gradients * captured.activations).sum(dim=1))


class XGradCAM(LayerMethod):
    """L = ReLU(Σ_c w_c A_c), w_c = Σ_ij (A_cij / Σ_ab A_cab) ∂y/∂A_cij (0 where Σ A_c = 0).

    Fu et al., "Axiom-based Grad-CAM: Towards Accurate Visualization and Explanation of CNNs"
    (BMVC 2020).

    Example: ``XGradCAM().attribute(request).maps``.
    """

    name = "xgradcam"
    label = "XGrad-CAM"
    unit = "XGrad-CAM of the {quantity} (ReLU'd)"

    def _layer_maps(self, request: GradientRequest, captured: LayerGradients) -> torch.Tensor:
        activations = captured.activations
        totals = activations.sum(dim=(2, 3), keepdim=True)
        shares = torch.where(totals != 0, activations / torch.where(totals != 0, totals, 1), 0)
        return _weighted((shares * captured.gradients).sum(dim=(2, 3)), activations)


class LayerCAM(LayerMethod):
    """L = ReLU(Σ_c ReLU(∂y/∂A_c) ⊙ A_c): each position weighed by its own positive gradient.

    Jiang et al., "LayerCAM: Exploring Hierarchical Class Activation Maps for Localization"
    (IEEE TIP 2021).

    Example: ``LayerCAM(layer="layer2").attribute(request).maps``.
    """

    name = "layercam"
    label = "LayerCAM"
    unit = "LayerCAM of the {quantity} (ReLU'd)"

    def _layer_maps(self, request: GradientRequest, captured: LayerGradients) -> torch.Tensor:
        return torch.relu((torch.relu(captured.gradients) * captured.activations).sum(dim=1))


def _masks(activations: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Each channel upsampled to the input size and scaled to [0, 1] (a flat one: zero)."""
    up = upsampled(activations, size)
    low = up.amin(dim=(1, 2), keepdim=True)
    span = up.amax(dim=(1, 2), keepdim=True) - low
    return torch.where(span > 0, (up - low) / torch.where(span > 0, span, 1), 0)


class ScoreCAM(LayerMethod):
    """L = ReLU(Σ_c w_c A_c), w = softmax_c(y(x ⊙ M_c)), M_c = A_c upsampled, scaled to [0, 1].

    Wang et al., "Score-CAM: Score-Weighted Visual Explanations for Convolutional Neural
    Networks" (CVPR workshops 2020). Gradient-free: channel c's weight is the target (the
    logit or loss of the class held at the original image) of the image masked by that
    channel, normalised over channels with a softmax as in the paper's code. One forward per
    channel and picked image, ``batch_size`` masked images at a time: ``forwards(request)``
    tells the cost before it runs. The activation is captured through the same engine call as
    the gradient methods (whose d target / d A it does not use).

    Example: ``ScoreCAM(batch_size=32).forwards(request)``, then ``.attribute(request)``.
    """

    name = "scorecam"
    label = "Score-CAM"
    unit = "Score-CAM of the {quantity} (ReLU'd)"
    parameters = (
        Parameter("batch_size", "Masked images per forward", 64, "batch of masked images", True, 1),
    )

    def forwards(self, request: GradientRequest) -> int:
        layer = resolve(request.model, self.layer, request.images)
        return request.count * (1 + layer.layout.channels)

    def _layer_maps(self, request: GradientRequest, captured: LayerGradients) -> torch.Tensor:
        activations = captured.activations
        k, channels = activations.shape[:2]
        size = (int(request.images.shape[-2]), int(request.images.shape[-1]))
        picked = request.picked_images.to(request.device)
        held = captured.result.classes.repeat_interleave(channels)
        # Row r scores image r // C masked by channel r % C, for the class held at the image.
        versus = None if request.versus is None else request.versus.repeat_interleave(channels)
        scored = request.but(
            indices=torch.arange(k * channels), labels=held, classes=held, versus=versus
        )
        batch = int(self.settings["batch_size"])
        scores = []
        with torch.no_grad():
            for start in range(0, k * channels, batch):
                rows = torch.arange(start, min(start + batch, k * channels))
                images = picked[rows // channels]
                masks = _masks(activations[rows // channels, rows % channels].to(picked), size)
                logits = call_model(request.model, images * masks.unsqueeze(1))
                scores.append(scored.picked_targets(logits, slice(start, start + len(rows)))[0])
        weights = torch.cat(scores).reshape(k, channels).softmax(dim=1)
        if not bool(torch.isfinite(weights).all()):
            raise InputError("Score-CAM's masked images gave non-finite targets.")
        return _weighted(weights.to(activations), activations)
