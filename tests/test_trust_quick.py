"""The badges' quick checks: hand-made maps and scipy's Spearman, a hand-randomised copy, the
served model left as it was, and a class-blind map flagged."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from torch import nn

from gradpick import attribution
from gradpick.attribution import InputGradientMethod
from gradpick.gradients import GradientResult
from gradpick.request import GradientRequest
from gradpick.trust import quick
from gradpick.trust.quick import FAILS, NOT_RUN, PASSES, WEAK, quick_checks, verdict_of

UNLIMITED = math.inf


def hand_saliency(model: nn.Module, image: torch.Tensor, target: int) -> np.ndarray:
    """max over channels of |d logit[target] / d image| for one image, by plain autograd."""
    leaf = image.detach().clone().unsqueeze(0).requires_grad_(True)
    model(leaf)[0, target].backward()
    assert leaf.grad is not None
    return leaf.grad[0].abs().amax(dim=0).numpy()


def figures(checks: quick.QuickChecks, check: str) -> list[float | None]:
    return [
        next(badge.figure for badge in pick.badges if badge.check == check) for pick in checks.picks
    ]


def predicted(model: nn.Module, images: torch.Tensor, indices: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(images[indices]).argmax(dim=1)


def test_class_sensitivity_is_spearman_of_two_autograd_maps(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    indices = [4, 1, 2]
    held = predicted(float64_cnn, float64_images, indices)
    checks = quick_checks(
        float64_cnn, float64_images, indices, "gradient", "logit", held, budget_s=UNLIMITED
    )
    for position, index in enumerate(indices):
        image = float64_images[index]
        order = float64_cnn(image.unsqueeze(0))[0].detach().argsort(descending=True)
        own = hand_saliency(float64_cnn, image, int(order[0]))
        runner_up = hand_saliency(float64_cnn, image, int(order[1]))
        expected = spearmanr(own.ravel(), runner_up.ravel()).statistic
        assert figures(checks, "class")[position] == pytest.approx(expected, abs=1e-9)
        assert checks.picks[position].index == index


def test_randomisation_is_against_a_hand_reinitialised_last_layer(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    indices = [0, 3]
    held = predicted(float64_cnn, float64_images, indices)
    checks = quick_checks(
        float64_cnn, float64_images, indices, "gradient", "logit", held, budget_s=UNLIMITED
    )
    # By hand: the last Linear redrawn from N(0, rms^2) of each of its tensors, from a CPU
    # generator seeded by SeedSequence((seed 0, step 0)), weight then bias.
    randomised = copy.deepcopy(float64_cnn)
    last = randomised[-1]
    assert isinstance(last, nn.Linear)
    state = int(np.random.SeedSequence((0, 0)).generate_state(1)[0])
    generator = torch.Generator().manual_seed(state)
    with torch.no_grad():
        for parameter in (last.weight, last.bias):
            rms = parameter.square().mean().sqrt()
            parameter.copy_(
                torch.randn(parameter.shape, generator=generator, dtype=torch.float64) * rms
            )
    for position, index in enumerate(indices):
        image, target = float64_images[index], int(held[position])
        trained = hand_saliency(float64_cnn, image, target)
        moved = hand_saliency(randomised, image, target)
        expected = spearmanr(trained.ravel(), moved.ravel()).statistic
        assert figures(checks, "randomised")[position] == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("method", ["gradient", "gradcam"])
def test_the_served_model_is_left_as_it_was(
    tiny_cnn: nn.Module, float64_images: torch.Tensor, method: str
) -> None:
    images = float64_images.float()
    before = {name: value.clone() for name, value in tiny_cnn.state_dict().items()}
    grads = [parameter.requires_grad for parameter in tiny_cnn.parameters()]
    held = predicted(tiny_cnn, images, [1, 2])
    quick_checks(tiny_cnn, images, [1, 2], method, "logit", held, budget_s=UNLIMITED)
    found = quick_checks(tiny_cnn, images, [1, 2], method, "logit", held, budget_s=UNLIMITED)
    assert [badge.check for badge in found.picks[0].badges] == ["class", "randomised", "road"]
    after = tiny_cnn.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert [parameter.requires_grad for parameter in tiny_cnn.parameters()] == grads
    assert not any(module.training for module in tiny_cnn.modules())
    for module in tiny_cnn.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks
        assert not module._backward_hooks and not module._backward_pre_hooks
    # The randomised copy is made once per model and shared.
    example = images[:1]
    assert quick.randomised_copy(tiny_cnn, example) is quick.randomised_copy(tiny_cnn, example)
    assert quick.randomised_copy(tiny_cnn, example) is not tiny_cnn


class Edges(InputGradientMethod):
    """A map that ignores the class: the image's edges, whatever is asked."""

    name = "edges_for_test"
    label = "Edges"
    unit = "edge"

    def _maps(self, request: GradientRequest, plain: GradientResult) -> tuple[torch.Tensor, None]:
        images = request.picked_images
        across = torch.zeros_like(images)
        across[..., 1:] = (images[..., 1:] - images[..., :-1]).abs()
        across[..., 1:, :] += (images[..., 1:, :] - images[..., :-1, :]).abs()
        return across, None


def test_a_class_blind_map_fails_and_a_gradient_map_does_not(
    tiny_cnn: nn.Module, float64_images: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(attribution.METHODS, Edges.name, Edges)  # gone after the test
    images = float64_images.float()
    indices = [0, 1, 2, 3]
    held = predicted(tiny_cnn, images, indices)
    blind = quick_checks(tiny_cnn, images, indices, Edges.name, "logit", held, budget_s=UNLIMITED)
    assert [pick.verdict for pick in blind.picks] == [FAILS] * 4
    assert all("explains the image, not the class" in pick.reason for pick in blind.picks)
    honest = quick_checks(tiny_cnn, images, indices, "gradient", "logit", held, budget_s=UNLIMITED)
    # Its class and randomisation badges pass (ROAD says little of a net with random weights).
    assert all(value < 0.7 for value in figures(honest, "class") + figures(honest, "randomised"))
    for pick in honest.picks:
        assert [b.verdict for b in pick.badges if b.check in ("class", "randomised")] == [
            PASSES
        ] * 2


def test_ig_completeness_against_the_logits_at_image_and_baseline(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    indices = [2, 5]
    held = predicted(float64_cnn, float64_images, indices)
    request = GradientRequest.build(
        float64_cnn, float64_images, indices, target="logit", classes=held
    )
    shown = attribution.build("integrated_gradients", {"steps": 8}).attribute(request)
    checks = quick_checks(
        float64_cnn,
        float64_images,
        indices,
        "integrated_gradients",
        "logit",
        held,
        shown=shown,
        budget_s=UNLIMITED,
    )
    with torch.no_grad():
        at_image = float64_cnn(float64_images[indices]).gather(1, held[:, None])[:, 0]
        at_black = float64_cnn(torch.zeros_like(float64_images[:1]))[0, held]
    total = shown.maps.flatten(1).sum(dim=1)
    expected = ((total - (at_image - at_black)).abs() / (at_image - at_black).abs()).tolist()
    assert figures(checks, "completeness") == pytest.approx(expected, rel=1e-9)


def test_checks_that_do_not_fit_the_budget_point_to_the_trust_tab(
    tiny_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    images = float64_images.float()
    held = predicted(tiny_cnn, images, [1])
    none = quick_checks(tiny_cnn, images, [1], "gradient", "logit", held, budget_s=-1.0)
    assert none.skipped == ("class", "randomised", "road")
    (badge,) = none.picks[0].badges
    assert badge.verdict == NOT_RUN and "Trust tab" in badge.label
    every = quick_checks(tiny_cnn, images, [1], "gradient", "logit", held, budget_s=UNLIMITED)
    assert every.skipped == () and figures(every, "road")[0] is not None


def test_thresholds() -> None:
    assert [verdict_of("class", value) for value in (0.2, 0.69, 0.7, 0.89, 0.9, 1.0)] == [
        PASSES,
        PASSES,
        WEAK,
        WEAK,
        FAILS,
        FAILS,
    ]
    assert verdict_of("randomised", math.nan) == WEAK
    assert [verdict_of("completeness", value) for value in (0.01, 0.1, 0.3)] == [
        PASSES,
        WEAK,
        FAILS,
    ]
    assert [verdict_of("road", value) for value in (0.2, 0.05, 0.0, -0.1)] == [
        PASSES,
        WEAK,
        FAILS,
        FAILS,
    ]


def test_road_noise_follows_the_batch_index_when_given_the_picks_alone(
    tiny_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    images = float64_images.float()
    held = predicted(tiny_cnn, images, [4])
    whole = quick_checks(tiny_cnn, images, [4], "gradient", "logit", held, budget_s=UNLIMITED)
    alone = quick_checks(
        tiny_cnn, images[4:5], [0], "gradient", "logit", held, budget_s=UNLIMITED, seeds=[4]
    )
    assert figures(alone, "road") == pytest.approx(figures(whole, "road"), abs=1e-12)
    elsewhere = quick_checks(
        tiny_cnn, images[4:5], [0], "gradient", "logit", held, budget_s=UNLIMITED
    )
    assert figures(elsewhere, "road") != pytest.approx(figures(whole, "road"), abs=1e-12)
