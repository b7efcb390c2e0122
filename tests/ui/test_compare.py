"""The Compare view through AppTest: a second model, its flip matrix, the picks' two maps."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import streamlit as st
import torch
from streamlit.testing.v1 import AppTest

from gradpick import compare as versus
from gradpick import data
from gradpick.cli import main
from gradpick.runtime import devices
from gradpick.ui import config, heatmaps, keys, service
from gradpick.ui.panels import compare as compare_panel
from tests.app.test_app import captioned_indices, open_app, open_tab

TUTORIAL = "tutorial:random-seed0"
RESNET = "resnet20:random-seed0"


def _open(**session: Any) -> AppTest:
    """The page on the Compare tab."""
    return open_app("Compare", **session)


def _no_errors(app: AppTest) -> None:
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [e.value for e in app.error]


def _map_captions(app: AppTest) -> list[str]:
    return [c for element in app.image for c in element.captions if c.startswith("second: ")]


def test_a_flip_cell_picks_its_images_and_both_maps_are_drawn(generated: Path) -> None:
    app = _open(**{keys.MODEL: TUTORIAL, keys.COMPARE_WITH: RESNET})
    _no_errors(app)
    assert any("First: tutorial; second: resnet20; 64 images" in c.value for c in app.caption)
    assert app.session_state[keys.PICKED] == []
    # cell 3 of the flip matrix: both models wrong (random weights: most images)
    app.session_state[keys.COMPARE_FLIPS] = {
        "selection": {"points": [{"customdata": [3]}], "box": [], "lasso": []}
    }
    app.run()
    _no_errors(app)
    picked = app.session_state[keys.PICKED]
    assert picked
    # the click is folded in before the page writes its link, in the same run
    assert str(app.query_params["picks"]) == ",".join(map(str, picked))
    captions = _map_captions(app)
    assert len(captions) == min(len(picked), 8)
    assert all("Spearman" in caption and "SSIM" in caption for caption in captions)
    first_captions = [c for e in app.image for c in e.captions if c.startswith("first: ")]
    assert len(first_captions) == len(captions)
    assert captioned_indices(open_tab(app, "Explore")) == picked  # the same picks there


def test_comparing_a_model_with_itself_flips_nothing(generated: Path) -> None:
    app = _open(**{keys.MODEL: TUTORIAL, keys.COMPARE_WITH: TUTORIAL})
    _no_errors(app)
    app.session_state[keys.COMPARE_FLIPS] = {
        "selection": {"points": [{"customdata": [1]}, {"customdata": [2]}], "box": [], "lasso": []}
    }
    app.run()
    _no_errors(app)
    assert app.session_state[keys.PICKED] == []  # no image is right for one and not the other
    app.button(key=keys.COMPARE_DRIFT).click().run()
    _no_errors(app)
    assert len(app.session_state[keys.PICKED]) == 8
    assert all(c.endswith("Spearman 1.00, SSIM 1.00") for c in _map_captions(app))


def test_the_hosted_demo_compares_two_built_in_models_out_of_the_box(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(config.HOSTED_ENV, "1")
    app = _open()
    _no_errors(app)
    assert app.session_state[keys.COMPARE_WITH] not in (
        keys.COMPARE_NOTHING,
        app.session_state[keys.MODEL],
    )
    assert any("; second: " in c.value for c in app.caption)


def test_without_a_second_model_the_view_says_how_to_choose_one(generated: Path) -> None:
    app = _open(**{keys.MODEL: TUTORIAL})
    _no_errors(app)
    assert any("Choose a model to compare with" in info.value for info in app.info)


def _store_of(folder: Path, out: Path) -> Path:
    """Outputs of the seeded tutorial stand-in over ``folder``, written by ``gradpick infer``."""
    weights = out.parent / "stand-in.pt"
    torch.save(
        service.load_model(
            service.ModelOption("tutorial"), torch.device("cpu")
        ).module.state_dict(),
        weights,
    )
    arguments = ["infer", "--model", "tutorial", "--weights", str(weights), "--data", str(folder)]
    assert main([*arguments, "--out", str(out)]) == 0
    return out


def test_a_store_of_the_same_images_is_the_second_model(generated: Path, tmp_path: Path) -> None:
    outputs = _store_of(generated / "test", tmp_path / "outputs")
    session = {
        keys.MODEL: TUTORIAL,
        keys.COMPARE_WITH: keys.COMPARE_STORED,
        keys.COMPARE_OUTPUTS: str(outputs),
    }
    app = _open(**session)
    _no_errors(app)
    # the same weights: no image is right for one model and wrong for the other
    app.session_state[keys.COMPARE_FLIPS] = {
        "selection": {"points": [{"customdata": [1]}, {"customdata": [2]}], "box": [], "lasso": []}
    }
    app.run()
    _no_errors(app)
    assert app.session_state[keys.PICKED] == []
    assert any("; second: tutorial; 64 images" in c.value for c in app.caption)


def test_a_store_of_other_images_is_refused(
    generated: Path, tmp_path: Path, image_folder_factory: Any
) -> None:
    other = image_folder_factory(list(data.CIFAR10_CLASSES), per_class=1, name="other")
    outputs = _store_of(other, tmp_path / "outputs")
    session = {
        keys.MODEL: TUTORIAL,
        keys.COMPARE_WITH: keys.COMPARE_STORED,
        keys.COMPARE_OUTPUTS: str(outputs),
    }
    app = _open(**session)
    assert not app.exception
    assert any("was written from other images" in e.value for e in app.error)


def test_the_picks_maps_are_a_click_s_step_on_one_cpu_thread(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the Explore tab's gradients: a few picks gain nothing from a second thread, whose
    spinning beside the browser's redraw made a flip cell's click 80 ms slower."""
    if devices.PROCESS_CPU_THREADS < 2:
        pytest.skip("one CPU thread for the whole process: nothing to tell apart")
    threads: list[int] = []
    compare_maps = versus.compare_maps

    def recording(*args: Any, **kwargs: Any) -> Any:
        threads.append(torch.get_num_threads())
        return compare_maps(*args, **kwargs)

    monkeypatch.setattr(versus, "compare_maps", recording)
    st.cache_data.clear()  # the maps of an earlier test's same picks would be reused
    app = _open(**{keys.MODEL: TUTORIAL, keys.COMPARE_WITH: RESNET})
    app.session_state[keys.COMPARE_FLIPS] = {
        "selection": {"points": [{"customdata": [3]}], "box": [], "lasso": []}
    }
    app.run()
    _no_errors(app)
    assert threads == [heatmaps.STEP_CPU_THREADS]
    assert _map_captions(app)


def _luminance(colour: str) -> float:
    """WCAG relative luminance of a #rrggbb colour."""
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(one: str, other: str) -> float:
    light, dark = sorted((_luminance(one), _luminance(other)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


@pytest.mark.parametrize("labelled", [True, False])
def test_the_flip_matrix_is_equal_cells_with_large_high_contrast_counts(labelled: bool) -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 50, 3)).astype(np.float32)
    labels = rng.integers(0, 3, 50) if labelled else None
    sides = [
        versus.Side(
            positions=np.arange(50),
            names=tuple(f"{i}.jpg" for i in range(50)),
            labels=labels,
            logits=logits[k],
            class_names=("a", "b", "c"),
            model={"name": f"m{k}"},
            source={"description": "test"},
        )
        for k in range(2)
    ]
    pairing = versus.pair(*sides)
    figure = compare_panel.flip_matrix(pairing)
    trace = figure.data[0]
    counts = [int(re.sub(r"<b>([\d,]+)</b>.*", r"\1", t).replace(",", "")) for t in trace.text]
    first, second = pairing.first, pairing.second
    if labelled:
        right = [first == pairing.labels, second == pairing.labels]
        expected = [
            int((right[0] & right[1]).sum()),
            int((right[0] & ~right[1]).sum()),
            int((~right[0] & right[1]).sum()),
            int((~right[0] & ~right[1]).sum()),
        ]
    else:
        expected = [int((first == second).sum()), int((first != second).sum())]
    assert counts == expected and sum(counts) == 50
    assert [list(c) for c in trace.customdata] == [[i] for i in range(len(expected))]
    assert trace.textfont.size >= 24
    shapes = figure.layout.shapes
    assert len(shapes) == len(expected)
    assert len({(round(s.x1 - s.x0, 6), round(s.y1 - s.y0, 6)) for s in shapes}) == 1
    for shape in shapes:
        assert _contrast(trace.textfont.color, shape.fillcolor) >= 7  # WCAG AAA
