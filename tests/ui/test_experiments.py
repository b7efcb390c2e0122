"""The Strategies tab's experiments on tiny models: agreement, costs, the naive loop, leakage."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradpick.data import CIFAR10_CLASSES, ImageBatch
from gradpick.errors import SelectionError
from gradpick.gradients.engine import STRATEGIES
from gradpick.gradients.timing import FLOOR, StrategyRun
from gradpick.ui import experiments
from gradpick.ui.heatmaps import HeatmapRequest


@pytest.fixture
def batch() -> ImageBatch:
    generator = torch.Generator().manual_seed(11)
    images = torch.randint(0, 256, (20, 3, 32, 32), generator=generator, dtype=torch.uint8)
    return ImageBatch(
        images=images,
        labels=torch.randint(0, 10, (20,), generator=generator),
        class_names=CIFAR10_CLASSES,
        names=tuple(str(i) for i in range(20)),
        positions=tuple(range(20)),
        source="test",
    )


def _setup(batch: ImageBatch, indices: list[int], forward_ms: float = 0.01) -> experiments.Setup:
    return experiments.Setup.of(batch, indices, HeatmapRequest(), forward_ms)


def test_setup_keeps_at_most_the_compared_number_of_picks(batch: ImageBatch) -> None:
    setup = _setup(batch, list(range(20)))
    assert setup.indices == list(range(experiments.MAX_COMPARED))
    assert (setup.target, setup.classes) == ("loss", None)
    with pytest.raises(SelectionError):
        _setup(batch, [])


def test_every_strategy_agrees_with_the_floor(tiny_cnn: nn.Module, batch: ImageBatch) -> None:
    setup = _setup(batch, [3, 8, 1])
    runs = experiments.compare_all(tiny_cnn, setup, repeats=1)
    assert [run.name for run in runs] == [FLOOR, *STRATEGIES]
    for run in runs:
        assert run.max_abs_difference < 1e-5
        assert run.milliseconds > 0


def test_whole_batch_strategies_over_budget_are_skipped_with_a_reason(
    tiny_cnn: nn.Module, batch: ImageBatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(experiments, "WHOLE_BATCH_BUDGET", 1000)
    setup = _setup(batch, [3, 8])
    affordable, skipped = experiments.affordable_strategies(tiny_cnn, setup)
    assert affordable == ["recompute", "vmap"]
    assert set(skipped) == {"summed", "retain_graph"}
    assert "20 images" in skipped["summed"]
    names = [run.name for run in experiments.compare_all(tiny_cnn, setup, repeats=1)]
    assert names == [FLOOR, "recompute", "vmap"]


def test_a_sigmoid_models_loss_skips_the_strategy_without_bce(
    tiny_cnn: nn.Module, batch: ImageBatch
) -> None:
    request = HeatmapRequest(output="sigmoid")  # its loss: the true label's bce
    setup = experiments.Setup.of(batch, [3, 8], request, 0.01)
    assert setup.target == "bce"
    affordable, skipped = experiments.affordable_strategies(tiny_cnn, setup)
    assert "vmap" not in affordable and skipped["vmap"] == "takes targets loss and logit, not bce"
    runs = experiments.compare_all(tiny_cnn, setup, repeats=1)
    assert [run.name for run in runs] == [FLOOR, *(n for n in STRATEGIES if n != "vmap")]
    assert all(run.max_abs_difference < 1e-5 for run in runs)


def test_whole_batch_strategies_estimated_too_slow_are_skipped(
    tiny_cnn: nn.Module, batch: ImageBatch
) -> None:
    slow = _setup(batch, [3, 8], forward_ms=500.0)  # 20 images: summed ~30 s, retain ~50 s
    affordable, skipped = experiments.affordable_strategies(tiny_cnn, slow, repeats=1)
    assert affordable == ["recompute", "vmap"]
    assert "would take about" in skipped["retain_graph"]
    fast = _setup(batch, [3, 8], forward_ms=0.01)
    assert experiments.affordable_strategies(tiny_cnn, fast) == (list(STRATEGIES), {})


def test_the_naive_loop_fails_from_the_second_index(tiny_cnn: nn.Module, batch: ImageBatch) -> None:
    failing = experiments.naive_loop(tiny_cnn, _setup(batch, [1, 2]))
    assert failing.error is not None and "second time" in failing.error
    single = experiments.naive_loop(tiny_cnn, _setup(batch, [1]))
    assert single.error is None


def test_mean_reduction_scales_by_one_over_k(tiny_cnn: nn.Module, batch: ImageBatch) -> None:
    scaling = experiments.mean_scaling(tiny_cnn, _setup(batch, [0, 4, 7, 9]))
    assert scaling.k == 4
    assert scaling.ratio == pytest.approx(0.25, rel=1e-5)
    assert scaling.max_deviation < 1e-7


def test_train_mode_batch_norm_leaks_and_the_served_model_is_untouched(
    tiny_bn_cnn: nn.Module, batch: ImageBatch
) -> None:
    before = {name: value.clone() for name, value in tiny_bn_cnn.state_dict().items()}
    setup = _setup(batch, [0, 5, 9])
    served, training = experiments.leakage(tiny_bn_cnn, setup)
    assert served.relative < 1e-6
    assert training.relative > 1e-3
    assert training.coupled_modules
    assert not tiny_bn_cnn.training
    for name, value in tiny_bn_cnn.state_dict().items():
        assert torch.equal(value, before[name])
    with pytest.raises(SelectionError):
        experiments.leakage(tiny_bn_cnn, _setup(batch, [2]))


def test_sweep_varies_k_at_the_largest_n_and_n_at_the_largest_k(
    tiny_cnn: nn.Module, batch: ImageBatch
) -> None:
    setup = _setup(batch, [0])
    steps: list[tuple[int, int]] = []
    points = experiments.sweep(
        tiny_cnn, setup, ks=(1, 4), ns=(8, 20), progress=lambda d, t: steps.append((d, t))
    )
    cells = sorted({(point.k, point.n) for point in points})
    assert cells == [(1, 20), (4, 8), (4, 20)]
    assert steps[-1] == (3, 3)
    assert {point.strategy for point in points} == {FLOOR, *STRATEGIES}


def test_agreement_is_judged_at_float32_rounding() -> None:
    def run(difference: float) -> StrategyRun:
        return StrategyRun("x", 1.0, None, None, "not measured", difference)

    assert experiments.agreement([run(0.0), run(experiments.AGREEMENT)]).agrees
    verdict = experiments.agreement([run(1e-7), run(3e-3)])
    assert not verdict.agrees and verdict.worst == 3e-3


def test_run_comparison_runs_every_experiment_and_asks_for_the_leakage_model_when_needed(
    tiny_cnn: nn.Module, tiny_bn_cnn: nn.Module, batch: ImageBatch
) -> None:
    asked: list[int] = []

    def leakage_model() -> nn.Module:
        asked.append(1)
        return tiny_bn_cnn

    stored = experiments.run_comparison(tiny_cnn, _setup(batch, [0, 5]), ("key",), leakage_model)
    assert stored.key == ("key",) and asked == [1]
    assert [run.name for run in stored.runs] == [FLOOR, *STRATEGIES] and stored.skipped == {}
    assert stored.naive.error is not None and stored.mean.k == 2
    assert stored.agreement.agrees
    assert stored.leakage is not None and stored.leakage[1].relative > 1e-3
    single = experiments.run_comparison(tiny_cnn, _setup(batch, [3]), ("one",), leakage_model)
    assert single.leakage is None and asked == [1]


def test_sweep_series_split_the_points_by_direction() -> None:
    points = [
        experiments.SweepPoint("recompute", k, n, float(k * n), None if k == 1 else 10 * k)
        for k, n in ((4, 20), (1, 20), (4, 8))
    ]
    against_k, against_n = experiments.sweep_series(points)
    assert against_k.fixed == 20 and against_k.lines == {
        "recompute": ([1, 4], [20.0, 80.0], [None, 40])
    }
    assert against_n.fixed == 4 and against_n.lines == {
        "recompute": ([8, 20], [32.0, 80.0], [40, 40])
    }


def test_the_run_table_compares_with_the_floor_in_megabytes() -> None:
    runs = [
        StrategyRun(FLOOR, 2.0, 1_000_000, 3_456_789, "x", 0.0),
        StrategyRun("summed", 5.0, None, None, "x", 1e-6),
    ]
    table = experiments.run_table(runs)
    assert table["strategy"] == [FLOOR, "summed"] and table["× floor"] == [1.0, 2.5]
    assert table["saved for backward (MB)"] == [1.0, None]
    assert table["peak (MB)"] == [3.46, None]
