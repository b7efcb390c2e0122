"""The explorer benchmark's own logic: core lists, targets and the table (the browser run itself
is ``gradpick bench --explorer``; its figures are never asserted on)."""

from __future__ import annotations

import math
import sys

import pytest

from gradpick.bench import explorer as explorer_bench
from gradpick.bench.explorer import ExplorerBenchConfig, ExplorerReport, Step
from gradpick.errors import InputError


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0:1", ((0,), (1,))), ("0-1:2,3", ((0, 1), (2, 3))), ("3:0-2", ((3,), (0, 1, 2)))],
)
def test_taskset_takes_server_and_browser_core_lists(text: str, expected: tuple) -> None:
    assert explorer_bench.parse_taskset(text) == expected


@pytest.mark.parametrize("text", ["0", "a:1", "0:", "0:1:2"])
def test_a_bad_taskset_is_explained(text: str) -> None:
    with pytest.raises(InputError, match="SERVER:BROWSER"):
        explorer_bench.parse_taskset(text)


def test_a_step_is_held_to_its_median_or_for_sessions_its_worst() -> None:
    step = Step("click", [100.0, 300.0, 900.0], limit_ms=500)
    assert (step.median, step.worst, step.met) == (300.0, 900.0, "yes")
    sessions = Step("sessions", [100.0, 300.0, 2100.0], limit_ms=2000, worst_bound=True)
    assert sessions.met == "no"
    assert Step("readout", [5.0]).met == ""
    both = Step("settled", [200.0, 250.0, 900.0], limit_ms=300, worst_limit_ms=800)
    assert both.met == "no"  # the median is within, the worst is not
    assert Step("settled", [300.0, 800.0, 100.0], limit_ms=300, worst_limit_ms=800).met == "yes"
    empty = Step("skipped", limit_ms=1.0)
    assert math.isnan(empty.median) and empty.met == ""


def test_the_report_is_a_markdown_table_with_the_ratios_and_the_machine() -> None:
    steps = [Step("click → heatmaps", [210.0, 190.5], "median < 500 ms", 500), Step("failed one")]
    context = {
        "cpus": 2,
        "load_before": "1.00 1.00 1.00",
        "load_after": "2.00 1.50 1.00",
        "server_cpus": "0",
        "browser_cpus": "1",
        "threads": "unset",
        "page": {"method": "Grad-CAM 3.2 ms"},
        "failed": ["large batch: TimeoutError: waited too long"],
    }
    report = ExplorerReport(ExplorerBenchConfig(), steps, {"inference ratio": 0.93}, context)
    text = explorer_bench.report_text(report)
    lines = text.splitlines()
    assert lines[0] == "| step | runs | median (ms) | worst (ms) | target | met |"
    assert lines[2] == "| click → heatmaps | 2 | 200 | 210 | median < 500 ms | yes |"
    assert lines[3] == "| failed one | 0 | – | – |  |  |"
    assert "- inference ratio: 0.93" in lines
    assert "- failed: large batch: TimeoutError: waited too long" in lines
    assert "server cores 0, browser cores 1" in text
    assert text.endswith("attribution view Grad-CAM 3.2 ms")
    assert report.as_dict()["steps"][0]["met"] == "yes"


def test_a_click_waits_for_the_hover_of_its_own_mark() -> None:
    """The mark a click's hover must find: a point's batch index, a confusion cell, else any
    (the hover still held from the previous click must not count for the next one)."""
    from gradpick.bench.serving import hovered_mark

    assert hovered_mark({"x": 1.0, "y": 2.0, "index": 63}) == 63
    assert hovered_mark({"x": 1.0, "y": 2.0, "cell": [3, 5], "count": 2}) == [3, 5]
    assert hovered_mark({"x": 1.0, "y": 2.0}) is None


def test_the_badges_figures_are_read_from_the_pages_own_caption() -> None:
    """What the benchmark reads is what ``badges.caption`` writes: the total and each check."""
    from gradpick.trust.quick import QuickChecks
    from gradpick.ui import badges

    ran = QuickChecks("gradient", (), 1234.4, ("road",), (("class", 9.2), ("randomised", 8.6)))
    assert explorer_bench.badges_figures(badges.caption(ran)) == (1234.0, ["class", "randomised"])
    none = QuickChecks("gradient", (), 0.2, ("class", "randomised", "road"))
    assert explorer_bench.badges_figures(f"#3 class: Trust tab\n{badges.caption(none)}") == (
        0.0,
        [],
    )
    assert explorer_bench.badges_figures("no badges here") is None


def test_each_inference_ratio_is_of_medians_over_its_own_seeds() -> None:
    """The later sessions take the first seeds, the sample changes the next ones; each case is
    set against the plain processes' inference of its own seeds only, the first page's against
    every fresh plain process."""
    config = ExplorerBenchConfig(inference_seeds=2, sample_changes=3)
    readouts = {
        "seeded_inference": "500 img/s, 700 img/s",
        "sample_changes": "1,800 img/s, 1,900 img/s, 2,000 img/s",
    }
    first = {
        "app": [900.0, 1000.0, 1300.0],
        "plain": [800.0, 1000.0, 1000.0, 1100.0],
        "plain_server_allocator": [1500.0, 1600.0],
    }
    before = [1000.0, 1000.0, 2000.0, 2000.0, 2000.0]  # seeds 1-2, then 3-5
    after = [1000.0, 3000.0, 2000.0, 2000.0, 9000.0]
    ratios = list(explorer_bench._inference_ratios(config, readouts, first, before, after).items())
    assert [round(value, 6) for _, value in ratios] == [1.0, 1.55, 0.6, 0.95]
    assert "3 servers and 4 plain processes" in ratios[0][0]
    assert "allocator policy alone" in ratios[1][0] and "medians of 2 and 4" in ratios[1][0]
    assert "later sessions" in ratios[2][0] and "2 samples and 4" in ratios[2][0]
    assert "changed in the open page" in ratios[3][0] and "3 samples and 6" in ratios[3][0]
    first["plain_server_allocator"] = []
    only_first = explorer_bench._inference_ratios(config, {}, first, before, after)
    assert list(only_first.values()) == [1.0]


def test_a_call_that_fails_in_its_fresh_process_says_which_and_why() -> None:
    from gradpick.bench import reference

    with pytest.raises(RuntimeError, match="no_such_call in a fresh process failed") as failed:
        reference.in_fresh_process("no_such_call", [], {}, sys.executable)
    assert "AttributeError" in str(failed.value)
