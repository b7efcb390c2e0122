"""The folded copy perturbation methods run: the served model's logits (float64 to 1e-12 on the
shipped ResNet-20 and real CIFAR-10 images), the model itself never changed, and the model as
it is wherever folding does not apply (no BatchNorm, hooks, untraceable, training mode)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from captum.attr import Occlusion as CaptumOcclusion
from torch import nn

from gradpick import data
from gradpick.attribution import Occlusion
from gradpick.gradients.request import GradientRequest
from gradpick.models import folding
from gradpick.models import shipped as models
from gradpick.models.folding import inference_copy, lowered_copy
from gradpick.models.weights import freeze


@pytest.fixture(scope="module")
def resnet64() -> nn.Module:
    """The shipped ResNet-20 (real BatchNorm statistics) in float64, eval, frozen."""
    return freeze(models.load("resnet20").double())


@pytest.fixture(scope="module")
def cifar(shared_cifar10_dir: Path) -> torch.Tensor:
    """Eight real CIFAR-10 test images, float64 in [0, 1]."""
    batch = data.load_batch(data.open_source(shared_cifar10_dir, "test"), size=8, seed=4)
    return (batch.images.double() / 255.0) if batch.images.dtype == torch.uint8 else batch.images


def _snapshot(model: nn.Module) -> dict[str, tuple[torch.Tensor, int, bool]]:
    return {
        name: (tensor.clone(), tensor._version, tensor.requires_grad)
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]
    }


def test_the_folded_copy_gives_the_models_logits(resnet64, cifar):
    before = _snapshot(resnet64)
    folded = inference_copy(resnet64, cifar[:2])
    assert folded is not resnet64
    assert not any(isinstance(module, nn.BatchNorm2d) for module in folded.modules())
    with torch.inference_mode():
        expected, got = resnet64(cifar), folded(cifar)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    # The served model: the same tensors, never written (versions unchanged), still frozen.
    after = _snapshot(resnet64)
    assert after.keys() == before.keys()
    for name, (value, version, grad) in before.items():
        assert torch.equal(after[name][0], value) and after[name][1:] == (version, grad), name
    assert not resnet64.training


def test_the_copy_is_kept_until_the_weights_change(resnet64, cifar):
    model = copy.deepcopy(resnet64)
    first = inference_copy(model, cifar[:2])
    assert inference_copy(model, cifar[:2]) is first
    with torch.no_grad():
        model.fc.bias.add_(1.0)  # in place: the same storage, a new version
    second = inference_copy(model, cifar[:2])
    assert second is not first
    with torch.inference_mode():
        torch.testing.assert_close(second(cifar), model(cifar), rtol=0, atol=1e-12)


def _occlusion_by_definition(model: nn.Module, picked: torch.Tensor) -> torch.Tensor:
    """Occlusion with 8x8 windows at stride 8 (each pixel under one window), straight from its
    definition through ``model`` itself: y(x) - y(x with the window grey)."""
    with torch.no_grad():
        classes = model(picked).argmax(dim=1)
        maps = torch.zeros_like(picked)
        for row in range(0, 32, 8):
            for column in range(0, 32, 8):
                hidden = picked.clone()
                hidden[:, :, row : row + 8, column : column + 8] = 0.5
                drop = model(picked) - model(hidden)
                chosen = drop[torch.arange(len(picked)), classes]
                maps[:, :, row : row + 8, column : column + 8] = chosen[:, None, None, None]
    return maps


def test_occlusion_through_the_folded_copy_is_its_definition_and_captums(resnet64, cifar):
    request = GradientRequest.build(resnet64, cifar, [1, 6], target="logit")
    maps = Occlusion(window=8, stride=8).attribute(request).maps
    picked = cifar[[1, 6]]
    torch.testing.assert_close(maps, _occlusion_by_definition(resnet64, picked), rtol=0, atol=1e-12)
    expected = CaptumOcclusion(resnet64).attribute(
        picked,
        sliding_window_shapes=(3, 8, 8),
        strides=(3, 8, 8),
        baselines=0.5,
        target=resnet64(picked).argmax(dim=1),
    )
    # captum divides its sums by the window counts in float32: equal to float32 rounding.
    torch.testing.assert_close(maps, expected.double(), rtol=1e-6, atol=1e-6)


class _Plain(nn.Module):
    """Convolutions without BatchNorm: nothing to fold."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(images)).mean(dim=(2, 3)))


class _Branching(nn.Module):
    """A BatchNorm after a convolution, behind control flow that depends on the pixels: fx
    cannot trace it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.norm(self.conv(images))
        if features.mean() > 0:
            features = torch.relu(features)
        return self.fc(features.mean(dim=(2, 3)))


def _made(kind: type[nn.Module]) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = kind()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):  # statistics that folding would change
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return freeze(model.double())


def _hooked() -> nn.Module:
    model = freeze(copy.deepcopy(models.load("resnet20")).double())
    model.fc.register_forward_hook(lambda module, inputs, output: output * 2)
    return model


def _training() -> nn.Module:
    model = copy.deepcopy(models.load("resnet20")).double()
    return model.train()


@pytest.mark.parametrize(
    "make",
    [lambda: _made(_Plain), lambda: _made(_Branching), _hooked, _training],
    ids=["no-batchnorm", "untraceable", "hooked", "training"],
)
def test_where_folding_does_not_apply_the_model_runs_as_it_is(make, cifar):
    model = make()
    before = _snapshot(model)
    assert inference_copy(model, cifar[:2]) is model
    request = GradientRequest.build(model.eval(), cifar, [0, 3], target="logit")
    found = Occlusion(window=8, stride=8).attribute(request).maps
    torch.testing.assert_close(
        found, _occlusion_by_definition(model, cifar[[0, 3]]), rtol=0, atol=1e-12
    )
    for name, (value, _, _) in before.items():
        assert torch.equal(dict([*model.named_parameters(), *model.named_buffers()])[name], value)


def test_the_bfloat16_copy_rounds_the_logits_and_leaves_the_model_alone(cifar):
    """The folded copy in bfloat16: its logits are the float32 model's within bfloat16's rounding
    through the network (a few units of its last place, relative to the largest logit), it is
    kept for the next call, and the served model keeps its dtype and values."""
    model = freeze(copy.deepcopy(models.load("resnet20")))
    images = cifar.float()
    before = _snapshot(model)
    lowered = lowered_copy(model, images[:2], torch.bfloat16)
    assert lowered is not None and lowered is not model
    assert lowered_copy(model, images[:2], torch.bfloat16) is lowered
    assert {parameter.dtype for parameter in lowered.parameters()} == {torch.bfloat16}
    assert not any(isinstance(module, nn.BatchNorm2d) for module in lowered.modules())
    # On a CPU with oneDNN's bfloat16 kernels each ReLU after a convolution (and the residual
    # sum before it) runs inside the convolution: 19 in ResNet-20 (the first convolution and 9
    # blocks of two). Without them (no AVX-512 BW/VL/DQ nor AVX-NE-CONVERT, as on an AVX2-only
    # EPYC) the fused kernel raises, and the copy runs its layers one by one.
    fused = [m for m in lowered.modules() if isinstance(m, folding._FusedConvolution)]
    assert len(fused) == (19 if torch.ops.mkldnn._is_mkldnn_bf16_supported() else 0)
    with torch.inference_mode():
        expected, got = model(images), lowered(images.to(torch.bfloat16))
    error = float((got.float() - expected).abs().max())
    largest = float(expected.abs().max())
    assert 0 < error <= 8 * torch.finfo(torch.bfloat16).eps * largest, (error, largest)
    for name, (value, version, grad) in before.items():
        now = dict([*model.named_parameters(), *model.named_buffers()])[name]
        assert now.dtype == value.dtype and torch.equal(now, value), name
        assert (now._version, now.requires_grad) == (version, grad), name


@pytest.mark.parametrize("make", [_hooked, _training], ids=["hooked", "training"])
def test_no_bfloat16_copy_of_a_model_with_hooks_or_in_training(make, cifar):
    assert lowered_copy(make().float(), cifar[:2].float(), torch.bfloat16) is None
