"""The explorer benchmark's own logic: core lists, targets and the table (the browser run itself
is ``gradpick bench --explorer``; its figures are never asserted on)."""

from __future__ import annotations

import math

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
