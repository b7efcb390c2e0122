"""Baseline images: black, seeded uniform noise per batch index, and the Gaussian blur."""

from __future__ import annotations

import math

import numpy as np
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


@pytest.mark.parametrize("sigma", [2.0, 1.5, 0.3])
def test_blur_equals_scipys_gaussian_filter_with_edges_replicated(sigma: float) -> None:
    ndimage = pytest.importorskip("scipy.ndimage")
    images = torch.rand(2, 3, 20, 17, generator=torch.Generator().manual_seed(3)).double()
    # scipy's window reaches int(truncate * sigma + 0.5) pixels, this one ceil(3 sigma) (at
    # least 1): 6, 5 and 1 pixels for these sigmas either way, with truncate 3.
    expected = np.stack(
        [
            [ndimage.gaussian_filter(channel, sigma, mode="nearest", truncate=3.0)
             for channel in image]
            for image in images.numpy()
        ]
    )  # fmt: skip
    np.testing.assert_allclose(blurred(images, sigma).numpy(), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("sigma", [-1.0, math.inf, math.nan])
def test_a_sigma_that_is_not_a_positive_number_is_refused(sigma: float) -> None:
    with pytest.raises(InputError) as refused:
        blurred(torch.rand(1, 3, 4, 4), sigma=sigma)
    assert str(refused.value) == (
        f"The blur's sigma must be a positive number of pixels; got {sigma!r}."
    )


def test_the_blurred_baseline_is_the_default_blur_and_unknown_ones_are_named() -> None:
    images = torch.rand(2, 3, 9, 9, generator=torch.Generator().manual_seed(1)).double()
    assert torch.equal(baseline_images(images, "blurred", [0, 1]), blurred(images, 2.0))
    noise = baseline_images(images.float(), "uniform_noise", [3, 4], seed=2)
    assert noise.dtype == torch.float32 and noise.shape == images.shape
    with pytest.raises(InputError) as refused:
        baseline_images(images, "grey", [0, 1])
    assert str(refused.value) == (
        "Unknown baseline 'grey'; use one of black, uniform_noise, blurred."
    )


def test_noise_is_seeded_with_0_by_default_and_needs_one_index_per_image() -> None:
    """Without a seed, image i's noise is U(0, 1) from SeedSequence((0, i)); a pick whose
    indices do not match its images one to one is refused rather than cut short."""
    images = torch.zeros(2, 3, 5, 4, dtype=torch.float64)
    noise = baseline_images(images, "uniform_noise", [7, 2])
    for row, index in enumerate([7, 2]):
        state = int(np.random.SeedSequence((0, index)).generate_state(1)[0])
        generator = torch.Generator().manual_seed(state)
        expected = torch.rand((3, 5, 4), generator=generator, dtype=torch.float64)
        assert torch.equal(noise[row], expected)
    with pytest.raises(ValueError, match="zip"):
        baseline_images(images, "uniform_noise", [7, 2, 5])
    with pytest.raises(ValueError, match="zip"):
        baseline_images(images, "uniform_noise", [7])
