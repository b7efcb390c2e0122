"""The badges' quick checks: hand-made maps and scipy's Spearman, a hand-randomised copy, the
served model left as it was, a class-blind map flagged, the time budget, and each badge's words."""

from __future__ import annotations

import copy
import dataclasses
import math
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr
from torch import nn

from gradpick import attribution
from gradpick.attribution import InputGradientMethod
from gradpick.gradients.engine import GradientResult
from gradpick.gradients.request import GradientRequest
from gradpick.models.shipped import freeze
from gradpick.trust import quick
from gradpick.trust.engine import MethodSettings
from gradpick.trust.faithfulness import attribution_order
from gradpick.trust.quick import FAILS, NOT_RUN, PASSES, WEAK, Badge, quick_checks, verdict_of
from gradpick.trust.road import RoadCurves, road
from tests.trust.test_randomisation import Direct

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


def hand_cascade(model: nn.Sequential, names: list[str]) -> nn.Module:
    """``model`` with the modules ``names`` (from the output down) redrawn by hand: the i-th
    from N(0, rms^2) of each of its tensors, from a CPU generator seeded by
    SeedSequence((seed 0, step i)), weight then bias."""
    randomised = copy.deepcopy(model)
    for step, name in enumerate(names):
        layer = randomised.get_submodule(name)
        state = int(np.random.SeedSequence((0, step)).generate_state(1)[0])
        generator = torch.Generator().manual_seed(state)
        with torch.no_grad():
            for parameter in (layer.weight, layer.bias):
                rms = parameter.square().mean().sqrt()
                parameter.copy_(
                    torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype) * rms
                )
    return randomised


def test_randomisation_is_against_a_hand_cascade_down_to_the_automatic_layer(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    """The net's automatic layer is '4' (the Tanh after conv '3'): what feeds it is the Linear
    '6' above it and conv '3' that makes its activation, redrawn in that order; the first conv
    and its BatchNorm stay trained."""
    indices = [0, 3]
    held = predicted(float64_cnn, float64_images, indices)
    checks = quick_checks(
        float64_cnn, float64_images, indices, "gradient", "logit", held, budget_s=UNLIMITED
    )
    randomised = hand_cascade(float64_cnn, ["6", "3"])
    for position, index in enumerate(indices):
        image, target = float64_images[index], int(held[position])
        trained = hand_saliency(float64_cnn, image, target)
        moved = hand_saliency(randomised, image, target)
        expected = spearmanr(trained.ravel(), moved.ravel()).statistic
        assert figures(checks, "randomised")[position] == pytest.approx(expected, abs=1e-9)
    badge = next(b for b in checks.picks[0].badges if b.check == "randomised")
    assert "weights from the output down to 4 were redrawn at random" in badge.meaning


def test_a_layer_maps_cascade_includes_its_own_layer(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    """Grad-CAM at conv '3': its own weights make the activation A, the Linear makes dA; at
    BatchNorm '1' the cascade goes down to it, the first conv staying trained."""
    example = float64_images[:1]
    own = [id(m) for m in quick.cascade_layers(float64_cnn, example, "3")]
    assert own == [id(float64_cnn[6]), id(float64_cnn[3])]
    deeper = [id(m) for m in quick.cascade_layers(float64_cnn, example, "1")]
    assert deeper == [id(float64_cnn[6]), id(float64_cnn[3]), id(float64_cnn[1])]
    indices = [1, 2]
    held = predicted(float64_cnn, float64_images, indices)
    checks = quick_checks(
        float64_cnn, float64_images, indices, "gradcam", "logit", held,
        settings=MethodSettings(layer="3"), budget_s=UNLIMITED,
    )  # fmt: skip
    randomised = hand_cascade(float64_cnn, ["6", "3"])

    def cam(model: nn.Module) -> np.ndarray:
        maps = attribution.attribute(
            model, float64_images, indices, target="logit", classes=held, method="gradcam",
            layer="3",
        ).maps  # fmt: skip
        return maps.abs().amax(dim=1).flatten(1).numpy()

    expected = [
        spearmanr(a, b).statistic for a, b in zip(cam(float64_cnn), cam(randomised), strict=True)
    ]
    assert figures(checks, "randomised") == pytest.approx(expected, abs=1e-9, nan_ok=True)


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
    assert all(
        "barely changes when the weights that feed it are random" in pick.reason
        for pick in blind.picks
    )
    # Its class check can only warn (weak-only: good maps of two classes come close too).
    assert all(
        next(b for b in pick.badges if b.check == "class").verdict == WEAK for pick in blind.picks
    )
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
    assert badge.verdict == NOT_RUN and badge.label == "class, randomisation, ROAD"
    assert none.check_ms == ()  # what did not run costs nothing
    every = quick_checks(tiny_cnn, images, [1], "gradient", "logit", held, budget_s=UNLIMITED)
    assert every.skipped == () and figures(every, "road")[0] is not None
    assert [check for check, _ in every.check_ms] == ["class", "randomised", "road"]
    assert all(ms > 0 for _, ms in every.check_ms)
    assert sum(ms for _, ms in every.check_ms) <= every.milliseconds


@pytest.mark.parametrize(
    ("method", "family"),
    [("gradient", "input gradient"), ("smoothgrad", "input gradient"),
     ("gradient_x_input", "gradient × input"), ("gradcam", "layer"),
     ("layercam", "positive-gradient layer"), ("scorecam", "Score-CAM")],
)  # fmt: skip
def test_thresholds_per_family_at_their_edges(method: str, family: str) -> None:
    """Below 'weak from' passes, from it weak, from 'fails from' fails, per the family's own."""
    assert quick.family_of(method) == family
    for check in ("class", "randomised"):
        weak, fails = quick.THRESHOLDS[family][check]
        assert 0 < weak < fails and (fails < 1 or fails == math.inf)
        assert verdict_of(check, weak - 0.01, method) == PASSES
        assert verdict_of(check, weak, method) == WEAK
        # a map the same as its check's map (1.0) fails, unless the check is weak-only
        assert verdict_of(check, 1.0, method) == (FAILS if fails < 1 else WEAK)
        if fails < 1:
            assert verdict_of(check, fails - 0.001, method) == WEAK
            assert verdict_of(check, fails, method) == FAILS
        assert verdict_of(check, math.nan, method) == WEAK


def test_completeness_and_road_thresholds() -> None:
    weak, fails = quick.THRESHOLDS["input gradient"]["completeness"]
    ig = "integrated_gradients"
    values = (weak / 2, weak, fails, fails * 2)
    assert [verdict_of("completeness", v, ig) for v in values] == [PASSES, WEAK, FAILS, FAILS]
    assert [verdict_of("road", value) for value in (0.2, 0.1, 0.05, 0.0, -0.1)] == [
        PASSES, PASSES, WEAK, FAILS, FAILS,
    ]  # fmt: skip


def test_the_families_thresholds_differ_where_the_calibration_found_them_to() -> None:
    """A layer map's randomisation figure is judged by the layer family's thresholds, not the
    gradient's: the same figure can pass one and fail the other."""
    layer = quick.THRESHOLDS["layer"]["randomised"]
    gradient = quick.THRESHOLDS["input gradient"]["randomised"]
    assert layer != gradient
    between = (min(layer[1], gradient[1]) + max(layer[1], gradient[1])) / 2
    assert {
        verdict_of("randomised", between, "gradcam"),
        verdict_of("randomised", between, "gradient"),
    } >= {FAILS}


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


def test_spearman_badges_say_what_was_measured_and_what_it_means() -> None:
    weak, fails = quick.THRESHOLDS["input gradient"]["class"]
    low = quick._spearman_badge("class", 0.12)
    assert (low.check, low.verdict, low.figure, low.label) == (
        "class",
        PASSES,
        0.12,
        "class ρ 0.12",
    )
    assert low.meaning == (
        "Spearman ρ 0.12 between this map and the same method's map for the runner-up class: "
        "the map changes with the class asked about, as a map of the class should."
    )
    assert quick._spearman_badge("class", weak).meaning.endswith(
        "the map changes only partly with the class: much of it is common to both classes."
    )
    assert quick._spearman_badge("class", 1.0).verdict == WEAK  # weak-only
    randomised = quick._spearman_badge("randomised", 0.999, "gradcam", "layer3")
    assert (randomised.verdict, randomised.label) == (FAILS, "randomised ρ 1.00")
    assert randomised.meaning == (
        "Spearman ρ 1.00 between this map and the map after the model's weights from the "
        "output down to layer3 were redrawn at random: the map barely changes when the weights "
        "that feed it are random: it shows the image or the architecture, not what the model "
        "learned."
    )
    constant = quick._spearman_badge("class", math.nan)
    assert (constant.verdict, constant.label) == (WEAK, "class ρ nan")
    assert constant.meaning.endswith(
        "the map is constant (nothing for the class), so it has no order to compare."
    )


def test_gradient_x_input_badges_say_what_they_cannot_tell() -> None:
    plain = quick._spearman_badge("randomised", 0.1, "gradient")
    times_input = quick._spearman_badge("randomised", 0.1, "gradient_x_input")
    assert "can tell a map that is the image alone" not in plain.meaning
    assert times_input.meaning.endswith(
        "Gradient × input is mostly the image itself (each pixel times its gradient): this "
        "badge can tell a map that is the image alone, not whether the model's part of it is "
        "right; read the gradient's badge for that."
    )


def test_completeness_badges_say_what_the_figure_means() -> None:
    weak, fails = quick.THRESHOLDS["input gradient"]["completeness"]
    adds_up = "the attributions add up to F(x) − F(baseline)"
    does_not = "the attributions do not add up to F(x) − F(baseline): more path steps needed"
    measured = "between the sum of the attributions and F(x) − F(baseline)"
    assert quick._completeness_badge(weak / 2) == Badge(
        "completeness", PASSES, weak / 2, f"sum error {weak / 2:.0%}",
        f"{weak / 2:.1%} {measured}: {adds_up}",
    )  # fmt: skip
    assert quick._completeness_badge(fails * 2) == Badge(
        "completeness", FAILS, fails * 2, f"sum error {fails * 2:.0%}",
        f"{fails * 2:.1%} {measured}: {does_not}",
    )  # fmt: skip


def ig_checks(
    model: nn.Module,
    images: torch.Tensor,
    indices: list[int],
    target: str,
    classes: torch.Tensor,
    reduction: str = "sum",
) -> tuple[attribution.Attribution, quick.QuickChecks]:
    """Integrated Gradients (6 steps from a grey image, 0.5) shown, and its badges (only
    completeness: it costs no time)."""
    labels = torch.zeros(len(images), dtype=torch.long)
    labels[indices] = classes.long()
    request = GradientRequest.build(
        model, images, indices, labels=labels, target=target, classes=classes, reduction=reduction
    )
    shown = attribution.build("integrated_gradients", {"steps": 6, "baseline": 0.5}).attribute(
        request
    )
    checks = quick_checks(
        model, images, indices, "integrated_gradients", target, classes, shown=shown,
        budget_s=-1.0,
    )  # fmt: skip
    return shown, checks


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_ig_completeness_of_the_loss_from_a_grey_baseline(
    float64_cnn: nn.Module, float64_images: torch.Tensor, reduction: str
) -> None:
    """The loss of each pick's label at the image and at a grey image, and the maps' sums (a
    mean over the k picks scales each map by 1/k), written out per image."""
    indices, labels = [2, 5, 0], torch.tensor([1, 7, 4], dtype=torch.int32)  # as numpy gives
    shown, checks = ig_checks(float64_cnn, float64_images, indices, "loss", labels, reduction)
    grey = torch.full_like(float64_images[:1], 0.5)
    scale = len(indices) if reduction == "mean" else 1
    expected = []
    for position, index in enumerate(indices):
        label = labels[position : position + 1].long()
        with torch.no_grad():
            at_image = F.cross_entropy(float64_cnn(float64_images[index : index + 1]), label)
            at_grey = F.cross_entropy(float64_cnn(grey), label)
        total = float(shown.maps[position].sum()) * scale
        difference = float(at_image - at_grey)
        expected.append(abs(total - difference) / abs(difference))
    assert figures(checks, "completeness") == pytest.approx(expected, rel=1e-9)


def test_ig_completeness_when_the_logit_does_not_move() -> None:
    """F(x) = F(baseline): exact (0) when the maps sum to 0 too, else infinitely wrong."""
    flat = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 3)).double()
    with torch.no_grad():
        flat[1].weight.zero_()  # the logits are the bias, whatever the image
    model = freeze(flat)
    images = torch.rand(4, 3, 4, 4, generator=torch.Generator().manual_seed(0)).double()
    classes = torch.tensor([0, 2, 1])
    shown, checks = ig_checks(model, images, [3, 0, 1], "logit", classes)
    assert figures(checks, "completeness") == [0.0, 0.0, 0.0]
    moved = dataclasses.replace(shown, maps=shown.maps + 1.0)
    wrong = quick_checks(
        model, images, [3, 0, 1], "integrated_gradients", "logit", classes, shown=moved,
        budget_s=-1.0,
    )  # fmt: skip
    assert figures(wrong, "completeness") == [math.inf] * 3
    assert [pick.verdict for pick in wrong.picks] == [FAILS] * 3


def loss_saliency(model: nn.Module, image: torch.Tensor, label: int) -> np.ndarray:
    """max over channels of |d cross-entropy(label) / d image| for one image, by autograd."""
    leaf = image.detach().clone().unsqueeze(0).requires_grad_(True)
    F.cross_entropy(model(leaf), torch.tensor([label])).backward()
    assert leaf.grad is not None
    return leaf.grad[0].abs().amax(dim=0).numpy()


def test_the_class_check_of_loss_maps_uses_each_picks_label(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    indices, labels = [1, 4], torch.tensor([6, 2])
    checks = quick_checks(
        float64_cnn, float64_images, indices, "gradient", "loss", labels, budget_s=UNLIMITED
    )
    for position, index in enumerate(indices):
        image, label = float64_images[index], int(labels[position])
        logits = float64_cnn(image.unsqueeze(0))[0].detach()
        logits[label] = -math.inf
        other = int(logits.argmax())  # the most likely class other than the label
        own, against = (
            loss_saliency(float64_cnn, image, label),
            loss_saliency(float64_cnn, image, other),
        )
        expected = spearmanr(own.ravel(), against.ravel()).statistic
        assert figures(checks, "class")[position] == pytest.approx(expected, abs=1e-9)


def test_a_layer_method_is_checked_at_the_chosen_layer(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    indices = [0, 3]
    with torch.no_grad():
        order = float64_cnn(float64_images[indices]).argsort(dim=1, descending=True)
    held, runner_up = order[:, 0], order[:, 1]
    checks = quick_checks(
        float64_cnn, float64_images, indices, "gradcam", "logit", held,
        settings=MethodSettings(layer="1"), budget_s=UNLIMITED,
    )  # fmt: skip

    def cam(classes: torch.Tensor) -> np.ndarray:
        maps = attribution.attribute(
            float64_cnn, float64_images, indices, target="logit", classes=classes,
            method="gradcam", layer="1",
        ).maps  # fmt: skip
        return maps.abs().amax(dim=1).flatten(1).numpy()

    own, against = cam(held), cam(runner_up)
    expected = [spearmanr(a, b).statistic for a, b in zip(own, against, strict=True)]
    assert figures(checks, "class") == pytest.approx(expected, abs=1e-9)


def test_the_randomised_copy_is_frozen_and_redraws_a_models_own_parameters() -> None:
    model = freeze(Direct())  # its weight is its own, not a submodule's
    copied = quick.randomised_copy(model, torch.rand(1, 3, 12, 12, dtype=torch.float64))
    assert not any(parameter.requires_grad for parameter in copied.parameters())
    assert not copied.training
    # By hand: N(0, rms^2) of the trained weight, from SeedSequence((seed 0, step 0)).
    state = int(np.random.SeedSequence((0, 0)).generate_state(1)[0])
    draw = torch.randn(3, 432, generator=torch.Generator().manual_seed(state), dtype=torch.float64)
    rms = model.weight.detach().square().mean().sqrt()
    assert torch.allclose(copied.weight, draw * rms, rtol=1e-12, atol=0)


def test_road_badges_are_the_mean_gap_of_the_held_class_at_three_shares(
    tiny_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    images, indices = float64_images.float(), [2, 5]
    with torch.no_grad():
        held = tiny_cnn(images[indices]).argsort(dim=1, descending=True)[:, 2]  # not predicted
    checks = quick_checks(tiny_cnn, images, indices, "gradient", "logit", held, budget_s=UNLIMITED)
    maps = attribution.attribute(
        tiny_cnn, images, indices, target="logit", classes=held, method="gradient"
    ).maps
    curves = road(
        tiny_cnn, images, indices, {"map": attribution_order(maps)}, held, (0.1, 0.5, 0.9)
    )["map"]
    expected = (curves.lerf - curves.morf).mean(dim=1).tolist()
    assert figures(checks, "road") == pytest.approx(expected, abs=1e-12)


def test_road_badges_say_what_the_gap_means(
    tiny_cnn: nn.Module, float64_images: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Curves given by hand: mean gaps +0.3 (passes), +0.05 (weak) and -0.2 (fails)."""
    lerf = torch.tensor([[0.9, 0.8, 0.7], [0.5, 0.5, 0.5], [0.2, 0.2, 0.2]], dtype=torch.float64)
    morf = lerf - torch.tensor([[0.3], [0.05], [-0.2]], dtype=torch.float64)

    def given(*_: object, **__: object) -> dict[str, RoadCurves]:
        return {"map": RoadCurves(torch.tensor([0.1, 0.5, 0.9]), morf, lerf)}

    monkeypatch.setattr(quick, "road", given)
    images = float64_images.float()
    held = torch.tensor([0, 1, 2])
    checks = quick_checks(
        tiny_cnn, images, [0, 1, 2], "gradient", "logit", held, budget_s=UNLIMITED
    )
    badges = [next(b for b in pick.badges if b.check == "road") for pick in checks.picks]
    hurts = "removing its top pixels hurts the class more than removing its bottom ones"
    no_more = "removing its top pixels hurts the class no more than removing its bottom ones"
    measured = "(class probability with the bottom pixels removed minus with the top ones, by ROAD)"
    assert [(b.verdict, b.label, b.meaning) for b in badges] == [
        (PASSES, "ROAD gap +0.30", f"+0.30 {measured}: {hurts}"),
        (WEAK, "ROAD gap +0.05", f"+0.05 {measured}: {hurts}"),
        (FAILS, "ROAD gap -0.20", f"-0.20 {measured}: {no_more}"),
    ]
    assert [b.figure for b in badges] == pytest.approx([0.3, 0.05, -0.2], abs=1e-12)


def test_road_runs_only_when_its_measured_cost_per_pick_fits(
    tiny_cnn: nn.Module, float64_images: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    images, indices = float64_images.float(), [0, 1, 2, 3]
    held = torch.tensor([1, 2, 3, 4])
    monkeypatch.setattr(quick, "_road_cost", {})
    started = time.perf_counter()
    checks = quick_checks(tiny_cnn, images, indices, "gradient", "logit", held, budget_s=UNLIMITED)
    took = (time.perf_counter() - started) * 1000
    assert checks.method == "gradient" and 0 < checks.milliseconds <= took
    (shape,) = quick._road_cost
    assert shape == (3, 32, 32)  # keyed by the image size, channels included
    # Seconds per pick: four picks' ROAD took at most the whole call.
    assert 0 < quick._road_cost[shape] * len(indices) <= checks.milliseconds / 1000
    # 100 s a pick for 4 picks does not fit in 200 s; the map checks (about no time) do.
    quick._road_cost[shape] = 100.0
    slow = quick_checks(tiny_cnn, images, indices, "gradient", "logit", held, budget_s=200.0)
    assert slow.skipped == ("road",)
    assert [b.check for b in slow.picks[0].badges] == ["class", "randomised", "skipped"]
    assert slow.picks[0].badges[-1].meaning == (
        "ROAD did not fit in this click's time budget (200,000 ms): run them with the button "
        "below the badges, or see the full checks in the Trust tab"
    )
    # Maps not shown yet cost no budget of their own: 0.9 s is enough for the map checks.
    tight = quick_checks(tiny_cnn, images, indices, "gradient", "logit", held, budget_s=0.9)
    assert tight.skipped == ("road",)


def test_the_map_checks_run_only_when_the_shown_maps_time_fits(
    tiny_cnn: nn.Module, float64_images: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    images, indices = float64_images.float(), [0, 1]
    held = torch.tensor([5, 6])
    monkeypatch.setitem(quick._road_cost, (3, 32, 32), 1e6)  # ROAD never fits here
    request = GradientRequest.build(tiny_cnn, images, indices, target="logit", classes=held)
    shown = attribution.build("gradient", {}).attribute(request)

    def checked(milliseconds: float) -> quick.QuickChecks:
        took = dataclasses.replace(shown, milliseconds=milliseconds)
        return quick_checks(
            tiny_cnn, images, indices, "gradient", "logit", held, shown=took, budget_s=20.0
        )

    assert checked(500.0).skipped == ("road",)  # a map of 0.5 s fits twice in 20 s
    none = checked(30_000.0)
    assert none.skipped == ("class", "randomised", "road")
    (note,) = none.picks[1].badges
    assert (note.check, note.label) == ("skipped", "class, randomisation, ROAD")


def test_the_shown_maps_and_logits_are_used_as_given(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    indices = [1, 3]
    held = torch.tensor([2, 8], dtype=torch.int32)
    # Logits that make class 0 every pick's runner-up, whatever the model says.
    logits = torch.full((2, 10), -5.0, dtype=torch.float64)
    logits[:, 0] = 1.0
    logits[[0, 1], held.long()] = 3.0
    checks = quick_checks(
        float64_cnn, float64_images, indices, "gradient", "logit", held, logits=logits,
        budget_s=UNLIMITED,
    )  # fmt: skip
    for position, index in enumerate(indices):
        image = float64_images[index]
        own = hand_saliency(float64_cnn, image, int(held[position]))
        against = hand_saliency(float64_cnn, image, 0)
        expected = spearmanr(own.ravel(), against.ravel()).statistic
        assert figures(checks, "class")[position] == pytest.approx(expected, abs=1e-9)
    # Shown maps that are the runner-up's own: the class check compares them with themselves.
    request = GradientRequest.build(
        float64_cnn, float64_images, indices, target="logit", classes=[0, 0]
    )
    runner_up = attribution.build("gradient", {}).attribute(request)
    same = quick_checks(
        float64_cnn, float64_images, indices, "gradient", "logit", held, shown=runner_up,
        logits=logits, budget_s=UNLIMITED,
    )  # fmt: skip
    assert figures(same, "class") == pytest.approx([1.0, 1.0], abs=1e-12)


def test_making_the_randomised_copy_counts_in_the_budget(
    float64_images: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy not made yet costs its parameters' bytes at the measured rate: at 1 byte a second
    it does not fit 1,000 s, so the randomised check is not run (the class check is); once the
    copy is made, the same budget runs it."""
    model = freeze(copy.deepcopy(nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10)).double()))
    monkeypatch.setattr(quick, "_copy_rate", [1.0])
    monkeypatch.setitem(quick._road_cost, (3, 32, 32), 1e9)  # ROAD never fits here
    held = torch.tensor([2])
    first = quick_checks(model, float64_images, [0], "gradient", "logit", held, budget_s=1000.0)
    assert first.skipped == ("randomised", "road")
    assert [check for check, _ in first.check_ms] == ["class"]
    quick.randomised_copy(model, float64_images[:1], None)
    second = quick_checks(model, float64_images, [0], "gradient", "logit", held, budget_s=1000.0)
    assert second.skipped == ("road",)


def test_methods_at_the_automatic_layer_share_one_copy(
    tiny_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    example = float64_images[:1].float()
    automatic = quick.randomised_copy(tiny_cnn, example, None)
    assert quick.randomised_copy(tiny_cnn, example, "3") is automatic  # '3': its automatic layer
    assert quick.randomised_copy(tiny_cnn, example, "2") is not automatic


def test_checks_that_do_not_run_cost_no_layer_probe(
    tiny_cnn: nn.Module, float64_images: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big model's first click: finding the automatic layer is a forward of its own, so it
    happens only when the randomised check runs."""

    def refused(*_: object) -> None:
        raise AssertionError("the layer was probed")

    monkeypatch.setattr(quick, "_map_layer", refused)
    found = quick_checks(
        tiny_cnn, float64_images.float(), [1], "gradient", "logit", torch.tensor([3]),
        budget_s=-1.0,
    )  # fmt: skip
    assert found.skipped == ("class", "randomised", "road")
