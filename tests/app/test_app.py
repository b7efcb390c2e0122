"""The Streamlit page through AppTest: each part, driven as a user would, checked by what it shows.

Selections are injected the way the browser reports them (the chart's or table's widget state);
the page folds them into its own picked list. The data is a generated CIFAR-10-shaped folder of
64 images and the models have random weights (an empty assets folder), so the tests depend on
neither the shared data nor training.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import streamlit as st
import torch
from streamlit.testing.v1 import AppTest

from gradpick import attribution, data
from gradpick.gradients import strategies
from gradpick.gradients.engine import STRATEGIES
from gradpick.models import shipped as models
from gradpick.outputs import store_format as store
from gradpick.outputs import stores as stored
from gradpick.outputs.inference import infer_chunks
from gradpick.picking import rules as selection
from gradpick.runtime import measure
from gradpick.ui import cache, heatmaps, keys, page, service, state, warmup
from gradpick.ui.panels import explore as gradients_panel

APP = Path(__file__).resolve().parents[2] / "app.py"
TIMEOUT = 180
IMAGES = 64


def open_app(tab: str | None = None, **session: Any) -> AppTest:
    """The app after its first run, with ``session`` set before it (e.g. widget values) and
    the explorer's ``tab`` open (only the open tab is drawn; default: Explore)."""
    app = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    for key, value in session.items():
        app.session_state[key] = value
    if tab is not None:
        app.session_state[keys.EXPLORER_TAB] = tab
    app.run()
    begun = warmup.current()  # as a visitor finds the page once the server's start-up is over
    assert begun is None or begun.done.wait(TIMEOUT)
    return app


def open_tab(app: AppTest, tab: str) -> AppTest:
    """Switch the explorer to ``tab``, as a click on it does (the page reruns)."""
    app.session_state[keys.EXPLORER_TAB] = tab
    return app.run()


TUTORIAL = {"model": "tutorial:random-seed0"}
"""Session values that choose the small tutorial net (random weights), for speed."""


def select(app: AppTest, key: str, indices: list[int]) -> AppTest:
    points = [{"customdata": index} for index in indices]
    app.session_state[key] = {"selection": {"points": points, "box": [], "lasso": []}}
    return app.run()


def metrics(app: AppTest) -> dict[str, str]:
    return {metric.label: metric.value for metric in app.metric}


def heatmap_captions(app: AppTest) -> list[str]:
    """Captions of the heatmap strips: one image per picked index."""
    for element in app.image:
        captions = element.captions
        if captions and all(c.startswith("#") and "overlay" not in c for c in captions):
            return captions
    return []


def captioned_indices(app: AppTest) -> list[int]:
    return [int(caption.split()[0].lstrip("#")) for caption in heatmap_captions(app)]


def index_box(app: AppTest) -> Any:
    """The editable picked-indices box (its key changes with every selection)."""
    return app.text_input(key=state.text_key(app.session_state))


def table(app: AppTest) -> Any:
    """The batch table; its view is opened first, since only the open view is drawn."""
    if app.session_state[keys.OUTPUTS_TAB] != "Table":
        app.session_state[keys.OUTPUTS_TAB] = "Table"
        app.run()
    return app.dataframe[0].value


@pytest.fixture(scope="module", autouse=True)
def caches_of_its_own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A cache folder and empty Streamlit caches for this file: a file run before it in the same
    process may have kept the default batch's outputs, and the page would then open them
    ("Device: stored") where these tests expect it to infer."""
    st.cache_data.clear()
    st.cache_resource.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADPICK_CACHE_DIR", str(tmp_path_factory.mktemp("app-cache")))
        yield


def no_errors(app: AppTest) -> None:
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [e.value for e in app.error]


def test_the_launcher_reads_the_batch_the_page_opens_on(generated: Path) -> None:
    """``service.default_batch`` (what the launcher reads and infers before it serves) names
    the batch the sidebar opens on before anything is typed."""
    app = open_app()
    no_errors(app)
    base = service.DataChoice()
    default = service.default_batch(base, service.open_source(base))
    assert default.seed == 0  # the generated folder lists its images class by class
    assert app.session_state[keys.PICKED_BATCH] == default.batch_key


def test_opens_on_the_default_batch_with_outputs_and_no_selection(generated: Path) -> None:
    app = open_app()
    no_errors(app)
    shown = metrics(app)
    assert shown["Images N"] == str(IMAGES)
    assert shown["Device"] == "cpu"
    assert re.fullmatch(r"\d+(\.\d)?%", shown["Accuracy"])
    assert "img/s" in shown["Throughput"]
    assert app.sidebar.selectbox(key="model").value == "resnet20:random-seed0"
    assert any("random weights" in warning.value for warning in app.sidebar.warning)
    assert any("No images picked yet" in info.value for info in app.info)
    assert len(table(app)) == IMAGES
    assert heatmap_captions(app) == []


def test_the_sidebar_offers_exactly_the_registered_strategies_and_methods(
    generated: Path,
) -> None:
    app = open_app(**TUTORIAL, method="smoothgrad")
    strategy = app.sidebar.selectbox(key=keys.STRATEGY)
    assert strategy.options == list(strategies.NAMES)
    assert strategy.help == strategies.help_text()
    method = app.sidebar.selectbox(key=keys.METHOD)
    assert method.options == [attribution.get(name).label for name in attribution.METHOD_NAMES]
    shown = [p for p in attribution.get("smoothgrad").parameters if p.shown is not None]
    sliders = {slider.key: slider for slider in app.sidebar.slider}
    for parameter in shown:
        slider = sliders[keys.setting_key(parameter.name)]
        assert (slider.min, slider.max, slider.value) == (*parameter.shown, parameter.default)


def test_a_scatter_selection_shows_heatmaps_and_readouts_for_exactly_those_images(
    generated: Path,
) -> None:
    app = select(open_app(), keys.SCATTER_CHART, [5, 3])
    no_errors(app)
    assert app.session_state[keys.PICKED] == [5, 3]
    assert index_box(app).value == "5, 3"
    assert captioned_indices(app) == [5, 3]
    shown = metrics(app)
    assert shown["Picked k / batch N"] == f"2 / {IMAGES}"
    assert shown["Strategy"] == "recompute"
    assert float(shown["Gradient step"].split()[0].replace(",", "")) > 0
    assert re.fullmatch(r"[\d,]+ ms", shown["Server time for this update"])
    assert shown["Saved for backward"].endswith("MB") and shown["Peak memory"].endswith("MB")
    assert any("saved by autograd" in caption.value for caption in app.caption)


def test_a_click_does_not_wait_for_the_profiler_the_warm_up_is_setting_up(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The profiler's first use takes seconds and holds the measurement lock: a click while the
    warm-up sets it up shows its maps without a memory figure, and says so; a later click, once
    the profiler is set up, measures."""
    app = open_app(**TUTORIAL)
    cache.step_memory.clear()
    measured: list[int] = []
    real = heatmaps.step_memory

    def counted(*args: Any) -> Any:
        measured.append(len(args[2]))
        return real(*args)

    monkeypatch.setattr(heatmaps, "step_memory", counted)
    warming = threading.Event()
    warming.set()  # the warm-up's thread is setting the profiler up
    monkeypatch.setattr(measure, "_profiler_warming", warming)
    app = select(app, keys.SCATTER_CHART, [5])
    no_errors(app)
    assert captioned_indices(app) == [5]
    assert gradients_panel.PROFILER_WARMING in [caption.value for caption in app.caption]
    assert measured == [] and "Peak memory" not in metrics(app)
    warming.clear()
    app = select(app, keys.SCATTER_CHART, [6])
    assert measured == [1] and metrics(app)["Peak memory"].endswith("MB")
    assert gradients_panel.PROFILER_WARMING not in [caption.value for caption in app.caption]


def test_grid_selections_add_and_remove_in_the_chosen_mode(generated: Path) -> None:
    app = select(open_app(**TUTORIAL), keys.GRID_CHART, [1, 2])
    app.radio(key=keys.MERGE_MODE).set_value("add").run()
    app = select(app, keys.GRID_CHART, [2, 9])
    assert app.session_state[keys.PICKED] == [1, 2, 9]
    app.radio(key=keys.MERGE_MODE).set_value("remove").run()
    app = select(app, keys.SCATTER_CHART, [1])
    assert captioned_indices(app) == [2, 9]
    no_errors(app)


def test_a_confusion_cell_picks_every_image_of_that_true_and_predicted_pair(
    generated: Path,
) -> None:
    app = open_app(**TUTORIAL)
    rows = table(app)
    true, predicted = rows.iloc[0]["true"], rows.iloc[0]["predicted"]
    expected = rows.index[(rows["true"] == true) & (rows["predicted"] == predicted)].tolist()
    names = list(data.CIFAR10_CLASSES)
    cell = [names.index(true), names.index(predicted)]
    app.session_state[keys.CONFUSION_CHART] = {
        "selection": {"points": [{"customdata": cell}], "box": [], "lasso": []}
    }
    app.run()
    no_errors(app)
    assert app.session_state[keys.PICKED] == expected
    assert captioned_indices(app) == expected


def test_table_rows_pick_their_images(generated: Path) -> None:
    app = open_app(**TUTORIAL)
    app.session_state[keys.TABLE] = {"selection": {"rows": [7, 4], "columns": [], "cells": []}}
    app.run()
    assert captioned_indices(app) == [7, 4]


def test_the_misclassified_picker_takes_the_first_wrong_images(generated: Path) -> None:
    app = open_app(**TUTORIAL, rule="misclassified", rule_k=3)
    rows = table(app)
    expected = rows.index[~rows["correct"]].tolist()[:3]
    next(button for button in app.button if button.label == "Pick").click().run()
    no_errors(app)
    assert captioned_indices(app) == expected
    assert index_box(app).value == selection.format_indices(expected)


def test_typed_indices_are_parsed_and_bad_ones_explained(generated: Path) -> None:
    app = open_app(**TUTORIAL)
    index_box(app).input("3, 7, x").run()
    assert any("'x'" in error.value for error in app.error)
    assert captioned_indices(app) == []
    index_box(app).input("10-12, 2").run()
    no_errors(app)
    assert captioned_indices(app) == [10, 11, 12, 2]
    index_box(app).input(f"1, {IMAGES}").run()
    assert any("out of range" in error.value for error in app.error)
    assert captioned_indices(app) == [10, 11, 12, 2]


def test_clear_empties_the_selection(generated: Path) -> None:
    app = select(open_app(**TUTORIAL), keys.SCATTER_CHART, [1])
    clear = next(button for button in app.button if button.label == "Clear selection")
    clear.click().run()
    assert app.session_state[keys.PICKED] == []
    assert any("No images picked yet" in info.value for info in app.info)


def test_every_chart_is_sent_with_the_pages_plotly_options(generated: Path) -> None:
    """No logo, no PNG export, and WebGL drawn at one canvas pixel per CSS pixel (plotly's own
    default of two draws four times the pixels of a large scatter)."""
    app = select(open_app(), keys.SCATTER_CHART, [5, 3])
    configs = []
    for view in ("Thumbnails", "Confidence vs loss", "Confusion matrix", "Feature space"):
        app.session_state[keys.OUTPUTS_TAB] = view
        app.run()
        no_errors(app)
        drawn = [json.loads(chart.proto.config) for chart in app.get("plotly_chart")]
        assert drawn, view
        configs += drawn
    for config in configs:
        assert config["plotGlPixelRatio"] == 1 and config["displaylogo"] is False
        assert "toImage" in config["modeBarButtonsToRemove"]


def charts_keyed(app: AppTest, key: str) -> list[Any]:
    """The page's plotly charts drawn with widget key ``key`` (their element id ends with it)."""
    return [chart for chart in app.get("plotly_chart") if chart.proto.id.endswith(f"-{key}")]


def test_the_detailed_view_and_the_downloads_are_drawn_only_once_opened(generated: Path) -> None:
    """Closed (the default), a click's rerun sends neither; each opens on its own."""
    app = select(open_app(**TUTORIAL), keys.SCATTER_CHART, [4, 9])
    no_errors(app)
    labels = [expander.label for expander in app.expander]
    assert gradients_panel.DETAIL_LABEL in labels and gradients_panel.DOWNLOADS_LABEL in labels
    assert not [box for box in app.selectbox if box.key == keys.DETAIL]
    assert not charts_keyed(app, keys.PROBABILITY_CHART)
    assert not app.get("download_button")

    app.session_state[keys.DETAIL_OPEN] = True
    app.run()
    no_errors(app)
    assert app.selectbox(key=keys.DETAIL).value == 4
    assert any(caption.endswith("· overlay") for image in app.image for caption in image.captions)
    assert len(charts_keyed(app, keys.PROBABILITY_CHART)) == 1
    assert not app.get("download_button")

    app.session_state[keys.DOWNLOADS_OPEN] = True
    app.run()
    no_errors(app)
    shown = [button.proto.label for button in app.get("download_button")]
    assert shown == [
        "Gradients (.pt)",
        "Gradients (.npz)",
        "Heatmap grid (.png)",
        "Report (.json)",
        "Report (.html)",
    ]


def test_a_click_on_a_probability_bar_makes_its_class_the_target(generated: Path) -> None:
    app = select(open_app(**TUTORIAL, **{keys.DETAIL_OPEN: True}), keys.SCATTER_CHART, [4])
    app.session_state[keys.PROBABILITY_CHART] = {
        "selection": {"points": [{"customdata": 7}], "box": [], "lasso": []}
    }
    app.run()
    no_errors(app)
    assert app.sidebar.radio(key="target_mode").value == "class"
    assert app.sidebar.selectbox(key="target_class").value == 7
    assert any("logit[horse]" in image.captions[0] for image in app.image if image.captions)


@pytest.mark.parametrize(
    ("method", "unit"),
    [("smoothgrad", "SmoothGrad"), ("integrated_gradients", "(IG)"), ("gradient_x_input", "×")],
)
def test_attribution_views(generated: Path, method: str, unit: str) -> None:
    app = select(open_app(**TUTORIAL, method=method), keys.SCATTER_CHART, [0, 1])
    no_errors(app)
    assert captioned_indices(app) == [0, 1]
    assert any(unit in image.captions[0] for image in app.image if image.captions)


def test_smoothgrad_shows_its_noise_and_sample_count_with_the_maps(generated: Path) -> None:
    app = select(open_app(**TUTORIAL, method="smoothgrad", samples=8), keys.SCATTER_CHART, [2])
    no_errors(app)
    shown = [caption.value for caption in app.caption]
    assert any("8 noisy copies" in c and "0.15 × each image's range" in c for c in shown)


def test_an_unavailable_device_is_refused_with_its_reason(generated: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA, so cuda is not an unavailable device here")
    app = open_app(**TUTORIAL, device="cuda")
    assert any("cuda cannot be used here" in error.value for error in app.sidebar.error)
    assert metrics(app)["Device"] == "cpu"
    assert not app.exception


def test_batch_size_start_and_sampling(generated: Path) -> None:
    app = open_app(**TUTORIAL)
    size = next(box for box in app.sidebar.number_input if box.label == "Batch size N")
    size.set_value(10).run()
    assert metrics(app)["Images N"] == "10"
    sampled = next(toggle for toggle in app.sidebar.toggle if "random" in toggle.label)
    assert sampled.value  # the folder is stored class by class
    sampled.set_value(False).run()
    start = next(box for box in app.sidebar.number_input if box.label == "Start")
    start.set_value(IMAGES - 5).run()
    assert any("runs past the end" in error.value for error in app.error)
    assert not app.exception


def test_a_new_batch_clears_the_selection(generated: Path) -> None:
    app = select(open_app(**TUTORIAL), keys.SCATTER_CHART, [1, 2])
    size = next(box for box in app.sidebar.number_input if box.label == "Batch size N")
    size.set_value(20).run()
    assert app.session_state[keys.PICKED] == []
    assert any("batch changed" in info.value for info in app.info)


def test_folder_and_upload_sources_explain_what_they_need(generated: Path, tmp_path: Path) -> None:
    app = open_app(**TUTORIAL, source_kind="folder")
    assert any("Type the path" in error.value for error in app.sidebar.error)
    assert any("Choose a data source" in info.value for info in app.info)
    app.sidebar.text_input(key="folder_path").input(str(tmp_path / "missing")).run()
    assert any("no such folder" in error.value for error in app.sidebar.error)
    app.sidebar.text_input(key="folder_path").input(str(generated)).run()
    no_errors(app)
    assert metrics(app)["Images N"] == str(IMAGES)
    app.sidebar.radio(key="source_kind").set_value("upload").run()
    assert any("Upload one or more images" in info.value for info in app.sidebar.info)
    assert not app.exception


def test_the_strategies_tab_measures_every_strategy_on_the_selection(generated: Path) -> None:
    app = select(open_app("Strategies", **TUTORIAL), keys.SCATTER_CHART, [2, 6])
    app.button(key="run_comparison").click().run()
    no_errors(app)
    runs = next(frame.value for frame in app.dataframe if "strategy" in frame.value.columns)
    assert list(runs["strategy"]) == ["floor", *STRATEGIES]
    assert (runs["max |difference| from floor"] < 1e-4).all()
    assert any("RuntimeError" in code.value for code in app.code)
    text = " ".join(markdown.value for markdown in app.markdown)
    assert "1/k = 0.500000 (k = 2)" in text
    leak = re.search(r"In training mode .* it is ([\d.]+)%", text)
    assert leak is not None and float(leak[1]) > 0
    app.button(key="run_sweep").click().run()
    no_errors(app)
    assert any(f"Against k, at N = {IMAGES}" in caption.value for caption in app.caption)


def direct_accuracy(name: str, folder: Path, size: int = 1000, seed: int = 0) -> float:
    """Percent correct of the shipped model ``name`` on the page's default sample of
    ``folder`` (seeded, as a class-sorted folder is), by a plain loop over the JPEG files."""
    import numpy as np
    from PIL import Image

    files = sorted(path for path in folder.glob("*/*.jpg"))
    classes = sorted({path.parent.name for path in files})
    model = models.load(name, models.shipped_weights_path(name))
    correct = 0
    chosen = data.batch_positions(len(files), size=size, seed=seed)
    with torch.no_grad():
        for position in chosen:
            with Image.open(files[position]) as image:
                pixels = np.asarray(image.convert("RGB"), dtype=np.float32) / 255
            x = torch.from_numpy(pixels).permute(2, 0, 1).unsqueeze(0)
            label = classes.index(files[position].parent.name)
            correct += int(model(x).argmax(dim=1).item() == label)
    return 100 * correct / size


def test_on_the_real_cifar10_test_split(
    shared_cifar10_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default page on the shared data and the best shipped model; k = 16 picks."""
    monkeypatch.setenv(data.CIFAR10_DIR_ENV, str(shared_cifar10_dir))
    app = open_app()
    assert metrics(app)["Images N"] == "1,000"
    shipped = models.shipped_models()
    if shipped:
        assert app.sidebar.selectbox(key="model").value.startswith(shipped[0])
        expected = direct_accuracy(shipped[0], shared_cifar10_dir / "test")
        assert float(metrics(app)["Accuracy"].rstrip("%")) == pytest.approx(expected, abs=0.051)
    index_box(app).input("0-15").run()
    no_errors(app)
    assert captioned_indices(app) == list(range(16))
    assert metrics(app)["Picked k / batch N"] == "16 / 1,000"


def test_many_picks_get_a_compact_grid_and_a_detail_selector(generated: Path) -> None:
    app = open_app(**TUTORIAL, **{keys.DETAIL_OPEN: True})
    index_box(app).input("0-13").run()
    no_errors(app)
    assert captioned_indices(app) == list(range(14))
    assert any(caption.value == gradients_panel.PANELS_COMPACT for caption in app.caption)
    detail = app.selectbox(key="detail_index")
    assert detail.options[0].startswith("#0 ") and len(detail.options) == 14
    detail.set_value(5).run()
    assert any(c.startswith("#5 ") and c.endswith("overlay") for i in app.image for c in i.captions)


def test_an_offline_download_says_how_to_use_a_local_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def offline(*args: Any, **kwargs: Any) -> Any:
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.delenv(data.CIFAR10_DIR_ENV, raising=False)
    monkeypatch.setenv("GRADPICK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    app = open_app()
    assert any("Could not download CIFAR-10" in error.value for error in app.sidebar.error)
    assert any("Local folder" in error.value for error in app.sidebar.error)
    assert any("Choose a data source" in info.value for info in app.info)
    assert not app.exception


# ----------------------------------------------------------------------------- stored outputs


def store_of_the_stand_in(
    folder: Path, out: Path, size: int | None = None, seed: int = 0, embeddings: bool = False
) -> None:
    """Outputs of the page's seeded tutorial stand-in over ``folder``, as a store: of every
    image, or of a seeded sample of ``size``, recorded as ``gradpick infer --out`` records it
    (with ``--embeddings``, when asked)."""
    served = service.load_model(service.ModelOption("tutorial"), torch.device("cpu"))
    source = data.image_folder(folder)
    identity = served.identity()
    labels = source.labels()
    assert labels is not None
    positions = None if size is None else data.batch_positions(len(source), size=size, seed=seed)
    batch = None if size is None else {"start": 0, "size": size, "seed": seed}
    metadata = store.store_metadata(identity, source.spec, source, embeddings, batch)
    with store.StoreWriter(out, metadata, embeddings) as writer:
        for chunk in infer_chunks(served.module, source, positions, embeddings=embeddings):
            rows = list(chunk.positions)
            names, given = source.names(rows), labels[rows]
            writer.write(store.output_table(rows, names, given, chunk.logits, chunk.embeddings))


@pytest.fixture
def stored_folder(generated: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the generated test split and a store of it by the tutorial stand-in."""
    folder = tmp_path / "images"
    shutil.copytree(generated / "test", folder)
    store_of_the_stand_in(folder, tmp_path / "outputs")
    return folder, tmp_path / "outputs"


def test_stored_outputs_open_without_inferring(
    stored_folder: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, out = stored_folder

    def no_inference(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("stored outputs must not be inferred again")

    monkeypatch.setattr(stored, "infer", no_inference)
    monkeypatch.setattr(sys, "argv", ["app.py", "--outputs", str(out)])
    app = open_app(**TUTORIAL)
    no_errors(app)
    assert app.sidebar.radio(key="source_kind").value == "stored"
    assert any("not inferred" in caption.value for caption in app.caption)
    assert metrics(app)["Images N"] == str(IMAGES) and len(table(app)) == IMAGES
    app = select(app, keys.SCATTER_CHART, [4])  # gradients read the picked image again
    no_errors(app)
    assert captioned_indices(app) == [4]


def test_a_stores_first_page_reads_its_folders_fingerprint_once(
    stored_folder: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder's fingerprint is a ``stat`` per image: the kept pixels' key and the store's
    check share one reading, and a store of another model is refused before any."""
    folder, out = stored_folder
    readings: list[Path] = []
    fingerprint = data.FolderSource.fingerprint

    def counted(source: data.FolderSource) -> str:
        readings.append(source.root)
        return fingerprint(source)

    monkeypatch.setattr(data.FolderSource, "fingerprint", counted)
    refused = open_app(source_kind="stored", outputs_path=str(out))  # resnet20 is chosen
    assert any("written by model tutorial:random-seed0" in e.value for e in refused.error)
    assert folder not in readings  # (the default page before it reads its own folder)
    monkeypatch.setattr(sys, "argv", ["app.py", "--outputs", str(out)])
    app = open_app(**TUTORIAL)
    no_errors(app)
    assert any("not inferred" in caption.value for caption in app.caption)
    assert readings.count(folder) == 1


def _opened_beside_a_held_check(
    out: Path, monkeypatch: pytest.MonkeyPatch, tab: str | None = None, **session: Any
) -> tuple[AppTest, threading.Event]:
    """The store's page (its explorer's ``tab``, ``session`` set first), drawn while its
    folder's check waits for the returned gate (the page treats the store as large:
    ``CHECK_BESIDE_ABOVE`` lowered to 0)."""
    gate = threading.Event()
    real_check = stored.fingerprint_now

    def held(source: data.ImageSource) -> str:
        gate.wait(60)
        return real_check(source)

    monkeypatch.setattr(stored, "fingerprint_now", held)
    monkeypatch.setattr(page, "CHECK_BESIDE_ABOVE", 0)
    monkeypatch.setattr(sys, "argv", ["app.py", "--outputs", str(out)])
    app = open_app(tab, **{**TUTORIAL, **session})
    no_errors(app)
    assert any("checking that" in caption.value for caption in app.caption)
    return app, gate


def _polled_until_checked(app: AppTest) -> AppTest:
    """The page's runs (its poll's, in a browser) until the check's caption is gone."""
    for _ in range(600):
        app.run()
        if not any("checking that" in caption.value for caption in app.caption):
            break
    return app


def test_a_large_stores_folder_is_checked_beside_its_page(
    stored_folder: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``CHECK_BESIDE_ABOVE`` images the page is drawn while the folder is checked; the
    answer (here: a changed folder) shows on a later run without a click."""
    folder, out = stored_folder
    app, gate = _opened_beside_a_held_check(out, monkeypatch)
    assert metrics(app)["Images N"] == str(IMAGES) and len(table(app)) == IMAGES
    first, second = sorted(folder.rglob("*.png"))[:2]
    first.write_bytes(second.read_bytes())
    gate.set()
    app = _polled_until_checked(app)
    no_errors(app)
    assert any("changed since" in warning.value for warning in app.warning)
    assert app.button(key=keys.REINFER)


def test_a_large_stores_comparison_with_a_store_of_its_images_does_not_wait_for_the_check(
    stored_folder: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """While the page's check runs beside it, the Compare tab takes the page's images to be
    those its store was written from, as the page does, and compares at once."""
    _, out = stored_folder
    second = tmp_path / "second"
    shutil.copytree(out, second)  # the same images' outputs, written by the same model
    compare = {keys.COMPARE_WITH: keys.COMPARE_STORED, keys.COMPARE_OUTPUTS: str(second)}
    waits: list[float | None] = []
    fingerprint = stored.FolderCheck.fingerprint

    def recorded(check: stored.FolderCheck, wait: float | None = None) -> str | None:
        waits.append(wait)
        return fingerprint(check, wait)

    monkeypatch.setattr(stored.FolderCheck, "fingerprint", recorded)
    app, gate = _opened_beside_a_held_check(out, monkeypatch, "Compare", **compare)
    assert any(f"; second: tutorial; {IMAGES} images" in c.value for c in app.caption)
    assert waits and None not in waits  # nothing waited for the check's answer
    gate.set()
    app = _polled_until_checked(app)
    no_errors(app)
    assert any(f"; second: tutorial; {IMAGES} images" in c.value for c in app.caption)


def test_a_large_stores_folder_gone_while_it_is_checked_is_said_in_words(
    stored_folder: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, out = stored_folder
    app, gate = _opened_beside_a_held_check(out, monkeypatch)
    shutil.rmtree(folder)
    gate.set()
    app = _polled_until_checked(app)
    assert not app.exception
    assert any("no such folder" in error.value for error in app.error)


def test_a_stores_triage_keeps_its_neighbours_beside_it_and_reads_them_without_embeddings(
    generated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Triage tab of a store with embeddings keeps the neighbours beside the store; a later
    server (its caches empty) ranks the same suspects from that file, not reading the store's
    embeddings at all."""
    folder, out = tmp_path / "images", tmp_path / "outputs"
    shutil.copytree(generated / "test", folder)
    store_of_the_stand_in(folder, out, embeddings=True)
    monkeypatch.setattr(sys, "argv", ["app.py", "--outputs", str(out)])
    first = open_app("Triage", **TUTORIAL)
    no_errors(first)
    kept = out.with_name(out.name + ".neighbours.npz")
    assert kept.is_file()
    ranked = [table.value for table in first.table]
    assert ranked and any("flagged as label issues" in c.value for c in first.caption)
    assert any("nearest neighbours vote" in c.value for c in first.caption)
    st.cache_data.clear()
    st.cache_resource.clear()

    def not_read(*args: Any) -> None:
        raise AssertionError("the kept neighbours should have been read, not the embeddings")

    monkeypatch.setattr(stored, "_embeddings_of", not_read)
    again = open_app("Triage", **TUTORIAL)
    no_errors(again)
    assert [table.value.to_dict() for table in again.table] == [t.to_dict() for t in ranked]


def test_a_store_of_another_model_is_refused_and_a_changed_folder_offers_to_re_infer(
    stored_folder: tuple[Path, Path],
) -> None:
    folder, out = stored_folder
    app = open_app(source_kind="stored", outputs_path=str(out))  # resnet20 is chosen
    assert any("written by model tutorial:random-seed0" in e.value for e in app.error)
    assert not app.exception
    first, second = sorted(folder.rglob("*.png"))[:2]
    first.write_bytes(second.read_bytes())
    app.selectbox(key="model").set_value(TUTORIAL["model"]).run()
    no_errors(app)
    assert any("changed since" in warning.value for warning in app.warning)

    def outputs_of(rows: Any, path: Path) -> list[float]:
        named = rows[rows["name"] == path.relative_to(folder).as_posix()]
        return [float(value) for value in named[["confidence", "loss"]].iloc[0]]

    stale = table(app)
    assert outputs_of(stale, first) != outputs_of(stale, second)  # the rows of the old image
    app.button(key="reinfer").click().run()
    no_errors(app)
    assert metrics(app)["Images N"] == str(IMAGES)
    assert not any("changed since" in warning.value for warning in app.warning)
    # inferred again: the copied image now has its original's outputs, as equal pixels must
    fresh = table(app)
    assert outputs_of(fresh, first) == pytest.approx(outputs_of(fresh, second), abs=1e-6)
    assert outputs_of(fresh, second) == pytest.approx(outputs_of(stale, second), abs=1e-6)


def test_a_store_of_an_unknown_format_is_explained_in_the_sidebar(
    stored_folder: tuple[Path, Path],
) -> None:
    import pyarrow.parquet as pq

    _, out = stored_folder
    for part in out.glob("*.parquet"):
        table = pq.read_table(part)
        meta = table.schema.metadata[store.METADATA_KEY].replace(b'"format": 1', b'"format": 7')
        pq.write_table(table.replace_schema_metadata({store.METADATA_KEY: meta}), part)
    app = open_app(**TUTORIAL, source_kind="stored", outputs_path=str(out))
    assert any("store format 7" in error.value for error in app.sidebar.error)
    assert any("Choose a data source" in info.value for info in app.info)
    assert not app.exception


def test_a_store_of_a_seeded_sample_opens_on_its_own_batch(
    stored_folder: tuple[Path, Path], tmp_path: Path
) -> None:
    folder, _ = stored_folder
    out = tmp_path / "sample"
    store_of_the_stand_in(folder, out, size=20, seed=3)
    app = open_app(**TUTORIAL, source_kind="stored", outputs_path=str(out))
    no_errors(app)
    assert not any("changed" in warning.value for warning in app.warning)
    assert metrics(app)["Images N"] == "20"
    wanted = data.batch_positions(IMAGES, size=20, seed=3)
    names = data.image_folder(folder).names(wanted)
    assert list(table(app)["name"]) == names
