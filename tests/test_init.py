"""``import gradpick`` is light, and every name the README and the docs name resolves from it.

Each check runs in a fresh interpreter: in this process the test suite has imported most of
gradpick already, and an imported submodule is an attribute of its package whatever
``gradpick/__init__.py`` does.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import gradpick

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _fresh(code: str) -> str:
    """The stdout of ``code`` run by a new interpreter (same sys.path as this one)."""
    answer = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": ":".join(path for path in sys.path if path), "OMP_NUM_THREADS": "1"},
    )
    return answer.stdout


def documented_names() -> list[str]:
    """Every dotted ``gradpick.<name>...`` the README and the docs name."""
    text = "\n".join(page.read_text() for page in PAGES)
    return sorted(set(re.findall(r"\bgradpick(?:\.[A-Za-z_]\w*)+", text)))


def test_a_bare_import_loads_neither_torch_nor_streamlit() -> None:
    loaded = json.loads(
        _fresh("import gradpick, json, sys; print(json.dumps(sorted(sys.modules)))")
    )
    heavy = {"torch", "streamlit", "numpy", "PIL", "pandas", "plotly", "torchvision"}
    assert heavy.isdisjoint(loaded), heavy & set(loaded)
    assert not [name for name in loaded if name.startswith("gradpick.")]


def test_the_readme_documents_the_main_modules() -> None:
    names = documented_names()
    for module in (
        "gradpick.models.shipped",
        "gradpick.data",
        "gradpick.outputs.inference",
        "gradpick.errors",
    ):
        assert any(name == module or name.startswith(module + ".") for name in names), module


def test_every_documented_name_resolves_after_a_bare_import() -> None:
    """Attribute access from ``gradpick`` down, as a user types it; a module inside a
    subpackage (``gradpick.ui.media``) is imported, as Python requires for any package."""
    code = f"""
import importlib, json
import gradpick
unresolved = []
for dotted in {documented_names()!r}:
    target = gradpick
    for depth, part in enumerate(dotted.split(".")[1:], start=2):
        if not hasattr(target, part) and hasattr(target, "__path__"):
            importlib.import_module(".".join(dotted.split(".")[:depth]))
        if not hasattr(target, part):
            unresolved.append(dotted)
            break
        target = getattr(target, part)
print(json.dumps(unresolved))
"""
    assert json.loads(_fresh(code)) == []


def test_all_lists_only_names_that_resolve_and_every_public_module() -> None:
    modules = {
        path.stem
        for path in Path(gradpick.__file__).parent.iterdir()
        if (path.suffix == ".py" or (path / "__init__.py").is_file())
        and not path.name.startswith("_")
    }
    assert modules - {"bench", "cli", "ui"} == set(gradpick.SUBMODULES)
    resolved = json.loads(
        _fresh(
            "import gradpick, json; "
            "print(json.dumps({n: type(getattr(gradpick, n)).__name__ for n in gradpick.__all__}))"
        )
    )
    assert set(resolved) == set(gradpick.__all__)
    assert {name for name, kind in resolved.items() if kind == "module"} == set(gradpick.SUBMODULES)
    assert resolved["input_gradients"] == "function"


def test_models_load_works_from_a_bare_import() -> None:
    code = (
        "import gradpick; model = gradpick.models.shipped.load('tutorial'); "
        "print(type(model).__name__, model.training)"
    )
    assert _fresh(code).split() == ["TutorialNet", "False"]


def test_an_unknown_name_is_an_attribute_error() -> None:
    code = """
import gradpick
try:
    gradpick.no_such_module
except AttributeError as error:
    print(error)
"""
    assert "has no attribute 'no_such_module'" in _fresh(code)
