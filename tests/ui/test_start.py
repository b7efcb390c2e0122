"""The page's frame: sent before the heavy imports, its preload chart gone when a run ends."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from gradpick.ui import keys, page, start
from tests.serving import (
    APP_IDLE,
    CHROMIUM_ARGS,
    LOAD_TIMEOUT_MS,
    chromium_executable,
    free_port,
    wait_healthy,
)


def test_the_frame_module_imports_no_torch() -> None:
    code = "import sys, gradpick.ui.start; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", f"import json; {code}"],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = set(json.loads(done.stdout))
    assert not loaded & {"torch", "gradpick.ui.page", "gradpick.ui.state", "pandas"}


def _frame_only() -> None:
    from gradpick.ui.start import run

    run()


def _charts(app: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in app.get("plotly_chart")]


def _main_is_a_caption(*_: object) -> None:
    import streamlit as st

    st.caption("the page")


def _main_fails(*_: object) -> None:
    raise RuntimeError("the page broke")


@pytest.mark.parametrize("main", [_main_is_a_caption, _main_fails])
def test_the_preload_chart_is_cleared_when_the_run_ends(
    monkeypatch: pytest.MonkeyPatch, main: object
) -> None:
    seen_during_run: list[int] = []

    def recording_main(after_inference: object = None) -> None:
        seen_during_run.append(1)
        main()  # type: ignore[operator]

    monkeypatch.setattr(page, "main", recording_main)
    app = AppTest.from_function(_frame_only, default_timeout=60).run()
    assert seen_during_run == [1]
    assert _charts(app) == []
    assert [m.value for m in app.markdown] == [start.PAGE_STYLE]
    if main is _main_fails:
        assert len(app.exception) == 1  # the message itself is redacted by the page config
    else:
        assert [c.value for c in app.caption] == ["the page"]


MARKDOWN_KINDS = {"markdown", "title", "header", "subheader", "caption"}
"""AppTest's names for what the browser draws with one element's code, Markdown's."""


def _kinds_above_grid(node: Any, kinds: set[str], tab_rows: list[str] | None = None) -> bool:
    """Collect into ``kinds`` the kinds of element drawn above the thumbnail grid (the page's
    first plotly chart), leaving out what a collapsed expander or a popover holds, and into
    ``tab_rows`` the keys of its button groups; True once at the grid."""
    kind = getattr(node, "type", None)
    if kind == "plotly_chart":
        return True
    if kind == "button_group" and tab_rows is not None:
        tab_rows.append(node.key)
    if kind == "expander" and not node.proto.expanded:
        return False
    if kind == "popover":  # the browser draws its content only once it is opened
        kinds.add(kind)
        return False
    children = getattr(node, "children", None)
    if children is None:
        kinds.add("markdown" if kind in MARKDOWN_KINDS else str(kind))
        return False
    return any(_kinds_above_grid(child, kinds, tab_rows) for child in children.values())


@pytest.mark.parametrize("imported", [False, True])
def test_the_frame_loads_the_code_of_what_the_grid_sits_under(
    generated: Path, monkeypatch: pytest.MonkeyPatch, imported: bool
) -> None:
    """The browser loads an element kind's code when the first one arrives, and draws a
    placeholder until then: a metric or popover above the thumbnails, drawn late, moved the
    grid down under a visitor's pointer. So every kind above the grid that the sidebar does not
    load first is in the hidden frame, sent before the page waits for its batch. And a
    process's first page sends the preload chart before it imports (the browser loads plotly
    meanwhile); any later page only once its batch is inferred, not while it infers."""
    events: list[str] = []
    send_chart, load = start.st.plotly_chart, page._load

    def recorder(kind: str) -> Any:
        send = getattr(start.st, kind)

        def record(body: Any, *args: Any, **kwargs: Any) -> Any:
            if body == start._LAZY_ABOVE_GRID:
                events.append(kind)
            return send(body, *args, **kwargs)

        return record

    def recording_chart(*args: Any, **kwargs: Any) -> Any:
        events.append("chart")
        return send_chart(*args, **kwargs)

    def recording_load(settings: Any) -> Any:
        loaded = load(settings)
        events.append("batch")
        return loaded

    for kind in ("metric", "popover", "segmented_control"):
        monkeypatch.setattr(start.st, kind, recorder(kind))
    monkeypatch.setattr(start.st, "plotly_chart", recording_chart)
    monkeypatch.setattr(page, "_load", recording_load)
    if not imported:
        monkeypatch.setattr(start, "_PAGE_MODULE", "gradpick.ui.not_imported_yet")
    app = AppTest.from_function(_frame_only, default_timeout=120).run()
    assert not app.exception
    preloaded = ["metric", "popover", "segmented_control"]
    if imported:
        assert events[:5] == [*preloaded, "batch", "chart"]
    else:
        assert events[:5] == [*preloaded, "chart", "batch"]
    assert app.get("plotly_chart"), "the page's own charts are drawn"
    above, sidebar, tab_rows = set[str](), set[str](), list[str]()
    assert _kinds_above_grid(app.main, above, tab_rows)
    _kinds_above_grid(app.sidebar, sidebar)
    # AppTest calls a segmented control's element a button group
    assert above - sidebar - {"empty"} == {"metric", "popover", "button_group"}
    # The page style sizes the placeholders of these rows of tabs and of the readouts' metrics.
    assert sorted(tab_rows) == sorted(keys.TAB_ROWS)
    assert all(f".st-key-{key} > " in start.PAGE_STYLE for key in keys.TAB_ROWS)
    assert f".st-key-{keys.READOUTS} " in start.PAGE_STYLE


def test_containers_keyed_hidden_are_hidden_by_the_page_style() -> None:
    hidden = f'[class*="st-key-{keys.HIDDEN_KEY_PREFIX}"]'
    wrapper = f'[data-testid="stLayoutWrapper"]:has(> {hidden})'
    assert f"{hidden},\n{wrapper} {{\n  display: none; }}" in start.PAGE_STYLE
    assert keys.PRELOAD_CONTAINER.startswith(keys.HIDDEN_KEY_PREFIX)
    assert keys.HOVER_SCRIPT.startswith(keys.HIDDEN_KEY_PREFIX)


WORKING_PAGE = """
import time

import streamlit as st

from gradpick.ui.start import PAGE_STYLE

st.markdown(PAGE_STYLE, unsafe_allow_html=True)
st.button("Go")  # an element with transitions of its own
with st.expander("More"):  # and one whose border fades while stale
    st.write("more")
if st.query_params.get("idle") != "1":
    with st.spinner("Working…"):
        if st.query_params.get("bar") == "1":
            bar = st.progress(0.2, text="Reading images: 2 of 10")
            time.sleep(1)
            bar.progress(0.6, text="Reading images: 6 of 10")
        time.sleep(60)
"""
"""A run that works under Streamlit's spinner, reporting on a progress bar when ?bar=1; with
?idle=1 it ends at once."""

RUNNING_ANIMATIONS_JS = """
() => document.getAnimations().filter((a) => a.playState === 'running')
  .map((a) => [a.effect.target.closest('[data-testid]').dataset.testid,
               a.effect.getTiming().duration,
               getComputedStyle(a.effect.target).animationTimingFunction])
"""
GLIDING_JS = """
() => Array.from(document.querySelectorAll('[data-testid="stApp"] *')).filter(
  (el) => getComputedStyle(el).transitionDuration.split(',').some((d) => parseFloat(d) > 0)).length
"""
"""How many of the page's elements would glide from one value to the next."""


def test_no_animation_runs_while_a_progress_bar_reports_work(tmp_path: Path) -> None:
    """The browser draws an animation sixty frames a second on the cores the work needs; the
    page style stops Streamlit's spinner and the bar's glide while a bar is shown; a spinner
    alone still turns, a quarter every half second; nothing glides, while the run works or
    after it (the rule does not follow the run's state, whose every change would make the
    browser restyle the whole page)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium = chromium_executable()
    script = tmp_path / "working.py"
    script.write_text(WORKING_PAGE)
    url = f"http://127.0.0.1:{free_port()}"
    command = [sys.executable, "-m", "streamlit", "run", str(script)]
    command += ["--server.port", url.rsplit(":", 1)[1], "--server.headless", "true"]
    command += ["--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(url, server)
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            running, gliding = {}, {}
            page = browser.new_page()
            page.goto(f"{url}/?idle=1")
            page.locator(APP_IDLE).wait_for(timeout=LOAD_TIMEOUT_MS)
            page.get_by_text("Go").wait_for(timeout=LOAD_TIMEOUT_MS)
            gliding["idle"] = page.evaluate(GLIDING_JS)
            page.close()
            for bar in ("0", "1"):
                page = browser.new_page()
                page.goto(f"{url}/?bar={bar}")
                page.wait_for_selector('[data-testid="stSpinnerIcon"]', timeout=LOAD_TIMEOUT_MS)
                if bar == "1":
                    page.wait_for_function(
                        "() => document.body.innerText.includes('6 of 10')",
                        timeout=LOAD_TIMEOUT_MS,
                    )
                running[bar] = page.evaluate(RUNNING_ANIMATIONS_JS)
                gliding[bar] = page.evaluate(GLIDING_JS)
                page.close()
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=15)
    assert running["0"] == [["stSpinnerIcon", 2000, "steps(4)"]]
    assert running["1"] == []
    assert gliding == {"idle": 0, "0": 0, "1": 0}
