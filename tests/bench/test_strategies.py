"""The benchmark on a tiny grid: its rows, table, JSON and verdict (never the full grid here)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from gradpick.bench import strategies as bench
from gradpick.bench.strategies import (
    CAPTUM_LABEL,
    DIRECT,
    INFER,
    RECOMPUTE_MEASURED,
    BenchConfig,
    BenchRow,
    judge,
    markdown_table,
    run_benchmark,
)
from gradpick.errors import InputError
from gradpick.gradients.engine import STRATEGIES
from gradpick.gradients.timing import FLOOR

GRADIENT_ROWS = [FLOOR, "recompute", RECOMPUTE_MEASURED, *STRATEGIES[1:], CAPTUM_LABEL]
TINY = BenchConfig(models=("tutorial",), sizes=(8, 4), picks=(1, 2, 6), repeats=1, min_seconds=0.01)
"""Timed briefly: these tests check the grid's rows and sums, not the steadiness of a median."""


@pytest.fixture(scope="module")
def report() -> bench.BenchReport:
    return run_benchmark(TINY)


def test_rows_cover_the_grid_in_order(report):
    expected = []
    for n in (4, 8):
        expected += [(n, None, DIRECT), (n, None, INFER)]
        for k in (1, 2, 6):
            if k <= n:  # k = 6 of N = 4 cannot be picked
                expected += [(n, k, label) for label in GRADIENT_ROWS]
    assert [(row.n, row.k, row.strategy) for row in report.rows] == expected
    assert {row.model for row in report.rows} == {"tutorial"}


def test_gradient_rows_are_measured_and_agree_with_the_floor(report):
    for row in report.rows:
        if row.k is None:
            assert row.milliseconds is not None and row.milliseconds > 0
            continue
        assert row.milliseconds is not None and row.milliseconds > 0, row
        assert row.ratio_to_floor == pytest.approx(row.milliseconds / floor_ms(report, row))
        assert row.max_abs_difference is not None and row.max_abs_difference < 1e-5, row
        assert row.peak_bytes is not None
        if row.strategy != "vmap":
            assert row.saved_bytes is not None and row.saved_bytes > 0


def floor_ms(report: bench.BenchReport, row: BenchRow) -> float:
    (floor,) = [
        other
        for other in report.rows
        if (other.model, other.n, other.k, other.strategy) == (row.model, row.n, row.k, FLOOR)
    ]
    assert floor.milliseconds is not None
    return floor.milliseconds


def test_inference_rows_compare_throughput_with_a_direct_call(report):
    for row in report.rows:
        if row.strategy == INFER:
            (direct,) = [r for r in report.rows if (r.n, r.strategy) == (row.n, DIRECT)]
            assert direct.milliseconds is not None and row.milliseconds is not None
            assert row.throughput_vs_direct == pytest.approx(direct.milliseconds / row.milliseconds)
    assert report.verdict.inference_over_direct == min(
        row.throughput_vs_direct for row in report.rows if row.throughput_vs_direct is not None
    )


def test_table_and_json_hold_every_row(report, tmp_path):
    lines = markdown_table(report.rows).splitlines()
    assert lines[0].split("|")[1:-1] == [
        " model ",
        " N ",
        " k ",
        " strategy ",
        " median ms ",
        " x floor ",
        " saved-for-backward MB ",
        " peak MB ",
        " note ",
    ]
    assert len(lines) == 2 + len(report.rows)
    path = tmp_path / "bench.json"
    report.write_json(path)
    written = json.loads(path.read_text())
    assert len(written["rows"]) == len(report.rows)
    assert written["rows"][0]["strategy"] == DIRECT
    assert written["config"]["sizes"] == [8, 4]
    assert set(written["verdict"]) == {
        "recompute_over_floor",
        "recompute_saved_bytes_constant",
        "inference_over_direct",
    }
    assert {"gradpick", "torch", "torchvision", "python"} <= set(written["environment"])


def test_recompute_saved_bytes_do_not_depend_on_n(report):
    assert report.verdict.recompute_saved_bytes_constant is True


def test_expensive_rows_over_budget_are_skipped_with_an_estimate():
    config = replace(TINY, sizes=(8,), picks=(2,), row_budget_seconds=0.0)
    rows = {row.strategy: row for row in run_benchmark(config).rows}
    for strategy in ("summed", "retain_graph"):
        assert rows[strategy].milliseconds is None
        assert rows[strategy].note.startswith("skipped: would take about")
    assert rows["recompute"].milliseconds is not None
    assert rows["vmap"].milliseconds is not None


def test_verdict_judges_the_targets():
    rows = [
        BenchRow("m", 4, None, INFER, 1.0, throughput_vs_direct=0.95),
        BenchRow("m", 8, None, INFER, 1.0, throughput_vs_direct=0.85),
        BenchRow("m", 4, 1, "recompute", 1.1, ratio_to_floor=1.1, saved_bytes=100),
        BenchRow("m", 8, 1, "recompute", 1.3, ratio_to_floor=1.3, saved_bytes=100),
        BenchRow("m", 8, 2, "recompute", 1.0, ratio_to_floor=1.0, saved_bytes=200),
    ]
    verdict = judge(rows)
    assert verdict.recompute_over_floor == 1.3
    assert verdict.recompute_saved_bytes_constant is True
    assert verdict.inference_over_direct == 0.85
    lines = verdict.lines()
    assert "1.30x" in lines[0] and lines[0].endswith("FAIL")
    assert lines[1].endswith("PASS")
    assert "0.85x" in lines[2] and lines[2].endswith("FAIL")

    varying = judge([*rows, BenchRow("m", 16, 1, "recompute", 1.0, 1.0, saved_bytes=101)])
    assert varying.recompute_saved_bytes_constant is False
    assert judge([]).lines()[0].endswith("n/a")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"models": ("vgg",)}, "Unknown model"),
        ({"sizes": (0,)}, "at least 1"),
        ({"picks": ()}, "at least 1"),
        ({"repeats": 0}, "repeats"),
        ({"threads": 0}, "threads"),
    ],
)
def test_bad_configurations_are_refused(fields, message):
    config = replace(TINY, **fields)
    with pytest.raises(InputError, match=message):
        run_benchmark(config)


def test_thread_setting_is_restored_after_the_run():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        config = replace(TINY, sizes=(2,), picks=(1,), threads=1)
        environment = run_benchmark(config).environment
        assert environment["threads"] == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
