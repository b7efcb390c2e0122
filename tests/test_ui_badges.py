"""The trust badges through AppTest: one per map, cached like the maps, and none when off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import streamlit as st
from test_app import TUTORIAL, captioned_indices, no_errors, open_app, select

from gradpick.trust.quick import FAILS, PASSES, Badge, PickBadges, QuickChecks
from gradpick.ui import badges, heatmaps, keys


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
