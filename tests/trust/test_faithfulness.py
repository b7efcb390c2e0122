"""Deletion and insertion curves: a linear model where every point is known, one forward a step."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.models.shipped import freeze
from gradpick.trust.baselines import blurred
from gradpick.trust.faithfulness import RANDOM, attribution_order, faithfulness, random_order

SIDE = 4
PIXELS = SIDE * SIDE


@pytest.fixture
def linear() -> nn.Module:
    """logit 0 = w . x over a 1 x 4 x 4 image, logit 1 = 0: P(class 0) = sigmoid(w . x)."""
    weights = torch.linspace(-1.5, 2.0, PIXELS, dtype=torch.float64)
    weights = weights[torch.randperm(PIXELS, generator=torch.Generator().manual_seed(0))]
    layer = nn.Linear(PIXELS, 2, bias=False).double()
    with torch.no_grad():
        layer.weight.zero_()
        layer.weight[0] = weights
    return freeze(nn.Sequential(nn.Flatten(), layer))


def sigmoid(value: float) -> float:
    return 1 / (1 + math.exp(-value))


def test_the_curves_of_a_linear_model_by_hand(linear: nn.Module) -> None:
    images = torch.rand(3, 1, SIDE, SIDE, generator=torch.Generator().manual_seed(1)).double()
    weights = linear[1].weight[0].detach()
    maps = (weights.view(1, 1, SIDE, SIDE) * images).detach()  # gradient x input of logit 0
    order = attribution_order(maps)
    curves = faithfulness(linear, images, [0, 2], {"map": order[[0, 2]]}, classes=0, steps=PIXELS)
    canvas = blurred(images)
    for row, index in enumerate([0, 2]):
        x, start = images[index].flatten(), canvas[index].flatten()
        ranking = sorted(range(PIXELS), key=lambda p: (-abs(float(weights[p] * x[p])), p))
        for share in range(PIXELS + 1):
            gone = set(ranking[:share])
            kept = sum(float(weights[p] * x[p]) for p in range(PIXELS) if p not in gone)
            shown = sum(
                float(weights[p] * (x[p] if p in gone else start[p])) for p in range(PIXELS)
            )
            assert float(curves["map"].deletion[row, share]) == pytest.approx(sigmoid(kept))
            assert float(curves["map"].insertion[row, share]) == pytest.approx(sigmoid(shown))
    fractions = curves["map"].fractions
    assert fractions.tolist() == pytest.approx([share / PIXELS for share in range(PIXELS + 1)])
    deletion = curves["map"].deletion[0].tolist()
    by_hand = sum((a + b) / 2 / PIXELS for a, b in zip(deletion, deletion[1:], strict=False))
    assert float(curves["map"].deletion_auc[0]) == pytest.approx(by_hand)
    assert set(curves) == {"map", RANDOM}


def test_every_step_is_one_forward_of_all_picks_and_orders(tiny_cnn: nn.Module) -> None:
    images = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    orders = {name: random_order([0, 1, 3], 32 * 32, seed) for name, seed in (("a", 5), ("b", 6))}
    rows: list[int] = []
    hook = tiny_cnn.register_forward_pre_hook(lambda _, inputs: rows.append(inputs[0].shape[0]))
    try:
        faithfulness(tiny_cnn, images, [0, 1, 3], orders, steps=8)
    finally:
        hook.remove()
    # One forward for the predicted classes, then one per step: 2 curves x 3 orders x 3 picks.
    assert rows == [3] + [18] * 9


def test_random_orders_follow_the_batch_index() -> None:
    together = random_order([7, 2, 9], 64, seed=1)
    assert torch.equal(together[1], random_order([2], 64, seed=1)[0])
    assert sorted(together[0].tolist()) == list(range(64))


def test_bad_orders_and_steps_are_refused(tiny_cnn: nn.Module) -> None:
    images = torch.rand(2, 3, 32, 32)
    with pytest.raises(InputError, match=r"must be \[k, H \* W\]"):
        faithfulness(tiny_cnn, images, [0, 1], {"map": torch.zeros(2, 10, dtype=torch.long)})
    with pytest.raises(InputError, match="steps must be a whole number from 1"):
        faithfulness(tiny_cnn, images, [0, 1], {}, steps=0)
    with pytest.raises(InputError, match="random-order reference"):
        faithfulness(tiny_cnn, images, [0, 1], {RANDOM: random_order([0, 1], 1024)})


def test_three_shares_and_the_random_order_by_hand(linear: nn.Module) -> None:
    """Three steps of 16 pixels remove round(16 s / 3) pixels (0, 5, 11, 16), and the random
    order is a permutation seeded by (seed, batch index)."""
    images = torch.rand(3, 1, SIDE, SIDE, generator=torch.Generator().manual_seed(4)).double()
    weights = linear[1].weight[0].detach()
    order = torch.arange(PIXELS).flip(0).expand(2, PIXELS)
    curves = faithfulness(linear, images, [2, 1], {"map": order}, classes=0, steps=3, seed=6)
    canvas = blurred(images)
    for row, index in enumerate([2, 1]):
        state = int(np.random.SeedSequence((6, index)).generate_state(1)[0])
        shuffled = torch.randperm(PIXELS, generator=torch.Generator().manual_seed(state))
        x, start = images[index].flatten(), canvas[index].flatten()
        for name, ranking in (("map", order[row].tolist()), (RANDOM, shuffled.tolist())):
            for share, count in enumerate((0, 5, 11, 16)):
                gone = set(ranking[:count])
                kept = sum(float(weights[p] * x[p]) for p in range(PIXELS) if p not in gone)
                shown = sum(
                    float(weights[p] * (x[p] if p in gone else start[p])) for p in range(PIXELS)
                )
                assert float(curves[name].deletion[row, share]) == pytest.approx(sigmoid(kept))
                assert float(curves[name].insertion[row, share]) == pytest.approx(sigmoid(shown))
    assert curves["map"].fractions.tolist() == pytest.approx([0, 1 / 3, 2 / 3, 1])
    insertion = curves[RANDOM].insertion[1].tolist()
    by_hand = sum((a + b) / 2 / 3 for a, b in zip(insertion, insertion[1:], strict=False))
    assert float(curves[RANDOM].insertion_auc[1]) == pytest.approx(by_hand)


def test_more_steps_than_the_most_are_refused(linear: nn.Module) -> None:
    images = torch.rand(1, 1, SIDE, SIDE).double()
    with pytest.raises(InputError) as refused:
        faithfulness(linear, images, [0], {}, steps=1025)
    assert str(refused.value) == (
        "Deletion and insertion steps must be a whole number from 1 to 1,024; got 1025."
    )
    assert faithfulness(linear, images, [0], {}, steps=1024)[RANDOM].deletion.shape == (1, 1025)


def test_tied_pixels_go_in_position_order() -> None:
    """ "Ties by position": a 10 x 10 map of three values lists each value's pixels in
    increasing position (large maps are where an unstable sort would shuffle them)."""
    values = torch.zeros(2, 1, 10, 10)
    values.view(2, -1)[:, ::3] = 2.0
    values.view(2, -1)[1, 1::7] = -3.0  # |.| counts: these come first in the second map
    order = attribution_order(values)
    flat = values.abs().view(2, -1)
    for row in range(2):
        by_hand = sorted(range(100), key=lambda p: (-float(flat[row, p]), p))
        assert order[row].tolist() == by_hand


def test_the_random_order_is_seeded_with_0_by_default(linear: nn.Module) -> None:
    for index in (0, 5):
        state = int(np.random.SeedSequence((0, index)).generate_state(1)[0])
        wanted = torch.randperm(PIXELS, generator=torch.Generator().manual_seed(state))
        assert torch.equal(random_order([index], PIXELS)[0], wanted)
    images = torch.rand(6, 1, SIDE, SIDE, generator=torch.Generator().manual_seed(2)).double()
    own = random_order([5, 0], PIXELS, seed=0)
    curves = faithfulness(linear, images, [5, 0], {"seed 0": own}, steps=4)
    assert torch.equal(curves[RANDOM].deletion, curves["seed 0"].deletion)
    assert torch.equal(curves[RANDOM].insertion, curves["seed 0"].insertion)


def test_the_given_class_is_read_and_fractions_are_float64(linear: nn.Module) -> None:
    """P(class 1) = 1 - sigmoid(w . x) on the linear model, whatever it predicts."""
    images = torch.rand(2, 1, SIDE, SIDE, generator=torch.Generator().manual_seed(3)).double()
    weights = linear[1].weight[0].detach()
    order = torch.arange(PIXELS).expand(2, PIXELS)
    curves = faithfulness(linear, images, [0, 1], {"map": order}, classes=1, steps=2)["map"]
    for row in range(2):
        x = images[row].flatten()
        kept = sum(float(weights[p] * x[p]) for p in range(PIXELS // 2, PIXELS))
        expected = [1 - sigmoid(float(weights @ x)), 1 - sigmoid(kept), 0.5]
        assert curves.deletion[row].tolist() == pytest.approx(expected)
    assert curves.fractions.dtype == torch.float64 and curves.fractions.tolist() == [0, 0.5, 1]
