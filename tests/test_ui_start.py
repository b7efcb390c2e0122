"""The page's frame: sent before the heavy imports, its preload chart gone when a run ends."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from streamlit.testing.v1 import AppTest

from gradpick.ui import keys, page, start


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

    def recording_main() -> None:
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


def test_containers_keyed_hidden_are_hidden_by_the_page_style() -> None:
    assert f'[class*="st-key-{keys.HIDDEN_KEY_PREFIX}"] {{ display: none; }}' in start.PAGE_STYLE
    assert keys.PRELOAD_CONTAINER.startswith(keys.HIDDEN_KEY_PREFIX)
    assert keys.HOVER_SCRIPT.startswith(keys.HIDDEN_KEY_PREFIX)
