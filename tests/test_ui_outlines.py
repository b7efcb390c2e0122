"""The picked outlines' script: which grid cells it boxes, and what it is told."""

from __future__ import annotations

import json
import re

from gradpick.ui import figures, keys, outlines


def test_picked_cells_are_the_picks_on_the_page_as_positions_in_order() -> None:
    assert outlines.picked_cells([205, 3, 150, 199, 200, 150], first=100, last=200) == [50, 99]
    assert outlines.picked_cells([], first=0, last=100) == []
    assert outlines.picked_cells([100], first=100, last=200) == [0]


def test_the_script_is_told_the_chart_the_cells_and_how_to_draw_them() -> None:
    selector = keys.selector(keys.GRID_CHART)
    html = outlines.script(selector, [0, 13], 10, figures.PICKED)
    match = re.search(r"const config = (\{.*?\});", html)
    assert match is not None
    config = json.loads(match.group(1))
    assert config == {
        "chart": selector,
        "cells": [0, 13],
        "columns": 10,
        "inset": outlines.INSET,
        "width": outlines.WIDTH,
        "colour": figures.PICKED,
        "layer": outlines.LAYER_ID,
    }
    assert html.startswith("<script>") and html.rstrip().endswith("</script>")
