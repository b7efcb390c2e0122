"""The explorer benchmark's clock in a real browser: a page counts as settled at its last change,
however late that change comes within the quiet window, but for a canvas's fallback content,
which the browser never draws."""

from __future__ import annotations

import asyncio

from gradpick.bench.pages import QUIET_MS, TEXT_JS, until_settled
from tests.serving import CHROMIUM_ARGS, chromium_executable

FIRST_MS = 50
"""When the scripted page shows what the click asked for."""
LATE_GAP_MS = 220
"""How long after that it changes once more: the gap measured between a new plotly chart's
first draw and Streamlit's second pass over it."""

PAGE = """
<div data-testid="stApp" data-test-script-state="notRunning">
  <button id="act">act</button><p id="shown"></p><p id="late"></p>
  <canvas id="grid" width="40" height="20"><table><tr><td id="cell"></td></tr></table></canvas>
</div>
<script>
document.getElementById('act').addEventListener('click', () => {
  setTimeout(() => { document.getElementById('shown').textContent = 'shown'; }, FIRST);
  setTimeout(() => { document.getElementById('LATE').textContent = 'late'; }, FIRST + GAP);
});
</script>
"""


def _page(late: str) -> str:
    """The page: the click's first change after ``FIRST_MS``, and one to the element ``late``
    ``LATE_GAP_MS`` after that."""
    page = PAGE.replace("FIRST", str(FIRST_MS)).replace("GAP", str(LATE_GAP_MS))
    return page.replace("LATE", late)


async def _timed(late: str) -> tuple[float, float]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium_executable(), args=CHROMIUM_ARGS
        )
        page = await browser.new_page()
        await page.set_content(_page(late))
        timed = await until_settled(page, lambda: page.click("#act"), TEXT_JS, "shown")
        await browser.close()
        return timed


def test_a_change_later_than_the_first_paint_still_counts() -> None:
    assert QUIET_MS > LATE_GAP_MS
    shown, settled = asyncio.run(_timed("late"))
    assert shown >= FIRST_MS
    # The settled time is the late change's, not the first paint's (a quiet window shorter
    # than the gap, 150 ms, reported about 50 ms here).
    assert settled >= FIRST_MS + LATE_GAP_MS
    assert settled < FIRST_MS + LATE_GAP_MS + QUIET_MS


def test_a_canvas_fallback_change_does_not_count() -> None:
    """A data grid's copy of its cells for screen readers, inside its canvas, changes after the
    grid is drawn; the page settled with what was drawn."""
    shown, settled = asyncio.run(_timed("cell"))
    assert shown >= FIRST_MS
    assert settled < FIRST_MS + LATE_GAP_MS
