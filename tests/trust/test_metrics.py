"""Spearman and SSIM against small hand computations, scipy and scikit-image."""

from __future__ import annotations

import math

import pytest
import torch

from gradpick.errors import InputError
from gradpick.trust.metrics import ranks, spearman, ssim


def test_ranks_share_the_mean_rank_among_ties() -> None:
    values = torch.tensor([[10.0, 20.0, 20.0, 5.0]])
    assert ranks(values).tolist() == [[2.0, 3.5, 3.5, 1.0]]


def test_spearman_by_hand() -> None:
    # One swapped pair of four: 1 - 6 * sum(d^2) / (n (n^2 - 1)) = 1 - 6 * 2 / 60 = 0.8.
    first = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]])
    second = torch.tensor([[1.0, 3.0, 2.0, 4.0], [40.0, 30.0, 20.0, 10.0]])
    assert spearman(first, second).tolist() == pytest.approx([0.8, -1.0])


def test_spearman_with_ties_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    generator = torch.Generator().manual_seed(0)
    first = torch.randint(0, 5, (3, 40), generator=generator).double()
    second = torch.randint(0, 5, (3, 40), generator=generator).double()
    expected = [stats.spearmanr(a, b).statistic for a, b in zip(first, second, strict=True)]
    assert spearman(first, second).tolist() == pytest.approx(expected, abs=1e-12)


def test_spearman_of_a_constant_map_is_undefined() -> None:
    result = spearman(torch.ones(1, 9), torch.arange(9.0).view(1, 9))
    assert math.isnan(float(result[0]))


def test_ssim_of_identical_maps_is_one() -> None:
    maps = torch.rand(2, 16, 16, generator=torch.Generator().manual_seed(1))
    assert ssim(maps, maps).tolist() == pytest.approx([1.0, 1.0], abs=1e-12)


def test_ssim_of_two_constant_maps_by_hand() -> None:
    # No variance or covariance, so SSIM = (2 a b + C1) / (a^2 + b^2 + C1), C1 = (0.01)^2.
    a, b, c1 = 0.2, 0.6, 0.01**2
    first, second = torch.full((1, 12, 12), a), torch.full((1, 12, 12), b)
    expected = (2 * a * b + c1) / (a * a + b * b + c1)
    assert float(ssim(first, second)[0]) == pytest.approx(expected, rel=1e-6)


def test_ssim_matches_scikit_image() -> None:
    metrics = pytest.importorskip("skimage.metrics")
    generator = torch.Generator().manual_seed(2)
    first = torch.rand(3, 32, 32, generator=generator, dtype=torch.float64)
    second = (first + 0.4 * torch.rand(3, 32, 32, generator=generator, dtype=torch.float64)) / 1.4
    expected = [
        metrics.structural_similarity(
            a.numpy(),
            b.numpy(),
            data_range=1.0,
            gaussian_weights=True,
            sigma=1.5,
            use_sample_covariance=False,
        )
        for a, b in zip(first, second, strict=True)
    ]
    assert ssim(first, second).tolist() == pytest.approx(expected, abs=1e-12)


def test_maps_too_small_or_of_two_shapes_are_refused() -> None:
    with pytest.raises(InputError, match="at least 11 x 11"):
        ssim(torch.rand(1, 8, 8), torch.rand(1, 8, 8))
    with pytest.raises(InputError, match="one shape"):
        ssim(torch.rand(1, 16, 16), torch.rand(1, 16, 15))
    with pytest.raises(InputError, match="one shape"):
        spearman(torch.rand(2, 5), torch.rand(3, 5))


@pytest.mark.parametrize(("shape", "data_range"), [((2, 11, 11), 1.0), ((1, 13, 24), 2.5)])
def test_ssim_of_the_smallest_and_of_oblong_maps_matches_scikit_image(
    shape: tuple[int, ...], data_range: float
) -> None:
    metrics = pytest.importorskip("skimage.metrics")
    generator = torch.Generator().manual_seed(8)
    first = torch.rand(shape, generator=generator, dtype=torch.float64) * data_range
    second = first.flip(-1) * 0.5 + 0.3 * torch.rand(shape, generator=generator).double()
    expected = [
        metrics.structural_similarity(
            a.numpy(), b.numpy(), data_range=data_range, gaussian_weights=True, sigma=1.5,
            use_sample_covariance=False,
        )
        for a, b in zip(first, second, strict=True)
    ]  # fmt: skip
    assert ssim(first, second, data_range).tolist() == pytest.approx(expected, abs=1e-12)


def test_maps_of_one_value_each_or_of_the_wrong_rank_are_refused() -> None:
    with pytest.raises(InputError) as refused:
        spearman(torch.rand(5), torch.rand(5))
    assert str(refused.value) == "Compare maps of one shape [k, ...]; got (5,) and (5,)."
    with pytest.raises(InputError) as refused:
        ssim(torch.rand(16, 16), torch.rand(16, 16))
    assert str(refused.value) == (
        "SSIM compares maps [k, H, W] of one shape; got (16, 16) and (16, 16)."
    )
    with pytest.raises(InputError) as refused:
        ssim(torch.rand(1, 10, 30), torch.rand(1, 10, 30))
    assert str(refused.value) == "SSIM needs maps of at least 11 x 11 pixels."


def test_spearman_of_float32_maps_of_three_dimensions() -> None:
    # Ranks [1, 2, 3, 4] against [2, 1, 4, 3]: 1 - 6 * 4 / 60 = 0.6, in float64 whatever given.
    first = torch.tensor([[[0.1, 0.2], [0.3, 0.4]]])
    second = torch.tensor([[[0.5, 0.1], [0.9, 0.7]]])
    result = spearman(first, second)
    assert result.dtype == torch.float64 and result.tolist() == pytest.approx([0.6], abs=1e-15)


def test_spearman_of_maps_of_two_pixels_is_plus_or_minus_one() -> None:
    # Ranks [1, 2]: centred [-1/2, 1/2], each sum of squares 1/2, so the product of spreads is
    # 1/2 (below 1) and still defines the correlation; only a constant map has none.
    first = torch.tensor([[0.2, 0.7], [0.2, 0.7], [0.5, 0.5]])
    second = torch.tensor([[0.1, 0.3], [0.9, 0.3], [0.1, 0.3]])
    result = spearman(first, second)
    assert result[:2].tolist() == [1.0, -1.0] and math.isnan(float(result[2]))
