"""The explorer benchmark's phases beyond the first page's clicks, each timed in the browser
from a settled page to the page settled: the Triage and Compare tabs, seeded samples changed in
the open page and sessions opened on others (the page's own inference readouts), and the whole
split (tabs and clicks at N = 10,000).

Each records its samples through ``record(step, milliseconds)`` under the step names of
``gradpick.bench.explorer``, which holds the steps, their targets and the table.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from gradpick.bench.pages import (
    CANVAS_JS,
    CELLS_JS,
    CONFUSION,
    EMBEDDING,
    LARGE_TIMEOUT_MS,
    SCATTER,
    TABLE,
    TEXT_JS,
    click_in_place,
    click_until_changed,
    from_settled,
    hover,
    idle,
    isolated_points,
    metric,
    open_session,
    press,
    settled_points,
    switch_tab,
    wait,
)
from gradpick.ui.keys import COMPARE_FLIPS, GRID_CHART, selector

__all__ = [
    "COMPARE_CHOSEN_JS",
    "COMPARE_WITH",
    "COMPARED_JS",
    "COMPARED_PICKS_JS",
    "TRIAGE_HEADING",
    "Record",
    "SEED_LINKED_JS",
    "large_batch",
    "sample_changes",
    "seeded_inference",
    "triage_and_compare",
]

Record = Callable[[str, float], None]
"""Adds one sample (milliseconds) to the named step."""


async def large_batch(
    page: Any, size: int, clicks: int, record: Record, readouts: dict[str, str]
) -> None:
    """Infer ``size`` images of the split in the page (its throughput readout goes into
    ``readouts``), then time every outputs view's tab but the thumbnails, and clicks in the
    scatter and the confusion matrix, ``clicks`` times each."""
    size_box = page.get_by_role("spinbutton", name="Batch size N", exact=True)
    await size_box.fill(str(size))
    pressed = time.monotonic()
    await size_box.press("Enter")
    await wait(
        page,
        "(size) => Array.from(document.querySelectorAll('[data-testid=\"stMetricValue\"]'))"
        ".some((el) => el.textContent.trim() === size)",
        f"{size:,}",
        LARGE_TIMEOUT_MS,
    )
    ready = await idle(page, LARGE_TIMEOUT_MS)
    record("large_ready", (ready - pressed) * 1000)
    readouts["large_inference"] = await metric(page, "Throughput")

    def both(name: str, timed: tuple[float, float]) -> None:
        record(f"{name}_drawn", timed[0])
        record(name, timed[1])

    # A WebGL scatter's chart is made while its view is closed, and kept while another view is
    # open (``ui.outputs``): the first opening is its own row, the reopenings the tab's.
    record("scatter_tab_first", (await switch_tab(page, "Confidence vs loss", SCATTER))[1])
    record("embedding_tab_first", (await switch_tab(page, "Feature space", EMBEDDING))[1])
    for _ in range(clicks):
        both("scatter_tab", await switch_tab(page, "Confidence vs loss", SCATTER))
        both("confusion_tab", await switch_tab(page, "Confusion matrix", CONFUSION))
        both("embedding_tab", await switch_tab(page, "Feature space", EMBEDDING))
        both("table_tab", await switch_tab(page, "Table", TABLE, CANVAS_JS))
    await switch_tab(page, "Confusion matrix", CONFUSION)
    cells = [
        cell
        for cell in await page.evaluate(CELLS_JS)
        if cell["cell"][0] != cell["cell"][1] and 1 <= cell["count"] <= 16
    ]
    for cell in cells[:clicks]:
        both("confusion_click", await click_until_changed(page, cell))
    # The cells' clicks changed the picks; the scatter, holding no selection, keeps its chart.
    record("scatter_tab_picked", (await switch_tab(page, "Confidence vs loss", SCATTER))[1])
    isolated = isolated_points(await settled_points(page, SCATTER))
    for point in isolated[:clicks]:
        both("scatter_click", await click_until_changed(page, point))


TRIAGE_HEADING = re.compile(r"Suspect \d+ of \d+: (\d+) without a verdict")
COMPARED_PICKS_JS = r"() => document.body.innerText.match(/index \d+, /g) || []"
"""The Compare tab's mapped picks: its captions' "index i," in page order."""
COMPARED_JS = f"""
(before) => {{
  const shown = ({COMPARED_PICKS_JS})();
  return shown.length > 0 && JSON.stringify(shown) !== JSON.stringify(before);
}}
"""
"""True once the Compare tab's maps show other picks than ``before``."""
COMPARE_CHOSEN_JS = """
(name) => Array.from(document.querySelectorAll('[data-testid="stSelectbox"] input')).some(
  (box) => box.value.startsWith(name))
"""
"""True once a select box shows the option ``name`` starts (a select box's value is its input's,
not its text)."""
COMPARE_WITH = "tutorial"
"""The second model of the comparison: the other shipped one."""


async def seeded_inference(browser: Any, url: str, seeds: int, readouts: dict[str, str]) -> None:
    """Open a session on each seeded sample of 1,000 through the page's link, one after another,
    and keep the page's own inference readout of each (its Throughput)."""
    found = []
    for seed in range(1, seeds + 1):
        opened = await open_session(browser, f"{url}/?seed={seed}")
        found.append(await metric(opened.page, "Throughput"))
        await opened.page.context.close()
    readouts["seeded_inference"] = ", ".join(found)


SEED_LINKED_JS = "(seed) => new URLSearchParams(location.search).get('seed') === seed"
"""True once the page's link names the sample ``seed``: the page writes it once that sample's
outputs are shown."""


async def sample_changes(page: Any, seeds: Iterable[int], readouts: dict[str, str]) -> None:
    """Change the open page's seeded sample to each of ``seeds`` in its sidebar, one after
    another, and keep the page's inference readout of each; then back to seed 0 (inferred
    already), the sample the later phases expect."""
    box = page.get_by_test_id("stSidebar").get_by_role("spinbutton", name="Seed", exact=True)
    found = []
    for seed in [*seeds, 0]:
        await box.fill(str(seed))
        await box.press("Enter")
        await wait(page, SEED_LINKED_JS, str(seed))
        await idle(page)
        found.append(await metric(page, "Throughput"))
    readouts["sample_changes"] = ", ".join(found[:-1])


async def triage_and_compare(page: Any, clicks: int, record: Record) -> None:
    """The Triage and Compare tabs: opening each, a verdict's click to the next suspect, and a
    flip cell's click to both models' maps, each from a settled page to the page settled; then
    back to Explore."""
    _, done = await switch_tab(page, "Triage", "without a verdict", TEXT_JS)
    record("triage_tab", done)
    for _ in range(clicks):
        found = TRIAGE_HEADING.search(await page.locator("body").inner_text())
        if found is None or int(found.group(1)) < 2:
            break
        waiting = f": {int(found.group(1)) - 1} without a verdict"
        button = page.get_by_role("button", name="ambiguous", exact=True)
        record("triage_verdict", (await press(page, button, TEXT_JS, waiting))[1])
    chooser = page.get_by_test_id("stSelectbox").filter(has_text="Compare with")
    await chooser.click()
    await page.get_by_role("option", name=re.compile(f"^{COMPARE_WITH} ")).click()
    await wait(page, COMPARE_CHOSEN_JS, f"{COMPARE_WITH} ·")
    _, done = await switch_tab(page, "Compare", selector(COMPARE_FLIPS))
    record("compare_tab", done)
    flips = await settled_points(page, selector(COMPARE_FLIPS))
    for cell in flips["points"][:clicks]:
        before = await page.evaluate(COMPARED_PICKS_JS)
        await hover(page, {"x": cell["x"], "y": cell["y"], "cell": [cell["index"]]})
        clicked = await from_settled(page, lambda: click_in_place(page), COMPARED_JS, before)
        record("compare_click", clicked[1])
    await switch_tab(page, "Explore", selector(GRID_CHART))
