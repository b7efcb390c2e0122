"""Figures carry the right batch index in every selectable point and state their units."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from PIL import Image

from gradpick.ui import figures

CLASSES = tuple(f"c{index}" for index in range(10))


def _squares(trace: dict) -> int:
    """Closed squares in an outline trace: five corners and a None each."""
    return len(trace["x"]) // 6


def test_thumbnail_sheet_places_each_image_with_transparent_gaps() -> None:
    images = np.random.default_rng(0).integers(0, 256, (13, 3, 32, 32), dtype=np.uint8)
    sheet = np.asarray(Image.open(io.BytesIO(figures.thumbnail_sheet(images, columns=5))))
    cell = 32 + figures.THUMBNAIL_GAP
    assert sheet.shape == (3 * cell, 5 * cell, 4)
    offset = figures.THUMBNAIL_GAP // 2
    for position in (0, 7, 12):
        top, left = (position // 5) * cell + offset, (position % 5) * cell + offset
        tile = sheet[top : top + 32, left : left + 32]
        assert (tile[..., :3] == images[position].transpose(1, 2, 0)).all()
        assert (tile[..., 3] == 255).all()
    assert (sheet[0, :, 3][:offset] == 0).all()
    assert (sheet[-cell:, -cell:, 3] == 0).all()  # the two empty cells of the last row


def test_thumbnails_of_large_inputs_are_averaged_down_to_the_thumbnail_side() -> None:
    images = np.zeros((3, 3, 224, 224), dtype=np.uint8)
    images[1, 0] = 255  # a red image
    images[2, :, :, 112:] = 200  # grey on the right half
    sheet = np.asarray(Image.open(io.BytesIO(figures.thumbnail_sheet(images, columns=3))))
    side, cell = figures.THUMBNAIL_SIDE, figures.THUMBNAIL_SIDE + figures.THUMBNAIL_GAP
    assert sheet.shape == (cell, 3 * cell, 4)
    offset = figures.THUMBNAIL_GAP // 2
    red = sheet[offset : offset + side, cell + offset : cell + offset + side, :3]
    assert (red == [255, 0, 0]).all()
    grey = sheet[offset : offset + side, 2 * cell + offset : 2 * cell + offset + side, 0]
    assert (grey[:, : side // 2] == 0).all() and (grey[:, side // 2 :] == 200).all()


def test_thumbnail_grid_markers_carry_batch_indices_and_outlines_mark_right_wrong() -> None:
    indices = list(range(100, 112))
    correct = [index % 3 != 0 for index in indices]
    figure = figures.thumbnail_grid(
        "/media/sheet.png", indices, [f"#{i}" for i in indices], correct, 5, selection_revision=3
    ).to_dict()
    markers = [trace for trace in figure["data"] if trace["mode"] == "markers"]
    assert len(markers) == 1
    assert list(markers[0]["customdata"]) == indices
    outlines = {
        trace["line"]["color"]: trace for trace in figure["data"] if trace["mode"] == "lines"
    }
    assert set(outlines) == {figures.RIGHT, figures.WRONG}  # the picked ones are drawn apart
    assert _squares(outlines[figures.RIGHT]) == sum(correct)
    assert _squares(outlines[figures.WRONG]) == len(indices) - sum(correct)
    image = figure["layout"]["images"][0]
    assert image["source"] == "/media/sheet.png"
    assert (image["sizex"], image["sizey"]) == (5, 3)
    assert figure["layout"]["selectionrevision"] == 3


def test_the_thumbnail_grid_is_the_same_figure_whatever_is_picked() -> None:
    """Picks are not in the figure: a click leaves it unchanged, so the browser keeps it."""
    arguments = ("/media/sheet.png", [0, 1, 2], ["a", "b", "c"], [True, False, True], 2)
    drawn = figures.thumbnail_grid(*arguments).to_json()
    assert figures.thumbnail_grid(*arguments).to_json() == drawn
    assert figures.thumbnail_grid(*arguments, selection_revision=1).to_json() != drawn


def test_unlabelled_thumbnails_get_neutral_outlines() -> None:
    figure = figures.thumbnail_grid("/media/sheet.png", [0, 1], ["a", "b"], None, 2).to_dict()
    colours = [trace["line"]["color"] for trace in figure["data"] if trace["mode"] == "lines"]
    assert colours == [figures.NEUTRAL]


def test_outputs_scatter_puts_every_image_in_its_predicted_class_trace() -> None:
    rng = np.random.default_rng(1)
    predictions = rng.integers(0, 10, 200)
    correct = rng.random(200) > 0.3
    figure = figures.outputs_scatter(
        rng.random(200),
        rng.random(200),
        "loss",
        predictions,
        correct,
        CLASSES,
        [str(i) for i in range(200)],
        selection_revision=2,
    )
    members: dict[tuple[str, str], list[int]] = {}
    for trace in figure.data:  # trace objects: to_dict() would base64-encode the arrays
        members[trace.name, trace.marker.symbol or ""] = list(trace.customdata)
    seen = []
    for class_index, name in enumerate(CLASSES):
        right = members.get((name, "circle"), [])
        wrong = members.get((name, "x"), [])
        assert right == np.flatnonzero((predictions == class_index) & correct).tolist()
        assert wrong == np.flatnonzero((predictions == class_index) & ~correct).tolist()
        seen += right + wrong
    assert sorted(seen) == list(range(200))
    legend = [trace.name for trace in figure.data if trace.showlegend is not False]
    assert legend == list(CLASSES)  # the picks are ringed over the chart, not in it
    assert figure.layout.selectionrevision == 2


def test_confusion_matrix_has_one_marker_per_nonempty_cell_with_its_count() -> None:
    labels = np.array([0, 0, 0, 1, 1, 2])
    predictions = np.array([0, 0, 1, 1, 1, 0])
    trace = figures.confusion_matrix(labels, predictions, CLASSES[:3]).to_dict()["data"][0]
    cells = {
        tuple(pair): int(text)
        for pair, text in zip(trace["customdata"], trace["text"], strict=True)
    }
    assert cells == {(0, 0): 2, (0, 1): 1, (1, 1): 2, (2, 0): 1}
    assert sum(cells.values()) == len(labels)


def test_probability_bars_carry_class_indices_and_mark_target_and_truth() -> None:
    trace = figures.probability_bars(np.full(10, 0.1), CLASSES, 2, 5).to_dict()["data"][0]
    assert list(trace["customdata"]) == list(range(10))
    colours = trace["marker"]["color"]
    assert colours[5] == figures.PICKED and colours[2] == figures.RIGHT
    assert colours.count(figures.NEUTRAL) == 8


@pytest.mark.parametrize("memory", [[1_000_000, None], [2_000_000, 3_000_000]])
def test_strategy_bars_show_megabytes_and_leave_out_missing(memory: list[int | None]) -> None:
    figure = figures.strategy_bars(["a", "b"], [1.0, 2.0], memory, [5_000_000, 6_000_000])
    saved = figure.to_dict()["data"][1]
    expected = [None if value is None else value / 1e6 for value in memory]
    assert list(saved["y"]) == expected


def test_sweep_lines_draw_time_and_memory_per_strategy() -> None:
    series = {"recompute": ([1, 4], [2.0, 3.0], [1_000_000, 2_000_000])}
    data = figures.sweep_lines(series, "k").to_dict()["data"]
    assert [list(trace["y"]) for trace in data] == [[2.0, 3.0], [1.0, 2.0]]


def test_a_log_loss_axis_draws_zero_losses_at_the_lowest_value() -> None:
    losses = np.array([0.0, 1e-6, 1e-3, 2.0])
    figure = figures.outputs_scatter(
        np.full(4, 0.5), losses, "loss", np.zeros(4, int), None, CLASSES, list("abcd")
    )
    assert figure.layout.yaxis.type == "log"
    assert min(figure.data[0].y) == pytest.approx(1e-6)
    assert "0 drawn lowest" in figure.layout.yaxis.title.text


def test_scatter_heights_lift_zeros_only_on_a_log_axis() -> None:
    wide = np.array([0.0, 1e-6, 1e-3, 2.0])
    heights, log_scale = figures.scatter_heights(wide)
    assert log_scale and heights.tolist() == [1e-6, 1e-6, 1e-3, 2.0]
    narrow = np.array([0.0, 0.5, 2.0])  # a span of 4: linear, where 0 can be drawn
    heights, log_scale = figures.scatter_heights(narrow)
    assert not log_scale and heights.tolist() == [0.0, 0.5, 2.0]
    heights, log_scale = figures.scatter_heights(np.array([1e-6, 2.0]))
    assert log_scale and heights.tolist() == [1e-6, 2.0]


def test_each_strategy_keeps_its_colour_across_sweep_charts() -> None:
    with_retain = {"summed": ([1], [1.0], [1]), "retain_graph": ([1], [2.0], [1])}
    without = {"summed": ([1], [1.0], [1]), "vmap": ([1], [2.0], [1])}
    first = figures.sweep_lines(with_retain, "k").to_dict()["data"]
    second = figures.sweep_lines(without, "N").to_dict()["data"]
    assert first[0]["line"]["color"] == second[0]["line"]["color"]
    assert first[2]["line"]["color"] != second[2]["line"]["color"]


def test_large_scatters_switch_to_webgl() -> None:
    def kinds(n: int) -> set[str]:
        rng = np.random.default_rng(0)
        figure = figures.outputs_scatter(
            rng.random(n), rng.random(n), "loss", np.zeros(n, int), None, CLASSES, ["h"] * n
        )
        return {trace.type for trace in figure.data}

    assert kinds(figures.WEBGL_ABOVE) == {"scatter"}
    assert kinds(figures.WEBGL_ABOVE + 1) == {"scattergl"}


@pytest.mark.parametrize("size", [60, figures.WEBGL_ABOVE + 1])
def test_embedding_scatter_colours_each_group_and_leaves_the_picks_out(size: int) -> None:
    rng = np.random.default_rng(2)
    points = rng.random((size, 2))
    groups = rng.integers(0, 2, size)
    hover = [f"#{i}" for i in range(size)]
    figure = figures.embedding_scatter(points, groups, ("right", "wrong"), hover, "pca", 4)
    traces = {trace.name: trace for trace in figure.data}
    assert set(traces) == {"right", "wrong"}  # the picks are ringed over the chart
    assert figure.layout.selectionrevision == 4
    for group, name in enumerate(("right", "wrong")):
        members = np.flatnonzero(groups == group)
        assert list(traces[name].customdata) == members.tolist()
        np.testing.assert_array_equal(traces[name].x, points[members, 0])
        np.testing.assert_array_equal(traces[name].y, points[members, 1])
        assert traces[name].marker.color == (figures.RIGHT, figures.WRONG)[group]
    kind = "scattergl" if size > figures.WEBGL_ABOVE else "scatter"
    assert {trace.type for trace in figure.data} == {kind}
    assert figure.layout.xaxis.title.text == "PCA 1"


def test_embedding_scatter_by_class_uses_the_class_colours() -> None:
    points = np.arange(8, dtype=float).reshape(4, 2)
    figure = figures.embedding_scatter(
        points, np.array([2, 0, 2, 1]), CLASSES, list("abcd"), "umap"
    )
    colours = {trace.name: trace.marker.color for trace in figure.data}
    assert colours == {CLASSES[i]: figures.CLASS_COLOURS[i] for i in (0, 1, 2)}
    assert figure.layout.yaxis.title.text == "UMAP 2"


def test_a_scatter_draws_every_point_up_to_its_limit_and_a_seeded_sample_past_it() -> None:
    assert figures.drawn_sample(10, at_most=10) is None
    drawn = figures.drawn_sample(50, at_most=10, seed=3)
    assert drawn is not None and len(drawn) == 10 == len(set(drawn.tolist()))
    assert drawn.tolist() == sorted(drawn.tolist()) and drawn.min() >= 0 and drawn.max() < 50
    assert np.array_equal(drawn, figures.drawn_sample(50, at_most=10, seed=3))
    assert figures.sample_note(50, None) == ""
    assert figures.sample_note(50, drawn).startswith("10 of 50 images drawn")


def _customdata(figure: Any) -> list[int]:
    return sorted(int(i) for trace in figure.data for i in trace.customdata)


def test_sampled_scatters_draw_exactly_the_sample_and_say_so() -> None:
    rng = np.random.default_rng(4)
    count = 60
    drawn = figures.drawn_sample(count, at_most=20)
    assert drawn is not None
    hover_lines = [str(i) for i in range(count)]
    outputs = figures.outputs_scatter(
        rng.random(count),
        rng.random(count),
        "loss",
        rng.integers(0, 10, count),
        rng.random(count) > 0.3,
        CLASSES,
        hover_lines,
        drawn=drawn,
    )
    points = rng.random((count, 2))
    groups = rng.integers(0, 3, count)
    space = figures.embedding_scatter(points, groups, ["a", "b", "c"], hover_lines, "pca", 0, drawn)
    for figure in (outputs, space):
        assert _customdata(figure) == drawn.tolist()
        assert figure.layout.title.text == f"20 of {count} images drawn (seeded sample)"
    for trace in space.data:  # each drawn point where its image's projection puts it
        rows = np.asarray(trace.customdata)
        assert np.array_equal(np.asarray(trace.x), points[rows, 0])
    whole = figures.embedding_scatter(points, groups, ["a", "b", "c"], hover_lines, "pca")
    assert _customdata(whole) == list(range(count)) and whole.layout.title.text is None
