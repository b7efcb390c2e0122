"""The explorer benchmark on a store (``gradpick bench --explorer --store STORE``): what a
visitor of a large store waits for, in a real browser.

It starts the explorer on the store (``python -m gradpick.ui.launch app.py -- --outputs
STORE``, as ``make run`` does), drives headless chromium (Debian's, through Playwright) and
prints a markdown table, each row with the 1-minute load average beside it:

* the server's start, from its launch until it answered its health check: the launcher opens
  the store and waits for its folder's check before it serves (``ui.warmup``);
* the first page, from the moment the server answered its health check and the browser was
  started, until the thumbnails showed and until the page settled (its last change before
  ``pages.QUIET_MS`` without one); by default on a first server, the store's kept pixels
  (``STORE.pixels.pt``) removed first, so its images are decoded as the page shows them;
* every outputs view (the scatter, the confusion matrix, the feature space, the table), each
  from a settled page to the page settled: its first opening, then later switches;
* one click per view (a thumbnail, a point of the scatter, a confusion-matrix cell, a point of
  the feature space) until the page settled;
* every explorer tab (Strategies, Trust, Compare, Triage, Slices), as the views, and each time
  back to the Explore tab, which draws again the charts of the views opened before: a large
  store's first Triage tab computes its triage;
* with ``compare_with`` (a second store of the same images, by another model), last: the second
  store chosen in the sidebar (a page run), the Compare tab's first opening with it (the two
  stores lined up and compared) and later switches, and a click on a flip cell until its images
  are picked (the page's link names them: a store has no model to map them with);
* the server's peak memory: the resident set (VmRSS) of the server and every process below it
  (the background job decoding the store's pixels included), summed and sampled every 0.25 s;
* with ``restart``: once the background job has kept the pixels, a second server's first page.

Targets (``targets_for``): up to 50,000 rows the first page settled in 3 s, every tab and view
in 0.5 s, a click in 0.5 s; past that (set for 1,280,000 rows) the first page in 5 s, every tab
and view in 1 s, a click in 0.5 s; at any size, two stores compared (the Compare tab's first
opening with the second store) in 30 s. Playwright is imported only when the benchmark runs.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gradpick.bench.explorer import Step, default_app
from gradpick.bench.pages import (
    CANVAS_JS,
    CELLS_JS,
    CONFUSION,
    DRAWN_JS,
    EMBEDDING,
    GRID,
    IDLE_JS,
    SCATTER,
    TAB_SELECTED_JS,
    TABLE,
    THUMBNAILS_JS,
    WATCH_CHANGES_JS,
    click_in_place,
    click_until_changed,
    click_until_settled,
    from_settled,
    hover,
    isolated_points,
    run_phase,
    settled,
    settled_points,
    switch_tab,
    thumbnail,
    wait,
)
from gradpick.bench.process import descendants, live_kilobytes
from gradpick.bench.rows import markdown_table
from gradpick.bench.serving import CHROMIUM_ARGS, LOAD_TIMEOUT_MS, VIEWPORT, streamlit_server
from gradpick.errors import InputError
from gradpick.outputs.pixels import PIXELS_SUFFIX
from gradpick.outputs.sidecar import sibling
from gradpick.outputs.stores import open_stored
from gradpick.ui.keys import COMPARE_FLIPS, selector
from gradpick.ui.keys import EXPLORER_TABS as TABS

__all__ = [
    "MemoryPeak",
    "StoreBenchConfig",
    "StoreReport",
    "VIEWS",
    "report_text",
    "run_store_benchmark",
]

VIEWS = (
    ("Confidence vs loss", SCATTER, DRAWN_JS),
    ("Confusion matrix", CONFUSION, DRAWN_JS),
    ("Feature space", EMBEDDING, DRAWN_JS),
    ("Table", TABLE, CANVAS_JS),
)
"""The outputs views but the thumbnails (the first page's), with what shows each is drawn."""


@dataclass(frozen=True)
class Targets:
    """What a store's page is held to, in ms: its first page settled, a view's or tab's
    opening, a click."""

    first_page_ms: float
    view_ms: float
    click_ms: float
    compare_ms: float = 30_000.0
    """Two stores compared: the Compare tab's first opening with the second store."""


TARGETS_AT_MOST_50K = Targets(first_page_ms=3000.0, view_ms=500.0, click_ms=500.0)
"""The targets of a store of up to 50,000 rows (ImageNet's validation split)."""
TARGETS_PAST_50K = Targets(first_page_ms=5000.0, view_ms=1000.0, click_ms=500.0)
"""The targets of a larger store, set for 1,280,000 rows (ImageNet's training split)."""


def targets_for(rows: int) -> Targets:
    """The targets a store of ``rows`` rows is held to (no targets are set between 50,000 and
    1,280,000 rows: a store there is held to the larger one's)."""
    return TARGETS_AT_MOST_50K if rows <= 50_000 else TARGETS_PAST_50K


@dataclass(frozen=True)
class StoreBenchConfig:
    store: Path
    switches: int = 3
    """Later switches to each view and tab (after its first opening)."""
    cold: bool = True
    """Remove the pixels kept beside the store first: the first page of a first server."""
    restart: bool = True
    """Then, once the background job kept the pixels, time a second server's first page."""
    keep_timeout_s: float = 900.0
    """How long the second server waits for the kept pixels before its row is left empty."""
    compare_with: Path | None = None
    """A second store of the same images (another model's) to compare with, last."""
    app: Path = field(default_factory=default_app)
    python: str = sys.executable
    log: Path = Path("artifacts") / "bench-explorer-store-server.log"


@dataclass
class Row(Step):
    """A timed step (``bench.explorer.Step``: held to its median) in ms, or MB for memory, with
    the load average at each sample."""

    unit: str = "ms"
    loads: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.samples.append(value)
        self.loads.append(os.getloadavg()[0])


@dataclass
class StoreReport:
    config: StoreBenchConfig
    rows: list[Row]
    context: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        config = {**asdict(self.config), "store": str(self.config.store)}
        return {
            "config": {**config, "app": str(self.config.app), "log": str(self.config.log)},
            "rows": [
                {**asdict(row), "median": row.median, "worst": row.worst, "met": row.met}
                for row in self.rows
            ],
            "context": self.context,
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), indent=2, default=str))


class MemoryPeak:
    """The largest summed VmRSS of a process and every process below it, sampled every
    ``interval`` seconds in a thread (a sample can miss a peak shorter than that)."""

    def __init__(self, root: int, interval: float = 0.25) -> None:
        self.root = root
        self.interval = interval
        self.peak_kilobytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def now_kilobytes(self) -> int:
        tree = [self.root, *descendants(self.root)]
        return sum(live_kilobytes(pid, "VmRSS") for pid in tree)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_kilobytes = max(self.peak_kilobytes, self.now_kilobytes())
            self._stop.wait(self.interval)

    def __enter__(self) -> MemoryPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _rows(targets: Targets, compare: bool = False) -> dict[str, Row]:
    def timed(name: str, limit_ms: float) -> Row:
        shown = f"{limit_ms / 1000:.0f} s" if limit_ms >= 1000 else f"{limit_ms:.0f} ms"
        return Row(name, target=f"≤ {shown}", limit_ms=limit_ms)

    rows = {
        "start": Row(
            "server started → healthy (its start-up work: the store, its check, its kept triage)"
        ),
        "first_shown": Row("first page: thumbnails shown"),
        "first": timed("first page settled", targets.first_page_ms),
    }
    for view, _, _ in VIEWS:
        rows[f"view {view}"] = timed(f"view {view}: first opening", targets.view_ms)
        rows[f"view {view} again"] = timed(f"view {view}: later switch", targets.view_ms)
    for tab in TABS[1:]:
        rows[f"tab {tab}"] = timed(f"tab {tab}: first opening", targets.view_ms)
        rows[f"tab {tab} again"] = timed(f"tab {tab}: later switch", targets.view_ms)
    rows[f"tab {TABS[0]} again"] = timed(
        f"tab {TABS[0]}: later switch (back from the others, its opened views kept)",
        targets.view_ms,
    )
    for view in ("thumbnail", "scatter point", "confusion cell", "feature-space point"):
        rows[f"click {view}"] = timed(f"click a {view}", targets.click_ms)
    if compare:
        rows["compare chosen"] = Row("compare: the second store chosen in the sidebar → settled")
        rows["compare"] = timed(
            "compare of two stores: the Compare tab's first opening", targets.compare_ms
        )
        rows["compare again"] = timed(
            "compare of two stores: the Compare tab's later switch", targets.view_ms
        )
        rows["compare click"] = timed(
            "compare of two stores: click a flip cell → its images picked", targets.click_ms
        )
    rows["memory"] = Row("server peak memory (RSS of its process tree)", unit="MB")
    rows["second_start"] = Row("second server started → healthy")
    rows["second_first"] = timed(
        "first page settled, second server (pixels kept)", targets.first_page_ms
    )
    return rows


async def _first_page(browser: Any, url: str, ready: float) -> tuple[Any, float, float]:
    """A new session: its page and the milliseconds from ``ready`` to its thumbnails shown and
    to the page settled."""
    context = await browser.new_context(viewport=VIEWPORT)
    await context.add_init_script(
        f"document.addEventListener('DOMContentLoaded', {WATCH_CHANGES_JS})"
    )
    page = await context.new_page()
    page.set_default_timeout(LOAD_TIMEOUT_MS)
    await page.goto(url)
    shown = await wait(page, THUMBNAILS_JS)
    done = await settled(page)
    return page, (shown - ready) * 1000, (done - ready) * 1000


async def _views(page: Any, rows: dict[str, Row], switches: int) -> None:
    """Every view: its first opening, then ``switches`` later ones."""
    for suffix in ("", *[" again"] * switches):
        for view, chart, script in VIEWS:
            rows[f"view {view}{suffix}"].add((await switch_tab(page, view, chart, script))[1])
        await switch_tab(page, "Thumbnails", GRID)


async def _tabs(page: Any, rows: dict[str, Row], switches: int) -> None:
    """Every explorer tab: its first opening, then ``switches`` later ones, and each time back
    to the Explore tab (the first page's), whose opened views' charts are drawn again with it.
    After the clicks: a store's first Triage tab computes its triage, which at 1,280,000 rows
    takes minutes without its neighbours kept beside the store."""
    for suffix in ("", *[" again"] * switches):
        for tab in TABS[1:]:
            rows[f"tab {tab}{suffix}"].add((await switch_tab(page, tab, tab, TAB_SELECTED_JS))[1])
        rows[f"tab {TABS[0]} again"].add((await switch_tab(page, TABS[0], GRID))[1])


async def _clicks(page: Any, rows: dict[str, Row]) -> None:
    """One click per view, each from a settled page until the page settled."""
    point = await thumbnail(page, 3)
    rows["click thumbnail"].add((await click_until_settled(page, point, [3]))[1])
    await switch_tab(page, "Confidence vs loss", SCATTER)
    isolated = isolated_points(await settled_points(page, SCATTER))
    rows["click scatter point"].add((await click_until_changed(page, isolated[0]))[1])
    await switch_tab(page, "Confusion matrix", CONFUSION)
    cells = [c for c in await page.evaluate(CELLS_JS) if c["cell"][0] != c["cell"][1]]
    smallest = min((c for c in cells if c["count"] > 0), key=lambda c: c["count"])
    rows["click confusion cell"].add((await click_until_changed(page, smallest))[1])
    await switch_tab(page, "Feature space", EMBEDDING)
    isolated = isolated_points(await settled_points(page, EMBEDDING))
    rows["click feature-space point"].add((await click_until_changed(page, isolated[0]))[1])
    await switch_tab(page, "Thumbnails", GRID)  # where the tabs come back to


FLIP_CELLS_JS = """
(selector) => Array.from(
  document.querySelector(selector + ' .js-plotly-plot')._fullData[0].hovertext)
"""
"""What the flip matrix says of each cell on hover ("...: N image(s)"), in cell order."""
ADDRESS_CHANGED_JS = "(before) => window.location.search !== before"
"""True once the page's address (its link, which names the picks) is no longer ``before``."""
SECOND_STORE_OPTION = "a stored-outputs folder…"
"""The sidebar's Compare-with choice of a second model's store."""


async def _compare(page: Any, rows: dict[str, Row], other: Path, switches: int) -> None:
    """The second store chosen in the sidebar, then the Compare tab: its first opening (the
    comparison made), ``switches`` later ones, and a click on its smallest flip cell that holds
    images."""
    sidebar = page.get_by_test_id("stSidebar")
    await sidebar.get_by_test_id("stSelectbox").filter(has_text="Compare with").click()
    await page.get_by_role("option", name=SECOND_STORE_OPTION, exact=True).click()
    box = sidebar.get_by_label("Second model's outputs")
    await box.wait_for()
    await box.fill(str(other))
    rows["compare chosen"].add((await from_settled(page, lambda: box.press("Enter"), IDLE_JS))[1])
    flips = selector(COMPARE_FLIPS)
    rows["compare"].add((await switch_tab(page, "Compare", flips))[1])
    for _ in range(switches):
        await switch_tab(page, TABS[0], GRID)
        rows["compare again"].add((await switch_tab(page, "Compare", flips))[1])
    said = await page.evaluate(FLIP_CELLS_JS, flips)
    counts = [int(re.sub(r"\D", "", line.rsplit(":", 1)[1])) for line in said]
    points = (await settled_points(page, flips))["points"]
    # The smallest cell of flips that holds any, as the confusion cell clicked above: what a
    # user looks into (the cell of images both models call right holds most of the batch).
    cell = min(
        (point for point in points if counts[point["index"]] > 0),
        key=lambda point: counts[point["index"]],
    )
    # A store has no model to map with, so the click's sign is the picks in the page's link.
    before = await page.evaluate("() => window.location.search")
    await hover(page, {"x": cell["x"], "y": cell["y"], "cell": [cell["index"]]})
    clicked = await from_settled(page, lambda: click_in_place(page), ADDRESS_CHANGED_JS, before)
    rows["compare click"].add(clicked[1])


async def _drive(
    config: StoreBenchConfig, chromium: str, env: dict[str, str | None], rows: dict[str, Row]
) -> list[str]:
    from playwright.async_api import async_playwright

    failures: list[str] = []
    arguments = ["--outputs", str(config.store)]

    phase = functools.partial(run_phase, "explorer store bench", failures=failures)

    def serve() -> Any:
        return streamlit_server(config.app, env, config.log, config.python, app_args=arguments)

    with serve() as server:
        rows["start"].add((server.healthy_at - server.launched) * 1000)
        with MemoryPeak(server.process.pid) as memory:
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(
                    executable_path=chromium, args=CHROMIUM_ARGS
                )
                page, shown, done = await _first_page(browser, server.url, time.monotonic())
                rows["first_shown"].add(shown)
                rows["first"].add(done)
                await phase("views", _views(page, rows, config.switches))
                await phase("clicks", _clicks(page, rows))
                await phase("tabs", _tabs(page, rows, config.switches))
                if config.compare_with is not None:
                    compare = _compare(page, rows, config.compare_with, config.switches)
                    await phase("compare", compare)
                await browser.close()
        rows["memory"].add(memory.peak_kilobytes / 1024)
        kept = config.restart and _wait_for_kept(config, server.process.pid)
    if config.restart and not kept:
        failures.append(f"second server: the pixels were not kept in {config.keep_timeout_s} s")
    if kept:
        with streamlit_server(
            config.app, env, config.log, config.python, app_args=arguments
        ) as again:
            rows["second_start"].add((again.healthy_at - again.launched) * 1000)
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(
                    executable_path=chromium, args=CHROMIUM_ARGS
                )
                _, _, done = await _first_page(browser, again.url, time.monotonic())
                rows["second_first"].add(done)
                await browser.close()
    return failures


def _wait_for_kept(config: StoreBenchConfig, server: int) -> bool:
    """Whether the background job below the server kept the pixels within the timeout."""
    kept = sibling(config.store, PIXELS_SUFFIX)
    deadline = time.monotonic() + config.keep_timeout_s
    while time.monotonic() < deadline:
        jobs = [c for c in descendants(server).values() if "gradpick.outputs.pixels" in c]
        if kept.is_file() and not jobs:
            return True
        time.sleep(0.5)
    return False


def run_store_benchmark(config: StoreBenchConfig, chromium: str) -> StoreReport:
    """The scripted session against a fresh server on the store; see the module docstring."""
    if not config.app.is_file():
        raise InputError(f"{config.app}: no such app; run from the gradpick checkout.")
    opened = open_stored(str(config.store), ["position"])  # a DataError that says what a store is
    if config.compare_with is not None:
        open_stored(str(config.compare_with), ["position"])
    if config.cold:
        sibling(config.store, PIXELS_SUFFIX).unlink(missing_ok=True)
    rows = _rows(targets_for(len(opened)), compare=config.compare_with is not None)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="gradpick-bench-cache-") as cache:
        env: dict[str, str | None] = {"GRADPICK_CACHE_DIR": cache}
        failures = asyncio.run(_drive(config, chromium, env, rows))
    context = {
        "rows": len(opened),
        "cpus": os.cpu_count(),
        "load_before": " ".join(f"{v:.2f}" for v in load_before),
        "load_after": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        "failed": failures,
    }
    return StoreReport(config, list(rows.values()), context)


def _value(value: float, unit: str) -> str:
    if value != value:
        return "–"
    return f"{value:,.0f}" if unit == "MB" or value >= 100 else f"{value:,.1f}"


def report_text(report: StoreReport) -> str:
    """The markdown table (each row's load average beside it) and what failed."""
    cells = [
        [
            row.name,
            len(row.samples),
            _value(row.median, row.unit),
            _value(row.worst, row.unit),
            row.unit,
            f"{statistics.mean(row.loads):.2f}" if row.loads else "–",
            row.target,
            row.met,
        ]
        for row in report.rows
    ]
    columns = ["step", "runs", "median", "worst", "unit", "load (1 min)", "target", "met"]
    lines = markdown_table(columns, cells, right={"runs", "median", "worst", "load (1 min)"})
    lines.append("")
    for failure in report.context["failed"]:
        lines.append(f"- failed: {failure}")
    context, kept = report.context, "without" if report.config.cold else "with"
    compared = report.config.compare_with
    lines.append(
        f"- store {report.config.store} ({context['rows']:,} rows)"
        + (f", compared with {compared}" if compared is not None else "")
        + f"; first server {kept} the kept pixels; machine: {context['cpus']} CPUs, load average "
        f"{context['load_before']} before and {context['load_after']} after"
    )
    return "\n".join(lines)
