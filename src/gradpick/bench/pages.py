"""The page side of the explorer benchmark: scripts that run in the browser, and the actions
(open a session, click, switch a tab) that time themselves by them.

Every wait is ``OBSERVE_JS``: a ``MutationObserver`` that resolves on the first frame after its
condition holds, on the page's clock, so nothing polls the pages being measured.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gradpick.bench.serving import (
    APP_IDLE,
    HEATMAP_INDICES_JS,
    HEATMAPS_SHOW_JS,
    HOVERED_JS,
    LOAD_TIMEOUT_MS,
    SCATTER_POINTS_JS,
    VIEWPORT,
    hovered_mark,
    metric_value,
)
from gradpick.ui import keys

__all__ = [
    "CANVAS_JS",
    "CELLS_JS",
    "CLICK_TIMEOUT_MS",
    "CONFUSION",
    "DRAWN_JS",
    "EMBEDDING",
    "GRID",
    "HEATMAPS_CHANGED_JS",
    "IDLE_JS",
    "LARGE_TIMEOUT_MS",
    "NO_PLACEHOLDER_JS",
    "OBSERVE_JS",
    "Opened",
    "PAGE_SIZE",
    "SCATTER",
    "TABLE",
    "TAB_ROWS",
    "TAB_SELECTED_JS",
    "THUMBNAILS_JS",
    "browser_work",
    "click_in_place",
    "click_mark",
    "click_until_settled",
    "click_until_changed",
    "click_until_heatmaps",
    "hover",
    "idle",
    "isolated_points",
    "metric",
    "number",
    "open_session",
    "run_phase",
    "tab_button",
    "QUIET_MS",
    "SETTLED_JS",
    "TEXT_JS",
    "WATCH_CHANGES_JS",
    "settled",
    "settled_points",
    "from_settled",
    "press",
    "switch_tab",
    "thumbnail",
    "until_settled",
    "wait",
]

OBSERVE_JS = """
([condition, arg, timeout]) => new Promise((resolve, reject) => {
  const holds = new Function('return (' + condition + ')')();
  let observer = null;
  const timer = setTimeout(() => {
    if (observer) observer.disconnect();
    reject(new Error('not true within ' + timeout + ' ms: ' + condition.trim().slice(0, 200)));
  }, timeout);
  const check = () => {
    if (!holds(arg)) return false;
    if (observer) observer.disconnect();
    clearTimeout(timer);
    requestAnimationFrame(() => resolve(performance.timeOrigin + performance.now()));
    return true;
  };
  if (!check()) {
    observer = new MutationObserver(check);
    observer.observe(document, {childList: true, subtree: true, attributes: true,
                                characterData: true});
  }
})
"""
"""Resolves with the time (epoch ms, the page's clock) of the first frame after ``condition(arg)``
became true, checked on every change of the page rather than polled: polling eight pages every
few milliseconds would load the very browser whose drawing is being timed."""
IDLE_JS = f"() => Boolean(document.querySelector('{APP_IDLE}'))"
QUIET_MS = 300
"""A page counts as settled once nothing in it changed for this long: longer than the gap
between a new plotly chart's first draw and Streamlit's second pass over it (up to about
220 ms on two cores), which 150 ms let slip past."""
WATCH_CHANGES_JS = """
() => {
  if (window.__lastChange !== undefined) return;
  window.__lastChange = performance.now();
  const mark = () => requestAnimationFrame(() => { window.__lastChange = performance.now(); });
  const hook = () => document.querySelectorAll('.js-plotly-plot').forEach((gd) => {
    if (gd.__settleHooked || !gd.on) return;
    gd.__settleHooked = true;
    gd.on('plotly_afterplot', mark);
  });
  const shown = (record) => {  // not a canvas's fallback content, which is never drawn
    const node = record.target.nodeType === 1 ? record.target : record.target.parentElement;
    if (!node) return true;
    if (node.tagName === 'CANVAS') return record.type === 'attributes';
    return !(node.parentElement && node.parentElement.closest('canvas'));
  };
  new MutationObserver((records) => { if (records.some(shown)) mark(); hook(); }).observe(
    document, {childList: true, subtree: true, attributes: true, characterData: true});
  hook();
}
"""
"""Keeps ``window.__lastChange``: the page-clock time of the frame after the page last changed,
a DOM mutation anywhere or a plotly redraw (a WebGL chart redraws without touching the DOM).
What a canvas holds inside it is left out: the browser never draws it. Streamlit's data grid
keeps a copy of its cells there for screen readers and brings it up to date about 300 ms after
the grid itself is drawn."""
SETTLED_JS = f"""
([quiet, timeout]) => new Promise((resolve, reject) => {{
  const started = performance.now();
  const look = () => {{
    const now = performance.now();
    const still = now - window.__lastChange;
    if (document.querySelector('{APP_IDLE}') && still >= quiet) {{
      resolve(performance.timeOrigin + window.__lastChange);
    }} else if (now - started > timeout) {{
      reject(new Error('the page kept changing for ' + timeout + ' ms'));
    }} else {{
      setTimeout(look, Math.max(quiet - still, 10));
    }}
  }};
  look();
}})
"""
"""Resolves, once the app is idle and nothing changed for ``quiet`` ms, with the time (epoch ms,
the page's clock) of the last change: what is timed is the last change, not the quiet window.
One timer per quiet window, not a poll."""
GRID = keys.selector(keys.GRID_CHART)
SCATTER = keys.selector(keys.SCATTER_CHART)
CONFUSION = keys.selector(keys.CONFUSION_CHART)
EMBEDDING = keys.selector(keys.EMBEDDING_CHART)
TABLE = keys.selector(keys.TABLE)
PAGE_SIZE = 100
CLICK_TIMEOUT_MS = 60_000
"""A click whose heatmaps take longer counts as failed (its phase is reported and skipped)."""
LARGE_TIMEOUT_MS = 900_000
"""Reading and inferring the whole split on two busy cores takes minutes."""
"""Thumbnails on the grid's first page, the ones clicked."""

DRAWN_JS = """
(selector) => {
  const gd = document.querySelector(selector + ' .js-plotly-plot');
  return Boolean(gd && gd._fullLayout && gd.getBoundingClientRect().width > 0
    && gd.querySelector('.main-svg'));
}
"""
"""True once the plotly chart in ``selector`` is laid out and visible."""

CANVAS_JS = "(selector) => Boolean(document.querySelector(selector + ' canvas'))"
"""True once the element at ``selector`` holds a canvas (a data grid drawn)."""
TEXT_JS = "(text) => document.body.innerText.includes(text)"
"""True once the page shows ``text``."""

NO_PLACEHOLDER_JS = """
() => !document.querySelector('[data-testid="stMain"] [data-testid="stSkeleton"]')
"""
"""True while no element of the page waits for its kind's code: Streamlit's browser loads it
when the first element of a kind arrives, and draws a placeholder of another height meanwhile."""

THUMBNAILS_JS = f"""
() => {{
  const gd = document.querySelector('{GRID} .js-plotly-plot');
  const sheet = gd && gd.querySelector('.layer-below image, image');
  return Boolean(sheet && sheet.getBoundingClientRect().width > 0);
}}
"""
"""True once the thumbnail sheet of the grid's page is in the page."""

CELLS_JS = f"""
() => {{
  const gd = document.querySelector('{CONFUSION} .js-plotly-plot');
  const box = gd.getBoundingClientRect();
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, trace = gd._fullData[0];
  return trace.x.map((x, i) => ({{
    x: box.left + xa._offset + xa.d2p(x), y: box.top + ya._offset + ya.d2p(trace.y[i]),
    count: Number(trace.text[i]), cell: trace.customdata[i]}}));
}}
"""
"""Page coordinates, image count and [true, predicted] of every confusion-matrix cell."""

HEATMAPS_CHANGED_JS = f"""
(before) => {{
  const shown = ({HEATMAP_INDICES_JS})();
  return shown.length > 0 && JSON.stringify(shown) !== JSON.stringify(before);
}}
"""
"""True once the heatmaps show images other than ``before`` (a click on crowded markers may
pick a neighbour of the aimed one: what is timed is the click's own heatmaps)."""


async def run_phase(bench: str, name: str, work: Awaitable[Any], failures: list[str]) -> None:
    """One phase of a browser benchmark: its name on stderr, then ``work``; a failure (a timeout,
    a missing element) goes to ``failures`` as ``name: error`` and the benchmark goes on."""
    print(f"{bench}: {name}", file=sys.stderr, flush=True)
    try:
        await work
    except Exception as error:  # say which phase failed, and go on
        failures.append(f"{name}: {type(error).__name__}: {str(error).splitlines()[0]}")


async def wait(
    page: Any, script: str, arg: Any = None, timeout_ms: float = LOAD_TIMEOUT_MS
) -> float:
    """Wait until ``script(arg)`` is truthy in the page (``OBSERVE_JS``); returns when, on this
    process's time.monotonic clock, the page drew its first frame after that."""
    held_at = await page.evaluate(OBSERVE_JS, [script, arg, timeout_ms]) / 1000
    return time.monotonic() - (time.time() - held_at)


async def idle(page: Any, timeout_ms: float = LOAD_TIMEOUT_MS) -> float:
    return await wait(page, IDLE_JS, timeout_ms=timeout_ms)


async def settled(page: Any, timeout_ms: float = LOAD_TIMEOUT_MS) -> float:
    """When (time.monotonic) the page last changed before it fell quiet (``SETTLED_JS``);
    ``WATCH_CHANGES_JS`` must run in the page first."""
    changed_at = await page.evaluate(SETTLED_JS, [QUIET_MS, timeout_ms]) / 1000
    return time.monotonic() - (time.time() - changed_at)


async def metric(page: Any, label: str) -> str:
    return str(await metric_value(page, label).inner_text())


def number(text: str) -> float:
    """The number at the start of a readout such as "1,234 ms" or "991 img/s"."""
    return float(text.split()[0].replace(",", ""))


@dataclass
class Opened:
    """A new session's page and when (time.monotonic) it was asked for, its websocket opened
    (Streamlit's page loaded in the browser, the session begun) and its thumbnails showed."""

    page: Any
    asked: float
    connected: float
    shown: float


async def open_session(browser: Any, url: str) -> Opened:
    """A new session on the explorer, once its first page is idle."""
    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    page.set_default_timeout(LOAD_TIMEOUT_MS)
    connected: list[float] = []
    page.on("websocket", lambda _: connected.append(time.monotonic()))
    asked = time.monotonic()
    await page.goto(url)
    shown = await wait(page, THUMBNAILS_JS)
    await idle(page)
    return Opened(page, asked, connected[0] if connected else float("nan"), shown)


async def browser_work(page: Any) -> Callable[[], Awaitable[float]]:
    """A reader of the page's main-thread work so far, in milliseconds (Chrome's own
    ``TaskDuration``, CPU time the renderer spent on tasks, read through the DevTools protocol)."""
    session = await page.context.new_cdp_session(page)
    await session.send("Performance.enable")

    async def read() -> float:
        metrics = (await session.send("Performance.getMetrics"))["metrics"]
        return 1000 * next(m["value"] for m in metrics if m["name"] == "TaskDuration")

    return read


async def settled_points(page: Any, selector: str) -> dict[str, Any]:
    """``SCATTER_POINTS_JS`` once the page settled and two readings 100 ms apart agree: the
    browser may still be drawing what a finished script run sent (a busy page draws the rows
    above the chart after it, and moves it), and a chart that was just drawn may still be
    resized to its column (the grid keeps its cells square, so its rows move)."""
    await page.evaluate(WATCH_CHANGES_JS)
    await settled(page)
    layout = await page.evaluate(SCATTER_POINTS_JS, selector)
    while True:
        await asyncio.sleep(0.1)
        again = await page.evaluate(SCATTER_POINTS_JS, selector)
        if again == layout:
            return dict(layout)
        layout = again


async def thumbnail(page: Any, index: int) -> dict[str, float]:
    layout = await settled_points(page, GRID)
    point = next(p for p in layout["points"] if p["index"] == index)
    return {"x": float(point["x"]), "y": float(point["y"]), "index": index}


async def hover(page: Any, point: dict[str, Any]) -> None:
    """Move the mouse to ``point`` and wait until plotly has found the mark under it
    (``HOVERED_JS``), as a user's pointer rests before a click."""
    await page.mouse.move(point["x"], point["y"])
    await wait(page, HOVERED_JS, hovered_mark(point), CLICK_TIMEOUT_MS)


async def click_in_place(page: Any) -> None:
    """Press and release the button where the pointer rests (after ``hover``), with no move
    between: a move sent with the click, as ``mouse.click(x, y)`` sends, starts a hover plotly
    may put off by 50 ms into the press, where it drops the mark the click was to take
    (``gradpick.bench.serving.click_point``)."""
    await page.mouse.down()
    await page.mouse.up()


async def click_until_heatmaps(page: Any, point: dict[str, float], expected: list[int]) -> float:
    """Click ``point``; milliseconds until the heatmaps of ``expected`` are visible."""
    await hover(page, point)
    clicked = time.monotonic()
    await click_in_place(page)
    shown = await wait(page, HEATMAPS_SHOW_JS, [expected, False], CLICK_TIMEOUT_MS)
    return (shown - clicked) * 1000


async def click_until_settled(
    page: Any, point: dict[str, Any], expected: list[int]
) -> tuple[float, float]:
    """Click ``point``; milliseconds until the heatmaps of ``expected`` are visible (the first
    paint) and until the page settled (its last change before ``QUIET_MS`` of quiet)."""
    return await click_mark(page, point, HEATMAPS_SHOW_JS, [expected, False])


async def until_settled(
    page: Any, act: Callable[[], Awaitable[Any]], script: str, arg: Any = None
) -> tuple[float, float]:
    """``act`` (a click); milliseconds until ``script(arg)`` holds (the first paint of what the
    click asked for) and until the page settled again."""
    await page.evaluate(WATCH_CHANGES_JS)
    clicked = time.monotonic()
    await act()
    shown = await wait(page, script, arg, CLICK_TIMEOUT_MS)
    done = await settled(page, CLICK_TIMEOUT_MS)
    return (shown - clicked) * 1000, (done - clicked) * 1000


async def from_settled(
    page: Any, act: Callable[[], Awaitable[Any]], script: str, arg: Any = None
) -> tuple[float, float]:
    """``until_settled``, once the page has settled: what is timed starts from a quiet page."""
    await page.evaluate(WATCH_CHANGES_JS)
    await settled(page)
    return await until_settled(page, act, script, arg)


async def click_mark(
    page: Any, point: dict[str, Any], script: str, arg: Any = None
) -> tuple[float, float]:
    """Rest the pointer on a chart's ``point`` until plotly's hover found its mark, then click
    it; milliseconds as ``until_settled``."""
    await hover(page, point)
    return await until_settled(page, lambda: click_in_place(page), script, arg)


async def switch_tab(
    page: Any, name: str, chart: str, script: str = DRAWN_JS
) -> tuple[float, float]:
    """Switch to the tab ``name`` from a settled page; milliseconds until ``script(chart)``
    holds (by default: its ``chart`` is drawn; the first paint) and until the page settled."""
    return await from_settled(page, tab_button(page, name).click, script, chart)


_TAB_ROW_KEYS = (keys.EXPLORER_TAB, keys.OUTPUTS_TAB)
"""The page's two tab rows (``gradpick.ui.tabs``: segmented controls, each a radio group)."""
TAB_ROWS = ", ".join(keys.selector(row) for row in _TAB_ROW_KEYS)
_SELECTED_TABS = ", ".join(
    f'{keys.selector(row)} [role="radio"][aria-checked="true"]' for row in _TAB_ROW_KEYS
)
TAB_SELECTED_JS = f"""
(name) => Array.from(document.querySelectorAll('{_SELECTED_TABS}'))
  .some((tab) => tab.innerText.trim() === name)
"""
"""True once the tab ``name`` is the selected one of its row."""


def tab_button(page: Any, name: str) -> Any:
    """The locator of the tab ``name`` of either tab row, in a sync or an async page."""
    return page.locator(TAB_ROWS).get_by_role("radio", name=name, exact=True)


async def press(page: Any, button: Any, script: str, arg: Any = None) -> tuple[float, float]:
    """Click the ``button`` locator as a user would (scrolled into view, the pointer resting
    on it first); milliseconds as ``from_settled``."""
    await button.scroll_into_view_if_needed()
    box = await button.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    await page.mouse.move(x, y)
    return await from_settled(page, lambda: page.mouse.click(x, y), script, arg)


def isolated_points(layout: dict[str, Any], distance: float = 10.0) -> list[dict[str, Any]]:
    """Markers with no other marker within ``distance`` pixels, left to right; where every
    marker has one (a scatter of 200,000 rows), every marker, the least crowded first. Markers
    are bucketed by ``distance``, so each looks at its own and the 8 next buckets only."""
    points = layout["points"]
    buckets: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)

    def bucket(point: dict[str, Any]) -> tuple[int, int]:
        return int(point["x"] // distance), int(point["y"] // distance)

    for point in points:
        buckets[bucket(point)].append(point)

    def crowd(point: dict[str, Any]) -> int:
        column, row = bucket(point)
        return sum(
            other is not point
            and abs(other["x"] - point["x"]) < distance
            and abs(other["y"] - point["y"]) < distance
            for dx in (-1, 0, 1)
            for dy in (-1, 0, 1)
            for other in buckets.get((column + dx, row + dy), ())
        )

    crowds = [crowd(point) for point in points]
    alone = [point for point, near in zip(points, crowds, strict=True) if near == 0]
    if alone:
        return sorted(alone, key=lambda p: p["x"])
    return [points[i] for i in sorted(range(len(points)), key=crowds.__getitem__)]


async def click_until_changed(page: Any, point: dict[str, Any]) -> tuple[float, float]:
    """Click ``point``; milliseconds until the heatmaps show another pick (the first paint) and
    until the page settled."""
    before = await page.evaluate(HEATMAP_INDICES_JS)
    return await click_mark(page, point, HEATMAPS_CHANGED_JS, before)
