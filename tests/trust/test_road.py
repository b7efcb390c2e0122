"""ROAD: the imputation against the paper's linear system solved directly, the curves against
pytorch-grad-cam's ROAD, and the noise seeded per image."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_grad_cam.metrics.perturbation_confidence import (
    PerturbationConfidenceMetric,
    RemoveLeastRelevantFirst,
    RemoveMostRelevantFirst,
)
from pytorch_grad_cam.metrics.road import NoisyLinearImputer
from pytorch_grad_cam.utils.model_targets import ClassifierOutputSoftmaxTarget
from torch import nn

from gradpick.errors import InputError
from gradpick.models.shipped import freeze
from gradpick.trust.engine import MethodSettings, attribute_maps, held_classes, saliency
from gradpick.trust.faithfulness import attribution_order
from gradpick.trust.road import check_noise, check_shares, impute, road
from tests.trust.test_faithfulness import sigmoid

OFFSETS = {(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)} - {(0, 0)}


def dense_imputation(image: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """The paper's system written out: each removed pixel is the weighted mean of its neighbours
    inside the image (direct 1/6, diagonal 1/12), one dense solve per channel."""
    height, width = removed.shape
    unknown = [(y, x) for y in range(height) for x in range(width) if removed[y, x]]
    number = {pixel: row for row, pixel in enumerate(unknown)}
    filled = image.copy()
    for channel in range(image.shape[0]):
        matrix = np.zeros((len(unknown), len(unknown)))
        right = np.zeros(len(unknown))
        for row, (y, x) in enumerate(unknown):
            for dy, dx in OFFSETS:
                ny, nx = y + dy, x + dx
                if not (0 <= ny < height and 0 <= nx < width):
                    continue
                weight = 1 / 6 if dy == 0 or dx == 0 else 1 / 12
                matrix[row, row] += weight
                if removed[ny, nx]:
                    matrix[row, number[(ny, nx)]] -= weight
                else:
                    right[row] += weight * image[channel, ny, nx]
        solution = np.linalg.solve(matrix, right)
        for row, (y, x) in enumerate(unknown):
            filled[channel, y, x] = solution[row]
    return filled


def test_imputation_solves_the_papers_linear_system() -> None:
    generator = torch.Generator().manual_seed(5)
    images = torch.rand(2, 3, 6, 6, generator=generator, dtype=torch.float64)
    removed = torch.zeros(2, 6, 6, dtype=torch.bool)
    removed[0, 0, 0] = removed[0, 0, 1] = removed[0, 1, 0] = True  # a corner cluster
    removed[0, 2:5, 2:5] = True  # an inner block, some pixels with no known neighbour
    removed[0, 5, 3] = True  # an edge pixel
    removed[1] = torch.rand(6, 6, generator=generator) < 0.7
    removed[1, 3, 3] = False  # keep one pixel, at least
    filled = impute(images, removed)
    for image, mask, result in zip(images, removed, filled, strict=True):
        expected = dense_imputation(image.numpy(), mask.numpy())
        np.testing.assert_allclose(result.numpy(), expected, rtol=0, atol=1e-9)
        assert torch.equal(result[:, ~mask], image[:, ~mask])


def test_nothing_removed_leaves_the_image_and_a_float32_image_stays_float32() -> None:
    images = torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    assert torch.equal(impute(images, torch.zeros(1, 8, 8, dtype=torch.bool)), images)
    removed = torch.zeros(1, 8, 8, dtype=torch.bool)
    removed[0, 4, 4] = True
    filled = impute(images, removed)
    assert filled.dtype == torch.float32
    neighbours = images[0, :, 3:6, 3:6]
    weights = torch.tensor([[1, 2, 1], [2, 0, 2], [1, 2, 1]], dtype=torch.float32) / 12
    assert torch.allclose(filled[0, :, 4, 4], (neighbours * weights).sum(dim=(1, 2)))


PERCENTILES = (80, 70, 60, 50, 40, 30, 20)
"""pytorch-grad-cam removes the pixels at or above a linearly interpolated percentile; on 1,024
distinct values that is round(share x 1,024) pixels for these (at 10 and 90 it is one more or
one fewer), so both remove the same pixels."""
GRAD_CAM_TOLERANCE = 1e-5
"""pytorch-grad-cam solves in float64 and rounds to float32; this solves to 1e-10 in float64."""


@pytest.mark.filterwarnings("ignore:__array_wrap__ must accept context:DeprecationWarning")
def test_curves_equal_pytorch_grad_cams_road(tiny_cnn: nn.Module, random_batch) -> None:
    images, indices = random_batch.images, [0, 3, 7]
    held = held_classes(tiny_cnn, images, indices, None)
    maps = attribute_maps(tiny_cnn, images, indices, "gradient", held, MethodSettings())
    shares = [(100 - percentile) / 100 for percentile in PERCENTILES]
    curves = road(
        tiny_cnn, images, indices, {"gradient": attribution_order(maps)}, held, shares, noise=0
    )["gradient"]
    cams = saliency(maps).numpy()
    picked = images[indices]
    targets = [ClassifierOutputSoftmaxTarget(int(value)) for value in held]
    for position, percentile in enumerate(PERCENTILES):
        for removal, ours in (
            (RemoveMostRelevantFirst, curves.morf),
            (RemoveLeastRelevantFirst, curves.lerf),
        ):
            metric = PerturbationConfidenceMetric(removal(percentile, NoisyLinearImputer(noise=0)))
            theirs = metric(picked, cams, targets, tiny_cnn, return_diff=False)
            np.testing.assert_allclose(
                ours[:, position].numpy(), theirs, rtol=0, atol=GRAD_CAM_TOLERANCE
            )


def test_most_relevant_first_is_least_relevant_first_of_the_reversed_order(
    tiny_cnn: nn.Module, random_batch
) -> None:
    images, indices = random_batch.images, [2, 5]
    order = torch.stack(
        [torch.randperm(1024, generator=torch.Generator().manual_seed(i)) for i in indices]
    )
    curves = road(tiny_cnn, images, indices, {"ahead": order, "back": order.flip(1)}, seed=4)
    assert torch.equal(curves["ahead"].morf, curves["back"].lerf)
    assert torch.equal(curves["ahead"].lerf, curves["back"].morf)
    assert torch.equal(curves["ahead"].gap, -curves["back"].gap)
    unchanged = tiny_cnn(images[indices]).softmax(dim=1).max(dim=1).values.double()
    assert torch.allclose(curves["ahead"].morf[:, 0], unchanged, atol=1e-6)


def test_noise_is_seeded_per_image_and_the_curves_do_not_depend_on_batching(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    def curves(indices: list[int], seed: int, noise: float = 0.05) -> torch.Tensor:
        orders = {"flat": torch.arange(1024).expand(len(indices), 1024)}
        result = road(float64_cnn, float64_images, indices, orders, noise=noise, seed=seed)
        return torch.cat([result["flat"].morf, result["flat"].lerf], dim=1)

    together = curves([4, 1, 3], seed=7)
    apart = torch.cat([curves([4], seed=7), curves([1, 3], seed=7)])
    assert torch.allclose(together, apart, rtol=1e-9, atol=1e-12)
    assert torch.equal(curves([4, 1, 3], seed=7), together)
    assert not torch.allclose(curves([4, 1, 3], seed=8), together)
    quiet = curves([4, 1, 3], seed=7, noise=0.0)
    assert not torch.allclose(quiet, together)
    assert torch.allclose(quiet[:, 0], together[:, 0])  # share 0: nothing filled, no noise


@pytest.mark.parametrize(
    ("shares", "message"),
    [
        ((0.5,), "at least two increasing"),
        ((0.2, 0.1), "at least two increasing"),
        ((0.0, 1.0), "not including"),
        ((0.0, float("nan")), "not including"),
    ],
)
def test_bad_shares_are_refused(tiny_cnn: nn.Module, random_batch, shares, message) -> None:
    orders = {"flat": torch.arange(1024).expand(1, 1024)}
    with pytest.raises(InputError, match=message):
        road(tiny_cnn, random_batch.images, [0], orders, shares=shares)


def test_bad_noise_and_orders_are_refused(tiny_cnn: nn.Module, random_batch) -> None:
    orders = {"flat": torch.arange(1024).expand(1, 1024)}
    with pytest.raises(InputError, match="standard deviation of at least 0"):
        road(tiny_cnn, random_batch.images, [0], orders, noise=-0.1)
    with pytest.raises(InputError, match="must be \\[k, H \\* W\\]"):
        road(tiny_cnn, random_batch.images, [0, 1], orders)


def test_the_curves_of_a_linear_model_by_hand_with_seeded_noise() -> None:
    """logit 1 = w . x, logit 0 = 0, so P(class 1) = sigmoid(w . x) of the filled image: the
    removed pixels solved densely, plus noise x N(0, 1) drawn by hand per (seed, batch index)."""
    side, pixels = 4, 16
    weights = torch.linspace(-1.0, 1.5, 2 * pixels, dtype=torch.float64)
    layer = nn.Linear(2 * pixels, 2, bias=False).double()
    with torch.no_grad():
        layer.weight.zero_()
        layer.weight[1] = weights
    model = freeze(nn.Sequential(nn.Flatten(), layer))
    images = torch.rand(4, 2, side, side, generator=torch.Generator().manual_seed(6)).double()
    indices, shares, noise, seed = [3, 1], (0.0, 0.25, 0.5), 0.2, 5
    orders = torch.stack(
        [torch.randperm(pixels, generator=torch.Generator().manual_seed(i)) for i in (8, 9)]
    )
    curves = road(model, images, indices, {"map": orders}, 1, shares, noise, seed)["map"]
    assert curves.fractions.tolist() == list(shares)
    for row, index in enumerate(indices):
        state = int(np.random.SeedSequence((seed, index)).generate_state(1)[0])
        generator = torch.Generator().manual_seed(state)
        draws = torch.randn(len(shares), 2, side, side, generator=generator, dtype=torch.float64)
        ranked = orders[row].tolist()
        for position, share in enumerate(shares):
            taken = round(share * pixels)
            for removed, curve in (
                (ranked[:taken], curves.morf),
                (ranked[pixels - taken :], curves.lerf),
            ):
                mask = np.zeros((side, side), dtype=bool)
                mask.flat[removed] = True
                image = images[index].numpy()
                filled = dense_imputation(image, mask) if mask.any() else image
                filled = filled + noise * draws[position].numpy() * mask
                expected = sigmoid(float(weights.numpy() @ filled.ravel()))
                assert float(curve[row, position]) == pytest.approx(expected, rel=1e-8)


def test_share_and_noise_refusals_in_whole_sentences() -> None:
    assert check_shares([0.1, 0.5]) == (0.1, 0.5)  # two shares are enough
    assert check_shares([0, 0.5]) == (0.0, 0.5) and isinstance(check_shares([0, 0.5])[0], float)
    for shares in ([0.2, 0.2], [False, 0.5], ["0.1", 0.5]):
        with pytest.raises(InputError) as refused:
            check_shares(shares)
        assert str(refused.value) == (
            "ROAD shares are the fractions of pixels removed: give at least two increasing "
            f"numbers from 0 up to (not including) 1; got {shares!r}."
        )
    assert check_noise(0) == 0.0 and isinstance(check_noise(0), float)
    for noise in (True, "0.1", float("inf")):
        with pytest.raises(InputError) as refused:
            check_noise(noise)  # type: ignore[arg-type]
        assert str(refused.value) == (
            f"ROAD's noise must be a standard deviation of at least 0; got {noise!r}."
        )


def test_removed_pixels_of_the_wrong_shape_are_named_with_the_images_shape() -> None:
    with pytest.raises(InputError) as refused:
        impute(torch.zeros(2, 3, 4, 4), torch.zeros(2, 3, 4, dtype=torch.bool))
    assert str(refused.value) == (
        "The removed pixels must be [n, H, W] for images (2, 3, 4, 4); got (2, 3, 4)."
    )


def test_the_default_seed_the_given_classes_and_seeds_and_the_exact_shares(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    orders = {"flat": torch.arange(1024).expand(1, 1024)}
    shares = (0.0, 0.1, 0.3)

    def curves(**options: object) -> torch.Tensor:
        found = road(float64_cnn, float64_images, [4], orders, shares=shares, **options)["flat"]
        assert found.fractions.dtype == torch.float64
        assert found.fractions.tolist() == list(shares)  # 0.1, not float32's 0.10000000149
        return torch.cat([found.morf, found.lerf], dim=1)

    assert torch.equal(curves(), curves(seed=0))
    assert not torch.allclose(curves(), curves(seed=1))
    # The picks alone, each seeded by its batch index: the same noise as from the whole batch.
    alone = road(float64_cnn, float64_images[[4]], [0], orders, shares=shares, seeds=[4])["flat"]
    assert torch.equal(torch.cat([alone.morf, alone.lerf], dim=1), curves())
    # A class given is the class read, not the prediction: at share 0 nothing is removed.
    probabilities = float64_cnn(float64_images[[4]]).softmax(dim=1)[0]
    other = int(probabilities.argmin())
    given = road(float64_cnn, float64_images, [4], orders, classes=[other], shares=shares)
    assert given["flat"].morf[0, 0] == pytest.approx(float(probabilities[other]), rel=1e-12)
    assert given["flat"].morf[0, 0] < probabilities.max()
