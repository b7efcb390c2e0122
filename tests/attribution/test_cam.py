"""Class activation maps: each method equals its paper's formula by hand, captum and
pytorch-grad-cam where they have it, and keeps the layer map, its name and the caller's dtype."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch
import torch.nn.functional as F
from captum.attr import LayerGradCam
from pytorch_grad_cam import GradCAM as PeerGradCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
from torch import nn

from gradpick import attribution
from gradpick.attribution import LAYER_METHODS, ScoreCAM, attribute
from gradpick.attribution.cam import upsampled
from gradpick.errors import InputError
from gradpick.gradients.request import GradientRequest
from gradpick.models import shipped as models
from gradpick.models import zoo
from gradpick.models.shipped import freeze
from tests.gradients.test_layers import per_sample_layer

PICKED = [5, 2, 9]
SOME = [5, 2, 0]
LAYER = "2"
"""The ReLU after the tiny net's BatchNorm: 4 channels on a 16x16 grid."""


def _relu(x: torch.Tensor) -> torch.Tensor:
    return x.clamp_min(0)


def _gradcam(A, G, image, score):
    return _relu(sum(G[c].mean() * A[c] for c in range(len(A))))


def _gradcam_plus_plus(A, G, image, score):
    total = torch.zeros_like(A[0])
    for c in range(len(A)):
        g = G[c]
        alpha = g**2 / (2 * g**2 + A[c].sum() * g**3)
        alpha = torch.where(g == 0, torch.zeros_like(alpha), alpha)
        total = total + (alpha * _relu(g)).sum() * A[c]
    return _relu(total)


def _hirescam(A, G, image, score):
    return _relu(sum(G[c] * A[c] for c in range(len(A))))


def _xgradcam(A, G, image, score):
    # A channel that is zero everywhere has no shares; it adds nothing (as it would for any w).
    alive = [c for c in range(len(A)) if A[c].sum() != 0]
    return _relu(
        sum(((A[c] / A[c].sum() * G[c]).sum() * A[c] for c in alive), torch.zeros_like(A[0]))
    )


def _layercam(A, G, image, score):
    return _relu(sum(_relu(G[c]) * A[c] for c in range(len(A))))


def _scorecam(A, G, image, score):
    scores = []
    for c in range(len(A)):
        up = F.interpolate(A[c][None, None], size=image.shape[-2:], mode="bilinear")[0, 0]
        flat = up.max() == up.min()  # a flat channel masks everything out
        mask = torch.zeros_like(up) if flat else (up - up.min()) / (up.max() - up.min())
        scores.append(score(image * mask))
    weights = torch.softmax(torch.stack(scores), dim=0)
    return _relu(sum(weights[c] * A[c] for c in range(len(A))))


BY_HAND = {
    "gradcam": _gradcam,
    "gradcam_plus_plus": _gradcam_plus_plus,
    "hirescam": _hirescam,
    "xgradcam": _xgradcam,
    "layercam": _layercam,
    "scorecam": _scorecam,
}


def test_every_layer_method_has_a_hand_reference():
    assert set(BY_HAND) == set(LAYER_METHODS)


@pytest.mark.parametrize("name", LAYER_METHODS)
def test_each_method_equals_its_formula_by_hand_in_float64(float64_cnn, float64_images, name):
    result = attribute(float64_cnn, float64_images, SOME, target="logit", method=name, layer=LAYER)
    classes = result.gradients.classes
    A, G = per_sample_layer(
        float64_cnn, float64_cnn.get_submodule(LAYER), float64_images, SOME, classes
    )
    expected = []
    for row, (index, wanted) in enumerate(zip(SOME, classes.tolist(), strict=True)):

        def score(masked: torch.Tensor, wanted: int = wanted) -> torch.Tensor:
            return float64_cnn(masked[None])[0, wanted]

        expected.append(BY_HAND[name](A[row], G[row], float64_images[index], score))
    assert result.layer == LAYER and result.layer_maps is not None
    torch.testing.assert_close(result.layer_maps, torch.stack(expected), rtol=1e-10, atol=1e-13)
    assert result.layer_maps.abs().sum() > 0 and (result.layer_maps >= 0).all()
    up = upsampled(result.layer_maps, (32, 32))
    assert torch.equal(result.maps, up[:, None].expand(-1, 3, -1, -1))
    assert result.maps.dtype == torch.float64


@pytest.mark.parametrize("name", LAYER_METHODS)
def test_batched_equals_one_image_at_a_time(tiny_cnn, random_batch, name):
    together = attribute(tiny_cnn, random_batch.images, PICKED, random_batch.labels, method=name)
    assert together.layer == "3" and together.maps.dtype == torch.float32
    for row, index in enumerate(PICKED):
        alone = attribute(tiny_cnn, random_batch.images, [index], random_batch.labels, method=name)
        assert together.layer_maps is not None and alone.layer_maps is not None
        torch.testing.assert_close(together.layer_maps[row], alone.layer_maps[0])


def test_score_cam_says_its_cost_and_runs_exactly_that_many_forwards(tiny_cnn, random_batch):
    seen: list[int] = []
    model = nn.Sequential(tiny_cnn).eval()
    handle = model.register_forward_pre_hook(lambda m, inputs: seen.append(len(inputs[0])))
    try:
        request = GradientRequest.build(model, random_batch.images, PICKED, target="logit")
        method = ScoreCAM(layer="0.2", batch_size=5)
        assert method.forwards(request) == len(PICKED) * (1 + 8)
        assert ScoreCAM(layer="0.1").forwards(request) == len(PICKED) * (1 + 4)  # its own layer
        method.attribute(request)  # measures the model's saved bytes once (one image)
        seen.clear()
        method.attribute(request)
    finally:
        handle.remove()
    assert sum(seen) == len(PICKED) * (1 + 8) and max(seen) == 5


def test_a_layer_for_an_input_gradient_method_is_refused():
    with pytest.raises(InputError, match="works on the input pixels"):
        attribution.build("gradient", {}, layer="layer3")
    assert attribution.build("gradcam", {"samples": 4}, layer="layer3").layer == "layer3"


# ----------------------------------------------------------------------------- against peers


def _resnet20() -> tuple[nn.Module, str, nn.Module, torch.Tensor]:
    if "resnet20" not in models.shipped_models():
        pytest.skip("no shipped resnet20 weights")
    module = zoo.load_model("resnet20").module
    images = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return module, "layer3", module.layer3, images


def _resnet18() -> tuple[nn.Module, str, nn.Module, torch.Tensor]:
    module = zoo.load_model("torchvision:resnet18").module  # random weights, behind (x-m)/s
    images = torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    return module, "layer4", module.model.layer4, images


@pytest.fixture(scope="module", params=[_resnet20, _resnet18], ids=["resnet20", "resnet18"])
def peer_case(request: pytest.FixtureRequest):
    model, name, layer, images = request.param()
    result = attribute(model, images, [1, 0], target="logit", method="gradcam")
    assert result.layer == name  # chosen automatically, in the user's own names
    return model, layer, images, result


def test_grad_cam_equals_captum_layer_grad_cam(peer_case):
    model, layer, images, result = peer_case
    classes = result.gradients.classes
    expected = LayerGradCam(model, layer).attribute(
        images[[1, 0]], target=classes.tolist(), relu_attributions=True
    )
    scale = float(expected.abs().max())
    assert scale > 0
    torch.testing.assert_close(result.layer_maps, expected[:, 0], rtol=1e-4, atol=1e-5 * scale)


def _min_max(maps: torch.Tensor) -> torch.Tensor:
    """pytorch-grad-cam's per-image scaling: (m - min) / (1e-7 + max - min)."""
    low = maps.amin(dim=(1, 2), keepdim=True)
    shifted = maps - low
    return shifted / (1e-7 + shifted.amax(dim=(1, 2), keepdim=True))


def test_grad_cam_equals_pytorch_grad_cam(peer_case):
    model, layer, images, result = peer_case
    targets = [ClassifierOutputTarget(int(c)) for c in result.gradients.classes]
    # The served model is frozen: the peer needs an input that requires gradients.
    pixels = images[[1, 0]].clone().requires_grad_(True)
    with PeerGradCAM(model=model, target_layers=[layer]) as peer:
        expected = peer(input_tensor=pixels, targets=targets)
    ours = _min_max(upsampled(_min_max(result.layer_maps), tuple(images.shape[-2:])))
    np.testing.assert_allclose(ours.numpy(), expected, rtol=0, atol=1e-4)


def test_grad_cam_of_a_vision_transformer_needs_no_reshape():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = freeze(timm.create_model("vit_tiny_patch16_224"))
    images = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(4))
    result = attribute(model, images, [0], target="logit", method="gradcam")
    assert result.layer == "blocks.11.norm1" and result.layer_maps is not None
    assert result.layer_maps.shape == (1, 14, 14) and result.layer_maps.sum() > 0
    assert result.maps.shape == (1, 3, 224, 224)


def test_grad_cam_of_a_logit_difference_equals_a_hand_hook_and_autograd(float64_cnn):
    """Grad-CAM of z[A] - z[B] (the Triage tab's contrast) against a forward hook on the layer
    and torch.autograd.grad of that difference, one image at a time."""
    images = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(8)).double()
    request = GradientRequest.build(
        float64_cnn, images, [2, 0], target="logit", classes=[1, 6], versus=[4, 3]
    )
    result = attribution.build("gradcam", {}, layer=LAYER).attribute(request)
    layer = float64_cnn.get_submodule(LAYER)
    for row, (index, a, b) in enumerate([(2, 1, 4), (0, 6, 3)]):
        kept: list[torch.Tensor] = []
        handle = layer.register_forward_hook(
            lambda module, inputs, output, kept=kept: kept.append(output)
        )
        try:
            # the net is frozen: the graph reaches the layer only through the image
            logits = float64_cnn(images[index : index + 1].clone().requires_grad_(True))[0]
        finally:
            handle.remove()
        (G,) = torch.autograd.grad(logits[a] - logits[b], kept[0])
        A = kept[0][0].detach()
        weights = G[0].mean(dim=(1, 2))
        expected = (weights[:, None, None] * A).sum(dim=0).clamp_min(0)
        assert result.layer_maps is not None
        torch.testing.assert_close(result.layer_maps[row], expected, rtol=1e-10, atol=1e-13)
    assert result.layer_maps.abs().sum() > 0


def test_score_cam_of_a_logit_difference_scores_the_masked_images_by_it(float64_cnn):
    """Score-CAM's masked forwards go through a second request: each is scored by z[A] - z[B]."""
    images = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(10)).double()
    request = GradientRequest.build(
        float64_cnn, images, [1], target="logit", classes=[2], versus=[7]
    )
    result = attribution.build("scorecam", {}, layer=LAYER).attribute(request)
    layer = float64_cnn.get_submodule(LAYER)
    kept: list[torch.Tensor] = []
    handle = layer.register_forward_hook(lambda module, inputs, output: kept.append(output))
    try:
        with torch.no_grad():
            float64_cnn(images[1:2])
    finally:
        handle.remove()

    def score(masked: torch.Tensor) -> torch.Tensor:
        logits = float64_cnn(masked[None])[0]
        return logits[2] - logits[7]

    with torch.no_grad():
        expected = _scorecam(kept[0][0], None, images[1], score)
    assert result.layer_maps is not None
    torch.testing.assert_close(result.layer_maps[0], expected, rtol=1e-10, atol=1e-13)


def test_score_cam_scores_masked_images_for_the_class_given_not_their_own(
    float64_cnn, float64_images
):
    """Classes given (not the predicted ones): each masked image is scored for its image's
    class, as the hand formula does, even where masking changes the prediction."""
    classes = [1, 7, 3]
    result = attribute(
        float64_cnn, float64_images, SOME, target="logit", classes=classes, method="scorecam",
        layer=LAYER,
    )  # fmt: skip
    A, G = per_sample_layer(
        float64_cnn, float64_cnn.get_submodule(LAYER), float64_images, SOME, torch.tensor(classes)
    )
    expected = [
        _scorecam(A[row], G[row], float64_images[index], lambda m, c=c: float64_cnn(m[None])[0, c])
        for row, (index, c) in enumerate(zip(SOME, classes, strict=True))
    ]
    torch.testing.assert_close(result.layer_maps, torch.stack(expected), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize(("name", "settings"), [("gradcam", {}), ("scorecam", {"batch_size": 64})])
def test_layer_maps_of_images_that_are_not_square_are_upsampled_to_them(name, settings):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(4, 3),
    ).eval()  # fmt: skip
    images = torch.rand(2, 3, 12, 20)
    result = attribute(model, images, [0, 1], target="logit", method=name, layer="1")
    assert result.maps.shape == (2, 3, 12, 20)
    assert result.milliseconds > 0 and result.settings == settings


class _MinusLogOfMean(nn.Module):
    def forward(self, x):
        return -x.flatten(1).mean(dim=1, keepdim=True).log().expand(-1, 2)


def test_score_cam_says_when_masked_images_give_non_finite_targets():
    """A flat channel masks the whole image out; this head's target of a black image is +inf,
    which makes the channel weights NaN."""
    conv = nn.Conv2d(3, 2, 1)
    with torch.no_grad():
        conv.weight.zero_()
        conv.bias.zero_()
        conv.weight[0].fill_(1.0)  # channel 0 follows the image, channel 1 is flat zero
    model = nn.Sequential(conv, nn.ReLU(), _MinusLogOfMean()).eval()
    images = torch.rand(1, 3, 6, 6) + 0.1
    with pytest.raises(InputError) as raised:
        attribute(model, images, [0], target="logit", classes=0, method="scorecam", layer="1")
    assert str(raised.value) == "Score-CAM's masked images gave non-finite targets."
