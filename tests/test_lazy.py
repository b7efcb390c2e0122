"""Folders that import nothing until a name is used, and resolve every name they list."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import gradpick

FOLDERS = [
    name
    for name in gradpick.SUBMODULES
    if hasattr(importlib.import_module(f"gradpick.{name}"), "__path__")
    and name not in ("attribution", "data", "trust")
]


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_listed_name_is_the_defining_modules_object(folder: str) -> None:
    package = importlib.import_module(f"gradpick.{folder}")
    for name in package.__all__:
        value = getattr(package, name)
        origin = getattr(value, "__module__", None)
        if origin is not None and origin.startswith(f"gradpick.{folder}."):
            assert getattr(importlib.import_module(origin), name) is value
    assert sorted(package.__all__) == sorted(set(package.__all__))
    assert set(package.__all__) <= set(dir(package))


def test_a_submodule_resolves_as_an_attribute_and_an_unknown_name_is_refused() -> None:
    outputs = importlib.import_module("gradpick.outputs")
    assert outputs.sidecar is importlib.import_module("gradpick.outputs.sidecar")
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = outputs.nothing_here


def test_importing_a_folder_runs_none_of_its_modules() -> None:
    probe = (
        "import json, sys; import gradpick.outputs, gradpick.models; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('gradpick'))))"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = json.loads(run.stdout)
    assert "torch" not in run.stdout
    assert loaded == ["gradpick", "gradpick._lazy", "gradpick.models", "gradpick.outputs"]
