"""A deep link's view: written and read back, and every refused parameter noted, not raised."""

from __future__ import annotations

import pytest

from gradpick.ui.links import Allowed, Range, View, fit_to_source, from_params

LOCAL = Allowed(
    kinds=("cifar10", "folder", "stored"),
    models=("resnet20", "tiny"),
    strategies=("vmap", "loop"),
    methods={
        "gradient": {},
        "smoothgrad": {"steps": Range(4, 64, whole=True), "noise": Range(0, 1)},
    },
    targets=("loss", "predicted", "class"),
    tabs=("Explore", "Trust"),
    views=("Thumbnails", "Table"),
)
HOSTED = Allowed(
    kinds=("cifar10",),
    models=("resnet20",),
    strategies=LOCAL.strategies,
    methods=LOCAL.methods,
    targets=LOCAL.targets,
    tabs=LOCAL.tabs,
    views=LOCAL.views,
    max_batch_size=2000,
    hosted=True,
)
FULL = View(
    kind="cifar10",
    split="train",
    start=100,
    size=500,
    model="resnet20",
    strategy="loop",
    picks=(417, 3, 12),
    method="smoothgrad",
    settings=(("steps", 32.0), ("noise", 0.15)),
    target="class",
    target_class=5,
    tab="Trust",
    view="Table",
)


def test_a_full_view_comes_back_from_its_params_unchanged() -> None:
    params = FULL.to_params()
    assert params["picks"] == "417,3,12" and params["m.steps"] == "32" and params["class"] == "5"
    assert from_params(params, HOSTED) == (FULL, [])


@pytest.mark.parametrize(
    "view",
    [
        View(kind="folder", split="test", folder="/data/pets", seed=7, size=64, picks=(0, 63)),
        View(kind="stored", outputs="/runs/out", start=0, size=10),
        View(method="gradient", target="predicted"),
        View(),
    ],
)
def test_local_views_round_trip(view: View) -> None:
    assert from_params(view.to_params(), LOCAL) == (view, [])


def test_a_seeded_sample_names_no_start_and_only_its_own_source_path() -> None:
    params = View(
        kind="cifar10", split="test", folder="/x", outputs="/y", start=4, seed=1
    ).to_params()
    assert params == {"src": "cifar10", "split": "test", "seed": "1"}
    assert "class" not in View(target="loss", target_class=3).to_params()


def test_a_hosted_page_refuses_a_server_folder_and_opens_cifar10() -> None:
    view, notes = from_params({"src": "folder", "folder": "/etc", "picks": "1"}, HOSTED)
    assert (view.kind, view.folder, view.picks) == (None, "", (1,))
    assert any("'folder' is not offered" in n for n in notes)
    assert any("never reads one" in n for n in notes)
    view, notes = from_params({"src": "stored", "outputs": "/home/me/out"}, HOSTED)
    assert (view.kind, view.outputs) == (None, "") and len(notes) == 2


def test_a_hosted_page_refuses_a_foreign_model_and_an_oversized_batch() -> None:
    view, notes = from_params({"model": "tiny", "n": "5000"}, HOSTED)
    assert (view.model, view.size) == (None, None)
    assert "cap of 2,000" in notes[0] and "model 'tiny' is not offered" in notes[1]
    assert from_params({"model": "tiny", "n": "5000"}, LOCAL) == (View(model="tiny", size=5000), [])
    view, notes = from_params({"model": "user:evil.module:factory"}, LOCAL)
    assert view.model is None and len(notes) == 1


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"zzz": "1"}, None),
        ({"start": "-3"}, "start"),
        ({"seed": "x"}, "seed"),
        ({"n": "0"}, "size"),
        ({"picks": "1,two,3"}, "picks"),
        ({"picks": ",".join(map(str, range(2000)))}, "picks"),
        ({"strategy": "turbo"}, "strategy"),
        ({"method": "magic"}, "method"),
        ({"target": "everything"}, "target"),
        ({"class": "3.5"}, "target_class"),
        ({"tab": "Admin"}, "tab"),
        ({"view": "<script>"}, "view"),
        ({"split": "validation"}, "split"),
        ({"src": "upload"}, "kind"),
        ({"src": "folder"}, "kind"),
        ({"method": "smoothgrad", "m.steps": "1000"}, "settings"),
        ({"method": "smoothgrad", "m.steps": "4.5"}, "settings"),
        ({"method": "smoothgrad", "m.noise": "nan"}, "settings"),
        ({"method": "smoothgrad", "m.radius": "3"}, "settings"),
        ({"method": "gradient", "m.steps": "8"}, "settings"),
    ],
)
def test_garbage_is_dropped_with_a_note(params: dict[str, str], field: str | None) -> None:
    view, notes = from_params(params, LOCAL)
    assert len(notes) == 1
    if field is not None:
        assert getattr(view, field) == getattr(View(method=view.method), field)


def test_a_repeated_parameter_counts_once_and_picks_once() -> None:
    view, notes = from_params({"picks": ["1", "4,4,2"]}, LOCAL)
    assert (view.picks, notes) == ((4, 2), [])


def test_numbers_beyond_the_source_are_dropped_with_notes() -> None:
    view = View(kind="cifar10", start=9990, size=20, picks=(1, 9, 15), target_class=3)
    fitted, notes = fit_to_source(view, total=10000, classes=10)
    assert (fitted.start, fitted.size, fitted.picks) == (9990, 20, (1, 9)) and len(notes) == 1
    fitted, notes = fit_to_source(View(start=10000, size=50000, target_class=10), 10000, 10)
    assert (fitted.start, fitted.size, fitted.target_class) == (None, None, None)
    assert len(notes) == 3
    fitted, notes = fit_to_source(View(seed=3, size=100, picks=(99, 100)), 10000, 10)
    assert fitted.picks == (99,) and "100" in notes[0]
    assert fit_to_source(FULL, 50000, 10) == (FULL, [])


WIDGETS = Allowed(
    kinds=LOCAL.kinds,
    models=LOCAL.models,
    strategies=LOCAL.strategies,
    methods=LOCAL.methods,
    targets=LOCAL.targets,
    tabs=LOCAL.tabs,
    views=LOCAL.views,
    page_sizes=(100, 50),
    projections=("pca", "umap"),
    colourings=("true", "predicted"),
)


def test_the_layer_compare_queue_scale_and_switches_come_back_unchanged() -> None:
    view = View(
        kind="cifar10",
        seed=0,
        size=100,
        layer="layer2.1.conv2",
        compare="tiny",
        suspect=3,
        slice=2,
        scale="shared",
        badges=False,
        memory=True,
        per_page=50,
        page=2,
        projection="umap",
        colour="predicted",
    )
    params = view.to_params()
    assert params["layer"] == "layer2.1.conv2" and params["compare"] == "tiny"
    assert (params["badges"], params["memory"], params["suspect"]) == ("off", "on", "3")
    assert params["slice"] == "2"
    assert from_params(params, WIDGETS) == (view, [])
    none = View(compare="none")
    assert from_params(none.to_params(), WIDGETS) == (none, [])


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"layer": "x; rm -rf /"}, "not a layer's name"),
        ({"layer": "a" * 201}, "not a layer's name"),
        ({"compare": "mine:evil"}, "'mine:evil' is not offered"),
        ({"suspect": "0"}, "counts from 1"),
        ({"suspect": "-2"}, "not a whole number"),
        ({"slice": "0"}, "counts from 1"),
        ({"slice": "first"}, "not a whole number"),
        ({"scale": "log"}, "colour scale 'log'"),
        ({"badges": "maybe"}, "badges 'maybe'"),
        ({"per_page": "7"}, "thumbnails per page '7'"),
        ({"page": "0"}, "counts from 1"),
        ({"projection": "tsne"}, "projection 'tsne'"),
        ({"colour": "loss"}, "colouring 'loss'"),
    ],
)
def test_a_refused_widget_value_is_noted_and_left_at_its_default(
    params: dict[str, str], said: str
) -> None:
    view, notes = from_params(params, WIDGETS)
    assert view == View()
    assert len(notes) == 1 and said in notes[0], notes


def test_a_suspect_beyond_the_batch_is_dropped_with_a_note() -> None:
    view, notes = fit_to_source(View(size=10, suspect=11), total=100, classes=10)
    assert view.suspect is None and "suspect 11" in notes[0]
    assert fit_to_source(View(size=10, suspect=10), total=100, classes=10) == (
        View(size=10, suspect=10),
        [],
    )
