"""The picked outlines' script: which grid cells it boxes, and what it is told."""

from __future__ import annotations

import json
import re

from gradpick.ui import figures, keys
from gradpick.ui.browser import outlines


def test_picked_cells_are_the_picks_on_the_page_as_positions_in_order() -> None:
    assert outlines.picked_cells([205, 3, 150, 199, 200, 150], first=100, last=200) == [50, 99]
    assert outlines.picked_cells([], first=0, last=100) == []
    assert outlines.picked_cells([100], first=100, last=200) == [0]


def test_the_script_is_told_the_chart_where_the_cells_are_and_how_to_draw_them() -> None:
    selector, holder = keys.selector(keys.GRID_CHART), keys.selector(keys.OUTLINES_CELLS)
    html = outlines.script(selector, holder, 10, figures.PICKED)
    match = re.search(r"const config = (\{.*?\});", html)
    assert match is not None
    config = json.loads(match.group(1))
    assert config == {
        "chart": selector,
        "cells": holder,
        "columns": 10,
        "inset": outlines.INSET,
        "width": outlines.WIDTH,
        "colour": figures.PICKED,
        "layer": outlines.LAYER_ID,
        "ring": outlines.RING,
    }
    assert html.startswith("<script>") and html.rstrip().endswith("</script>")


def test_the_script_is_the_same_for_every_pick_and_the_cells_travel_beside_it() -> None:
    """The browser keeps an iframe whose HTML is unchanged: a click changes only the cells."""
    selector, holder = keys.selector(keys.GRID_CHART), keys.selector(keys.OUTLINES_CELLS)
    assert outlines.script(selector, holder, 10, figures.PICKED) == outlines.script(
        selector, holder, 10, figures.PICKED
    )
    element = outlines.cells_html([0, 13, 99])
    match = re.fullmatch(r"<div data-cells='(\[[^']*\])'></div>", element)
    assert match is not None and json.loads(match.group(1)) == [0, 13, 99]
    assert outlines.cells_html([]) == "<div data-cells='[]'></div>"


def test_without_columns_the_script_rings_points_by_batch_index() -> None:
    """A scatter's picks are circles around its points, found by their customdata."""
    selector, holder = keys.selector(keys.SCATTER_CHART), keys.selector(keys.OUTLINES_CELLS)
    html = outlines.script(selector, holder, None, figures.PICKED)
    match = re.search(r"const config = (\{.*?\});", html)
    assert match is not None
    config = json.loads(match.group(1))
    assert (config["chart"], config["columns"], config["ring"]) == (selector, None, outlines.RING)
    assert "border-radius: 50%" in html and "trace.customdata" in html
