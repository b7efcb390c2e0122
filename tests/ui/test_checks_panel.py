"""The Trust tab through AppTest: checks on demand, their charts and tables, errors in place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradpick.data import CIFAR10_CLASSES
from gradpick.trust.report import TrustReport
from gradpick.ui import keys
from gradpick.ui.panels import trust as trust_panel
from gradpick.ui.panels.trust import StoredChecks
from tests.app.test_app import TUTORIAL, captioned_indices, no_errors, open_app, open_tab, select


def frame_with(app, column: str):
    return next(frame.value for frame in app.dataframe if column in frame.value.columns)


def test_the_checks_run_on_the_picks_when_asked(generated: Path) -> None:
    app = select(open_app("Trust", **TUTORIAL), keys.SCATTER_CHART, [4, 1])
    assert keys.TRUST_CHECKS not in app.session_state  # nothing runs before the button
    # Integrated Gradients too: completeness checks it, and runs only when it is checked.
    checked = ["gradient", "smoothgrad", "integrated_gradients"]
    app.multiselect(key="trust_methods").set_value(checked)
    app.number_input(key="trust_layers").set_value(2)
    app.run()
    app.button(key="run_trust_checks").click().run()
    no_errors(app)
    stored: StoredChecks = app.session_state[keys.TRUST_CHECKS]
    report: TrustReport = stored.report
    assert report.indices == (4, 1)
    assert set(report.randomisation) == set(checked)
    assert [len(curve.steps) for curve in report.randomisation.values()] == [2, 2, 2]
    specs = [json.loads(chart.proto.spec) for chart in app.get("plotly_chart")]
    titles = [[note["text"] for note in spec["layout"].get("annotations", [])] for spec in specs]
    assert ["Spearman rank correlation", "SSIM"] in titles and ["deletion", "insertion"] in titles
    lines = next(spec for spec in specs if "SSIM" in str(spec["layout"].get("annotations")))
    assert lines["data"][0]["x"] == ["trained", "fc3", "fc2"]
    table = frame_with(app, "relative error (%)")
    assert list(table["image"]) == ["#4", "#1"] and (table["relative error (%)"] <= 5).all()
    assert list(table["class"]) == [CIFAR10_CLASSES[c] for c in report.classes.tolist()]
    aucs = frame_with(app, "deletion AUC (lower is better)")
    assert list(aucs["order"]) == ["Gradient", "SmoothGrad", "Integrated Gradients", "random"]
    captions = [caption.value for caption in app.caption]
    assert any("SmoothGrad: 16 noisy copies" in caption for caption in captions)
    # The randomised maps (trained + 2 steps) and, per pick, image + 3 classes + contrast.
    widths = [len(image.captions or []) for image in app.image]
    assert 3 in widths and widths.count(5) == 2
    assert captioned_indices(app) == []  # the closed Explore tab is not drawn
    assert captioned_indices(open_tab(app, "Explore")) == [4, 1]


def test_changed_picks_ask_for_a_new_run(generated: Path) -> None:
    app = select(open_app("Trust", **TUTORIAL), keys.SCATTER_CHART, [2])
    app.number_input(key="trust_layers").set_value(1)
    app.run()
    app.button(key="run_trust_checks").click().run()
    app = select(app, keys.SCATTER_CHART, [3])
    no_errors(app)
    assert any("changed since the last run" in info.value for info in app.info)


def test_bad_check_options_show_an_error_and_keep_the_page(generated: Path) -> None:
    app = select(open_app("Trust", **TUTORIAL), keys.SCATTER_CHART, [0, 5])
    app.number_input(key="trust_layers").set_value(50)
    app.run()
    app.button(key="run_trust_checks").click().run()
    assert not app.exception
    assert any(
        "layers to randomise must be a whole number from 1 to 5" in e.value for e in app.error
    )
    app.number_input(key="trust_layers").set_value(1)
    app.multiselect(key="trust_methods").set_value(["gradient", "integrated_gradients"])
    app.number_input(key="trust_tolerance").set_value(0.001)
    app.number_input(key="trust_max_steps").set_value(2)
    app.run()
    app.button(key="run_trust_checks").click().run()
    # A tolerance an image cannot reach is that image's verdict, not an error for the run.
    no_errors(app)
    table = frame_with(app, "relative error (%)")
    missed = table[table["relative error (%)"] > 0.1]
    assert len(missed) and all(
        v.startswith("did not reach 0.1% within 2 steps") for v in missed["verdict"]
    )
    assert keys.TRUST_CHECKS in app.session_state
    assert captioned_indices(open_tab(app, "Explore")) == [0, 5]


def test_more_picks_than_a_chunk_are_all_checked(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trust_panel, "CHUNK", 2)  # the tab's chunk, as its caption says
    picks = list(range(trust_panel.CHUNK + 1))  # two chunks, the last one short
    # Integrated Gradients on the sidebar: the tab checks it, so completeness runs.
    app = open_app("Trust", **TUTORIAL, method="integrated_gradients")
    app = select(app, keys.SCATTER_CHART, picks)
    caption = f"Runs on all {len(picks)} picked image(s), 2 at a time"
    assert any(caption in c.value for c in app.caption)
    app.number_input(key="trust_layers").set_value(1)
    app.number_input(key="trust_tolerance").set_value(0.2)  # a random net's tiny F(x) - F(b)
    app.run()
    app.button(key="run_trust_checks").click().run()
    no_errors(app)
    report: TrustReport = app.session_state[keys.TRUST_CHECKS].report
    assert report.indices == tuple(picks)
    table = frame_with(app, "relative error (%)")
    assert list(table["image"]) == [f"#{index}" for index in picks]
    # Every pick's row of class maps: its image, the top classes and the contrast.
    assert [len(image.captions or []) for image in app.image].count(5) == len(picks)


def test_a_chosen_class_is_the_class_every_check_explains(generated: Path) -> None:
    app = open_app(
        "Trust", **TUTORIAL, target_mode="class", target_class=3, method="integrated_gradients"
    )
    app = select(app, keys.SCATTER_CHART, [6, 2])
    assert any("explaining the logit of cat" in caption.value for caption in app.caption)
    app.number_input(key="trust_layers").set_value(1)
    app.run()
    app.button(key="run_trust_checks").click().run()
    no_errors(app)
    report: TrustReport = app.session_state[keys.TRUST_CHECKS].report
    assert report.classes.tolist() == [3, 3]
    assert [row.target_class for row in report.completeness] == [3, 3]
