"""The explorer benchmark's clock in a real browser: a page counts as settled at its last change,
however late that change comes within the quiet window, but for a canvas's fallback content,
which the browser never draws.

Asserted by the order of events, never by a wall-clock bound: what the page already shows when
the clock says it settled, and what it does not show yet."""

from __future__ import annotations

import asyncio

from gradpick.bench.pages import QUIET_MS, TEXT_JS, until_settled
from tests.serving import CHROMIUM_ARGS, chromium_executable

FIRST_MS = 50
"""When the scripted page shows what the click asked for."""
LATE_GAP_MS = 220
"""How long after that it changes once more: the gap measured between a new plotly chart's
first draw and Streamlit's second pass over it."""
AFTER_MS = 2000
"""A change this long after the late one, far past the quiet window: a clock that settles at the
late change returns before it."""

CANVAS_CHANGES = 50
"""How often the canvas's fallback cell changes, 100 ms apart from the late change on: past the
``after`` change, so a clock that counted them would settle after it."""

PAGE = """
<div data-testid="stApp" data-test-script-state="notRunning">
  <button id="act">act</button><p id="shown"></p><p id="late"></p><p id="after"></p>
  <canvas id="grid" width="40" height="20"><table><tr><td id="cell"></td></tr></table></canvas>
</div>
<script>
const show = (id, text) => { document.getElementById(id).textContent = text; };
document.getElementById('act').addEventListener('click', () => {
  setTimeout(() => show('shown', 'shown'), FIRST);
  setTimeout(() => {
    if ('LATE' !== 'cell') { show('LATE', 'late'); return; }
    let count = 0;
    const timer = setInterval(() => {
      show('cell', String(++count));
      if (count >= CHANGES) clearInterval(timer);
    }, 100);
  }, FIRST + GAP);
  setTimeout(() => show('after', 'after'), FIRST + GAP + AFTER);
});
</script>
"""


def _page(late: str) -> str:
    """The page: the click's first change after ``FIRST_MS``, then ``LATE_GAP_MS`` later a
    change to the element ``late`` (the canvas's cell: ``CANVAS_CHANGES`` of them), and one
    more ``AFTER_MS`` after that."""
    values = {"FIRST": FIRST_MS, "GAP": LATE_GAP_MS, "AFTER": AFTER_MS, "CHANGES": CANVAS_CHANGES}
    page = PAGE
    for name, value in values.items():
        page = page.replace(name, str(value))
    return page.replace("LATE", late)


async def _timed(late: str) -> tuple[float, float, dict[str, str]]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium_executable(), args=CHROMIUM_ARGS
        )
        page = await browser.new_page()
        await page.set_content(_page(late))
        shown, settled = await until_settled(page, lambda: page.click("#act"), TEXT_JS, "shown")
        texts = await page.evaluate(
            "() => Object.fromEntries(['late', 'cell', 'after'].map("
            "id => [id, document.getElementById(id).textContent]))"
        )
        await browser.close()
        return shown, settled, texts


def test_a_change_later_than_the_first_paint_still_counts() -> None:
    assert QUIET_MS > LATE_GAP_MS
    shown, settled, texts = asyncio.run(_timed("late"))
    assert shown >= FIRST_MS
    # The clock settled after the late change (a quiet window shorter than the gap, 150 ms,
    # settled before it), and before the change that comes long after the quiet window.
    assert texts["late"] == "late" and settled >= FIRST_MS + LATE_GAP_MS
    assert texts["after"] == ""


def test_a_canvas_fallback_change_does_not_count() -> None:
    """A data grid's copy of its cells for screen readers, inside its canvas, changes after the
    grid is drawn; the page settled with what was drawn."""
    shown, settled, texts = asyncio.run(_timed("cell"))
    assert shown >= FIRST_MS
    # The canvas's fallback cell kept changing past the ``after`` change: had it counted, the
    # clock would have settled after that change, which the page would show by then.
    assert texts["after"] == "" and settled > 0
