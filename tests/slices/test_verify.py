"""Verification by intervention: the evidence removed against the same area at random, judged
by a ratio and a Fisher exact test (checked against scipy's), never by an absolute rate."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import fisher_exact

from gradpick.data.planted import plant
from gradpick.slices.verify import (
    RANDOM_DRAWS,
    colour_interventions,
    fisher_greater,
    interventions,
    judged,
    odds_ratio,
    saturated,
)
from tests.slices.synthetic import Detector


@pytest.mark.parametrize(
    "table", [(9, 10, 5, 40), (0, 10, 3, 40), (10, 10, 40, 40), (3, 12, 1, 48), (5, 5, 0, 20)]
)
def test_fisher_matches_scipy(table: tuple[int, int, int, int]) -> None:
    changed, tested, control, control_tested = table
    expected = fisher_exact(
        [[changed, tested - changed], [control, control_tested - control]], alternative="greater"
    ).pvalue
    assert fisher_greater(changed, tested, control, control_tested) == pytest.approx(expected)


def test_a_high_rate_is_not_verified_when_the_control_changes_as_often() -> None:
    changed = np.ones(40, dtype=bool)
    control = np.ones((40, 4), dtype=bool)
    control[:, 0] = False  # 75% of random removals change the call too
    effect = judged(changed, control)
    assert effect.evidence_change == 1.0 and effect.random_change == 0.75
    assert effect.ratio == pytest.approx(1 / 0.75)
    assert not effect.verified


def test_a_clear_difference_is_verified_and_a_small_sample_is_not() -> None:
    control = np.zeros((30, 4), dtype=bool)
    control[:3, 0] = True
    changed = np.zeros(30, dtype=bool)
    changed[:20] = True
    effect = judged(changed, control)
    assert effect.ratio == pytest.approx((20 / 30) / (3 / 120))
    assert effect.p_value < 0.01 and effect.verified
    few = judged(np.array([True, False]), np.zeros((2, 4), dtype=bool))
    assert math.isinf(few.ratio) and not few.verified  # p = 0.2 with two images
    assert few.to_json()["ratio"] is None


@pytest.mark.parametrize(
    ("share", "control", "expected"),
    [
        (0.85, 0.11, (0.85 / 0.15) / (0.11 / 0.89)),
        (0.5, 0.5, 1.0),
        (0.0, 0.0, 1.0),
        (1.0, 1.0, 1.0),
        (0.3, 0.0, math.inf),
        (1.0, 0.2, math.inf),
        (0.0, 0.2, 0.0),
        (0.2, 1.0, 0.0),
    ],
)
def test_the_odds_ratio_of_two_shares(share: float, control: float, expected: float) -> None:
    assert odds_ratio(share, control) == pytest.approx(expected)


def test_a_sure_effect_over_a_busy_control_verifies_on_the_odds_not_on_the_rates() -> None:
    # 51 of 60 treated images called the target (85%) against 7 of 64 controls (11%): the
    # ratio of rates cannot pass 8 once the control's rate is over 1/8, the odds ratio can.
    changed = np.arange(60) < 51
    control = (np.arange(64) < 7)[:, None]
    on_rates = judged(changed, control)
    on_odds = judged(changed, control, on_odds=True)
    assert on_rates.ratio == on_odds.ratio == pytest.approx((51 / 60) / (7 / 64))
    assert on_odds.odds_ratio == pytest.approx((51 / 9) / (7 / 57))
    assert not on_rates.verified and on_rates.statistic == "ratio"
    assert on_odds.verified and on_odds.statistic == "odds_ratio"
    assert on_odds.to_json()["odds_ratio"] == pytest.approx(on_odds.odds_ratio)
    # The odds ratio still needs its significance: the same shares in a handful of images.
    assert not judged(changed[::12], control[::12], on_odds=True).verified
    # And an effect no larger than the control's verifies on neither.
    assert not judged(np.arange(60) < 7, control, on_odds=True).verified


def _images(count: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    base = torch.full((count, 3, 32, 32), 0.25)
    base[:, 0] = 0.7  # red
    return (base + 0.2 * torch.rand(base.shape, generator=generator) - 0.1).clamp(0, 1)


def test_removing_a_planted_patch_changes_the_call_and_random_removals_rarely_do() -> None:
    model = Detector().eval()
    images = plant(_images(24, 0), "patch", 0, range(24))
    maps = images.images.new_zeros(24, 32, 32)
    maps[images.masks] = 1.0  # the map of a method that finds the patch exactly
    called = model(images.images).argmax(dim=1)
    assert bool((called == 2).all())  # the shortcut: every patched red image is called blue
    changed, control = interventions(model, images.images, maps, called)
    assert changed.all()
    assert control.shape == (24, RANDOM_DRAWS)
    # A random window changes the call only where it covers the patch whole.
    assert control.mean() < 0.2
    assert judged(changed, control).verified


def test_removals_that_change_nothing_verify_nothing() -> None:
    model = Detector().eval()
    images = _images(24, 1)
    maps = torch.rand(24, 32, 32, generator=torch.Generator().manual_seed(2))
    called = model(images).argmax(dim=1)
    changed, control = interventions(model, images, maps, called)
    effect = judged(changed, control)
    assert not changed.any() and not control.any()
    assert effect.tested == 24 and effect.random_change == 0.0 and not effect.verified


def test_saturation_scales_the_colour_about_each_pixels_luma() -> None:
    images = torch.rand(3, 3, 4, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    red, green, blue = images[:, 0], images[:, 1], images[:, 2]
    luma = 0.299 * red + 0.587 * green + 0.114 * blue
    grey = saturated(images, 0.0)
    for channel in range(3):
        assert torch.allclose(grey[:, channel], luma, atol=1e-15)
    assert torch.allclose(saturated(images, 1.0), images, atol=1e-15)
    half = saturated(images, 0.5)
    assert torch.allclose(half[:, 0], (red + luma) / 2, atol=1e-15)
    assert half.dtype == torch.float64
    assert float(saturated(images, 5.0).max()) <= 1.0 and float(saturated(images, 5.0).min()) >= 0


class _GreyMeansOne(torch.nn.Module):
    """Class 1 when the image has almost no colour (mean channel spread under 0.05), else 0."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        spread = (images.amax(dim=1) - images.amin(dim=1)).mean(dim=(1, 2))
        return torch.stack([spread - 0.05, 0.05 - spread], dim=1)


class _GreyAndDarkMeansOne(_GreyMeansOne):
    """Class 1 only for a grey image that is also dark (mean under 0.5): greying makes
    class 1 of dark images only, a colour cause of one kind of image."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        grey = super().forward(images)[:, 1] > 0
        dark = images.mean(dim=(1, 2, 3)) < 0.5
        return torch.stack([(~(grey & dark)).double(), (grey & dark).double()], dim=1)


def test_a_colour_cause_verifies_and_a_colour_change_that_confuses_everything_does_not() -> None:
    treated, control = _images(30, 1), 1 - _images(60, 2)  # dark red images; light cyan ones
    changed, unchanged = colour_interventions(_GreyAndDarkMeansOne(), treated, control, 1, 0.0)
    assert changed.all() and unchanged.shape == (60, 1) and not unchanged.any()
    assert judged(changed, unchanged, on_odds=True).verified
    # Greying makes every image class 1 for this model: the control moves as much.
    changed, moved = colour_interventions(_GreyMeansOne().eval(), treated, control, 1, 0.0)
    assert changed.all() and moved.all()
    assert not judged(changed, moved, on_odds=True).verified
    # Leaving the colour as it is changes nothing.
    same, still = colour_interventions(_GreyMeansOne().eval(), treated, control, 1, 1.0)
    assert not same.any() and not still.any()
    assert not judged(same, still, on_odds=True).verified
