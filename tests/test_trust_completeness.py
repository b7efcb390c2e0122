"""IG completeness: the delta equals captum's for the same steps, automatic steps, bad input."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.models import freeze
from gradpick.trust.baselines import BASELINES, baseline_images
from gradpick.trust.completeness import completeness, steps_to_try

PICKS = [2, 0, 5]


@pytest.mark.parametrize("baseline", BASELINES)
def test_delta_equals_captums_convergence_delta(
    float64_cnn: nn.Module, float64_images: torch.Tensor, baseline: str
) -> None:
    captum_attr = pytest.importorskip("captum.attr")
    rows = completeness(float64_cnn, float64_images, PICKS, baseline=baseline, steps=12, seed=4)
    picked = float64_images[PICKS]
    references = baseline_images(picked, baseline, PICKS, seed=4)
    classes = torch.tensor([row.target_class for row in rows])
    assert torch.equal(classes, float64_cnn(picked).argmax(dim=1))
    attributions, delta = captum_attr.IntegratedGradients(float64_cnn).attribute(
        picked,
        baselines=references,
        target=classes,
        n_steps=12,
        method="riemann_middle",
        return_convergence_delta=True,
    )
    assert [row.delta for row in rows] == pytest.approx(delta.tolist(), abs=1e-6)
    sums = attributions.flatten(1).sum(dim=1).tolist()
    assert [row.attribution_sum for row in rows] == pytest.approx(sums, abs=1e-6)
    for row, picked_index in zip(rows, PICKS, strict=True):
        assert row.index == picked_index and row.steps == 12 and not row.automatic
        assert row.relative_error == pytest.approx(abs(row.delta) / abs(row.difference))


def test_a_linear_model_is_exact_with_one_step(float64_images: torch.Tensor) -> None:
    torch.manual_seed(0)
    linear = freeze(nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 4)).double())
    for row in completeness(linear, float64_images, PICKS, baseline="uniform_noise", steps=1):
        assert abs(row.delta) < 1e-10


def test_automatic_steps_stop_at_the_first_count_within_the_tolerance(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    rows = completeness(
        float64_cnn, float64_images, PICKS, steps="auto", tolerance=0.05, max_steps=1024
    )
    for row in rows:
        assert row.automatic and row.relative_error <= 0.05
        assert row.steps in (16, 32, 64, 128, 256, 512, 1024)
        if row.steps > 16:  # the count before it was not enough
            (fewer,) = completeness(float64_cnn, float64_images, [row.index], steps=row.steps // 2)
            assert fewer.relative_error > 0.05


def test_an_unreachable_tolerance_is_a_clear_error(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    with pytest.raises(InputError, match=r"did not reach 0\.0% relative error .* within 32 steps"):
        completeness(
            float64_cnn, float64_images, PICKS, steps="auto", tolerance=1e-12, max_steps=32
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"steps": 0}, "steps must be a whole number from 1"),
        ({"steps": 10_000}, "steps must be a whole number from 1 to 4,096"),
        ({"steps": 2.5}, "steps must be a whole number"),
        ({"tolerance": 0.0}, "tolerance is a relative error"),
        ({"tolerance": 1.5}, "tolerance is a relative error"),
        ({"max_steps": 1}, "most Integrated Gradients steps"),
        ({"baseline": "grey"}, "Unknown baseline"),
        ({"classes": 10}, "Class 10 is out of range"),
    ],
)
def test_bad_options_are_refused(
    float64_cnn: nn.Module, float64_images: torch.Tensor, options: dict, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        completeness(float64_cnn, float64_images, PICKS, **options)


def test_automatic_steps_double_from_16_and_end_at_the_cap_once() -> None:
    assert steps_to_try("auto", 0.05, 32) == [16, 32]
    assert steps_to_try("auto", 0.05, 100) == [16, 32, 64, 100]
    assert steps_to_try("auto", 0.05, 8) == [8]
    assert steps_to_try(12, 0.05, 8) == [12]  # a fixed count ignores the cap


@pytest.mark.parametrize("tolerance", ["0.1", True, 1.0, float("inf")])
def test_a_tolerance_that_is_not_a_fraction_below_one_is_refused(
    float64_cnn: nn.Module, float64_images: torch.Tensor, tolerance: object
) -> None:
    message = (
        f"The tolerance must be a number; got {tolerance!r}."
        if isinstance(tolerance, str | bool)
        else f"The tolerance is a relative error: give a number between 0 and 1; got {tolerance!r}."
    )
    with pytest.raises(InputError) as refused:
        completeness(float64_cnn, float64_images, PICKS, tolerance=tolerance)  # type: ignore[arg-type]
    assert str(refused.value) == message
