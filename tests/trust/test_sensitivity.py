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


def hand_random_class(logits: torch.Tensor, held: int, index: int, seed: int) -> int:
    """The docstring's draw: uniform over the classes that are neither the held one nor the
    runner-up, from a CPU generator seeded by SeedSequence((seed, batch index))."""
    others = logits.clone()
    others[held] = -torch.inf
    runner_up = int(others.argmax())
    choices = [value for value in range(len(logits)) if value not in (held, runner_up)]
    state = int(np.random.SeedSequence((seed, index)).generate_state(1)[0])
    position = torch.randint(len(choices), (1,), generator=torch.Generator().manual_seed(state))
    return choices[int(position)]


def test_the_random_class_is_seeded_with_0_by_default() -> None:
    logits = torch.randn(6, 10, generator=torch.Generator().manual_seed(9))
    held = logits.argmax(dim=1)
    indices = [3, 11, 0, 7, 5, 2]
    drawn = other_classes(logits, held, indices)["random"]
    by_hand = [
        hand_random_class(logits[row], int(held[row]), index, seed=0)
        for row, index in enumerate(indices)
    ]
    assert drawn.tolist() == by_hand and drawn.dtype == torch.long
    seed_one = [
        hand_random_class(logits[row], int(held[row]), index, seed=1)
        for row, index in enumerate(indices)
    ]
    assert seed_one != by_hand  # so the default seed shows


def test_held_classes_of_any_integer_dtype_and_mismatched_lengths() -> None:
    logits = torch.tensor([[0.1, 2.0, 0.5, 0.3], [3.0, -1.0, 0.0, 0.2]])
    for dtype in (torch.int16, torch.uint8):
        others = other_classes(logits, torch.tensor([1, 0], dtype=dtype), [0, 1])
        assert others["runner_up"].tolist() == [2, 3]
    with pytest.raises(ValueError, match="zip"):
        other_classes(logits, torch.tensor([1, 0]), [0])  # one index for two picks
    with pytest.raises(InputError) as refused:
        other_classes(torch.zeros(2, 1), torch.tensor([0, 0]), [0, 1])
    assert str(refused.value) == "Class sensitivity needs a model with at least two classes."


def test_given_classes_are_held_and_the_other_maps_are_their_gradients(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    indices = [5, 2]
    rows = class_sensitivity(float64_cnn, float64_images, indices, classes=[7, 4], seed=2)
    for row in rows:
        assert row.classes.tolist() == [7, 4]
        for position, index in enumerate(indices):
            other = int(row.other_classes[position])
            assert other != [7, 4][position]
            wanted = hand_gradient(float64_cnn, float64_images[index], other)
            assert torch.allclose(row.other_maps[position], wanted, rtol=0, atol=1e-12)
            own = hand_saliency(hand_gradient(float64_cnn, float64_images[index], [7, 4][position]))
            expected = spearmanr(own.ravel(), hand_saliency(wanted).ravel()).statistic
            assert float(row.spearman[position]) == pytest.approx(expected, abs=1e-9)


def test_class_sensitivity_draws_with_seed_0_by_default(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    indices = [0, 1, 2, 3, 4, 5]
    with torch.no_grad():
        logits = float64_cnn(float64_images[indices])
    held = logits.argmax(dim=1)
    rows = class_sensitivity(float64_cnn, float64_images, indices)
    drawn = next(row for row in rows if row.kind == "random").other_classes.tolist()
    by_hand = [
        hand_random_class(logits[i], int(held[i]), index, 0) for i, index in enumerate(indices)
    ]
    assert drawn == by_hand
    assert by_hand != [
        hand_random_class(logits[i], int(held[i]), index, 1) for i, index in enumerate(indices)
    ]


def test_given_held_maps_are_used_and_not_recomputed(
    float64_cnn: nn.Module, float64_images: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given as the held maps, the runner-up's own maps match the runner-up row exactly
    (Spearman and SSIM 1), and each method's one attribution call asks only for the two
    other classes of each pick, not for the held class again."""
    indices = [4, 1]
    first = class_sensitivity(float64_cnn, float64_images, indices)
    runner_up = next(row for row in first if row.kind == "runner_up")
    requested: list[list[int]] = []
    real = sensitivity.attribute_maps

    def counted(model, images, repeated, method, classes, settings):  # noqa: ANN001
        requested.append(list(repeated))
        return real(model, images, repeated, method, classes, settings)

    monkeypatch.setattr(sensitivity, "attribute_maps", counted)
    rows = class_sensitivity(
        float64_cnn, float64_images, indices, held_maps={"gradient": runner_up.other_maps}
    )
    assert requested == [indices * 2]
    again = next(row for row in rows if row.kind == "runner_up")
    assert again.spearman.tolist() == pytest.approx([1.0, 1.0], abs=1e-12)
    assert again.ssim.tolist() == pytest.approx([1.0, 1.0], abs=1e-12)
