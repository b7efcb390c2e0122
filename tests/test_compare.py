"""The strategy comparison: every row agrees with the floor, the floor with plain autograd."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradpick.compare import (
    CAPTUM,
    FLOOR,
    MAX_RUNS_PER_ROUND,
    MIN_MEASURED_SECONDS,
    NOT_MEASURED,
    captum_unavailable_reason,
    compare_strategies,
    floor_gradients,
    interleaved_medians,
)
from gradpick.errors import InputError, SelectionError
from gradpick.gradients import STRATEGIES
from gradpick.measure import CPU_PEAK_LABEL
from gradpick.request import GradientRequest

INDICES = [5, 0, 5, 11]  # repeated and unordered on purpose


def per_sample_loop(
    model: nn.Module,
    images: torch.Tensor,
    indices: list[int],
    labels: torch.Tensor | None,
    classes: list[int] | None,
) -> torch.Tensor:
    """The plainest possible reference: one image at a time through the model."""
    rows = []
    for position, index in enumerate(indices):
        image = images[index : index + 1].clone().requires_grad_(True)
        logits = model(image)
        if labels is not None:
            value = F.cross_entropy(logits, labels[index : index + 1])
        else:
            wanted = int(logits.argmax()) if classes is None else classes[position]
            value = logits[0, wanted]
        (gradient,) = torch.autograd.grad(value, image)
        rows.append(gradient[0])
    return torch.stack(rows)


@pytest.mark.parametrize("target", ["loss", "logit"])
def test_floor_equals_a_per_sample_loop_in_float64(tiny_cnn, random_batch, target):
    model = tiny_cnn.double()
    images = random_batch.images.double()
    labels = random_batch.labels if target == "loss" else None
    floor = floor_gradients(GradientRequest.build(model, images, INDICES, labels, target))
    expected = per_sample_loop(model, images, INDICES, labels, classes=None)
    assert floor.shape == (len(INDICES), 3, 32, 32)
    torch.testing.assert_close(floor, expected, rtol=1e-12, atol=1e-14)


def test_floor_takes_one_class_or_one_per_index(tiny_cnn, random_batch):
    images = random_batch.images
    one = floor_gradients(GradientRequest.build(tiny_cnn, images, INDICES, None, "logit", 3))
    each = floor_gradients(
        GradientRequest.build(tiny_cnn, images, INDICES, None, "logit", [3, 1, 2, 0])
    )
    torch.testing.assert_close(one, per_sample_loop(tiny_cnn, images, INDICES, None, [3] * 4))
    torch.testing.assert_close(each, per_sample_loop(tiny_cnn, images, INDICES, None, [3, 1, 2, 0]))


def test_every_strategy_and_captum_agree_with_the_floor(tiny_cnn, random_batch):
    runs = compare_strategies(
        tiny_cnn, random_batch.images, INDICES, target="logit", repeats=2, include_captum=True
    )
    assert [run.name for run in runs] == [FLOOR, *STRATEGIES, CAPTUM]
    for run in runs:
        assert run.max_abs_difference < 1e-5, run
        assert run.milliseconds > 0


def test_memory_columns_are_labelled_and_only_there_when_measured(tiny_cnn, random_batch):
    measured = compare_strategies(
        tiny_cnn, random_batch.images, INDICES, random_batch.labels, repeats=1
    )
    by_name = {run.name: run for run in measured}
    for run in measured:
        assert run.peak_counts == CPU_PEAK_LABEL
        assert run.peak_bytes is not None and run.peak_bytes > 0
    assert by_name["vmap"].saved_bytes is None  # torch.func runs no saved-tensor hooks
    assert by_name[FLOOR].saved_bytes == by_name["recompute"].saved_bytes > 0

    unmeasured = compare_strategies(
        tiny_cnn, random_batch.images, INDICES, random_batch.labels, measure_memory=False
    )
    assert all(run.peak_counts == NOT_MEASURED for run in unmeasured)
    assert all(run.saved_bytes is None and run.peak_bytes is None for run in unmeasured)


def test_recompute_saves_the_same_bytes_whatever_the_batch_size(tiny_cnn, random_batch):
    def saved(count: int) -> dict[str, int | None]:
        runs = compare_strategies(
            tiny_cnn,
            random_batch.images[:count],
            [1, 3],
            random_batch.labels[:count],
            strategies=("recompute", "summed"),
            repeats=1,
            include_floor=False,
        )
        return {run.name: run.saved_bytes for run in runs}

    small, large = saved(4), saved(16)
    assert small["recompute"] == large["recompute"]
    assert small["summed"] is not None and large["summed"] is not None
    assert large["summed"] > small["summed"]  # the usual answer pays for every image


def test_captum_is_offered_for_logits_only(tiny_cnn, random_batch):
    assert captum_unavailable_reason("logit") is None
    assert "logit" in (captum_unavailable_reason("loss") or "")
    with pytest.warns(UserWarning, match="captum row skipped"):
        runs = compare_strategies(
            tiny_cnn,
            random_batch.images,
            [0],
            random_batch.labels,
            strategies=(),
            repeats=1,
            include_captum=True,
        )
    assert [run.name for run in runs] == [FLOOR]


def test_bad_indices_raise_gradpicks_own_error(tiny_cnn, random_batch):
    with pytest.raises(SelectionError, match="out of range"):
        compare_strategies(tiny_cnn, random_batch.images, [16], random_batch.labels)


def test_interleaved_medians_interleave_rounds_and_sample_cheap_calls_more():
    calls: list[str] = []

    def call(name: str, seconds: float) -> Callable[[], None]:
        return lambda: (calls.append(name), time.sleep(seconds))

    medians = interleaved_medians(
        {"slow": call("slow", 0.03), "quick": call("quick", 0.001)},
        torch.device("cpu"),
        repeats=3,
    )
    assert calls[:2] == ["slow", "quick"]  # one warm-up run each
    rounds = "".join("S" if name == "slow" else "q" for name in calls[2:]).split("S")[1:]
    quick_rounds = [run for run in rounds if run]
    assert len(set(quick_rounds[:-1])) == 1, "a cheap call runs equally often in every round"
    assert 10 <= len(quick_rounds[0]) <= MAX_RUNS_PER_ROUND
    assert rounds[: len(quick_rounds)] == quick_rounds, "cheap calls take turns with slow ones"
    # Each call is measured for at least MIN_MEASURED_SECONDS of its own time, and then stops.
    assert len(rounds) * 30 >= MIN_MEASURED_SECONDS * 1000
    quick_runs = calls[2:].count("quick")
    assert MIN_MEASURED_SECONDS * 1000 / 2 <= quick_runs <= MIN_MEASURED_SECONDS * 1000
    assert medians["slow"] >= 30 and 1 <= medians["quick"] < 30
    slow: list[str] = []
    interleaved_medians(
        {"slow": lambda: (slow.append("slow"), time.sleep(0.1))}, torch.device("cpu"), repeats=3
    )
    assert len(slow) == 1 + 5, "0.1 s calls need 5 runs to fill the measuring time"
    with pytest.raises(InputError, match="repeats"):
        interleaved_medians({"a": lambda: None}, torch.device("cpu"), repeats=0)
