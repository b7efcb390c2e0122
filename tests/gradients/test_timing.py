"""The strategy comparison: every row agrees with the floor, the floor with plain autograd."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradpick.errors import InputError, SelectionError
from gradpick.gradients.engine import STRATEGIES
from gradpick.gradients.request import GradientRequest
from gradpick.gradients.timing import (
    CAPTUM,
    FLOOR,
    MAX_ROUNDS,
    MAX_RUNS_PER_ROUND,
    MIN_MEASURED_SECONDS,
    NOT_MEASURED,
    ROUND_SECONDS,
    captum_unavailable_reason,
    compare_strategies,
    floor_gradients,
    interleaved_medians,
)
from gradpick.runtime.measure import CPU_PEAK_LABEL

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


class FakeClock:
    """A clock (seconds) that moves only when a fake call says how long it took; the costs
    below are powers of two, so every sum of them is exact."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[str] = []

    def __call__(self) -> float:
        return self.now

    def costing(self, name: str, seconds: float) -> Callable[[], None]:
        def call() -> None:
            self.calls.append(name)
            self.now += seconds

        return call


def test_interleaved_medians_interleave_rounds_and_sample_cheap_calls_more():
    clock = FakeClock()
    slow, quick = 2**-5, 2**-10  # 31.25 ms and 0.9765625 ms
    medians = interleaved_medians(
        {"slow": clock.costing("slow", slow), "quick": clock.costing("quick", quick)},
        torch.device("cpu"),
        repeats=3,
        clock=clock,
    )
    assert medians == {"slow": slow * 1000, "quick": quick * 1000}
    # One warm-up run each; then rounds of about ROUND_SECONDS per call: int(50 / 0.977) = 51
    # quick runs per slow one. Each call stops once it has MIN_MEASURED_SECONDS of its own time:
    # quick after 11 rounds (10 give 498 ms), slow after 16 (500 ms).
    quick_per_round = int(ROUND_SECONDS / quick)
    assert quick_per_round == 51 and MIN_MEASURED_SECONDS == 0.5
    rounds = ["slow", *["quick"] * quick_per_round] * 11 + ["slow"] * 5
    assert clock.calls == ["slow", "quick", *rounds]


@pytest.mark.parametrize(
    ("seconds", "runs"),
    [(2**-3, 4), (2**-2, 3), (0.0, MAX_ROUNDS * MAX_RUNS_PER_ROUND)],
    ids=["measuring time decides", "repeats decide", "at most MAX_ROUNDS rounds"],
)
def test_interleaved_medians_stop_when_a_call_has_enough(seconds: float, runs: int) -> None:
    """125 ms calls need 4 runs to fill 0.5 s; 250 ms ones fill it in 2 but 3 repeats are asked
    for; a call too quick for the clock runs the most rounds, MAX_RUNS_PER_ROUND at a time."""
    clock = FakeClock()
    medians = interleaved_medians(
        {"call": clock.costing("call", seconds)}, torch.device("cpu"), repeats=3, clock=clock
    )
    assert len(clock.calls) == 1 + runs
    assert medians == {"call": seconds * 1000}


def test_interleaved_medians_need_a_repeat():
    with pytest.raises(InputError, match="repeats"):
        interleaved_medians({"a": lambda: None}, torch.device("cpu"), repeats=0)
