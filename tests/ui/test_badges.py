"""The trust badges through AppTest: one per map, cached like the maps, and none when off."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import streamlit as st

from gradpick.trust.quick import BUDGET_SHARE, FAILS, PASSES, Badge, PickBadges, QuickChecks
from gradpick.ui import badges, heatmaps, keys
from tests.app.test_app import (
    TUTORIAL,
    captioned_indices,
    heatmap_captions,
    metrics,
    no_errors,
    open_app,
    select,
)


def badge_lines(app: Any) -> list[str]:
    """The badge line of each map, as the page's markdown holds them."""
    return [
        line
        for element in app.markdown
        for line in element.value.split("</div>")
        if 'class="trust-badge"' in line
    ]


def test_every_map_gets_a_badge_and_the_switch_turns_them_off(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st.cache_data.clear()
    runs: list[tuple[int, ...]] = []
    checks = heatmaps.run_quick_checks

    def counted(*args: Any, **kwargs: Any) -> QuickChecks:
        runs.append(tuple(args[2]))
        return checks(*args, **kwargs)

    monkeypatch.setattr(heatmaps, "run_quick_checks", counted)
    # No time budget: on busy cores the checks may outrun half the click's server time and be
    # cut short (the budget's own test is below); here every check must run.
    monkeypatch.setattr(badges, "budget_s", lambda server_s: math.inf)
    app = select(open_app(**TUTORIAL), keys.SCATTER_CHART, [5, 3])
    no_errors(app)
    lines = badge_lines(app)
    assert len(lines) == 2 and "#5" in lines[0] and "#3" in lines[1]
    assert all("class ρ" in line and "randomised ρ" in line for line in lines)
    assert all('title="Spearman' in line for line in lines)  # the meaning, on hover
    assert len(runs) == 1
    app.run()  # a rerun without a change recomputes nothing
    assert len(runs) == 1 and len(badge_lines(app)) == 2
    app.toggle(key=keys.TRUST_BADGES).set_value(False).run()
    no_errors(app)
    assert badge_lines(app) == [] and len(runs) == 1
    assert captioned_indices(app) == [5, 3]  # the maps stay
    app = select(app, keys.SCATTER_CHART, [1])
    assert badge_lines(app) == [] and len(runs) == 1  # off: no check runs
    app.toggle(key=keys.TRUST_BADGES).set_value(True).run()
    assert len(badge_lines(app)) == 1 and len(runs) == 2


def test_a_failing_map_is_dimmed_with_its_reason() -> None:
    def pick(index: int, verdict: str) -> PickBadges:
        badge = Badge("class", verdict, 0.95, "class ρ 0.95", "explains the image")
        return PickBadges(index, (badge,))

    found = QuickChecks("gradient", (pick(1, PASSES), pick(2, FAILS)), 1.0, ())
    strip = np.full((2, 2, 4), 200, dtype=np.uint8)
    strips, captions = badges.applied(found, [strip, strip], ["#1", "#2"])
    assert captions == ["#1", "#2 · fails: explains the image"]
    assert strips[0] is strip
    assert (strips[1][..., :3] == 200).all()
    assert (strips[1][..., 3] == round(200 * badges.DIMMED)).all()  # lower opacity
    unchanged, same = badges.applied(None, [strip], ["#1"])
    assert unchanged[0] is strip and same == ["#1"]
    assert 'data-verdict="fails"' in badges.pick_html("#2", found, 1)


def test_the_checks_run_after_the_maps_within_half_the_click_so_far(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The badges' budget is half of the page's own server-time readout (the click up to its
    maps), and a failing verdict redraws the maps already sent: dimmed, the reason captioned."""
    st.cache_data.clear()
    budgets: list[float] = []
    checks = heatmaps.run_quick_checks

    def second_fails(*args: Any, **kwargs: Any) -> QuickChecks:
        budgets.append(args[8])
        found = checks(*args, **kwargs)
        failing = Badge("class", FAILS, 0.97, "class ρ 0.97", "explains the image")
        picks = (found.picks[0], PickBadges(found.picks[1].index, (failing,)))
        return QuickChecks(found.method, picks, found.milliseconds, found.skipped)

    monkeypatch.setattr(heatmaps, "run_quick_checks", second_fails)
    app = select(open_app(**TUTORIAL), keys.SCATTER_CHART, [5, 3])
    no_errors(app)
    server_ms = float(metrics(app)["Server time for this update"].split()[0].replace(",", ""))
    assert budgets == [pytest.approx(BUDGET_SHARE * server_ms / 1000, abs=0.0003)]
    captions = heatmap_captions(app)
    assert captions[0].startswith("#5") and "fails" not in captions[0]
    assert captions[1].startswith("#3") and captions[1].endswith("· fails: explains the image")
    assert 'data-verdict="fails"' in badge_lines(app)[1]


def test_checks_that_did_not_fit_say_not_run_and_a_button_runs_them(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no time to spare every check is 'not run' and the button appears; pressing it runs
    them all for these picks, with no budget, and they stay run on the next rerun."""
    st.cache_data.clear()
    budgets: list[float] = []
    checks = heatmaps.run_quick_checks

    def recorded(*args: Any, **kwargs: Any) -> QuickChecks:
        budgets.append(args[8])
        return checks(*args, **kwargs)

    monkeypatch.setattr(heatmaps, "run_quick_checks", recorded)
    monkeypatch.setattr(badges, "budget_s", lambda server_s: -1.0)
    app = select(open_app(**TUTORIAL), keys.SCATTER_CHART, [5])
    no_errors(app)
    (line,) = badge_lines(app)
    assert "not run" in line and "class ρ" not in line
    app.button(key=keys.TRUST_BADGES_RUN).click().run()
    no_errors(app)
    (line,) = badge_lines(app)
    assert "class ρ" in line and "randomised ρ" in line and "not run" not in line
    assert budgets == [-1.0, float("inf")]
    assert not [b for b in app.button if b.key == keys.TRUST_BADGES_RUN]
    app.run()
    assert "class ρ" in badge_lines(app)[0] and len(budgets) == 2  # kept, cached
