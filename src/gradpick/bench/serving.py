"""A real ``streamlit run app.py`` server and ways to read its page from a real browser.

Shared by the explorer benchmark (``gradpick.bench.explorer``) and the browser tests. Nothing
here imports Playwright at module level: helpers that only build locators take a page of either
Playwright API; the ones that act or wait use the sync API (the async callers wait with the same
JavaScript).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradpick.bench.process import status_kilobytes
from gradpick.ui.keys import HEATMAPS_CONTAINER, selector

__all__ = [
    "APP_IDLE",
    "CHROMIUM_ARGS",
    "HEATMAP_INDICES_JS",
    "HEATMAPS_SHOW_JS",
    "HOVERED_JS",
    "LOAD_TIMEOUT_MS",
    "PAGE_ERRORS",
    "SCATTER_POINTS_JS",
    "TEXT_BOX_LABEL",
    "VIEWPORT",
    "free_port",
    "healthy",
    "hovered_mark",
    "heatmap_indices",
    "metric_value",
    "open_explorer",
    "page_errors",
    "pick_by_text",
    "Server",
    "click_point",
    "environment",
    "streamlit_server",
    "text_box",
    "wait_for_heatmaps",
    "wait_healthy",
]

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
VIEWPORT = {"width": 1500, "height": 1900}
LOAD_TIMEOUT_MS = 240_000
"""First page load infers the batch (and may load a model) on a busy CI machine."""
TEXT_BOX_LABEL = "Picked indices (editable, e.g. 3, 7, 10-12)"
PAGE_ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
"""A traceback, or a message drawn with st.error."""
APP_IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
"""The page's script run has finished: every element of it (downloads too) is current."""

HEATMAP_INDICES_JS = f"""
() => Array.from(
  document.querySelectorAll('{selector(HEATMAPS_CONTAINER)} [data-testid="stImageCaption"]'),
  (caption) => Number(caption.textContent.trim().split(/\\s+/)[0].replace('#', '')))
"""
"""The batch index each heatmap caption names ("#12 cat→dog ..."), in page order."""

HEATMAPS_SHOW_JS = f"""
([expected, ordered]) => {{
  const shown = ({HEATMAP_INDICES_JS})();
  if (shown.length !== expected.length || new Set(shown).size !== shown.length) return false;
  const order = (values) => ordered ? values : [...values].sort((a, b) => a - b);
  const want = order(expected);
  return order(shown).every((value, i) => value === want[i]);
}}
"""
"""True once the captions name exactly ``expected`` (in that order when ``ordered``), each once."""

HOVERED_JS = """
(mark) => Array.from(document.querySelectorAll('.js-plotly-plot')).some(
  (gd) => Array.isArray(gd._hoverdata) && gd._hoverdata.some((found) => mark === null
    || JSON.stringify(found.customdata) === JSON.stringify(mark)))
"""
"""True once some chart's hover found the ``mark`` under the mouse (its customdata: a batch
index, a confusion cell), or any mark when ``mark`` is null. plotly's click picks what its last
hover found, so a click sent before that (a busy page handles the move late) selects nothing,
or, while the hover of the previous click's mark is still held, that mark again."""

SCATTER_POINTS_JS = """
(selector) => {
  const gd = document.querySelector(selector + ' .js-plotly-plot');
  const box = gd.getBoundingClientRect();
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  const points = [];
  for (const trace of gd._fullData) {
    if (!trace.mode.includes('markers') || trace.name === 'picked') continue;
    for (let i = 0; i < trace.x.length; i++) {
      const x = box.left + xa._offset + xa.c2p(trace.x[i]);
      const y = box.top + ya._offset + ya.c2p(trace.y[i]);
      if (Number.isFinite(x) && Number.isFinite(y)) {
        points.push({index: Number(trace.customdata[i]), x: x, y: y});
      }
    }
  }
  return {points: points, plot: {left: box.left + xa._offset, top: box.top + ya._offset,
                                 width: xa._length, height: ya._length}};
}
"""
"""Page coordinates and batch index of every selectable marker of the plotly chart inside
``selector`` (the scatter, the embedding or the thumbnail grid), and the plot area's box."""


def environment(env: Mapping[str, str | None]) -> dict[str, str]:
    """This process's environment with ``env`` over it (a None value removes the variable)."""
    merged = dict(os.environ)
    for name, value in env.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    return merged


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def healthy(url: str) -> bool:
    """Whether the server answers its health check with ok."""
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
            return bool(response.read().strip() == b"ok")
    except OSError:
        return False


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {process.returncode}")
        if healthy(url):
            return
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not become healthy within {timeout} s")


@dataclass(frozen=True)
class Server:
    """A running ``streamlit run app.py``; ``launched`` and ``healthy_at`` are monotonic times."""

    url: str
    process: subprocess.Popen[bytes]
    launched: float
    healthy_at: float

    def memory_bytes(self, field: str) -> int:
        """A memory line of the server's /proc status: VmRSS (resident now) or VmHWM (peak
        resident so far), in bytes."""
        return status_kilobytes(field, self.process.pid) * 1024


@contextmanager
def streamlit_server(
    app: Path,
    env: Mapping[str, str | None],
    log: Path,
    python: str = sys.executable,
    prefix: Sequence[str] = (),
    launcher: bool = True,
    app_args: Sequence[str] = (),
) -> Iterator[Server]:
    """``python -m gradpick.ui.launch app`` (what ``make run`` starts: ``streamlit run``
    after the start-up work), or with ``launcher=False`` a plain ``streamlit run app`` (what
    Streamlit Community Cloud starts), on a free port with ``env`` over this process's
    environment (a None value removes the variable), its output written to ``log``; ``prefix``
    goes before the command (e.g. ``taskset -c 0``), ``app_args`` after ``--`` (the app's own,
    e.g. ``--outputs STORE``)."""
    merged = environment(env)
    port = free_port()
    server = ["gradpick.ui.launch"] if launcher else ["streamlit", "run"]
    command = [*prefix, python, "-m", *server, str(app)]
    command += ["--server.port", str(port), "--server.headless", "true"]
    command += ["--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"]
    if app_args:
        command += ["--", *app_args]
    log.parent.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as output:
        launched = time.monotonic()
        process = subprocess.Popen(
            command, cwd=app.parent, env=merged, stdout=output, stderr=subprocess.STDOUT
        )
        try:
            wait_healthy(url, process)
            yield Server(url, process, launched, time.monotonic())
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def open_explorer(browser: Any, url: str, **context_options: Any) -> Any:
    """A new browser context's page on the explorer, once the batch is inferred (sync API)."""
    context = browser.new_context(viewport=VIEWPORT, **context_options)
    page = context.new_page()
    page.set_default_timeout(LOAD_TIMEOUT_MS)
    page.goto(url)
    page.get_by_text("Images N").wait_for()
    return page


def metric_value(page: Any, label: str) -> Any:
    """The value of the metric labelled ``label`` (a locator of the page's own API)."""
    metric = page.locator('[data-testid="stMetric"]').filter(has_text=label)
    return metric.locator('[data-testid="stMetricValue"]')


def text_box(page: Any) -> Any:
    """The picked-indices text box (a locator of the page's own API)."""
    return page.get_by_label(TEXT_BOX_LABEL)


def page_errors(page: Any) -> Any:
    """Every traceback or st.error on the page (a locator of the page's own API)."""
    return page.locator(PAGE_ERRORS)


def heatmap_indices(page: Any) -> list[int]:
    """The indices the heatmap captions name, in order (sync API)."""
    return [int(index) for index in page.evaluate(HEATMAP_INDICES_JS)]


def wait_for_heatmaps(
    page: Any, expected: Sequence[int], ordered: bool = False, polling: int = 100
) -> float:
    """Wait until the heatmap captions name exactly ``expected``, each once, and then until
    the run that drew them has ended (sync API); returns when (time.monotonic) they showed,
    to within ``polling`` milliseconds.

    The heatmaps reach the browser before the rest of their run (the outputs, the text box,
    the downloads): a click before that run ends would meet a stale page.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            HEATMAPS_SHOW_JS,
            arg=[list(expected), ordered],
            polling=polling,
            timeout=LOAD_TIMEOUT_MS,
        )
    except PlaywrightTimeout:
        raise AssertionError(
            f"heatmaps show {heatmap_indices(page)}, expected {list(expected)}"
        ) from None
    shown = time.monotonic()
    page.locator(APP_IDLE).wait_for(timeout=LOAD_TIMEOUT_MS)
    return shown


def hovered_mark(point: Mapping[str, Any]) -> Any:
    """The customdata plotly's hover must find at ``point``: its batch ``index``, its confusion
    ``cell``, or None (any mark) for a point that names neither."""
    return point.get("index", point.get("cell"))


def click_point(page: Any, point: Mapping[str, Any]) -> float:
    """Rest the mouse on a chart's ``point`` until plotly found the mark there (``HOVERED_JS``),
    then press and release the button where it rests (sync API); returns when (time.monotonic)
    the button went down.

    Not ``mouse.click(x, y)``: that moves the pointer first, even onto where it already is, and
    plotly runs at most one hover per 50 ms, putting off a move that comes sooner. On a busy page
    the put-off hover ran between the press and the release, over the cover plotly lays on the
    page while a button is down: it found no mark and dropped the one the click was to take, and
    the click selected nothing: seen in a CI run, and in 3 of ~170 clicks on the grid with the
    detailed view open and both cores busy; none in ~600 clicks pressed in place.
    """
    page.mouse.move(point["x"], point["y"])
    page.wait_for_function(HOVERED_JS, arg=hovered_mark(point), timeout=LOAD_TIMEOUT_MS)
    pressed = time.monotonic()
    page.mouse.down()
    page.mouse.up()
    return pressed


def pick_by_text(page: Any, indices: Sequence[int]) -> None:
    """Type ``indices`` into the text box and commit them with Enter (sync API)."""
    box = text_box(page)
    box.fill(", ".join(str(index) for index in indices))
    box.press("Enter")
