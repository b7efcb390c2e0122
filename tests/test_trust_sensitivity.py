"""Class sensitivity: hand-computed maps and scipy's Spearman, and a class-blind map flagged."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr
from skimage.metrics import structural_similarity
from torch import nn

from gradpick.errors import InputError
from gradpick.trust import sensitivity
from gradpick.trust.engine import MethodSettings
from gradpick.trust.sensitivity import KINDS, class_sensitivity, other_classes


def hand_gradient(model: nn.Module, image: torch.Tensor, target: int) -> torch.Tensor:
    """d logit[target] / d image for one image [C, H, W], by plain autograd."""
    leaf = image.detach().clone().unsqueeze(0).requires_grad_(True)
    model(leaf)[0, target].backward()
    assert leaf.grad is not None
    return leaf.grad[0]


def hand_saliency(gradient: torch.Tensor) -> np.ndarray:
    return gradient.abs().amax(dim=0).numpy()


def test_spearman_and_ssim_equal_a_hand_computation(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    indices = [4, 1]
    rows = class_sensitivity(float64_cnn, float64_images, indices, methods=("gradient",), seed=3)
    assert [row.kind for row in rows] == list(KINDS)
    for row in rows:
        for position, index in enumerate(indices):
            image = float64_images[index]
            logits = float64_cnn(image.unsqueeze(0))[0].detach()
            held = int(logits.argmax())
            assert int(row.classes[position]) == held
            other = int(row.other_classes[position])
            if row.kind == "runner_up":
                assert other == int(logits.argsort(descending=True)[1])
            else:
                assert other not in (held, int(logits.argsort(descending=True)[1]))
            own = hand_saliency(hand_gradient(float64_cnn, image, held))
            theirs = hand_saliency(hand_gradient(float64_cnn, image, other))
            expected = spearmanr(own.ravel(), theirs.ravel()).statistic
            assert float(row.spearman[position]) == pytest.approx(expected, abs=1e-9)
            similarity = structural_similarity(
                own / own.max(),
                theirs / theirs.max(),
                data_range=1.0,
                gaussian_weights=True,
                sigma=1.5,
                use_sample_covariance=False,
            )
            assert float(row.ssim[position]) == pytest.approx(similarity, abs=1e-9)


def test_the_random_class_is_seeded_by_image_not_by_position(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    def drawn(indices: Sequence[int], seed: int) -> list[int]:
        rows = class_sensitivity(float64_cnn, float64_images, indices, seed=seed)
        return next(row for row in rows if row.kind == "random").other_classes.tolist()

    together = drawn([0, 1, 2, 3, 4, 5], seed=0)
    assert drawn([3], seed=0) == together[3:4]
    assert drawn([5, 0], seed=0) == [together[5], together[0]]
    assert [drawn(range(6), seed) for seed in range(4)] != [together] * 4


def test_given_held_maps_give_the_same_rows(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    settings = MethodSettings(samples=3, steps=4)
    methods = ("smoothgrad", "integrated_gradients")
    computed = class_sensitivity(float64_cnn, float64_images, [2, 0], methods, settings=settings)
    held = {row.method: row for row in computed}
    given = {
        method: sensitivity.attribute_maps(
            float64_cnn, float64_images, [2, 0], method, held[method].classes, settings
        )
        for method in methods
    }
    reused = class_sensitivity(
        float64_cnn, float64_images, [2, 0], methods, settings=settings, held_maps=given
    )
    for first, second in zip(computed, reused, strict=True):
        assert torch.allclose(first.spearman, second.spearman, rtol=0, atol=1e-12)
        assert torch.allclose(first.ssim, second.ssim, rtol=0, atol=1e-12)


def edges(images: torch.Tensor) -> torch.Tensor:
    """A class-blind "map": the image's edge strength, the same for every class [k, C, H, W]."""
    grey = images.mean(dim=1, keepdim=True)
    across = F.pad(grey[..., :, 1:] - grey[..., :, :-1], (0, 1, 0, 0))
    down = F.pad(grey[..., 1:, :] - grey[..., :-1, :], (0, 0, 0, 1))
    return (across.square() + down.square()).sqrt().expand_as(images)


def test_a_class_blind_map_is_flagged_and_the_gradient_is_not(
    tiny_cnn: nn.Module, random_batch, monkeypatch: pytest.MonkeyPatch
) -> None:
    images, indices = random_batch.images, [0, 3, 5, 9]
    honest = class_sensitivity(tiny_cnn, images, indices, methods=("gradient",))
    for row in honest:
        assert not row.insensitive.any(), row.spearman
        assert (row.spearman < 0.8).all()

    def blind(model, images, indices, method, classes, settings):  # noqa: ARG001
        return edges(images[torch.tensor(list(indices))])

    monkeypatch.setattr(sensitivity, "attribute_maps", blind)
    flagged = class_sensitivity(tiny_cnn, images, indices, methods=("gradient",))
    for row in flagged:
        assert row.insensitive.all()
        assert torch.allclose(row.spearman, torch.ones(len(indices), dtype=torch.float64))
        assert torch.allclose(row.ssim, torch.ones(len(indices), dtype=torch.float64))


def test_other_classes_of_a_two_class_model_and_bad_models() -> None:
    logits = torch.tensor([[0.1, 2.0], [3.0, -1.0]])
    held = torch.tensor([1, 0])
    others = other_classes(logits, held, [0, 1])
    assert others["runner_up"].tolist() == [0, 1] == others["random"].tolist()
    held_second = other_classes(torch.tensor([[5.0, 1.0, 3.0]]), torch.tensor([2]), [0])
    assert held_second["runner_up"].tolist() == [0] and held_second["random"].tolist() == [1]
    with pytest.raises(InputError, match="at least two classes"):
        other_classes(torch.zeros(1, 1), torch.tensor([0]), [0])
