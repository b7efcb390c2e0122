"""The randomisation test: layer order, cascade and independent steps, metrics, no mutation."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.models.shipped import freeze
from gradpick.trust.engine import METHODS, MethodSettings, saliency
from gradpick.trust.metrics import spearman, ssim
from gradpick.trust.randomisation import randomisable_layers, randomisation_test, randomise_layer

PICKS = [1, 4]
QUICK = MethodSettings(samples=3, steps=4)


@pytest.fixture
def images() -> torch.Tensor:
    return torch.rand(5, 3, 32, 32, generator=torch.Generator().manual_seed(5))


def snapshot(model: nn.Module) -> tuple[dict, dict, dict]:
    return (
        {key: value.clone() for key, value in model.state_dict().items()},
        {name: p.requires_grad for name, p in model.named_parameters()},
        {name: module.training for name, module in model.named_modules()},
    )


def assert_unchanged(model: nn.Module, before: tuple[dict, dict, dict]) -> None:
    states, flags, modes = snapshot(model)
    assert states.keys() == before[0].keys()
    assert all(torch.equal(states[key], before[0][key]) for key in states)
    assert flags == before[1] and modes == before[2]
    assert all(p.grad is None for p in model.parameters())


def test_layers_come_in_forward_order(tiny_bn_cnn: nn.Module, images: torch.Tensor) -> None:
    assert randomisable_layers(tiny_bn_cnn, images[:1]) == ["0", "1", "3", "6"]


def test_cascade_randomises_from_the_output_and_never_touches_the_model(
    tiny_bn_cnn: nn.Module, images: torch.Tensor
) -> None:
    before = snapshot(tiny_bn_cnn)
    curves = randomisation_test(tiny_bn_cnn, images, PICKS, METHODS, settings=QUICK)
    assert_unchanged(tiny_bn_cnn, before)
    assert set(curves) == set(METHODS)
    for curve in curves.values():
        assert curve.mode == "cascade"
        assert [step.layer for step in curve.steps] == ["6", "3", "1", "0"]
        assert [step.randomised for step in curve.steps] == [
            ("6",),
            ("6", "3"),
            ("6", "3", "1"),
            ("6", "3", "1", "0"),
        ]
        original = saliency(curve.original)
        for step in curve.steps:
            assert step.maps.shape == curve.original.shape
            scaled = saliency(step.maps) / saliency(step.maps).flatten(1).amax(1).view(-1, 1, 1)
            reference = original / original.flatten(1).amax(1).view(-1, 1, 1)
            assert torch.allclose(step.spearman, spearman(original, saliency(step.maps)))
            assert torch.allclose(step.ssim, ssim(reference, scaled))
        # With every layer random, the map no longer looks like the trained model's.
        assert float(curve.steps[-1].spearman.mean()) < 0.9


def test_independent_steps_randomise_one_layer_each_with_the_cascades_draws(
    tiny_cnn: nn.Module, images: torch.Tensor
) -> None:
    cascade = randomisation_test(tiny_cnn, images, PICKS, layers=1)["gradient"]
    alone = randomisation_test(tiny_cnn, images, PICKS, mode="independent")["gradient"]
    assert [step.randomised for step in alone.steps] == [("5",), ("2",), ("0",)]
    # The output layer first: the first step is the same layer with the same draw either way.
    assert torch.equal(alone.steps[0].maps, cascade.steps[0].maps)
    assert len(cascade.steps) == 1


def test_a_model_in_training_mode_is_explained_in_eval_mode_on_a_copy(
    tiny_bn_cnn: nn.Module, images: torch.Tensor
) -> None:
    training = copy.deepcopy(tiny_bn_cnn).train()
    before = snapshot(training)
    served = randomisation_test(tiny_bn_cnn, images, PICKS, layers=2)["gradient"]
    copied = randomisation_test(training, images, PICKS, layers=2)["gradient"]
    assert_unchanged(training, before)
    assert torch.equal(served.steps[1].maps, copied.steps[1].maps)


def test_randomise_layer_keeps_the_scale_and_is_seeded() -> None:
    first, second = nn.Linear(64, 32), nn.Linear(64, 32)
    second.load_state_dict(first.state_dict())
    rms = float(first.weight.detach().square().mean().sqrt())
    randomise_layer(first, seed=3, position=1)
    randomise_layer(second, seed=3, position=1)
    assert torch.equal(first.weight, second.weight)
    assert float(first.weight.detach().square().mean().sqrt()) == pytest.approx(rms, rel=0.1)
    randomise_layer(second, seed=3, position=2)
    assert not torch.equal(first.weight, second.weight)


def test_a_model_without_parameters_and_bad_counts_are_refused(
    tiny_cnn: nn.Module, images: torch.Tensor
) -> None:
    bare = freeze(nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten()))
    with pytest.raises(InputError, match="no layers with parameters"):
        randomisation_test(bare, images, PICKS)
    with pytest.raises(InputError, match="layers to randomise must be a whole number from 1 to 3"):
        randomisation_test(tiny_cnn, images, PICKS, layers=4)
    with pytest.raises(InputError, match="Unknown randomisation mode"):
        randomisation_test(tiny_cnn, images, PICKS, mode="shuffle")
    with pytest.raises(InputError, match="Unknown attribution method"):
        randomisation_test(tiny_cnn, images, PICKS, methods=("lime",))


def redrawn(model: nn.Module, layers: dict[str, int], seed: int = 0) -> nn.Module:
    """A copy of ``model`` with each named layer's parameters redrawn by hand: N(0, rms^2) of
    the trained values, from a CPU generator seeded by (seed, the layer's step)."""
    import numpy as np

    copied = copy.deepcopy(model)
    with torch.no_grad():
        for name, step in layers.items():
            state = int(np.random.SeedSequence((seed, step)).generate_state(1)[0])
            generator = torch.Generator().manual_seed(state)
            for parameter in copied.get_submodule(name).parameters(recurse=False):
                rms = parameter.double().square().mean().sqrt()
                draw = torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
                parameter.copy_((draw * rms).to(parameter.dtype))
    return copied


def autograd_maps(model: nn.Module, images: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    """d logit[class] / d image of each pick, one image at a time, by plain autograd."""
    maps = []
    for image, label in zip(images[PICKS], classes, strict=True):
        x = image.unsqueeze(0).clone().requires_grad_(True)
        (gradient,) = torch.autograd.grad(model(x)[0, label], x)
        maps.append(gradient[0])
    return torch.stack(maps)


@pytest.mark.parametrize("mode", ["cascade", "independent"])
def test_each_steps_map_is_the_gradient_of_the_model_randomised_by_hand(
    tiny_cnn: nn.Module, images: torch.Tensor, mode: str
) -> None:
    curve = randomisation_test(tiny_cnn, images, PICKS, mode=mode)["gradient"]
    classes = tiny_cnn(images[PICKS]).argmax(dim=1)  # held at every step
    assert torch.allclose(curve.original, autograd_maps(tiny_cnn, images, classes), atol=1e-6)
    order = ["5", "2", "0"]
    for step, name in enumerate(order):
        chosen = order[: step + 1] if mode == "cascade" else [name]
        reference = redrawn(tiny_cnn, {layer: order.index(layer) for layer in chosen})
        expected = autograd_maps(reference, images, classes)
        assert torch.allclose(curve.steps[step].maps, expected, atol=1e-6), (mode, name)


class Direct(nn.Module):
    """Logits = W x with W held by the model itself, then a head of its own."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(4)
        self.weight = nn.Parameter(torch.randn(3, 432, generator=generator, dtype=torch.float64))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images.flatten(1) @ self.weight.T


def test_a_models_own_parameters_are_a_layer_named_by_its_class() -> None:
    model = freeze(Direct())
    images = torch.rand(3, 3, 12, 12, generator=torch.Generator().manual_seed(1)).double()
    assert randomisable_layers(model, images[:1]) == ["Direct"]
    (step,) = randomisation_test(model, images, [2, 0], classes=[1, 2])["gradient"].steps
    assert (step.layer, step.randomised) == ("Direct", ("Direct",))
    # d (W' x)[c] / d x = W'[c], W' drawn by hand: N(0, rms^2) from SeedSequence((seed 0, 0)).
    state = int(np.random.SeedSequence((0, 0)).generate_state(1)[0])
    draw = torch.randn(3, 432, generator=torch.Generator().manual_seed(state), dtype=torch.float64)
    redrawn = draw * model.weight.detach().square().mean().sqrt()
    assert torch.allclose(step.maps.flatten(1), redrawn[[1, 2]], rtol=1e-12, atol=0)
    assert torch.equal(model.weight, Direct().weight)  # the model itself is untouched


def test_a_layer_run_twice_is_randomised_once() -> None:
    shared = nn.Linear(48, 48)
    model = freeze(nn.Sequential(nn.Flatten(), shared, nn.Tanh(), shared, nn.Linear(48, 3)))
    assert randomisable_layers(model, torch.rand(1, 3, 4, 4)) == ["1", "4"]


def test_every_layer_by_default_and_a_bad_count_named() -> None:
    model = freeze(nn.Sequential(nn.Flatten(), nn.Linear(432, 6), nn.Tanh(), nn.Linear(6, 3)))
    images = torch.rand(2, 3, 12, 12)
    curve = randomisation_test(model, images, [0, 1], layers=None)["gradient"]
    assert [step.layer for step in curve.steps] == ["3", "1"]
    with pytest.raises(InputError) as refused:
        randomisation_test(model, images, [0, 1], layers=0)
    assert str(refused.value) == (
        "The number of layers to randomise must be a whole number from 1 to 2; got 0."
    )


def test_refusals_progress_and_curve_names_read_back(
    tiny_cnn: nn.Module, images: torch.Tensor
) -> None:
    with pytest.raises(InputError) as refused:
        randomisation_test(tiny_cnn, images, PICKS, mode="shuffle")
    assert str(refused.value) == (
        "Unknown randomisation mode 'shuffle'; use one of cascade, independent."
    )
    bare = freeze(nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten()))
    with pytest.raises(InputError) as refused:
        randomisation_test(bare, images, PICKS)
    assert str(refused.value) == (
        "The model has no layers with parameters, so there is nothing to randomise."
    )
    calls: list[tuple[int, int]] = []
    curves = randomisation_test(
        tiny_cnn,
        images,
        PICKS,
        methods=("gradient", "smoothgrad"),
        settings=QUICK,
        progress=lambda done, total: calls.append((done, total)),
    )
    assert calls == [(1, 3), (2, 3), (3, 3)]
    assert {name: curve.method for name, curve in curves.items()} == {
        "gradient": "gradient",
        "smoothgrad": "smoothgrad",
    }


class _Gate(nn.Module):
    """A layer with a parameter of its own and a child layer with parameters of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((3, 1, 1), 2.0))
        self.inner = nn.Conv2d(3, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x * self.scale)


def test_randomising_a_layer_leaves_its_child_layers_alone() -> None:
    torch.manual_seed(0)
    gate = _Gate()
    inner = {key: value.clone() for key, value in gate.inner.state_dict().items()}
    randomise_layer(gate, seed=0, position=0)
    assert not torch.equal(gate.scale.detach(), torch.full((3, 1, 1), 2.0))
    assert all(torch.equal(gate.inner.state_dict()[key], value) for key, value in inner.items())
