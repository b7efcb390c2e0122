"""The explorer's keys: one module importing nothing, and the selector a browser finds them by."""

from __future__ import annotations

import ast
from pathlib import Path

from gradpick.ui import keys, linking

UI = Path(keys.__file__).parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }


def test_the_keys_module_imports_nothing() -> None:
    assert _imports(UI / "keys.py") <= {"__future__"}


def test_the_session_state_helpers_do_not_import_the_page_frame() -> None:
    assert not {"gradpick.ui.start", "gradpick.ui"} & _imports(UI / "state.py")


def test_a_key_selects_the_element_streamlit_classes_with_it() -> None:
    assert keys.selector(keys.GRID_CHART) == ".st-key-grid_chart"
    assert keys.selector(keys.HOVER_SCRIPT) == ".st-key-hidden_hover_script"


def test_the_kept_widgets_are_named_by_the_explorers_own_tabs() -> None:
    assert set(keys.TAB_WIDGETS) <= set(linking.TABS)
