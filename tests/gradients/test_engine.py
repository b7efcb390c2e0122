"""input_gradients against the plain answer: each picked image forwarded alone through autograd.

Exact (to 1e-12) in float64, within rounding in float32, for every strategy and several models,
and against captum's Saliency as an independent implementation.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from captum.attr import Saliency
from torch import nn

from gradpick.errors import (
    DeviceMemoryError,
    DeviceUnavailableError,
    GradpickError,
    InputError,
    SampleCouplingError,
    SelectionError,
)
from gradpick.gradients import engine as gradients_module
from gradpick.gradients import strategies
from gradpick.gradients.engine import (
    STRATEGIES,
    cross_sample_leakage,
    input_gradients,
    naive_loop_error,
    saved_bytes_per_image,
)
from gradpick.gradients.request import GradientRequest
from gradpick.models import shipped as models

MODEL_NAMES = ("tiny_cnn", "tiny_bn_cnn", "tutorial", "resnet20")


def built_in(name: str) -> nn.Module:
    """A seeded, randomly initialised built-in model, served the way gradpick serves models."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        return models.freeze(models.build(name))


@pytest.fixture
def get_model(request: pytest.FixtureRequest) -> Any:
    def get(name: str) -> nn.Module:
        if name in models.ARCHITECTURES:
            return built_in(name)
        model: nn.Module = request.getfixturevalue(name)
        return model

    return get


def per_sample_reference(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    labels: torch.Tensor | None = None,
    target: str = "loss",
    classes: int | Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The hand-written loop: one image at a time, its own forward and its own autograd.grad."""
    gradients, values, chosen = [], [], []
    for position, index in enumerate(indices):
        image = images[index : index + 1].detach().clone().requires_grad_(True)
        logits = model(image)
        if target == "loss":
            assert labels is not None
            wanted = int(labels[index])
        elif classes is None:
            wanted = int(logits.argmax())
        elif isinstance(classes, int):
            wanted = classes
        else:
            wanted = int(classes[position])
        if target == "loss":
            value = F.cross_entropy(logits, torch.tensor([wanted]))
        else:
            value = logits[0, wanted]
        (gradient,) = torch.autograd.grad(value, image)
        gradients.append(gradient[0])
        values.append(value.detach())
        chosen.append(wanted)
    return torch.stack(gradients), torch.stack(values), torch.tensor(chosen)


def assert_exact(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """float64 agreement up to the last bits (batched kernels may round a few ulps apart)."""
    assert actual.dtype == expected.dtype == torch.float64
    assert expected.abs().max() > 0, "a reference of zeros proves nothing"
    torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12)


def assert_float32_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype == torch.float32
    scale = float(expected.abs().max())
    assert scale > 0
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5 * scale)


def float64_copy(model: nn.Module) -> nn.Module:
    return copy.deepcopy(model).double()


# ----------------------------------------------------------------------------- correctness


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("target", ["loss", "logit"])
@pytest.mark.parametrize("model_name", MODEL_NAMES)
def test_every_strategy_equals_the_per_sample_loop_in_float64(
    get_model: Any, random_batch: Any, model_name: str, target: str, strategy: str
) -> None:
    model = float64_copy(get_model(model_name))
    images, labels = random_batch.images[:5].double(), random_batch.labels[:5]
    indices = [3, 0, 3, 1]  # repeated and out of order
    expected, values, classes = per_sample_reference(model, images, indices, labels, target)

    result = input_gradients(
        model, images, indices, labels=labels, target=target, strategy=strategy
    )

    assert_exact(result.gradients, expected)
    torch.testing.assert_close(result.target_values, values, rtol=1e-12, atol=1e-12)
    assert torch.equal(result.classes, classes)
    assert result.indices == tuple(indices)
    assert not result.coupled


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("model_name", ["tiny_cnn", "tutorial", "resnet20"])
def test_every_strategy_equals_the_per_sample_loop_in_float32(
    get_model: Any, random_batch: Any, model_name: str, strategy: str
) -> None:
    model = get_model(model_name)
    images, labels = random_batch.images[:4], random_batch.labels[:4]
    indices = [2, 0, 2]
    expected, _, _ = per_sample_reference(model, images, indices, labels, "loss")

    result = input_gradients(model, images, indices, labels=labels, strategy=strategy)

    assert_float32_close(result.gradients, expected)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("indices", [[4], [5, 2, 0, 3, 1, 4]], ids=["k=1", "k=N shuffled"])
def test_one_image_and_the_whole_batch(
    tiny_cnn: nn.Module, random_batch: Any, strategy: str, indices: list[int]
) -> None:
    model = float64_copy(tiny_cnn)
    images, labels = random_batch.images[:6].double(), random_batch.labels[:6]
    expected, _, _ = per_sample_reference(model, images, indices, labels, "loss")

    result = input_gradients(model, images, indices, labels=labels, strategy=strategy)

    assert result.gradients.shape == (len(indices), 3, 32, 32)
    assert_exact(result.gradients, expected)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(
    "classes", [None, 7, [3, 5, 3, 9]], ids=["predicted", "one class", "one per index"]
)
def test_logit_targets_for_any_class_choice(
    tiny_bn_cnn: nn.Module, random_batch: Any, strategy: str, classes: Any
) -> None:
    """Includes one image picked twice with two different classes: two different gradients."""
    model = float64_copy(tiny_bn_cnn)
    images = random_batch.images[:5].double()
    indices = [2, 2, 0, 4]
    expected, _, chosen = per_sample_reference(model, images, indices, None, "logit", classes)

    result = input_gradients(
        model, images, indices, target="logit", classes=classes, strategy=strategy
    )

    assert_exact(result.gradients, expected)
    assert torch.equal(result.classes, chosen)
    if classes is None:
        with torch.no_grad():
            predicted = model(images).argmax(dim=1)
        assert result.classes.tolist() == predicted[indices].tolist()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_mean_reduction_is_the_sum_divided_by_k(
    tiny_cnn: nn.Module, random_batch: Any, strategy: str
) -> None:
    model = float64_copy(tiny_cnn)
    images, labels = random_batch.images[:6].double(), random_batch.labels[:6]
    indices = [5, 1, 1, 3]
    summed = input_gradients(model, images, indices, labels=labels, strategy=strategy)
    mean = input_gradients(
        model, images, indices, labels=labels, strategy=strategy, reduction="mean"
    )

    assert mean.reduction == "mean"
    assert_exact(mean.gradients, summed.gradients / len(indices))
    assert torch.equal(mean.target_values, summed.target_values)
    # and it is what a mean-reduced loss over the picked images gives:
    picked = images[indices].clone().requires_grad_(True)
    loss = F.cross_entropy(model(picked), labels[indices], reduction="mean")
    assert_exact(mean.gradients, torch.autograd.grad(loss, picked)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_logit_gradients_equal_captum_saliency(
    random_batch: Any, strategy: str, dtype: torch.dtype
) -> None:
    model = built_in("tutorial").to(dtype)
    images = random_batch.images[:6].to(dtype)
    indices, classes = [3, 0, 3, 5], [1, 2, 6, 9]

    result = input_gradients(
        model, images, indices, target="logit", classes=classes, strategy=strategy
    )
    saliency = Saliency(model).attribute(
        images[indices].clone().requires_grad_(True), target=classes, abs=False
    )

    if dtype == torch.float64:
        assert_exact(result.gradients, saliency)
    else:
        assert_float32_close(result.gradients, saliency)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_result_keeps_the_callers_dtype_and_device(
    tiny_cnn: nn.Module, random_batch: Any, strategy: str, dtype: torch.dtype
) -> None:
    model = tiny_cnn.to(dtype)
    images = random_batch.images[:4].to(dtype)
    result = input_gradients(
        model, images, [1, 0], labels=random_batch.labels[:4], strategy=strategy
    )
    assert result.gradients.dtype == dtype
    assert result.gradients.device == images.device
    assert not result.gradients.requires_grad
    assert result.target_values.shape == (2,) and result.classes.shape == (2,)
    assert result.strategy == strategy and result.target == "loss"
    assert result.timing > 0 and result.memory is None


@pytest.mark.parametrize("strategy", ["recompute", "vmap"])
@pytest.mark.parametrize(
    ("options", "chunks"),
    [({"chunk_size": 1}, 7), ({"chunk_size": 3}, 3), ({"memory_budget": 1}, 7)],
    ids=["chunk 1", "chunk 3", "tiny budget"],
)
def test_chunking_gives_identical_results(
    tiny_bn_cnn: nn.Module,
    random_batch: Any,
    strategy: str,
    options: dict[str, int],
    chunks: int,
) -> None:
    model = float64_copy(tiny_bn_cnn)
    images, labels = random_batch.images.double(), random_batch.labels
    indices = [9, 2, 2, 15, 0, 7, 4]
    whole = input_gradients(model, images, indices, labels=labels, strategy=strategy)
    chunked = input_gradients(model, images, indices, labels=labels, strategy=strategy, **options)

    assert whole.chunks == 1
    assert chunked.chunks == chunks
    assert_exact(chunked.gradients, whole.gradients)
    assert torch.equal(chunked.classes, whole.classes)


@pytest.mark.parametrize("strategy", ["summed", "retain_graph"])
def test_strategies_over_the_whole_batch_ignore_chunking(
    tiny_cnn: nn.Module, random_batch: Any, strategy: str
) -> None:
    result = input_gradients(
        tiny_cnn, random_batch.images, [1, 2, 3], labels=random_batch.labels, strategy=strategy,
        chunk_size=1,
    )  # fmt: skip
    assert result.chunks == 1


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_images_gradient_does_not_depend_on_the_rest_of_the_batch(
    tiny_bn_cnn: nn.Module, random_batch: Any, strategy: str
) -> None:
    model = float64_copy(tiny_bn_cnn)
    images, labels = random_batch.images.double(), random_batch.labels
    small = input_gradients(model, images[:4], [1], labels=labels[:4], strategy=strategy)
    # The same image at another position, among other neighbours, in a bigger batch.
    order = torch.tensor([8, 9, 10, 11, 12, 1, 13, 14, 15])
    large = input_gradients(model, images[order], [5], labels=labels[order], strategy=strategy)
    assert_exact(large.gradients, small.gradients)


# ----------------------------------------------------------------------------- no mutation


def snapshot(model: nn.Module) -> dict[str, Any]:
    return {
        "training": [module.training for module in model.modules()],
        "requires_grad": [parameter.requires_grad for parameter in model.parameters()],
        "grad": [
            None if parameter.grad is None else parameter.grad.clone()
            for parameter in model.parameters()
        ],
        "state": {key: value.clone() for key, value in model.state_dict().items()},
    }


def assert_same_snapshot(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before["training"] == after["training"]
    assert before["requires_grad"] == after["requires_grad"]
    for old, new in zip(before["grad"], after["grad"], strict=True):
        assert (old is None and new is None) or torch.equal(old, new)
    assert before["state"].keys() == after["state"].keys()
    for key, value in before["state"].items():
        assert torch.equal(value, after["state"][key]), key


FAILING_CALLS: list[dict[str, Any]] = [
    {"indices": [99]},
    {"indices": [0], "target": "logit", "classes": 10},
    {"indices": [0], "labels": None},
    {"indices": [0], "strategy": "unknown"},
]


def test_the_model_and_images_are_never_mutated(tiny_bn_cnn: nn.Module, random_batch: Any) -> None:
    model = tiny_bn_cnn
    images, labels = random_batch
    images_before = images.clone()
    before = snapshot(model)
    for strategy in STRATEGIES:
        input_gradients(model, images, [3, 1, 3], labels=labels, strategy=strategy)
        input_gradients(model, images, [2], target="logit", strategy=strategy, measure_memory=True)
    naive_loop_error(model, images, [0, 1], labels=labels)
    cross_sample_leakage(model, images, [0, 1], labels=labels)
    for arguments in FAILING_CALLS:
        with pytest.raises(GradpickError):
            input_gradients(model, images, **{"labels": labels, **arguments})
    assert_same_snapshot(before, snapshot(model))
    assert not images.requires_grad and images.grad is None
    assert torch.equal(images, images_before)


def test_a_trainable_user_model_keeps_its_flags_and_no_grad(
    tiny_cnn: nn.Module, random_batch: Any
) -> None:
    model = tiny_cnn
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    for strategy in STRATEGIES:
        input_gradients(model, random_batch.images, [0, 5], random_batch.labels, strategy=strategy)
    naive_loop_error(model, random_batch.images, [0, 5], target="logit")
    assert all(parameter.requires_grad for parameter in model.parameters())
    assert all(parameter.grad is None for parameter in model.parameters())


def test_a_training_mode_model_without_coupling_is_served_unchanged(
    tiny_cnn: nn.Module, random_batch: Any
) -> None:
    reference = input_gradients(tiny_cnn, random_batch.images, [4, 2], random_batch.labels)
    model = tiny_cnn.train()
    before = snapshot(model)
    result = input_gradients(model, random_batch.images, [4, 2], random_batch.labels)
    assert not result.coupled
    assert torch.equal(result.gradients, reference.gradients)
    assert_same_snapshot(before, snapshot(model))


def test_works_inside_a_callers_no_grad_block(tiny_cnn: nn.Module, random_batch: Any) -> None:
    expected = input_gradients(tiny_cnn, random_batch.images, [1, 2], random_batch.labels)
    with torch.no_grad():
        result = input_gradients(tiny_cnn, random_batch.images, [1, 2], random_batch.labels)
        leakage = cross_sample_leakage(tiny_cnn, random_batch.images, [1, 2], random_batch.labels)
        error = naive_loop_error(tiny_cnn, random_batch.images, [1, 2], random_batch.labels)
    assert torch.equal(result.gradients, expected.gradients)
    assert leakage.max_cross == 0.0
    assert isinstance(error, RuntimeError)


def test_threads_sharing_one_model_each_get_their_own_gradients(
    tiny_bn_cnn: nn.Module, random_batch: Any
) -> None:
    model = tiny_bn_cnn
    images, labels = random_batch
    before = snapshot(model)
    jobs = [
        {"indices": [thread, (thread * 5 + call) % 16], "strategy": STRATEGIES[call % 4],
         "target": "loss" if (thread + call) % 2 else "logit", "measure_memory": call == 1}
        for thread in range(4)
        for call in range(3)
    ]  # fmt: skip

    def run(job: dict[str, Any]) -> torch.Tensor:
        return input_gradients(model, images, labels=labels, **job).gradients

    expected = [run(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(run, jobs))
    for job, got, want in zip(jobs, results, expected, strict=True):
        assert torch.equal(got, want), job
    assert_same_snapshot(before, snapshot(model))


# ----------------------------------------------------------------------------- coupling


def test_batchnorm_in_training_mode_is_refused_and_named(random_batch: Any) -> None:
    model = built_in("resnet20").train()
    with pytest.raises(SampleCouplingError, match=r"'bn1' \(BatchNorm2d\).*model\.eval\(\)"):
        input_gradients(model, random_batch.images, [0, 1], random_batch.labels)


def test_a_single_training_submodule_is_also_found(
    tiny_bn_cnn: nn.Module, random_batch: Any
) -> None:
    model = tiny_bn_cnn
    model[1].train()  # only the BatchNorm, the model itself stays in eval mode
    before = snapshot(model)
    with pytest.raises(SampleCouplingError, match=r"'1' \(BatchNorm2d\)"):
        input_gradients(model, random_batch.images, [0, 1], random_batch.labels)
    result = input_gradients(
        model, random_batch.images, [0, 1], random_batch.labels, allow_coupled=True
    )
    assert result.coupled
    assert_same_snapshot(before, snapshot(model))
    expected = coupled_reference(
        model, random_batch.images, random_batch.labels, [0, 1], "recompute"
    )
    assert torch.allclose(result.gradients, expected, atol=1e-6, rtol=1e-4)


def coupled_reference(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, picks: list[int], strategy: str
) -> torch.Tensor:
    """Training-mode (coupled) gradients of the picks' cross-entropy by plain autograd, on a
    copy, with what each strategy forwards: the picks alone (recompute) or the whole batch,
    backward once through the picks' summed losses (summed) or once per pick (retain_graph)."""
    copied = copy.deepcopy(model)  # in the modes the caller set
    if strategy == "recompute":
        x = images[picks].clone().requires_grad_(True)
        losses = F.cross_entropy(copied(x), labels[picks], reduction="none")
        return torch.autograd.grad(losses.sum(), x)[0]
    x = images.clone().requires_grad_(True)
    losses = F.cross_entropy(copied(x), labels, reduction="none")
    if strategy == "summed":
        return torch.autograd.grad(losses[picks].sum(), x)[0][picks]
    return torch.stack([torch.autograd.grad(losses[j], x, retain_graph=True)[0][j] for j in picks])


@pytest.mark.parametrize("strategy", ["recompute", "summed", "retain_graph"])
def test_coupled_gradients_on_request_leave_running_stats_alone(
    random_batch: Any, strategy: str
) -> None:
    model = built_in("resnet20").train()
    before = snapshot(model)
    result = input_gradients(
        model, random_batch.images[:4], [0, 2], labels=random_batch.labels[:4],
        strategy=strategy, allow_coupled=True,
    )  # fmt: skip
    assert result.coupled
    assert torch.isfinite(result.gradients).all()
    assert_same_snapshot(before, snapshot(model))
    assert model.training
    images, labels = random_batch.images[:4], random_batch.labels[:4]
    expected = coupled_reference(model, images, labels, [0, 2], strategy)
    assert torch.allclose(result.gradients, expected, atol=1e-5, rtol=1e-4)
    served = copy.deepcopy(model).eval()  # what an uncoupled computation would give instead
    x = images.clone().requires_grad_(True)
    uncoupled = torch.autograd.grad(F.cross_entropy(served(x), labels, reduction="sum"), x)[0]
    assert not torch.allclose(result.gradients, uncoupled[[0, 2]], atol=1e-3)


def test_vmap_explains_that_it_cannot_run_training_batchnorm(random_batch: Any) -> None:
    model = built_in("resnet20").train()
    with pytest.raises(InputError, match="recompute"):
        input_gradients(
            model,
            random_batch.images,
            [0, 1],
            random_batch.labels,
            strategy="vmap",
            allow_coupled=True,
        )


@pytest.mark.parametrize("model_name", ["tiny_bn_cnn", "resnet20"])
def test_no_cross_sample_leakage_in_eval_mode(
    get_model: Any, random_batch: Any, model_name: str
) -> None:
    report = cross_sample_leakage(
        get_model(model_name), random_batch.images, [0, 3, 5, 3], random_batch.labels
    )
    assert report.max_cross == 0.0 and report.relative == 0.0
    assert report.max_self > 0
    assert report.per_index == (0.0, 0.0, 0.0)
    assert report.coupled_modules == ()


def test_cross_sample_leakage_of_resnet20_in_training_mode(random_batch: Any) -> None:
    model = built_in("resnet20").train()
    before = snapshot(model)
    report = cross_sample_leakage(model, random_batch.images, [0, 3, 5], random_batch.labels)
    assert report.max_cross > 0 and report.relative > 0
    assert all(ratio > 0 for ratio in report.per_index)
    assert "bn1" in report.coupled_modules
    assert_same_snapshot(before, snapshot(model))


def test_leakage_needs_two_different_images(tiny_cnn: nn.Module, random_batch: Any) -> None:
    with pytest.raises(SelectionError, match="two different images"):
        cross_sample_leakage(tiny_cnn, random_batch.images, [4, 4], random_batch.labels)


# ----------------------------------------------------------------------------- the naive loop


def test_the_naive_loop_fails_with_pytorchs_error(tiny_cnn: nn.Module, random_batch: Any) -> None:
    error = naive_loop_error(tiny_cnn, random_batch.images, [3, 7], random_batch.labels)
    assert isinstance(error, RuntimeError)
    assert "Trying to backward through the graph a second time" in str(error)


def test_the_naive_loop_succeeds_for_one_index(tiny_cnn: nn.Module, random_batch: Any) -> None:
    assert naive_loop_error(tiny_cnn, random_batch.images, [3], random_batch.labels) is None


# ----------------------------------------------------------------------------- bad input


BAD_INPUTS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("empty indices", {"indices": []}, SelectionError, "No images selected"),
    ("index past the end", {"indices": [0, 16]}, SelectionError, "valid indices 0 to 15"),
    ("negative index", {"indices": [-1]}, SelectionError, "Index -1 is out of range"),
    ("fractional index", {"indices": [1.5]}, SelectionError, "whole numbers"),
    ("text index", {"indices": ["a"]}, SelectionError, "whole numbers"),
    ("no labels for loss", {"labels": None}, InputError, "needs the true labels"),
    ("too few labels", {"labels": [1, 2]}, InputError, "2 labels for 16 images"),
    ("fractional labels", {"labels": [0.5] * 16}, InputError, "Labels must be whole numbers"),
    ("label out of range", {"labels": [12] * 16}, InputError, "Class 12 is out of range"),
    ("uint8 images", {"images": "uint8"}, InputError, "floating point"),
    ("3-D images", {"images": "3d"}, InputError, "[N, C, H, W]"),
    ("NaN images", {"images": "nan"}, InputError, "NaN"),
    ("wrong image size", {"images": "16px"}, InputError, "could not process images of shape"),
    ("wrong dtype", {"images": "float64"}, InputError, "model's parameters are torch.float32"),
    ("unknown strategy", {"strategy": "fastest"}, InputError, "Unknown strategy 'fastest'"),
    ("unknown target", {"target": "prob"}, InputError, "Unknown target 'prob'"),
    ("unknown reduction", {"reduction": "max"}, InputError, "Unknown reduction 'max'"),
    ("class too large", {"target": "logit", "classes": 10}, InputError, "Class 10"),
    ("negative class", {"target": "logit", "classes": [-1, 2]}, InputError, "Class -1"),
    ("classes per index", {"target": "logit", "classes": [1, 2, 3]}, InputError, "per index"),
    ("zero chunk size", {"chunk_size": 0}, InputError, "chunk_size must be at least 1"),
]


def _images_for(kind: str, images: torch.Tensor) -> torch.Tensor:
    if kind == "uint8":
        return (images * 255).to(torch.uint8)
    if kind == "3d":
        return images[0]
    if kind == "nan":
        broken = images.clone()
        broken[3, 1, 4, 4] = float("nan")
        return broken
    if kind == "16px":
        return images[:, :, :16, :16]
    assert kind == "float64"
    return images.double()


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [case[1:] for case in BAD_INPUTS],
    ids=[case[0] for case in BAD_INPUTS],
)
def test_bad_input_gets_a_clear_gradpick_error(
    tiny_cnn: nn.Module,
    random_batch: Any,
    strategy: str,
    arguments: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    call: dict[str, Any] = {
        "images": random_batch.images,
        "indices": [0, 3],
        "labels": random_batch.labels,
        "strategy": strategy,
        "chunk_size": None,
        **arguments,
    }
    if isinstance(call["images"], str):
        call["images"] = _images_for(call["images"], random_batch.images)
    before = snapshot(tiny_cnn)
    with pytest.raises(error, match=re.escape(message)):
        input_gradients(tiny_cnn, **call)
    assert_same_snapshot(before, snapshot(tiny_cnn))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_an_unavailable_device_is_refused(tiny_cnn: nn.Module, random_batch: Any) -> None:
    with pytest.raises(DeviceUnavailableError, match="'cuda' is not available.*'cpu'"):
        input_gradients(tiny_cnn, random_batch.images, [0], random_batch.labels, device="cuda")


def test_a_misspelt_device_is_refused(tiny_cnn: nn.Module, random_batch: Any) -> None:
    with pytest.raises(DeviceUnavailableError, match="'gpu' is not a device name"):
        input_gradients(tiny_cnn, random_batch.images, [0], random_batch.labels, device="gpu")


def test_leakage_uses_each_images_own_class(tiny_cnn: nn.Module, random_batch: Any) -> None:
    model = float64_copy(tiny_cnn)
    images = random_batch.images.double()
    indices, classes = [3, 1, 3], [7, 2, 4]  # image 3 keeps the class of its first occurrence
    report = cross_sample_leakage(model, images, indices, target="logit", classes=classes)
    expected, _, _ = per_sample_reference(model, images, [3, 1], None, "logit", [7, 2])
    assert report.max_self == float(expected.abs().flatten(1).amax(dim=1).max())


def _fail_above(limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make 'recompute' raise CUDA out-of-memory for chunks larger than ``limit`` images."""
    recompute = strategies.REGISTRY["recompute"]

    def step_with_memory_limit(request: Any, order: slice) -> Any:
        if request.indices[order].numel() > limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return recompute.step(request, order)

    limited = dataclasses.replace(recompute, step=step_with_memory_limit)
    monkeypatch.setitem(strategies.REGISTRY, "recompute", limited)


def test_out_of_memory_retries_with_smaller_chunks(
    monkeypatch: pytest.MonkeyPatch, tiny_cnn: nn.Module, random_batch: Any
) -> None:
    images, labels = random_batch
    indices = [3, 1, 4, 1, 5, 9, 2, 6]
    whole = input_gradients(tiny_cnn, images, indices, labels)
    _fail_above(2, monkeypatch)
    retried = input_gradients(tiny_cnn, images, indices, labels)
    assert (whole.chunks, retried.chunks) == (1, 4)
    torch.testing.assert_close(retried.gradients, whole.gradients, rtol=0, atol=1e-6)


def test_out_of_memory_with_one_image_per_chunk_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tiny_cnn: nn.Module, random_batch: Any
) -> None:
    images, labels = random_batch
    _fail_above(0, monkeypatch)
    with pytest.raises(DeviceMemoryError, match="one image at a time"):
        input_gradients(tiny_cnn, images, [0, 1, 2], labels)
    assert all(parameter.grad is None for parameter in tiny_cnn.parameters())


def test_the_naive_loop_fails_the_same_way_on_a_training_mode_batchnorm_model(
    tiny_bn_cnn: nn.Module, random_batch: Any
) -> None:
    """It demonstrates PyTorch's error whatever the model's mode: coupling is not refused."""
    model = copy.deepcopy(tiny_bn_cnn).train()
    error = naive_loop_error(model, random_batch.images, [3, 7], random_batch.labels)
    assert "Trying to backward through the graph a second time" in str(error)


class _DropsTheLastRow(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.eval()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        output: torch.Tensor = self.model(images)
        return output[:-1]


def test_the_naive_loop_checks_the_model_and_the_classes(
    tiny_cnn: nn.Module, random_batch: Any
) -> None:
    images, labels = random_batch
    with pytest.raises(InputError, match=r"to \[N, classes\]; it returned \(15, 10\)"):
        naive_loop_error(_DropsTheLastRow(tiny_cnn), images, [0, 1], labels)
    with pytest.raises(InputError, match=r"^Class 10 is out of range for a model with 10 outputs"):
        naive_loop_error(tiny_cnn, images, [0, 1], target="logit", classes=[10, 0])


def test_leakage_of_one_image_says_what_it_needs(tiny_cnn: nn.Module, random_batch: Any) -> None:
    with pytest.raises(SelectionError) as raised:
        cross_sample_leakage(tiny_cnn, random_batch.images, [4, 4], random_batch.labels)
    assert str(raised.value) == "Leakage needs at least two different images."


def test_leakage_ratios_equal_a_jacobian_taken_by_hand(
    tiny_bn_cnn: nn.Module, random_batch: Any
) -> None:
    """Training-mode BatchNorm: each target's largest gradient on the other images over its
    largest on its own image, from one autograd call per target on the same batch."""
    model = float64_copy(tiny_bn_cnn).train()
    images, labels = random_batch.images[[2, 5, 9]].double(), random_batch.labels[[2, 5, 9]]
    report = cross_sample_leakage(copy.deepcopy(model), images, [0, 1, 2], labels)
    batch = images.clone().requires_grad_(True)
    losses = F.cross_entropy(model(batch), labels, reduction="none")
    expected, owns, crosses = [], [], []
    for j in range(3):
        (gradient,) = torch.autograd.grad(losses[j], batch, retain_graph=True)
        largest = gradient.abs().flatten(1).amax(dim=1)
        own, cross = float(largest[j]), float(largest[[i for i in range(3) if i != j]].max())
        expected.append(cross / own)
        owns.append(own)
        crosses.append(cross)
    assert report.per_index == pytest.approx(expected, rel=1e-9)
    assert report.relative == pytest.approx(max(expected), rel=1e-9)
    assert report.max_self == pytest.approx(max(owns), rel=1e-9)
    assert report.max_cross == pytest.approx(max(crosses), rel=1e-9)


class _OthersOnly(nn.Module):
    """Each image's logits are the other images' pixels: no own gradient at all."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        others = images.sum(dim=0, keepdim=True) - images
        return others.flatten(1)[:, :3] * self.scale


def test_leakage_without_an_own_gradient_is_infinite_and_without_any_is_zero(
    random_batch: Any,
) -> None:
    images = random_batch.images[:2]
    report = cross_sample_leakage(_OthersOnly(), images, [0, 1], target="logit", classes=0)
    assert report.per_index == (float("inf"), float("inf")) and report.max_self == 0.0
    flat = _OthersOnly(scale=0.0)  # the logits no longer depend on any image
    report = cross_sample_leakage(flat, images, [0, 1], target="logit", classes=0)
    assert report.per_index == (0.0, 0.0) and report.max_cross == 0.0


class _LogOfMean(nn.Module):
    """Two logits, both the log of the image's mean: an all-zero image's are -inf."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images.flatten(1).mean(dim=1, keepdim=True).log().expand(-1, 2)


class _Huge(nn.Module):
    """Finite logits near float32's largest: the sum of two overflows, each is finite."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images.flatten(1)[:, :2] * 3e38


def test_only_the_picked_images_target_is_named_when_it_is_not_finite() -> None:
    images = torch.rand(3, 3, 4, 4)
    images[1] = 0.0  # its logits are -inf
    images[0, 0, 0, 0] = float("nan")  # not picked: never scanned
    with pytest.raises(InputError) as raised:
        input_gradients(_LogOfMean(), images, [1], target="logit", classes=0)
    assert str(raised.value) == "The model's logit for image 1 is not finite."
    result = input_gradients(_Huge(), torch.ones(2, 3, 4, 4), [0, 1], target="logit", classes=0)
    assert torch.equal(result.gradients[:, 0, 0, 0], torch.full((2,), 3e38))


class _ExpExp(nn.Module):
    """Saves two tensors of the image's size (each exp keeps its output)."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images.exp().exp().flatten(1)[:, :2]


class _Doubles(nn.Module):
    """Saves nothing: a product with a number keeps no tensor."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return (images * 2.0).flatten(1)[:, :2]


def test_saved_bytes_are_measured_per_image_shape_and_never_below_the_image() -> None:
    cpu = torch.device("cpu")
    model = _ExpExp()
    for shape in [(1, 8, 8), (3, 8, 8), (1, 16, 16)]:
        side = shape[0] * shape[1] * shape[2] * 4
        assert saved_bytes_per_image(model, torch.zeros(4, *shape), cpu) == 2 * side
    nothing_saved = saved_bytes_per_image(_Doubles(), torch.zeros(2, 3, 8, 8), cpu)
    assert nothing_saved == 3 * 8 * 8 * 4  # the image itself, as a floor


def test_compute_refuses_a_training_mode_model_unless_told_with_the_whole_message(
    tiny_bn_cnn: nn.Module, random_batch: Any
) -> None:
    """compute and compute_with, not only input_gradients, refuse coupled gradients by default."""
    images, labels = random_batch
    training = copy.deepcopy(tiny_bn_cnn).train()
    request = GradientRequest.build(training, images, [0, 3], labels)
    expected = (
        "'1' (BatchNorm2d) is in training mode, where it mixes samples across the batch, so one "
        "image's gradient depends on the others. Call model.eval() first, or pass "
        "allow_coupled=True to compute coupled gradients on purpose."
    )
    for call in (gradients_module.compute, lambda r: gradients_module.compute_with(r, None)):
        with pytest.raises(SampleCouplingError) as refused:
            call(request)
        assert str(refused.value) == expected
    assert gradients_module.compute(request, allow_coupled=True).coupled


@pytest.mark.parametrize("strategy", ["recompute", "vmap"])
def test_memory_is_measured_when_asked_and_exactly_two_chunks_are_joined(
    tiny_cnn: nn.Module, random_batch: Any, strategy: str
) -> None:
    images, labels = random_batch
    picks = [2, 9, 4, 11]
    whole = input_gradients(tiny_cnn, images, picks, labels, strategy=strategy)
    assert whole.memory is None and whole.device == "cpu"
    measured = input_gradients(
        tiny_cnn, images, picks, labels, strategy=strategy, measure_memory=True
    )
    assert measured.memory is not None and measured.memory.peak.bytes is not None
    counted = strategies.get(strategy).counts_saved
    assert (measured.memory.saved_for_backward.bytes is not None) == counted
    request = GradientRequest.build(tiny_cnn, images, picks, labels, strategy=strategy)
    halves = gradients_module.compute(request, chunk_size=2)
    assert halves.chunks == 2  # the strategies that chunk: the batch of picks in two halves
    torch.testing.assert_close(halves.gradients, whole.gradients)  # float32: up to rounding
    assert halves.indices == whole.indices


def test_a_budget_sets_the_chunk_size_in_whole_images(
    tiny_cnn: nn.Module, random_batch: Any
) -> None:
    """A budget of 2.5 images' saved bytes takes 2 at a time; 2 picks over 1.5 take 1 each."""
    images, labels = random_batch
    per_image = saved_bytes_per_image(tiny_cnn, images, torch.device("cpu"))
    request = GradientRequest.build(tiny_cnn, images, [1, 2, 3, 4, 5], labels)
    assert gradients_module.compute(request, memory_budget=int(2.5 * per_image)).chunks == 3
    pair = GradientRequest.build(tiny_cnn, images, [1, 2], labels)
    assert gradients_module.compute(pair, memory_budget=int(1.5 * per_image)).chunks == 2


def test_a_model_that_is_itself_in_training_mode_is_named_by_its_class(
    random_batch: Any,
) -> None:
    """The whole model has no name of its own: the refusal names its class."""
    images, _ = random_batch
    with pytest.raises(SampleCouplingError) as refused:
        input_gradients(nn.BatchNorm2d(3).train(), images, [0], target="logit", classes=0)
    assert str(refused.value).startswith("'BatchNorm2d' (BatchNorm2d) is in training mode")
