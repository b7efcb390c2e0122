"""IG completeness: the delta equals captum's for the same steps, automatic steps, bad input."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.models.shipped import freeze
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


def test_an_unreachable_tolerance_is_reported_per_image_not_raised(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    rows = completeness(
        float64_cnn, float64_images, PICKS, steps="auto", tolerance=1e-12, max_steps=32
    )
    assert [row.index for row in rows] == list(PICKS)  # every image kept
    for row in rows:
        assert row.steps == 32 and row.tolerance == 1e-12 and not row.reached
        assert row.relative_error > 1e-12
        assert row.verdict.startswith("did not reach 1e-10% within 32 steps")


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


class Cubic(nn.Module):
    """logit 0 = s^3 and logit 1 = -s^3 for s the sum of the image's pixels.

    On the path from black, F(a x) = a^3 s^3, and the midpoint rule with m points sums the
    attributions to s^3 (1 - 1 / (4 m^2)): (1/m) sum_i 3 a_i^2 with a_i = (i + 1/2) / m is
    1 - 1 / (4 m^2). With pixels that are short binary fractions every term is exact in float64,
    so the relative error is exactly 1 / (4 m^2): 1 / 1024 at 16 steps.
    """

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        total = images.flatten(1).sum(dim=1)
        return torch.stack([total**3, -(total**3)], dim=1)


def cubic_images(pixel: float) -> torch.Tensor:
    """Two float64 images [2, 1, 2, 2] of four equal pixels, so s = 4 * pixel."""
    return torch.full((2, 1, 2, 2), pixel, dtype=torch.float64)


def test_an_error_equal_to_the_tolerance_is_within_it() -> None:
    """ "At most the tolerance": 16 steps miss by exactly 1/1024, which a tolerance of 1/1024
    accepts (stopping there, also when 16 is the cap) instead of going on to 32 or failing."""
    images = cubic_images(0.25)
    (row,) = completeness(Cubic(), images, [1], steps="auto", tolerance=1 / 1024)
    assert (row.steps, row.automatic) == (16, True)
    assert row.attribution_sum == 1 - 1 / 1024 and row.relative_error == 1 / 1024
    (capped,) = completeness(Cubic(), images, [0], steps="auto", tolerance=1 / 1024, max_steps=16)
    assert capped.steps == 16 and capped.relative_error == 1 / 1024


def test_the_given_class_is_the_one_integrated() -> None:
    """The attributions explain the held class, not the prediction: class 1 (-s^3) of a pick
    whose predicted class is 0 sums to -(1 - 1/1024) at 16 steps."""
    (row,) = completeness(Cubic(), cubic_images(0.25), [0], classes=1, steps=16)
    assert row.target_class == 1 and (row.output, row.baseline_output) == (-1.0, 0.0)
    assert row.attribution_sum == -(1 - 1 / 1024) and row.delta == 1 / 1024


def test_an_image_that_misses_the_tolerance_keeps_its_figure_and_the_others_theirs() -> None:
    # Image 1: s = 0.5, F(x) - F(black) = 0.125, and 16 midpoint steps of the integral of
    # 3 t^2 s^3 miss by 1/1024 of it (0.0977%), over a tolerance of 0.05%. Image 0 is black:
    # F(x) - F(black) = 0 and the map is zero, exact at the first try.
    images = cubic_images(0.125)
    images[0] = 0.0
    missed, exact = completeness(
        Cubic(), images, [1, 0], steps="auto", tolerance=5e-4, max_steps=16
    )
    assert (missed.index, missed.steps, missed.reached) == (1, 16, False)
    assert missed.difference == 0.125 and missed.relative_error == 1 / 1024
    assert missed.verdict == (
        "did not reach 0.05% within 16 steps (still 0.0977%, F(x) - F(baseline) = 0.125): "
        "the path integral converges slowly here; more steps or another baseline may reach it"
    )
    assert (exact.index, exact.steps, exact.reached, exact.relative_error) == (0, 16, True, 0.0)
    assert exact.verdict == "within 0.05% at 16 steps"


def test_noise_baselines_are_seeded_with_0_by_default(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    rows = completeness(float64_cnn, float64_images, PICKS, baseline="uniform_noise", steps=1)
    references = baseline_images(float64_images[PICKS], "uniform_noise", PICKS, seed=0)
    with torch.no_grad():
        logits = float64_cnn(references)
    for position, row in enumerate(rows):
        assert row.baseline_output == pytest.approx(
            float(logits[position, row.target_class]), abs=1e-12
        )


def test_bad_steps_step_caps_and_baselines_are_refused_by_name(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    refusals = [
        ({"steps": 0}, "Integrated Gradients steps must be a whole number from 1 to 4,096; got 0."),
        (
            {"max_steps": 5000},
            "The most Integrated Gradients steps must be a whole number from 2 to 4,096; got 5000.",
        ),
        (
            {"max_steps": 1},
            "The most Integrated Gradients steps must be a whole number from 2 to 4,096; got 1.",
        ),
        (
            {"baseline": "grey"},
            "Unknown baseline 'grey'; use one of black, uniform_noise, blurred.",
        ),
    ]
    for options, message in refusals:
        with pytest.raises(InputError) as refused:
            completeness(float64_cnn, float64_images, PICKS, **options)
        assert str(refused.value) == message
    assert steps_to_try("auto", 0.05, 2) == [2]  # the smallest cap: its two steps at once
