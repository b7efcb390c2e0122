"""Top classes' maps and the contrast A - B from one forward equal plain per-sample autograd."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.models.shipped import freeze
from gradpick.trust.contrastive import class_maps

PICKS = [3, 0, 4]


def one_gradient(
    model: nn.Module, image: torch.Tensor, first: int, second: int | None
) -> torch.Tensor:
    image = image.clone().unsqueeze(0).requires_grad_(True)
    logits = model(image)[0]
    target = logits[first] - (logits[second] if second is not None else 0)
    return torch.autograd.grad(target, image)[0][0]


def test_top_maps_and_contrast_equal_per_sample_autograd(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    calls: list[int] = []
    hook = float64_cnn.register_forward_pre_hook(lambda _, inputs: calls.append(len(inputs[0])))
    try:
        maps = class_maps(float64_cnn, float64_images, PICKS, top=3)
    finally:
        hook.remove()
    assert calls == [3]  # one forward for every target
    with torch.no_grad():
        expected = float64_cnn(float64_images[PICKS]).softmax(dim=1).topk(3, dim=1)
    assert torch.equal(maps.top_classes, expected.indices)
    assert torch.allclose(maps.top_probabilities, expected.values)
    assert torch.equal(maps.contrast, expected.indices[:, :2])
    for row, index in enumerate(PICKS):
        for rank in range(3):
            wanted = one_gradient(
                float64_cnn, float64_images[index], int(maps.top_classes[row, rank]), None
            )
            assert torch.allclose(maps.top_maps[row, rank], wanted, rtol=0, atol=1e-12)
        a, b = maps.contrast[row].tolist()
        wanted = one_gradient(float64_cnn, float64_images[index], a, b)
        assert torch.allclose(maps.contrast_maps[row], wanted, rtol=0, atol=1e-12)
        logits = float64_cnn(float64_images[index : index + 1])[0]
        assert float(maps.contrast_values[row]) == pytest.approx(float(logits[a] - logits[b]))
    assert maps.top_maps.dtype == torch.float64 and maps.indices == tuple(PICKS)


def test_a_given_pair_applies_to_every_pick(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    maps = class_maps(float64_cnn, float64_images, PICKS, top=1, contrast=(3, 5))
    assert maps.contrast.tolist() == [[3, 5]] * 3 and maps.top_maps.shape[1] == 1
    wanted = one_gradient(float64_cnn, float64_images[PICKS[1]], 3, 5)
    assert torch.allclose(maps.contrast_maps[1], wanted, rtol=0, atol=1e-12)


def test_bad_pairs_and_counts_are_refused(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    with pytest.raises(InputError, match="Class 10 is out of range"):
        class_maps(float64_cnn, float64_images, PICKS, contrast=(1, 10))
    with pytest.raises(InputError, match="one per picked image"):
        class_maps(float64_cnn, float64_images, PICKS, contrast=[(1, 2), (2, 3)])
    with pytest.raises(InputError, match="top classes must be a whole number from 1 to 10"):
        class_maps(float64_cnn, float64_images, PICKS, top=11)


def test_one_pair_per_pick_and_the_default_top_three(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    pairs = [(1, 2), (9, 0), (4, 4)]
    maps = class_maps(float64_cnn, float64_images, PICKS, contrast=pairs)
    assert maps.contrast.tolist() == [list(pair) for pair in pairs]
    assert maps.top_classes.shape == (3, 3) and maps.top_maps.shape == (3, 3, 3, 32, 32)
    with torch.no_grad():
        logits = float64_cnn(float64_images[PICKS])
    by_hand = [float(logits[row, a] - logits[row, b]) for row, (a, b) in enumerate(pairs)]
    assert maps.contrast_values.tolist() == pytest.approx(by_hand, abs=1e-12)
    assert torch.equal(maps.contrast_maps[2], torch.zeros(3, 32, 32, dtype=torch.float64))


def test_a_one_output_model_has_no_contrast_and_a_bad_model_is_named() -> None:
    images = torch.rand(2, 3, 4, 4)
    single = freeze(nn.Sequential(nn.Flatten(), nn.Linear(48, 1)))
    with pytest.raises(InputError) as refused:
        class_maps(single, images, [0, 1], top=1)
    assert str(refused.value) == "A contrast needs a model with at least two classes."
    flat = freeze(nn.Sequential(nn.Flatten(0), nn.Linear(96, 4)))
    with pytest.raises(InputError) as refused:
        class_maps(flat, images, [0, 1], top=1)
    assert str(refused.value) == (
        "The model must map [N, C, H, W] to [N, classes]; it returned (4,)."
    )


def test_the_first_class_out_of_range_is_named(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    with pytest.raises(InputError) as refused:
        class_maps(float64_cnn, float64_images, PICKS, top=1, contrast=(12, 10))
    assert str(refused.value) == (
        "Class 12 is out of range for a model with 10 outputs (valid classes 0 to 9)."
    )


def test_a_pair_given_as_a_narrow_integer_tensor_is_taken_as_long_classes(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    """Classes are indices: an int32 (A, B) works as (3, 5) would, and comes back as long."""
    maps = class_maps(
        float64_cnn, float64_images, PICKS, top=1, contrast=torch.tensor([3, 5], dtype=torch.int32)
    )
    assert maps.contrast.dtype == torch.long and maps.contrast.tolist() == [[3, 5]] * 3
    wanted = one_gradient(float64_cnn, float64_images[PICKS[2]], 3, 5)
    assert torch.allclose(maps.contrast_maps[2], wanted, rtol=0, atol=1e-12)


class Pooled(nn.Module):
    """A bad model: one row of logits for the whole batch, [1, 4] for any N."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(48, 4)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.layer(images.flatten(1)).sum(dim=0, keepdim=True)


def test_a_model_with_one_row_for_the_batch_and_too_many_top_classes_are_refused() -> None:
    images = torch.rand(2, 3, 4, 4)
    with pytest.raises(InputError) as refused:
        class_maps(freeze(Pooled()), images, [0, 1], top=1)
    assert str(refused.value) == (
        "The model must map [N, C, H, W] to [N, classes]; it returned (1, 4)."
    )
    four = freeze(nn.Sequential(nn.Flatten(), nn.Linear(48, 4)))
    with pytest.raises(InputError) as refused:
        class_maps(four, images, [0, 1], top=5)
    assert str(refused.value) == (
        "The number of top classes must be a whole number from 1 to 4; got 5."
    )
