"""Batched inference equals calling the model directly, with no graph and clear input errors."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradpick.errors import DeviceUnavailableError, InputError, ModelError
from gradpick.infer import as_model_input, infer, last_linear, penultimate_features


def direct_logits(model: nn.Module, images: torch.Tensor, batch_size: int) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(batch) for batch in images.split(batch_size)])


def test_outputs_equal_a_direct_model_call_on_the_same_batches(
    tiny_bn_cnn: nn.Module, random_batch: Any
) -> None:
    images, labels = random_batch
    result = infer(tiny_bn_cnn, images, labels, batch_size=5)
    expected = direct_logits(tiny_bn_cnn, images, 5)

    assert torch.equal(result.logits, expected)
    assert torch.equal(result.probabilities, expected.softmax(dim=1))
    assert torch.equal(result.predictions, expected.argmax(dim=1))
    assert torch.equal(result.confidences, expected.softmax(dim=1).amax(dim=1))
    assert result.losses is not None
    assert torch.equal(result.losses, F.cross_entropy(expected, labels, reduction="none"))
    assert result.correct is not None
    assert torch.equal(result.correct, expected.argmax(dim=1) == labels)
    assert result.accuracy == pytest.approx(
        float((expected.argmax(dim=1) == labels).float().mean())
    )
    assert len(result) == 16 and result.device == "cpu"
    assert result.milliseconds > 0 and result.images_per_second > 0


def test_uint8_and_float_images_give_the_same_logits(
    tiny_cnn: nn.Module, random_batch: Any
) -> None:
    pixels = (random_batch.images * 255).round().to(torch.uint8)
    # The same batches for both: a float32 convolution may round differently at another batch
    # size (the CPU backend picks its kernel by shape), which is not what this test is about.
    from_uint8 = infer(tiny_cnn, pixels, batch_size=7)
    from_float = infer(tiny_cnn, pixels.float() / 255, batch_size=7)
    assert torch.equal(from_uint8.logits, from_float.logits)
    assert torch.equal(as_model_input(pixels), pixels.float() / 255)


def test_unlabelled_images_have_no_losses_or_accuracy(
    tiny_cnn: nn.Module, random_batch: Any
) -> None:
    result = infer(tiny_cnn, random_batch.images)
    assert result.labels is None and result.losses is None
    assert result.correct is None and result.accuracy is None


def test_progress_is_reported_per_batch(tiny_cnn: nn.Module, random_batch: Any) -> None:
    calls: list[tuple[int, int]] = []
    infer(tiny_cnn, random_batch.images[:10], batch_size=4, progress=lambda *c: calls.append(c))
    assert calls == [(4, 10), (8, 10), (10, 10)]


def test_no_graph_is_built_even_for_a_trainable_model(
    tiny_cnn: nn.Module, random_batch: Any
) -> None:
    for parameter in tiny_cnn.parameters():
        parameter.requires_grad_(True)
    result = infer(tiny_cnn, *random_batch)
    for output in (result.logits, result.probabilities, result.losses):
        assert output is not None and not output.requires_grad and output.grad_fn is None
    assert all(parameter.grad is None for parameter in tiny_cnn.parameters())


def test_a_float64_model_gets_float64_inputs_and_float32_outputs(
    tiny_cnn: nn.Module, random_batch: Any
) -> None:
    model = tiny_cnn.double()
    pixels = (random_batch.images * 255).to(torch.uint8)
    result = infer(model, pixels)
    assert result.logits.dtype == torch.float32
    expected = direct_logits(model, pixels.double() / 255, 16).float()
    assert torch.equal(result.logits, expected)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"labels": torch.zeros(15, dtype=torch.long)}, "Expected 16 labels"),
        ({"labels": torch.full((16,), 10)}, "Labels must be classes 0 to 9"),
        ({"batch_size": 0}, "batch_size must be at least 1"),
        ({"images": torch.rand(3, 32, 32)}, "[N, C, H, W]"),
        ({"images": torch.rand(0, 3, 32, 32)}, "no images"),
        ({"images": torch.full((2, 3, 32, 32), float("nan"))}, "NaN"),
        ({"images": torch.ones(2, 3, 32, 32, dtype=torch.int32)}, "uint8 or floating point"),
        ({"images": torch.rand(2, 3, 24, 24)}, "could not process images of shape (3, 24, 24)"),
    ],
    ids=[
        "labels shape",
        "label range",
        "batch size",
        "3-D",
        "empty",
        "NaN",
        "int32",
        "wrong size",
    ],
)
def test_bad_input_is_an_input_error(
    tiny_cnn: nn.Module, random_batch: Any, change: dict[str, Any], message: str
) -> None:
    call = {"images": random_batch.images, "labels": None, **change}
    with pytest.raises(InputError) as caught:
        infer(tiny_cnn, **call)
    assert message in str(caught.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_an_unavailable_device_is_refused(tiny_cnn: nn.Module, random_batch: Any) -> None:
    with pytest.raises(DeviceUnavailableError, match="not available"):
        infer(tiny_cnn, random_batch.images, device="cuda")


def _two_layer_head(features_dim: int = 6) -> nn.Module:
    torch.manual_seed(3)
    net = nn.Sequential(
        nn.Conv2d(3, 4, 3, stride=4),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 8 * 8, features_dim),
        nn.ReLU(),
        nn.Linear(features_dim, 10),
    )
    return net.eval().requires_grad_(False)


def test_features_are_the_input_of_the_last_linear_layer_batch_by_batch(
    random_batch: Any,
) -> None:
    model = _two_layer_head()
    result = infer(model, random_batch.images, batch_size=5, features=True)
    with torch.no_grad():
        expected = torch.cat([model[:5](batch) for batch in random_batch.images.split(5)])
    assert result.features is not None and result.features.shape == (16, 6)
    assert torch.equal(result.features, expected)
    assert torch.equal(result.logits, direct_logits(model, random_batch.images, 5))


def test_features_are_off_by_default_and_the_hooks_are_removed(random_batch: Any) -> None:
    model = _two_layer_head()
    assert infer(model, random_batch.images).features is None
    infer(model, random_batch.images, features=True)
    assert not model._forward_hooks and not model[5]._forward_pre_hooks
    with penultimate_features(model) as captured, torch.no_grad():
        model(random_batch.images[:3])
        model(random_batch.images[3:4])
    assert [tuple(part.shape) for part in captured] == [(3, 6), (1, 6)]
    assert not model._forward_hooks and not model[5]._forward_pre_hooks


def test_a_model_without_a_linear_layer_has_no_features(random_batch: Any) -> None:
    model = nn.Sequential(nn.Conv2d(3, 10, 32), nn.Flatten()).eval()
    assert last_linear(model) is None
    assert infer(model, random_batch.images, features=True).features is None
    with pytest.raises(ModelError, match="no nn.Linear"), penultimate_features(model):
        pass
