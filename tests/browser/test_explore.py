"""End to end: a real Streamlit server and a real browser (Debian's chromium via Playwright).

The test clicks one point and box-selects more in the outputs scatter, and checks that the
heatmaps and readouts appear for exactly those images. Screenshots go to ``artifacts/``; with
``GRADPICK_UPDATE_SCREENSHOTS=1`` the main views are also written to ``assets/screenshots/``
for the README. Uses the shared CIFAR-10 copy when present, else a generated folder.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gradpick import data
from gradpick.picking import rules as selection
from gradpick.runtime import devices
from gradpick.ui import heatmaps, keys
from gradpick.ui.browser import hover, outlines, pixels
from gradpick.ui.panels import explore as gradients_panel
from tests.serving import (
    APP_IDLE,
    ARTIFACTS,
    SCATTER_POINTS_JS,
    TAB_SELECTED_JS,
    cifar10_images,
    click_point,
    explorer_server,
    metric_value,
    open_expander,
    open_explorer,
    page_errors,
    pick_by_text,
    real_cifar10_dir,
    screenshot,
    tab_button,
    text_box,
    wait_for_chart,
    wait_for_heatmaps,
)

HEATMAPS = keys.selector(keys.HEATMAPS_CONTAINER)
UPLOADER = f'{keys.selector(keys.UPLOADS)} [data-testid="stFileUploaderDropzoneInput"]'
TOP_OF_PAGE = {"x": 0, "y": 0, "width": 1500, "height": 1250}
EMBEDDING_JS = """
(selector) => {
  const gd = document.querySelector(selector + ' .js-plotly-plot');
  const box = gd.getBoundingClientRect();
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  const points = [];
  for (const trace of gd._fullData) {
    if (trace.name === 'picked') continue;
    for (let i = 0; i < trace.x.length; i++) {
      points.push([Number(trace.customdata[i]), trace.x[i], trace.y[i]]);
    }
  }
  return {points: points, axes: {left: box.left + xa._offset, top: box.top + ya._offset,
    width: xa._length, height: ya._length, xrange: xa.range, yrange: ya.range}};
}
"""
"""The embedding chart's data ([index, x, y] per image) and its linear axes on the page."""


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, cifar_like_factory: Callable[[int], Path]
) -> Iterator[str]:
    """``streamlit run app.py`` on a free port; yields its URL."""
    images = cifar10_images(cifar_like_factory)
    with explorer_server(images, tmp_path_factory.mktemp("cache")) as running:
        yield running.url


@pytest.fixture
def fresh_page(browser: Any, server: str) -> Iterator[Any]:
    """A session of its own: for the tests that change what the others take as given (the picking
    mode, the source) or read the page as it first opens."""
    opened = open_explorer(browser, server)
    yield opened
    opened.context.close()


@pytest.fixture(scope="module")
def session(browser: Any, server: str) -> Iterator[Any]:
    """One session for the tests that each make their own picks in the default picking mode:
    opening a page costs the browser several CPU-seconds, a click a fraction of one."""
    opened = open_explorer(browser, server)
    yield opened
    opened.context.close()


@pytest.fixture
def page(session: Any) -> Any:
    """The module's session, back on the Thumbnails view with the mouse off the charts."""
    session.mouse.move(5, 5)
    if not session.evaluate(TAB_SELECTED_JS, "Thumbnails"):
        tab_button(session, "Thumbnails").click()
    session.locator(APP_IDLE).wait_for()
    wait_for_chart(session, keys.selector(keys.GRID_CHART))
    return session


def _shot_of_section(page: Any, name: str, first: Any, last: Any) -> None:
    """A screenshot from locator ``first`` down to ``last``, on a viewport tall enough."""

    def section(_: Any) -> dict[str, float]:
        top = first.bounding_box()["y"] - 12
        bottom = last.bounding_box()["y"] + last.bounding_box()["height"] + 12
        return {"x": 0, "y": top, "width": 1500, "height": bottom - top}

    tall = {"width": 1500, "height": 3400}
    screenshot(page, name, docs=True, size=tall, settle_ms=2300, clip=section)


def _metric(page: Any, label: str) -> str:
    return str(metric_value(page, label).inner_text())


def _clear_of_edges(point: dict[str, Any], box: tuple[float, ...], margin: float) -> bool:
    left, top, right, bottom = box
    x, y = point["x"], point["y"]
    well_inside = left + margin < x < right - margin and top + margin < y < bottom - margin
    near = left - margin < x < right + margin and top - margin < y < bottom + margin
    return well_inside or not near


def _box_around_some_points(
    layout: dict[str, Any], exclude: int, margin: float = 3.0
) -> tuple[tuple[float, float, float, float], list[int]]:
    """A pixel box in the plot holding 2 to 12 images, none near its edges, and those images."""
    plot, points = layout["plot"], layout["points"]
    for size in (20.0, 30.0, 45.0, 70.0):
        for left in range(int(plot["left"]) + 5, int(plot["left"] + plot["width"] - size), 5):
            for top in range(int(plot["top"]) + 5, int(plot["top"] + plot["height"] - size), 5):
                box = (float(left), float(top), left + size, top + size)
                if not all(_clear_of_edges(point, box, margin) for point in points):
                    continue
                indices = sorted(
                    {
                        p["index"]
                        for p in points
                        if box[0] < p["x"] < box[2] and box[1] < p["y"] < box[3]
                    }
                )
                if 2 <= len(indices) <= 12 and exclude not in indices:
                    return box, indices
    raise AssertionError("no box with 2 to 12 well-separated points in the scatter")


def _isolated_point(layout: dict[str, Any], distance: float = 12.0) -> dict[str, Any]:
    """A point with no other image's marker within ``distance`` pixels."""
    points = layout["points"]
    for point in points:
        others = [
            p
            for p in points
            if p["index"] != point["index"]
            and abs(p["x"] - point["x"]) < distance
            and abs(p["y"] - point["y"]) < distance
        ]
        if not others:
            return point
    raise AssertionError("no isolated point in the scatter")


def test_click_and_box_select_in_the_scatter_show_exactly_those_heatmaps(fresh_page: Any) -> None:
    screenshot(fresh_page, "explore", docs=True, clip=TOP_OF_PAGE)
    tab_button(fresh_page, "Confidence vs loss").click()
    chart = keys.selector(keys.SCATTER_CHART)
    wait_for_chart(fresh_page, chart)

    clicked = _isolated_point(fresh_page.evaluate(SCATTER_POINTS_JS, chart))
    click_point(fresh_page, clicked)
    wait_for_heatmaps(fresh_page, [clicked["index"]])
    assert _metric(fresh_page, "Picked k / batch N").startswith("1 / ")
    first_update_ms = _metric(fresh_page, "Server time for this update")

    fresh_page.get_by_text("adds to", exact=True).click()
    sync_api = pytest.importorskip("playwright.sync_api")
    sync_api.expect(fresh_page.get_by_role("radio", name="adds to")).to_be_checked()
    fresh_page.locator(APP_IDLE).wait_for()  # the mode's rerun is done
    wait_for_chart(fresh_page, chart)
    fresh_page.locator(chart).hover()  # shows plotly's mode bar
    fresh_page.locator(f'{chart} .modebar-btn[data-title="Box Select"]').click()
    layout = fresh_page.evaluate(SCATTER_POINTS_JS, chart)
    (left, top, right, bottom), boxed = _box_around_some_points(layout, clicked["index"])
    fresh_page.mouse.move(left, top)
    fresh_page.mouse.down()
    fresh_page.mouse.move((left + right) / 2, (top + bottom) / 2, steps=5)
    fresh_page.mouse.move(right, bottom, steps=5)
    fresh_page.mouse.up()
    expected = [clicked["index"], *boxed]
    wait_for_heatmaps(fresh_page, expected)

    assert _metric(fresh_page, "Picked k / batch N").startswith(f"{len(expected)} / ")
    # The outputs (with the text box) are redrawn after the heatmaps, in the same rerun.
    sync_api.expect(text_box(fresh_page)).to_have_value(selection.format_indices(expected))
    strips = fresh_page.locator(f'{HEATMAPS} [data-testid="stImage"] img')
    assert strips.count() == len(expected)
    assert _metric(fresh_page, "Gradient step").endswith("ms")
    assert "MB" in _metric(fresh_page, "Peak memory")
    open_expander(fresh_page, keys.DOWNLOADS_OPEN)
    screenshot(fresh_page, "scatter-selection", docs=True)
    _shot_of_section(
        fresh_page,
        "gradients",
        fresh_page.get_by_role("heading", name="Gradients of the picked images"),
        fresh_page.get_by_role("button", name="Report (.json)"),
    )
    # The HTML report of the same picks: each pick's image, map and overlay embedded, nothing
    # loaded from anywhere.
    with fresh_page.expect_download() as download:
        fresh_page.get_by_role("button", name="Report (.html)").click()
    document = Path(download.value.path()).read_text()
    embedded = re.findall(r'<img[^>]*data-pick="(\d+)"[^>]*data-panel="(\w+)"', document)
    assert sorted({int(pick) for pick, _ in embedded}) == sorted(expected)
    assert {panel for _, panel in embedded} == {"image", "saliency", "overlay"}
    assert not re.search(r'(?:src|href)="(?:https?:)?//', document)
    (ARTIFACTS / "e2e-timings.json").write_text(
        json.dumps(
            {
                "first_click_server_ms": first_update_ms,
                "box_select_server_ms": _metric(fresh_page, "Server time for this update"),
                "gradient_step": _metric(fresh_page, "Gradient step"),
                "k": len(expected),
            },
            indent=2,
        )
    )


def test_every_strategy_and_the_sweep_run_on_the_linked_picks(browser: Any, server: str) -> None:
    """The Strategies tab, opened by a link on a 100-image batch (each strategy's cost grows with
    N, and at the default 1,000 the summed loss alone takes seconds a run): the naive loop's
    error beside the strategies that work, then the sweep's lines."""
    page = open_explorer(browser, f"{server}/?n=100&picks=3,7,11&tab=Strategies")
    page.get_by_role("button", name="Run every strategy").click()
    page.get_by_text("The naive loop").wait_for()
    error = page.locator('[data-testid="stCode"]').filter(has_text="backward through the graph")
    assert "RuntimeError" in error.inner_text()
    page.get_by_role("button", name="Run the sweep").click()
    page.locator(f"{keys.selector(keys.SWEEP_N)} .js-plotly-plot").wait_for()
    _shot_of_section(
        page,
        "strategies",
        page.get_by_role("heading", name="Every strategy on the picked images"),
        page.locator(keys.selector(keys.SWEEP_N)),
    )
    assert page_errors(page).count() == 0
    page.context.close()


def test_a_corrupt_upload_is_named_and_the_page_keeps_working(
    fresh_page: Any, tmp_path: Path
) -> None:
    fake = tmp_path / "notes.png"
    fake.write_text("this is a text file renamed to .png")
    fresh_page.get_by_text("Uploaded images", exact=True).click()
    fresh_page.locator(UPLOADER).set_input_files(str(fake))
    fresh_page.get_by_text("notes.png: not a readable image").wait_for()
    fresh_page.get_by_text("CIFAR-10", exact=True).click()
    fresh_page.get_by_text("Images N").wait_for()
    assert fresh_page.locator('[data-testid="stException"]').count() == 0


def test_dark_theme_is_readable(browser: Any, server: str) -> None:
    page = open_explorer(browser, server, color_scheme="dark")
    pick_by_text(page, [3, 7, 11])
    wait_for_heatmaps(page, [3, 7, 11])
    background = page.evaluate("getComputedStyle(document.querySelector('.stApp')).backgroundColor")
    screenshot(page, "dark", docs=True)
    page.context.close()
    red, green, blue = (int(v) for v in background[background.index("(") + 1 : -1].split(","))
    assert red + green + blue < 200, f"the page did not follow the dark preference: {background}"


def _reference_projection() -> dict[int, tuple[float, float]]:
    """The default batch's PCA projection computed here, without the app: the sidebar's
    default model, batch and inference settings, then ``gradpick.picking.feature_space.project``."""
    from gradpick.outputs import inference as infer
    from gradpick.outputs import stores as stored
    from gradpick.picking import feature_space as embedding
    from gradpick.ui import service

    option = service.model_options()[0]
    model = service.load_model(option, devices.resolve_device("cpu")).module
    base = service.DataChoice()
    source = service.open_source(base)
    seed = 0 if service.sorted_by_class(source) else None
    batch = service.read_batch(source, replace(base, seed=seed))
    result = infer.infer(
        model, batch.images, batch.labels, batch_size=stored.INFERENCE_BATCH_SIZE, features=True
    )
    assert result.features is not None
    points = embedding.project(result.features)
    return {index: (float(x), float(y)) for index, (x, y) in enumerate(points.tolist())}


def _inside(point: tuple[float, float], polygon: list[tuple[float, float]]) -> bool:
    """Ray casting: whether ``point`` lies inside ``polygon`` (pixel coordinates)."""
    x, y = point
    inside = False
    for (x1, y1), (x2, y2) in zip(polygon, polygon[1:] + polygon[:1], strict=True):
        if (y1 > y) != (y2 > y) and x < x1 + (y - y1) * (x2 - x1) / (y2 - y1):
            inside = not inside
    return inside


def _lasso_around_some_points(
    pixels: dict[int, tuple[float, float]], plot: dict[str, float], margin: float = 4.0
) -> tuple[list[tuple[float, float]], list[int]]:
    """An octagon in the plot enclosing 2 to 12 points, none within ``margin`` px of its edge."""
    corners = [
        (math.cos(math.pi * (2 * i + 1) / 8), math.sin(math.pi * (2 * i + 1) / 8)) for i in range(8)
    ]
    inner = math.cos(math.pi / 8)
    for radius in (18.0, 26.0, 38.0):
        for cx in range(
            int(plot["left"] + radius + 5), int(plot["left"] + plot["width"] - radius), 7
        ):
            for cy in range(
                int(plot["top"] + radius + 5), int(plot["top"] + plot["height"] - radius), 7
            ):
                distances = {i: math.dist((cx, cy), p) for i, p in pixels.items()}
                if any(radius * inner - margin < d < radius + margin for d in distances.values()):
                    continue
                enclosed = sorted(i for i, d in distances.items() if d <= radius * inner - margin)
                if 2 <= len(enclosed) <= 12:
                    polygon = [(cx + radius * a, cy + radius * b) for a, b in corners]
                    return polygon, enclosed
    raise AssertionError("no lasso with 2 to 12 well-separated points in the embedding")


def test_a_lasso_in_the_feature_space_view_picks_exactly_the_enclosed_images(
    fresh_page: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = real_cifar10_dir()
    if real is None:
        pytest.skip("needs the real CIFAR-10 copy and the shipped model for the reference")
    # The reference reads the copy the server reads, however this process was started.
    monkeypatch.setenv(data.CIFAR10_DIR_ENV, str(real))
    tab_button(fresh_page, "Feature space").click()
    chart = keys.selector(keys.EMBEDDING_CHART)
    fresh_page.locator(f"{chart} .js-plotly-plot").wait_for()
    fresh_page.wait_for_timeout(500)
    drawn = fresh_page.evaluate(EMBEDDING_JS, chart)
    reference = _reference_projection()
    shown = {int(i): (x, y) for i, x, y in drawn["points"]}
    assert sorted(shown) == sorted(reference)
    for index, (x, y) in reference.items():
        assert shown[index] == pytest.approx((x, y), rel=1e-4, abs=1e-4), index
    axes = drawn["axes"]

    def to_pixels(x: float, y: float) -> tuple[float, float]:
        (x0, x1), (y0, y1) = axes["xrange"], axes["yrange"]
        px = axes["left"] + (x - x0) / (x1 - x0) * axes["width"]
        py = axes["top"] + (1 - (y - y0) / (y1 - y0)) * axes["height"]
        return px, py

    pixels = {index: to_pixels(*point) for index, point in reference.items()}
    plot = {key: axes[key] for key in ("left", "top", "width", "height")}
    polygon, enclosed = _lasso_around_some_points(pixels, plot)
    assert enclosed == sorted(i for i, p in pixels.items() if _inside(p, polygon))
    fresh_page.locator(chart).hover()
    fresh_page.locator(f'{chart} .modebar-btn[data-title="Lasso Select"]').click()
    fresh_page.mouse.move(*polygon[0])
    fresh_page.mouse.down()
    for vertex in [*polygon[1:], polygon[0]]:
        fresh_page.mouse.move(*vertex, steps=4)
    fresh_page.mouse.up()
    wait_for_heatmaps(fresh_page, enclosed, ordered=True)
    assert text_box(fresh_page).input_value() == selection.format_indices(enclosed)
    screenshot(fresh_page, "embedding", docs=True, clip=TOP_OF_PAGE)


HOVER_TIP_JS = f"""
() => {{
  const tip = document.getElementById('{hover.TIP_ID}');
  if (!tip || tip.style.display !== 'block') return null;
  return {{index: Number(tip.dataset.index), image: tip.style.backgroundImage,
           position: tip.style.backgroundPosition, size: tip.style.backgroundSize}};
}}
"""


def test_hovering_a_feature_space_point_shows_its_thumbnail(page: Any) -> None:
    """The hovered point's image, cut from the batch's atlas beside the mouse; gone once the
    mouse leaves the points; picking is untouched (a click still picks)."""
    tab_button(page, "Feature space").click()
    chart = keys.selector(keys.EMBEDDING_CHART)
    wait_for_chart(page, chart)  # the chart settled in its column
    script = page.locator(keys.selector(keys.HOVER_SCRIPT))
    script.wait_for(state="attached")  # it comes with the fragment that draws the chart
    assert script.count() == 1 and script.is_hidden()
    points = page.evaluate(SCATTER_POINTS_JS, chart)["points"]
    point = next(p for p in points if _alone(p, points, 12))
    # The script attaches to the chart on its own timer: hover until its tip answers, then on
    # the way the mouse may pass other points, so wait for the one it rests on.
    resting = f"(({HOVER_TIP_JS})() || {{}}).index === {point['index']}"
    not_yet = pytest.importorskip("playwright.sync_api").TimeoutError
    deadline = time.monotonic() + 30
    while True:
        page.mouse.move(point["x"] - 30, point["y"] - 30)
        page.mouse.move(point["x"], point["y"], steps=5)
        try:
            page.wait_for_function(resting, timeout=1000)
            break
        except not_yet as error:
            if time.monotonic() > deadline:
                raise AssertionError("the hover script never showed a thumbnail") from error
    shown = page.evaluate(HOVER_TIP_JS)
    size = len(page.evaluate(SCATTER_POINTS_JS, chart)["points"])
    columns = math.ceil(math.sqrt(size))
    side = hover.DISPLAY_SIDE
    row, column = divmod(point["index"], columns)
    assert shown["position"] == f"{-column * side}px {-row * side}px"
    # The height follows the width ("auto"), which newer chromium leaves out when it reads
    # the property back.
    assert shown["size"] in (f"{columns * side}px auto", f"{columns * side}px")
    atlas = shown["image"].removeprefix('url("').removesuffix('")')
    assert page.evaluate(FETCHED_JS, atlas) == [200, "image/jpeg"]
    screenshot(page, "hover", docs=True, clip={"x": 360, "y": 560, "width": 700, "height": 560})
    page.mouse.move(5, 5)
    page.wait_for_function(f"({HOVER_TIP_JS})() === null")
    click_point(page, point)
    wait_for_heatmaps(page, [point["index"]])


def test_hovering_the_detailed_maps_shows_each_pixels_value(page: Any) -> None:
    """The detailed view is one picture of four maps; the pixel under the mouse is named with
    its map, row, column and value, and nothing is shown over the gaps between the maps."""
    pick_by_text(page, [3])
    wait_for_heatmaps(page, [3])
    open_expander(page, keys.DETAIL_OPEN)
    picture = page.locator(f"{keys.selector(keys.DETAIL_HEATMAPS)} img")
    picture.scroll_into_view_if_needed()
    page.wait_for_function(
        "(el) => el.complete && el.naturalWidth > 0", arg=picture.element_handle()
    )
    box, natural = picture.bounding_box(), picture.evaluate("(el) => el.naturalWidth")
    scale, gap, side = box["width"] / natural, gradients_panel.MAP_GAP, heatmaps.DISPLAY_SIDE
    tip = page.locator(f"#{pixels.TIP_ID}")
    # The green map (the third), row 8 and column 20 of 32: the centre of that pixel.
    x = box["x"] + scale * (2 * (side + gap) + (20.5 / 32) * side)
    y = box["y"] + scale * (8.5 / 32) * side
    deadline = time.monotonic() + 30
    while not (tip.count() and tip.is_visible()):  # the script attaches on its own timer
        assert time.monotonic() < deadline, "the pixel values never showed"
        page.mouse.move(x - 3, y)
        page.mouse.move(x, y)
        page.wait_for_timeout(200)
    assert (tip.get_attribute("data-panel"), tip.get_attribute("data-row")) == ("green", "8")
    assert tip.get_attribute("data-column") == "20"
    assert re.fullmatch(r"green, row 8, column 20: -?[0-9.e+-]+", tip.inner_text())
    page.mouse.move(box["x"] + scale * (side + gap / 2), y)  # between saliency and red
    page.wait_for_function(f"document.getElementById('{pixels.TIP_ID}').style.display === 'none'")


def _alone(point: dict[str, Any], points: list[dict[str, Any]], distance: float) -> bool:
    return all(
        other is point or math.dist((point["x"], point["y"]), (other["x"], other["y"])) > distance
        for other in points
    )


def test_click_to_heatmap_times_are_recorded(page: Any) -> None:
    """Clicks on thumbnails, each timed from the click to its heatmaps (artifacts only: speed
    targets live in ``gradpick bench --explorer``, not in assertions)."""
    grid = keys.selector(keys.GRID_CHART)
    timings = []
    for index in (5, 17, 42, 63, 88):
        wait_for_chart(page, grid)
        points = page.evaluate(SCATTER_POINTS_JS, grid)["points"]
        clicked = click_point(page, next(p for p in points if p["index"] == index))
        shown = wait_for_heatmaps(page, [index], polling=10)
        timings.append(
            {
                "index": index,
                "click_to_heatmaps_ms": round((shown - clicked) * 1000, 1),
                "server_time": _metric(page, "Server time for this update"),
                "gradient_step": _metric(page, "Gradient step"),
                "picked": _metric(page, "Picked k / batch N"),
            }
        )
    (ARTIFACTS / "e2e-click-timings.json").write_text(json.dumps(timings, indent=2))
    # each click picked its own image alone (its heatmaps waited for above), and was timed
    assert all(t["picked"].startswith("1 / ") for t in timings), timings
    assert all(t["click_to_heatmaps_ms"] > 0 and t["server_time"] for t in timings), timings


SHEET_URL_JS = """
(selector) => {
  const sheet = document.querySelector(selector + ' .js-plotly-plot .imagelayer image');
  return sheet.getAttribute('href') || sheet.getAttribute('xlink:href');
}
"""
FETCHED_JS = "(url) => fetch(url).then((r) => [r.status, r.headers.get('content-type')])"


def test_the_thumbnail_sheet_is_fetched_by_url_and_kept_across_clicks(page: Any) -> None:
    """The grid's sheet is a media URL on the page's own address, not a data URI inside the
    chart's JSON, and clicks that move the picked outlines leave it as it was."""
    grid = keys.selector(keys.GRID_CHART)
    page.locator(f"{grid} .js-plotly-plot .imagelayer image").wait_for(state="attached")
    sheet = page.evaluate(SHEET_URL_JS, grid)
    assert sheet.startswith(page.evaluate("location.origin") + "/media/")
    assert page.evaluate(FETCHED_JS, sheet) == [200, "image/png"]
    for index in (4, 9):
        wait_for_chart(page, grid)
        points = page.evaluate(SCATTER_POINTS_JS, grid)["points"]
        click_point(page, next(p for p in points if p["index"] == index))
        wait_for_heatmaps(page, [index])
        assert page.evaluate(SHEET_URL_JS, grid) == sheet


COUNT_REDRAWS_JS = """
(selector) => {
  const gd = document.querySelector(selector + ' .js-plotly-plot');
  window.__gridRedraws = 0;
  gd.on('plotly_afterplot', () => { window.__gridRedraws += 1; });
}
"""
OUTLINE_BOXES_JS = f"""
(selector) => {{
  const gd = document.querySelector(selector + ' .js-plotly-plot');
  const layer = gd.querySelector('#{outlines.LAYER_ID}');
  return {{
    chart: gd.getBoundingClientRect().toJSON(),
    cell: gd._fullLayout.xaxis._length
      / (gd._fullLayout.xaxis.range[1] - gd._fullLayout.xaxis.range[0]),
    boxes: layer ? Array.from(layer.children, (box) => ({{
      cell: Number(box.dataset.cell), ...box.getBoundingClientRect().toJSON(),
      border: getComputedStyle(box).borderTopColor}})) : []}};
}}
"""


def test_a_click_outlines_the_picked_thumbnail_over_a_grid_it_does_not_redraw(page: Any) -> None:
    """The orange outline sits on the clicked thumbnail (inset in its cell, in the picked
    colour), moves with the next click, and neither click redraws the grid's chart."""
    grid = keys.selector(keys.GRID_CHART)
    wait_for_chart(page, grid)
    page.evaluate(COUNT_REDRAWS_JS, grid)
    for index in (12, 27):
        points = page.evaluate(SCATTER_POINTS_JS, grid)["points"]
        point = next(p for p in points if p["index"] == index)
        click_point(page, point)
        wait_for_heatmaps(page, [index])
        layer = f"document.getElementById('{outlines.LAYER_ID}')"
        page.wait_for_function(
            f"(cell) => {layer}?.children.length === 1 && {layer}.firstChild.dataset.cell === cell",
            arg=str(index),  # the grid's first page starts at image 0
        )
        wait_for_chart(page, grid)  # the click's run may move the chart: compare where it is now
        drawn = page.evaluate(OUTLINE_BOXES_JS, grid)
        points = page.evaluate(SCATTER_POINTS_JS, grid)["points"]
        point = next(p for p in points if p["index"] == index)
        (box,) = drawn["boxes"]
        assert box["cell"] == index
        side = drawn["cell"] * (1 - 2 * outlines.INSET)
        assert box["width"] == pytest.approx(side, abs=1.0)
        assert box["height"] == pytest.approx(side, abs=1.0)
        centre = (box["left"] + box["width"] / 2, box["top"] + box["height"] / 2)
        assert centre == pytest.approx((point["x"], point["y"]), abs=1.0)  # the marker's centre
        assert box["border"] == "rgb(240, 140, 0)"  # figures.PICKED, #f08c00
    assert page.evaluate("window.__gridRedraws") == 0


RINGS_JS = f"""
(selector) => {{
  const gd = document.querySelector(selector + ' .js-plotly-plot');
  const layer = gd.querySelector('#{outlines.LAYER_ID}');
  return layer ? Array.from(layer.children, (ring) => ({{
    index: Number(ring.dataset.cell), ...ring.getBoundingClientRect().toJSON(),
    border: getComputedStyle(ring).borderTopColor,
    radius: getComputedStyle(ring).borderTopLeftRadius}})) : [];
}}
"""


def test_a_click_rings_the_picked_point_over_a_scatter_it_does_not_redraw(page: Any) -> None:
    """The scatter's picks are rings over the chart, like the grid's outlines: each click
    moves the ring to its point and leaves the figure, so plotly draws nothing again."""
    tab_button(page, "Confidence vs loss").click()
    chart = keys.selector(keys.SCATTER_CHART)
    wait_for_chart(page, chart)
    page.evaluate(COUNT_REDRAWS_JS, chart)
    chosen: list[int] = []
    for _ in range(2):
        wait_for_chart(page, chart)  # the click's run may move the chart: find points anew
        layout = page.evaluate(SCATTER_POINTS_JS, chart)
        others = {"points": [p for p in layout["points"] if p["index"] not in chosen]}
        point = _isolated_point(others)
        chosen.append(point["index"])
        click_point(page, point)
        wait_for_heatmaps(page, [point["index"]])
        page.wait_for_function(
            f"(s) => ({RINGS_JS})(s).length === 1 && ({RINGS_JS})(s)[0].index === {point['index']}",
            arg=chart,
        )
        wait_for_chart(page, chart)
        (ring,) = page.evaluate(RINGS_JS, chart)
        point = next(
            p for p in page.evaluate(SCATTER_POINTS_JS, chart)["points"] if p["index"] == chosen[-1]
        )
        centre = (ring["left"] + ring["width"] / 2, ring["top"] + ring["height"] / 2)
        assert centre == pytest.approx((point["x"], point["y"]), abs=1.0)
        assert ring["width"] == pytest.approx(outlines.RING, abs=0.5)
        assert ring["border"] == "rgb(240, 140, 0)" and ring["radius"] == "50%"
    assert page.evaluate("window.__gridRedraws") == 0


def test_every_map_has_a_trust_badge_with_its_meaning_on_hover(page: Any) -> None:
    """The badges' labels reach the browser as coloured spans whose title is their meaning (a
    figure's, or why a check was left to the Trust tab: which fit depends on the CPU's speed)."""
    pick_by_text(page, [3, 7])
    wait_for_heatmaps(page, [3, 7])
    badges = page.locator(f"{keys.selector(keys.TRUST_BADGES_CONTAINER)} .trust-badge")
    badges.nth(1).wait_for()
    assert badges.count() == 2
    for line in range(2):
        labels = badges.nth(line).locator("span[title]")
        assert labels.count() >= 1
        for position in range(labels.count()):
            label = labels.nth(position)
            text, title = label.inner_text(), label.get_attribute("title")
            if text.endswith("not run"):
                assert "time budget" in title, title
            elif text.startswith(("class ρ", "randomised ρ")):
                assert title.startswith(("Spearman", "The map for")), title
            else:  # ROAD's gap: the figure, then its meaning
                assert text.startswith("ROAD gap") and ": removing" in title, (text, title)
            colour = label.evaluate("e => getComputedStyle(e).backgroundColor")
            assert colour not in ("rgba(0, 0, 0, 0)", "transparent")
    assert page_errors(page).count() == 0
