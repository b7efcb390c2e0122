"""Baseline images: black, seeded uniform noise per batch index, and the Gaussian blur."""

from __future__ import annotations

import math

import pytest
import torch

from gradpick.errors import InputError
from gradpick.trust.baselines import baseline_images, blurred


def test_black_is_zeros_and_noise_depends_on_the_index_not_the_position() -> None:
    images = torch.rand(3, 3, 8, 8, dtype=torch.float64)
    assert torch.equal(baseline_images(images, "black", [4, 5, 6]), torch.zeros_like(images))
    together = baseline_images(images, "uniform_noise", [4, 5, 6], seed=1)
    alone = baseline_images(images[1:2], "uniform_noise", [5], seed=1)
    assert torch.equal(together[1], alone[0])
    assert not torch.equal(together[0], together[1])
    assert (
        together.dtype == torch.float64 and 0 <= float(together.min()) < float(together.max()) <= 1
    )


def test_blur_keeps_a_constant_image_and_its_mean_and_smooths_a_point() -> None:
    flat = torch.full((1, 3, 9, 9), 0.3, dtype=torch.float64)
    assert torch.allclose(blurred(flat), flat)
    point = torch.zeros(1, 1, 31, 31, dtype=torch.float64)
    point[0, 0, 15, 15] = 1.0
    spread = blurred(point, sigma=2.0)
    assert float(spread.sum()) == pytest.approx(1.0)  # far from the edges nothing is lost
    assert float(spread.max()) < 0.1 and float(spread[0, 0, 15, 15]) == float(spread.max())
    # Separable Gaussian: the row through the centre falls off as exp(-d^2 / (2 sigma^2)).
    ratio = float(spread[0, 0, 15, 17] / spread[0, 0, 15, 15])
    assert ratio == pytest.approx(math.exp(-4 / 8.0), rel=1e-12)


def test_unknown_baseline_and_bad_sigma_are_refused() -> None:
    with pytest.raises(InputError, match="Unknown baseline"):
        baseline_images(torch.rand(1, 3, 4, 4), "grey", [0])
    with pytest.raises(InputError, match="sigma"):
        blurred(torch.rand(1, 3, 4, 4), sigma=0.0)
