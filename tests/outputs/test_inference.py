"""Batched inference equals calling the model directly, with no graph and clear input errors."""

from __future__ import annotations

import copy
import math
import threading
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradpick.data import image_folder, load_batch
from gradpick.errors import DeviceUnavailableError, InputError
from gradpick.outputs.inference import (
    InferenceResult,
    as_model_input,
    capture_embeddings,
    embedding_layer,
    infer,
    infer_source,
    logits_and_embeddings,
)


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


def test_entropy_is_zero_when_certain_and_log_classes_when_uniform() -> None:
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0], [2.0, 1.0, 0.0, 0.0]])
    result = InferenceResult(
        logits, logits.softmax(dim=1), logits.argmax(dim=1), logits.softmax(1).amax(1),
        None, None, "cpu", 1.0,
    )  # fmt: skip
    entropies = result.entropies
    assert entropies[0] == pytest.approx(math.log(4)) and entropies[1] == pytest.approx(0, abs=1e-6)
    p = logits[2].softmax(dim=0)
    assert entropies[2] == pytest.approx(float(-(p * p.log()).sum()))


# ----------------------------------------------------------------------------- from a source


@pytest.fixture
def ten_class_source(image_folder_factory: Any) -> Any:
    classes = [f"c{index}" for index in range(10)]
    return image_folder(image_folder_factory(classes=classes, per_class=3))


def test_inference_from_a_source_equals_inference_of_its_batch(
    tiny_cnn: nn.Module, ten_class_source: Any
) -> None:
    batch = load_batch(ten_class_source)
    expected = infer(tiny_cnn, batch.images, batch.labels, batch_size=8)
    inferred = infer_source(tiny_cnn, ten_class_source, batch_size=8, workers=1)
    assert inferred.positions == tuple(range(30)) and inferred.notes == ()
    assert torch.equal(inferred.result.logits, expected.logits)
    assert inferred.result.losses is not None and expected.losses is not None
    assert torch.equal(inferred.result.losses, expected.losses)
    assert inferred.embeddings is None


def test_embeddings_are_the_input_of_the_last_linear_layer(
    tiny_cnn: nn.Module, ten_class_source: Any
) -> None:
    assert embedding_layer(tiny_cnn) is tiny_cnn[-1]
    inferred = infer_source(tiny_cnn, ten_class_source, [4, 2, 9], batch_size=2, embeddings=True)
    images = as_model_input(ten_class_source.read([4, 2, 9]))
    with torch.no_grad():
        features = tiny_cnn[:-1](images)
    assert inferred.embeddings is not None and inferred.embeddings.shape == (3, 512)
    assert torch.allclose(inferred.embeddings, features, atol=1e-6)
    assert torch.allclose(inferred.result.logits, tiny_cnn[-1](features), atol=1e-5)
    assert not tiny_cnn[-1]._forward_pre_hooks  # the hook is gone afterwards


def test_embeddings_capture_only_the_calling_threads_forwards(tiny_cnn: nn.Module) -> None:
    images = torch.rand(2, 3, 32, 32)
    with capture_embeddings(tiny_cnn) as captured:
        worker = threading.Thread(target=lambda: tiny_cnn(torch.rand(5, 3, 32, 32)))
        worker.start()
        worker.join()
        _, features = logits_and_embeddings(tiny_cnn, images)
    assert [tuple(item.shape) for item in captured] == [(2, 512)]  # not the 5 images
    assert features.shape == (2, 512)


def test_a_model_without_a_linear_layer_has_no_embeddings() -> None:
    model = nn.Sequential(nn.Conv2d(3, 10, 32), nn.Flatten())
    with pytest.raises(InputError, match="no nn.Linear layer.*without embeddings"):
        embedding_layer(model)


def test_unreadable_files_are_skipped_in_inference(
    tiny_cnn: nn.Module, ten_class_source: Any
) -> None:
    broken = ten_class_source.files[5]
    broken.write_bytes(b"broken")
    inferred = infer_source(tiny_cnn, ten_class_source, batch_size=4)
    assert len(inferred.result) == 29 and 5 not in inferred.positions
    assert inferred.result.labels is not None
    assert (
        inferred.result.labels.tolist()
        == ten_class_source.labels()[list(inferred.positions)].tolist()
    )
    assert any(broken.name in note and "skipped" in note for note in inferred.notes)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_streaming_to_cuda_pins_the_chunks_and_matches_the_cpu(
    tiny_cnn: nn.Module, ten_class_source: Any
) -> None:
    from gradpick import data

    chunks = list(data.stream(ten_class_source, chunk_size=8, workers=1, pin_memory=True))
    assert all(chunk.images.is_pinned() for chunk in chunks)
    on_cpu = infer_source(tiny_cnn, ten_class_source, batch_size=8, embeddings=True)
    on_gpu = infer_source(
        copy.deepcopy(tiny_cnn).cuda(), ten_class_source, batch_size=8, embeddings=True
    )
    assert on_gpu.result.device.startswith("cuda") and on_gpu.positions == on_cpu.positions
    assert torch.allclose(on_gpu.result.logits, on_cpu.result.logits, atol=1e-4)
    assert on_gpu.embeddings is not None and on_gpu.embeddings.device.type == "cpu"
    assert on_cpu.embeddings is not None
    assert torch.allclose(on_gpu.embeddings, on_cpu.embeddings, atol=1e-4)


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
    with capture_embeddings(model) as captured, torch.no_grad():
        model(random_batch.images[:3])
        model(random_batch.images[3:4])
    assert [tuple(part.shape) for part in captured] == [(3, 6), (1, 6)]
    assert not model._forward_hooks and not model[5]._forward_pre_hooks


def test_a_model_without_a_linear_layer_has_no_features(random_batch: Any) -> None:
    model = nn.Sequential(nn.Conv2d(3, 10, 32), nn.Flatten()).eval()
    assert infer(model, random_batch.images, features=True).features is None
    with pytest.raises(InputError, match="no nn.Linear"), capture_embeddings(model):
        pass
