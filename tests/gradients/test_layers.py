"""Layer gradients: exact, chunked, k-only, model-safe, per thread; layers found and reshaped."""

from __future__ import annotations

import copy
import threading

import pytest
import timm
import torch
import torchvision
from torch import nn

from gradpick.errors import InputError
from gradpick.gradients import layers
from gradpick.gradients.layers import Layout, layer_gradients, layout_of, probe, resolve
from gradpick.gradients.request import GradientRequest
from gradpick.models import zoo
from gradpick.models.shipped import freeze

PICKED = [5, 2, 9, 2]


def per_sample_layer(
    model: nn.Module, module: nn.Module, images: torch.Tensor, indices: list[int], classes
) -> tuple[torch.Tensor, torch.Tensor]:
    """One image at a time: a hook keeps the module's output, autograd differentiates it."""
    activations, gradients = [], []
    for index, wanted in zip(indices, classes, strict=True):
        kept: list[torch.Tensor] = []
        handle = module.register_forward_hook(lambda m, i, output, kept=kept: kept.append(output))
        try:
            image = images[index : index + 1].clone().requires_grad_(True)
            logit = model(image)[0, int(wanted)]
        finally:
            handle.remove()
        (gradient,) = torch.autograd.grad(logit, kept[0])
        activations.append(kept[0].detach()[0])
        gradients.append(gradient[0])
    return torch.stack(activations), torch.stack(gradients)


def _no_hooks(model: nn.Module) -> bool:
    return all(
        not (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks) for m in model.modules()
    )


@pytest.fixture
def double_cnn(tiny_bn_cnn: nn.Module) -> nn.Module:
    return freeze(copy.deepcopy(tiny_bn_cnn).double())


@pytest.mark.parametrize("name", ["0", "2", "4"])
def test_layer_gradients_equal_per_sample_autograd_in_float64(double_cnn, random_batch, name):
    images = random_batch.images.double()
    request = GradientRequest.build(double_cnn, images, PICKED, target="logit")
    result = layer_gradients(request, name)
    assert result.layer.name == name and result.result.indices == tuple(PICKED)
    module = double_cnn.get_submodule(name)
    activations, gradients = per_sample_layer(
        double_cnn, module, images, PICKED, result.result.classes
    )
    torch.testing.assert_close(result.activations, activations, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(result.gradients, gradients, rtol=1e-12, atol=1e-15)
    assert result.gradients.dtype == torch.float64 and result.gradients.abs().sum() > 0


def test_an_in_place_operation_after_the_layer_cannot_change_what_is_recorded(random_batch):
    model = freeze(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True), nn.Flatten()))
    model = freeze(nn.Sequential(model, nn.Linear(4 * 30 * 30, 3)).double())
    images = random_batch.images.double()
    result = layer_gradients(GradientRequest.build(model, images, [0, 1], target="logit"), "0.0")
    conv = model.get_submodule("0.0")
    with torch.no_grad():
        expected = conv(images[[0, 1]])
    assert (expected < 0).any()  # the ReLU would have clipped these in place
    torch.testing.assert_close(result.activations, expected, rtol=1e-12, atol=1e-15)


def test_chunked_under_a_small_budget_equals_one_chunk(double_cnn, random_batch):
    request = GradientRequest.build(
        double_cnn, random_batch.images.double(), PICKED, target="logit"
    )
    whole = layer_gradients(request, "2")
    chunked = layer_gradients(request, "2", memory_budget=1)
    assert whole.result.chunks == 1 and chunked.result.chunks == len(PICKED)
    assert torch.equal(whole.activations, chunked.activations)
    assert torch.equal(whole.gradients, chunked.gradients)


class _Rows(nn.Module):
    """Records how many images each forward with gradients carries."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            self.seen.append(int(x.shape[0]))
        return x


def test_only_the_picks_are_forwarded_whatever_the_batch_size(tiny_cnn):
    rows = _Rows()
    model = nn.Sequential(rows, tiny_cnn).eval()
    for n in (12, 400):
        rows.seen.clear()
        images = torch.rand(n, 3, 32, 32, generator=torch.Generator().manual_seed(n))
        layer_gradients(GradientRequest.build(model, images, [3, 1], target="logit"), "1.1")
        # The one-image probe of saved bytes runs once per model; then only the k picks.
        assert rows.seen[-1] == 2 and max(rows.seen) <= 2


def test_strategies_that_forward_the_whole_batch_are_refused(tiny_cnn, random_batch):
    request = GradientRequest.build(tiny_cnn, random_batch.images, [1], target="logit")
    with pytest.raises(InputError, match="run strategy recompute"):
        layer_gradients(request.but(strategy="summed"), "1")


def test_the_served_model_is_unchanged_and_hooks_are_gone(tiny_bn_cnn, random_batch):
    state = copy.deepcopy(tiny_bn_cnn.state_dict())
    flags = [
        (m.training, [p.requires_grad for p in m.parameters(recurse=False)])
        for m in tiny_bn_cnn.modules()
    ]
    request = GradientRequest.build(tiny_bn_cnn, random_batch.images, PICKED, random_batch.labels)
    layer_gradients(request, "1")
    with pytest.raises(InputError, match="out of range"):
        layer_gradients(request.but(target="logit", classes=torch.full((4,), 99)), "1")
    assert _no_hooks(tiny_bn_cnn)
    assert all(torch.equal(state[key], value) for key, value in tiny_bn_cnn.state_dict().items())
    assert flags == [
        (m.training, [p.requires_grad for p in m.parameters(recurse=False)])
        for m in tiny_bn_cnn.modules()
    ]
    assert all(p.grad is None for p in tiny_bn_cnn.parameters())


class _FailsWithGradients(nn.Module):
    """Passes the probe (no gradients) and fails in the gradient step, mid-forward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            raise RuntimeError("boom")
        return x


def test_hooks_are_removed_after_an_error_mid_forward(tiny_cnn, random_batch):
    model = nn.Sequential(tiny_cnn[:2], _FailsWithGradients(), tiny_cnn[2:])
    request = GradientRequest.build(model, random_batch.images, [0, 1], target="logit")
    with pytest.raises(InputError, match="boom"):
        layer_gradients(request, "0.0")
    assert _no_hooks(model)
    with pytest.raises(InputError):  # a failing probe forward leaves none either
        resolve(model, None, torch.rand(1, 3, 31, 17))
    assert _no_hooks(model)


class _Meet(nn.Module):
    """Both threads' forwards wait here for each other, so both hooks are live at once."""

    def __init__(self) -> None:
        super().__init__()
        self.barrier = threading.Barrier(2, timeout=20)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            self.barrier.wait()
        return x


def test_two_threads_asking_for_different_layers_each_get_their_own(tiny_cnn, random_batch):
    model = nn.Sequential(tiny_cnn[:2], _Meet(), tiny_cnn[2:]).double().eval()
    images = random_batch.images.double()
    probe(model, (32, 32), dtype=torch.float64)  # measured once, before the threads race
    wanted = {"0.0": [1, 4], "2.2": [7, 3, 3]}
    results: dict[str, layers.LayerGradients] = {}

    def run(name: str) -> None:
        request = GradientRequest.build(model, images, wanted[name], target="logit")
        results[name] = layer_gradients(request, name, chunk_size=8)

    threads = [threading.Thread(target=run, args=(name,)) for name in wanted]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(results) == set(wanted) and _no_hooks(model)
    model[1].barrier = threading.Barrier(1)
    for name, indices in wanted.items():
        alone = layer_gradients(GradientRequest.build(model, images, indices, target="logit"), name)
        assert results[name].activations.shape == alone.activations.shape
        assert torch.equal(results[name].activations, alone.activations)
        assert torch.equal(results[name].gradients, alone.gradients)


# ----------------------------------------------------------------------------- finding layers


def test_the_probe_lists_spatial_layers_and_picks_the_last_before_pooling():
    loaded = zoo.load_model("torchvision:resnet18", input_size=64)
    found = probe(loaded.module, (64, 64))
    assert found.automatic == "layer4"  # the user's name: no 'model.' of gradpick's wrapper
    assert found.get("layer4") == layers.LayerInfo(
        "layer4", (512, 2, 2), Layout("nchw", (2, 2), 512)
    )
    assert found.get("conv1") is not None and found.get("avgpool") is None
    assert found.get("fc") is None and "fc" in found.reached
    assert _no_hooks(loaded.module)


def test_an_unknown_layer_lists_close_matches(tiny_cnn):
    model = zoo.load_model("torchvision:resnet18", input_size=32).module
    with pytest.raises(InputError, match=r"no layer 'layer33'; close matches: layer3"):
        resolve(model, "layer33", torch.rand(1, 3, 32, 32))


class _WithSpare(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.spare = nn.Conv2d(3, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def test_a_layer_that_is_not_spatial_or_not_reached_is_refused(tiny_cnn):
    image = torch.rand(1, 3, 32, 32)
    with pytest.raises(InputError, match="'5''s output is not a spatial map"):
        resolve(tiny_cnn, "5", image)
    unused = _WithSpare(tiny_cnn)
    with pytest.raises(InputError, match="'spare' is never reached"):
        resolve(unused, "spare", image)
    with pytest.raises(InputError, match="no layer with a spatial output"):
        resolve(freeze(nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 2))), None, image)


@pytest.mark.parametrize(
    ("shape", "size", "expected"),
    [
        ((64, 8, 8), (32, 32), Layout("nchw", (8, 8), 64)),
        ((7, 7, 768), (224, 224), Layout("nhwc", (7, 7), 768)),
        ((197, 768), (224, 224), Layout("tokens", (14, 14), 768, 1)),
        ((201, 192), (224, 224), Layout("tokens", (14, 14), 192, 5)),
        ((1 + 12 * 16, 32), (96, 128), Layout("tokens", (12, 16), 32, 1)),
        ((512, 1, 1), (224, 224), None),
        ((512,), (224, 224), None),
    ],
)
def test_layouts_follow_the_input_size_and_patch_grid(shape, size, expected):
    assert layout_of(shape, size) == expected


def test_token_layouts_become_channels_first_maps():
    tokens = torch.arange(2 * (2 + 6) * 3).reshape(2, 8, 3)
    maps = Layout("tokens", (2, 3), 3, 2).to_nchw(tokens)
    assert maps.shape == (2, 3, 2, 3)
    assert torch.equal(maps[1, 2, 1, 0], tokens[1, 2 + 3, 2])


def _random_head(model: nn.Module, head: nn.Linear) -> nn.Module:
    """torchvision zeroes a ViT's head, which would make every gradient zero."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        nn.init.normal_(head.weight, std=0.02)
    return freeze(model)


def _vit_b_16() -> nn.Module:
    model = torchvision.models.vit_b_16()
    return _random_head(model, model.heads.head)


def _seeded(build):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return build()


TRANSFORMERS = {
    "vit_b_16": (
        _vit_b_16,
        "encoder.layers.encoder_layer_11.ln_1",
        Layout("tokens", (14, 14), 768, 1),
    ),
    "swin_t": (
        lambda: freeze(torchvision.models.swin_t()),
        "features.7.1.norm1",
        Layout("nhwc", (7, 7), 768),
    ),
    "timm_vit_registers": (
        lambda: freeze(timm.create_model("vit_tiny_patch16_224", reg_tokens=4)),
        "blocks.11.norm1",
        Layout("tokens", (14, 14), 192, 5),
    ),
}


@pytest.mark.parametrize("name", list(TRANSFORMERS))
def test_transformers_get_the_input_of_the_last_attention_as_a_map(name):
    build, expected_name, expected_layout = TRANSFORMERS[name]
    model = _seeded(build)
    images = torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    request = GradientRequest.build(model, images, [1], target="logit")
    result = layer_gradients(request)
    assert result.layer.name == expected_name and result.layer.layout == expected_layout
    activations, gradients = per_sample_layer(
        model, model.get_submodule(expected_name), images, [1], result.result.classes
    )
    torch.testing.assert_close(result.activations, expected_layout.to_nchw(activations))
    torch.testing.assert_close(result.gradients, expected_layout.to_nchw(gradients))
    assert result.gradients.shape == (1, expected_layout.channels, *expected_layout.grid)
    assert result.gradients.abs().sum() > 0 and _no_hooks(model)


def test_after_the_last_attention_patch_tokens_never_reach_the_class_token():
    model = _seeded(lambda: freeze(timm.create_model("vit_tiny_patch16_224")))
    images = torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    request = GradientRequest.build(model, images, [0], target="logit")
    assert layer_gradients(request, "blocks.11").gradients.abs().max() == 0
    assert layer_gradients(request).gradients.abs().max() > 0
