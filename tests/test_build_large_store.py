"""``tools/build_large_store.py``: a folder of real, re-sampled JPEGs, the same for a seed,
written whole or not at all, and a store of it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from gradpick import data
from gradpick.outputs import store_format as store

TOOL = Path(__file__).resolve().parents[1] / "tools" / "build_large_store.py"


def _tool() -> Any:
    spec = importlib.util.spec_from_file_location("build_large_store", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_folder_holds_the_asked_images_the_same_for_a_seed(
    image_folder_factory: Any, tmp_path: Path
) -> None:
    tool = _tool()
    source = image_folder_factory(3, per_class=2, suffix=".png")
    a, b, c = (tmp_path / "a", tmp_path / "b", tmp_path / "c")
    tool.write_folder(source, a, 25, seed=1)
    tool.write_folder(source, b, 25, seed=1)
    tool.write_folder(source, c, 25, seed=2)
    files = sorted(p.relative_to(a) for p in a.rglob("*.jpg"))
    assert len(files) == 25 and {f.parts[0] for f in files} <= {"class_00", "class_01", "class_02"}
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    assert any(not (c / f).is_file() or (a / f).read_bytes() != (c / f).read_bytes() for f in files)
    pixels = [np.asarray(Image.open(a / f)) for f in files]
    assert all(p.shape == (32, 32, 3) for p in pixels)
    assert len({p.tobytes() for p in pixels}) > 6  # crops and flips: more than the 6 sources
    assert len(data.image_folder(a)) == 25


def test_an_interrupted_run_leaves_no_folder_that_looks_complete(
    image_folder_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = _tool()
    source = image_folder_factory(3, per_class=2, suffix=".png")
    saved: list[int] = []
    save = Image.Image.save

    def stopped(self: Image.Image, *args: Any, **kwargs: Any) -> None:
        if len(saved) == 10:
            raise KeyboardInterrupt
        saved.append(1)
        save(self, *args, **kwargs)

    monkeypatch.setattr(Image.Image, "save", stopped)
    with pytest.raises(KeyboardInterrupt):
        tool.write_folder(source, tmp_path / "images", 25)
    assert not (tmp_path / "images").exists()


def test_the_command_stores_the_outputs_of_the_folder(
    image_folder_factory: Any, tmp_path: Path
) -> None:
    source = image_folder_factory(list(data.CIFAR10_CLASSES), per_class=1, suffix=".png")
    folder, out = tmp_path / "images", tmp_path / "store"
    arguments = ["--images", "30", "--folder", str(folder), "--out", str(out)]
    assert _tool().main([*arguments, "--source", str(source)]) == 0
    opened = store.open_store(out)
    assert len(opened) == 30 and "embedding" in opened.table.column_names
