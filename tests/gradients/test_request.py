"""GradientRequest: what ``build`` accepts and refuses, and the engine form it hands down.

Every expected value here is written out by hand (indices, classes, scales, logits) or taken
from plain autograd on a two-line model, never from gradpick's own output.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from gradpick.errors import InputError, SelectionError
from gradpick.gradients.request import GradientRequest


def _model() -> nn.Module:
    """Three classes from a 1x2x2 image: small enough to check every logit by hand."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(4, 3)).eval()


def _images(n: int = 4, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.arange(n * 4, dtype=dtype).reshape(n, 1, 2, 2) / 10


LABELS = [2, 1, 0, 1]


@pytest.mark.parametrize(
    "indices",
    [
        [2, 0, 2],
        (2, 0, 2),
        torch.tensor([[2], [0], [2]]),
        torch.tensor([2, 0, 2], dtype=torch.int32),
        np.array([2, 0, 2]),
    ],
    ids=["list", "tuple", "2-D tensor", "int32 tensor", "numpy"],
)
def test_indices_of_every_form_become_one_flat_long_tensor(indices: object) -> None:
    request = GradientRequest.build(_model(), _images(), indices, LABELS)  # type: ignore[arg-type]
    assert request.indices.dtype == torch.long
    assert request.indices.tolist() == [2, 0, 2]
    assert request.count == 3
    assert torch.equal(request.picked_images, _images()[[2, 0, 2]])


def test_a_range_of_indices_is_taken_as_its_values() -> None:
    assert GradientRequest.build(_model(), _images(), range(1, 4), LABELS).indices.tolist() == [
        1,
        2,
        3,
    ]


@pytest.mark.parametrize(
    "indices",
    [torch.tensor([True, False]), torch.tensor([1 + 0j]), torch.tensor([1.0])],
    ids=["bool", "complex", "float"],
)
def test_indices_that_are_not_whole_numbers_are_refused(indices: torch.Tensor) -> None:
    with pytest.raises(SelectionError, match="Indices must be whole numbers"):
        GradientRequest.build(_model(), _images(), indices, LABELS)


def test_the_first_and_last_image_are_valid_indices() -> None:
    assert GradientRequest.build(_model(), _images(), [0, 3], LABELS).indices.tolist() == [0, 3]


@pytest.mark.parametrize(
    ("indices", "named"),
    [([0, 4], 4), ([1, -2], -2), ([5, 0, 9], 5), (torch.tensor([0, 4]), 4)],
    ids=["past the end", "negative", "first bad one", "tensor"],
)
def test_an_out_of_range_index_is_named_with_the_valid_range(indices: object, named: int) -> None:
    message = f"Index {named} is out of range: the batch holds 4 images (valid indices 0 to 3)."
    with pytest.raises(SelectionError, match=f"^{re.escape(message)}$"):
        GradientRequest.build(_model(), _images(), indices, LABELS)  # type: ignore[arg-type]


def test_labels_become_long_on_the_cpu_one_per_image() -> None:
    labels = torch.tensor([[2], [1], [0], [1]], dtype=torch.int32)
    request = GradientRequest.build(_model(), _images(), [1], labels)
    assert request.labels is not None
    assert request.labels.dtype == torch.long
    assert request.labels.tolist() == LABELS


@pytest.mark.parametrize(
    "labels", [torch.tensor([True, False, True, False]), torch.ones(4, dtype=torch.complex64)]
)
def test_labels_that_are_not_whole_numbers_are_refused(labels: torch.Tensor) -> None:
    with pytest.raises(InputError, match="^Labels must be whole numbers"):
        GradientRequest.build(_model(), _images(), [1], labels)


def test_labels_are_counted_against_the_images_not_the_picks() -> None:
    request = GradientRequest.build(_model(), _images(), [1, 2, 3, 0, 1], LABELS)
    assert request.count == 5
    with pytest.raises(InputError, match="^Got 3 labels for 4 images; give one label per image"):
        GradientRequest.build(_model(), _images(), [1, 2, 3], LABELS[:3])


def test_logit_targets_need_no_labels() -> None:
    request = GradientRequest.build(_model(), _images(), [1], target="logit")
    assert request.labels is None
    assert request.classes is None


@pytest.mark.parametrize(
    ("classes", "expected"),
    [(2, [2, 2, 2]), ([1], [1, 1, 1]), (torch.tensor([0, 2, 1]), [0, 2, 1])],
)
def test_one_class_is_repeated_for_every_pick(classes: object, expected: list[int]) -> None:
    request = GradientRequest.build(
        _model(),
        _images(),
        [3, 0, 3],
        target="logit",
        classes=classes,  # type: ignore[arg-type]
    )
    assert request.classes is not None
    assert request.classes.dtype == torch.long
    assert request.classes.tolist() == expected


def test_classes_must_be_one_or_one_per_pick() -> None:
    with pytest.raises(InputError, match=r"^Give one class, or one class per index \(3\); got 2\."):
        GradientRequest.build(_model(), _images(), [3, 0, 3], target="logit", classes=[0, 1])


def test_the_request_holds_a_detached_alias_of_the_callers_images() -> None:
    images = _images().requires_grad_(True)
    request = GradientRequest.build(_model(), images, [1], LABELS)
    assert not request.images.requires_grad
    assert request.images.data_ptr() == images.data_ptr()
    assert images.requires_grad


def test_the_build_arguments_reach_the_request() -> None:
    request = GradientRequest.build(
        _model(),
        _images(),
        [1],
        LABELS,
        target="logit",
        strategy="vmap",
        reduction="mean",
        device="cpu",
        measure_memory=True,
    )
    assert (request.target, request.strategy, request.reduction) == ("logit", "vmap", "mean")
    assert request.device == torch.device("cpu")
    assert request.measure_memory is True
    assert GradientRequest.build(_model(), _images(), [1], LABELS).measure_memory is False


def test_a_stateless_model_takes_images_of_any_float_dtype() -> None:
    request = GradientRequest.build(nn.Flatten(), _images(dtype=torch.float64), [0], target="logit")
    assert request.device == torch.device("cpu")


def test_images_and_parameters_of_two_dtypes_are_refused() -> None:
    with pytest.raises(InputError, match="^Images are torch.float64 but the model's parameters"):
        GradientRequest.build(_model(), _images(dtype=torch.float64), [0], LABELS)


@pytest.mark.parametrize(
    ("reduction", "scale", "objective"), [("sum", 1.0, 6.0), ("mean", 1 / 3, 2.0)]
)
def test_scale_and_objective_of_each_reduction(
    reduction: str, scale: float, objective: float
) -> None:
    request = GradientRequest.build(_model(), _images(), [2, 0, 2], LABELS, reduction=reduction)
    assert request.scale == pytest.approx(scale)
    assert request.scaled_sum(torch.tensor([1.0, 2.0, 3.0])).item() == pytest.approx(objective)


def test_given_classes_are_the_picked_labels_the_classes_or_none() -> None:
    loss = GradientRequest.build(_model(), _images(), [3, 0, 3], LABELS)
    assert loss.given_classes(slice(0, 3)).tolist() == [1, 2, 1]  # type: ignore[union-attr]
    assert loss.given_classes(slice(1, 3)).tolist() == [2, 1]  # type: ignore[union-attr]
    # A loss target differentiates the label, even where classes are also given.
    both = GradientRequest.build(_model(), _images(), [3, 0], LABELS, classes=[0, 0])
    assert both.given_classes(slice(0, 2)).tolist() == [1, 2]  # type: ignore[union-attr]
    chosen = GradientRequest.build(
        _model(), _images(), [3, 0, 3], target="logit", classes=[0, 2, 1]
    )
    assert chosen.given_classes(slice(1, 3)).tolist() == [2, 1]  # type: ignore[union-attr]
    predicted = GradientRequest.build(_model(), _images(), [3, 0, 3], target="logit")
    assert predicted.given_classes(slice(0, 3)) is None


LOGITS = torch.tensor([[1.0, 3.0, 2.0], [0.5, 0.0, 4.0]])


def _cross_entropy(row: list[float], label: int) -> float:
    return math.log(sum(math.exp(value) for value in row)) - row[label]


def test_picked_logits_of_the_predicted_or_given_class() -> None:
    predicted = GradientRequest.build(_model(), _images(), [3, 0], target="logit")
    values, classes = predicted.picked_targets(LOGITS, slice(0, 2))
    assert classes.tolist() == [1, 2]
    assert values.tolist() == [3.0, 4.0]
    given = GradientRequest.build(_model(), _images(), [3, 0], target="logit", classes=[2, 0])
    values, classes = given.picked_targets(LOGITS, slice(0, 2))
    assert classes.tolist() == [2, 0]
    assert values.tolist() == [2.0, 0.5]


def test_picked_losses_are_each_rows_cross_entropy_against_its_label() -> None:
    request = GradientRequest.build(_model(), _images(), [3, 0], LABELS)  # labels 1 and 2
    values, classes = request.picked_targets(LOGITS, slice(0, 2))
    assert classes.tolist() == [1, 2]
    expected = [_cross_entropy([1.0, 3.0, 2.0], 1), _cross_entropy([0.5, 0.0, 4.0], 2)]
    assert values.tolist() == pytest.approx(expected)


def test_the_first_and_last_class_are_valid_and_one_past_is_named() -> None:
    request = GradientRequest.build(_model(), _images(), [3, 0], target="logit", classes=[0, 2])
    values, _ = request.picked_targets(LOGITS, slice(0, 2))
    assert values.tolist() == [1.0, 4.0]
    message = r"^Class 3 is out of range for a model with 3 outputs \(valid classes 0 to 2\)\.$"
    for classes in ([3, 0], [0, 3]):
        outside = GradientRequest.build(
            _model(), _images(), [3, 0], target="logit", classes=classes
        )
        with pytest.raises(InputError, match=message):
            outside.picked_targets(LOGITS, slice(0, 2))


def test_picked_targets_check_the_logits_of_the_picked_rows() -> None:
    request = GradientRequest.build(_model(), _images(), [3, 0], target="logit")
    with pytest.raises(InputError, match="to \\[N, classes\\]; it returned \\(3, 3\\)"):
        request.picked_targets(torch.zeros(3, 3), slice(0, 2))


def test_the_loss_gradient_of_a_built_request_is_autograds() -> None:
    """The request's pieces, put together as the engine does, give autograd's gradient."""
    model, images = _model(), _images()
    request = GradientRequest.build(model, images, [3, 0], LABELS, reduction="mean")
    picked = request.picked_images.clone().requires_grad_(True)
    values, _ = request.picked_targets(model(picked), slice(0, 2))
    (gradient,) = torch.autograd.grad(request.scaled_sum(values), picked)
    reference = images[[3, 0]].clone().requires_grad_(True)
    loss = nn.functional.cross_entropy(model(reference), torch.tensor([1, 2]))  # mean over 2
    (expected,) = torch.autograd.grad(loss, reference)
    torch.testing.assert_close(gradient, expected)


@pytest.mark.parametrize(
    "indices", [[], torch.tensor([], dtype=torch.long)], ids=["list", "tensor"]
)
def test_no_indices_say_to_pick_one(indices: object) -> None:
    with pytest.raises(SelectionError, match=r"^No images selected: pick at least one index\.$"):
        GradientRequest.build(_model(), _images(), indices, LABELS)  # type: ignore[arg-type]


def test_labels_that_are_not_numbers_are_refused_with_what_was_given() -> None:
    with pytest.raises(InputError, match=r"^Labels must be whole numbers; got \['cat', 'dog'\] \("):
        GradientRequest.build(_model(), _images(2), [1], ["cat", "dog"])  # type: ignore[list-item]


def test_only_the_picked_images_are_scanned_for_nan() -> None:
    """Building never reads every pixel: a NaN in an image nobody picked is not its concern."""
    images = _images()
    images[2, 0, 1, 1] = float("nan")
    assert GradientRequest.build(_model(), images, [0, 3], LABELS).indices.tolist() == [0, 3]


def test_integer_images_are_refused_with_the_conversion_to_use() -> None:
    message = (
        "Images must be floating point to take gradients, not torch.uint8; "
        "convert uint8 images with images.float() / 255."
    )
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        GradientRequest.build(_model(), (_images() * 10).to(torch.uint8), [0], LABELS)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"target": "prob"}, "Unknown target 'prob'; use one of loss, logit, bce."),
        ({"reduction": "max"}, "Unknown reduction 'max'; use 'sum' or 'mean'."),
    ],
)
def test_an_unknown_target_or_reduction_lists_the_known_ones(
    arguments: dict[str, str], message: str
) -> None:
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        GradientRequest.build(_model(), _images(), [0], LABELS, **arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", ["recompute", "vmap", "summed", "retain_graph"])
def test_a_logit_difference_target_is_d_za_minus_zb_by_autograd(float64_cnn, strategy) -> None:
    """versus=B makes each target z[A] - z[B]; every strategy gives autograd's gradient of it,
    even with one image picked twice for two different contrasts."""
    from gradpick.gradients import engine as gradients

    images = torch.rand(5, 3, 32, 32, generator=torch.Generator().manual_seed(7)).double()
    indices, wanted, against = [3, 1, 3], [2, 0, 2], [5, 4, 7]
    request = GradientRequest.build(
        float64_cnn,
        images,
        indices,
        target="logit",
        classes=wanted,
        versus=against,
        strategy=strategy,
    )
    result = gradients.compute(request)
    for row, (index, a, b) in enumerate(zip(indices, wanted, against, strict=True)):
        image = images[index : index + 1].clone().requires_grad_(True)
        logits = float64_cnn(image)[0]
        (expected,) = torch.autograd.grad(logits[a] - logits[b], image)
        torch.testing.assert_close(result.gradients[row], expected[0], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(result.target_values[row], (logits[a] - logits[b]).detach())


def test_a_logit_difference_needs_a_logit_target_and_classes() -> None:
    with pytest.raises(InputError, match="needs target='logit' and the classes"):
        GradientRequest.build(_model(), _images(), [0], target="logit", versus=1)
    with pytest.raises(InputError, match="needs target='logit'"):
        GradientRequest.build(_model(), _images(), [0], labels=[0] * 4, classes=0, versus=1)
    with pytest.raises(InputError, match=r"one versus class per index \(2\); got 3"):
        GradientRequest.build(
            _model(), _images(), [0, 1], target="logit", classes=0, versus=[1, 2, 0]
        )
    with pytest.raises(InputError, match="out of range"):
        from gradpick.gradients import engine as gradients

        gradients.compute(
            GradientRequest.build(_model(), _images(), [0], target="logit", classes=0, versus=3)
        )


def test_a_logit_difference_reaches_the_stacked_methods(float64_cnn) -> None:
    """Integrated Gradients of z[A] - z[B] (its copies go through a second request) sums to
    the difference at the image minus that at the black baseline (completeness)."""
    from gradpick import attribution

    images = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(9)).double()
    request = GradientRequest.build(
        float64_cnn, images, [1, 2], target="logit", classes=[3, 0], versus=[8, 5]
    )
    maps = attribution.build("integrated_gradients", {"steps": 256}).attribute(request).maps
    with torch.no_grad():
        at_image = float64_cnn(images[[1, 2]])
        at_black = float64_cnn(torch.zeros_like(images[:2]))
    rows = torch.arange(2)
    wanted, against = torch.tensor([3, 0]), torch.tensor([8, 5])
    expected = (at_image[rows, wanted] - at_image[rows, against]) - (
        at_black[rows, wanted] - at_black[rows, against]
    )
    torch.testing.assert_close(maps.sum(dim=(1, 2, 3)), expected, rtol=1e-3, atol=1e-4)


def test_refusals_of_targets_and_class_pairs_in_whole_sentences() -> None:
    model, images = _model(), _images()
    with pytest.raises(InputError) as refused:
        GradientRequest.build(model, images, [0])
    assert str(refused.value) == (
        "target='loss' needs the true labels; pass labels=..., or use target='logit' for "
        "unlabelled images."
    )
    with pytest.raises(InputError) as refused:
        GradientRequest.build(model, images, [0], target="logit", versus=[1])
    assert str(refused.value) == (
        "A logit difference (versus=...) needs target='logit' and the classes whose logit it "
        "starts from (classes=...)."
    )
    with pytest.raises(InputError) as refused:
        GradientRequest.build(model, images, [0], target="logit", classes=[1], versus=[0.5])
    assert str(refused.value) == (
        "Versus classes must be whole numbers (class indices), not torch.float32."
    )
    with pytest.raises(InputError) as refused:
        GradientRequest.build(model, images, [0], target="logit", classes=[1.5])
    assert str(refused.value) == "Classes must be whole numbers (class indices), not torch.float32."


def test_float64_images_are_refused_on_mps(monkeypatch: pytest.MonkeyPatch) -> None:
    """MPS has no float64: refused before anything moves (the device is stood in for, so this
    runs on any machine)."""
    from gradpick.gradients import request as request_module

    monkeypatch.setattr(request_module, "device_matching", lambda *_: torch.device("mps"))
    model = _model().double()
    with pytest.raises(InputError) as refused:
        GradientRequest.build(model, _images(dtype=torch.float64), [0], target="logit")
    assert str(refused.value) == "The MPS device has no float64; use float32 or the CPU."
