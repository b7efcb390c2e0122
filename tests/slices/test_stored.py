"""Slices of real stores written by a hand-made model whose one systematic failure is known: the
patched images come out as one verified slice whatever their label; the same images without
the patch verify nothing; a store without embeddings is refused with what to run."""

from __future__ import annotations

import json
import re
from html import escape as html_escape
from pathlib import Path

import numpy as np
import pytest

from gradpick import data
from gradpick.errors import InputError
from gradpick.models.zoo import LoadedModel, load_model
from gradpick.outputs import store_format as store
from gradpick.outputs.stores import infer_to_store
from gradpick.slices.stored import SUFFIX, Found, find_slices, read_beside
from tests.slices.synthetic import FACTORY, write_folder


def _store(
    root: Path, patched: bool, embeddings: bool = True
) -> tuple[store.OpenedStore, set[str], LoadedModel]:
    truth = write_folder(root / "images", patched)
    loaded = load_model(FACTORY)
    source = data.open_source(str(root / "images"), spec=loaded.spec)
    infer_to_store(loaded, source, range(len(source)), root / "outputs", embeddings=embeddings)
    return store.open_store(root / "outputs"), truth, loaded


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Found, set[str]]:
    opened, truth, loaded = _store(tmp_path_factory.mktemp("planted"), patched=True)
    return find_slices(opened, loaded, clusters=8), truth


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Found:
    opened, _, loaded = _store(tmp_path_factory.mktemp("clean"), patched=False)
    return find_slices(opened, loaded, clusters=8)


def _f1(found: set[str], truth: set[str]) -> float:
    return 2 * len(found & truth) / (len(found) + len(truth))


def test_the_planted_failure_is_one_verified_slice_among_the_first_three(
    planted: tuple[Found, set[str]],
) -> None:
    found, truth = planted
    summary = found.to_json()
    scores = [_f1(set(row["names"]), truth) for row in summary["slices"][:3]]
    best = int(np.argmax(scores))
    assert scores[best] >= 0.9, scores
    chosen = summary["slices"][best]
    assert chosen["verified"]
    effect = chosen["effect"]
    assert effect["evidence_change"] >= 2 * effect["random_change"] and effect["p_value"] < 0.01
    # Both labels, one call: the patch made red and green images navy.
    assert {c["label_name"] for c in chosen["confusions"]} == {"crimson", "green"}
    assert {c["prediction_name"] for c in chosen["confusions"]} == {"navy"}
    assert chosen["description"].startswith("24 error(s) called navy (24), labelled")
    assert "more concentrated evidence" in chosen["description"]
    # No other slice verifies: the natural errors have no place to remove.
    assert [row["verified"] for row in summary["slices"]].count(True) == 1


def test_the_same_images_without_the_patch_verify_no_slice(clean: Found) -> None:
    summary = clean.to_json()
    assert summary["errors"] == 12  # the tinted images, four per class
    assert not any(row["verified"] for row in summary["slices"])
    tested = [row["effect"] for row in summary["slices"] if row["effect"] is not None]
    assert tested and all(e["tested"] > 0 and e["random_change"] is not None for e in tested)


def test_the_summary_and_the_table_agree(planted: tuple[Found, set[str]]) -> None:
    found, _ = planted
    summary = found.to_json()
    ranks = [row["rank"] for row in summary["slices"]]
    assert ranks == list(range(1, len(ranks) + 1))
    frame = found.frame()
    assert len(frame) == summary["rows"] == 120
    for row in summary["slices"]:
        members = frame[frame["slice"] == row["rank"]]
        assert (
            sorted(members["position"]) == sorted(row["positions"]) and len(members) == row["size"]
        )
        assert members["error"].sum() == row["errors"]
        assert set(row["typical"]) <= set(row["positions"])
        assert np.asarray(row["mean_map"]).sum() == pytest.approx(1.0, abs=1e-4)
    # Every error is mapped; unmapped rows (a sample of the correct ones is) have no slice.
    assert frame.loc[frame["error"], "slice"].notna().all()
    assert summary["mapped"] == int(frame["slice"].notna().sum())


def test_the_result_is_kept_beside_the_store_and_read_back_only_while_current(
    planted: tuple[Found, set[str]], tmp_path: Path
) -> None:
    found, _ = planted
    path = found.write_beside()
    assert path == found.store.resolve().with_name(found.store.name + SUFFIX)
    opened = store.open_store(found.store)
    kept, where = read_beside(opened)
    assert where == path and kept is not None
    assert kept["slices"] == json.loads(json.dumps(found.to_json()))["slices"]
    changed = store.OpenedStore(opened.table, {**opened.metadata, "source": {}}, opened.path)
    assert read_beside(changed)[0] is None


def test_a_store_without_embeddings_says_what_to_run(tmp_path: Path) -> None:
    opened, _, loaded = _store(tmp_path, patched=False, embeddings=False)
    with pytest.raises(InputError, match="gradpick infer --embeddings"):
        find_slices(opened, loaded)


def test_slices_in_a_notebook_are_one_line_and_a_table_of_cards(
    planted: tuple[Found, set[str]],
) -> None:
    found, _ = planted
    summary = found.to_json()
    first = summary["slices"][0]
    text = repr(found)
    assert "\n" not in text and len(text) < 200, text
    verified = sum(row["verified"] for row in summary["slices"])
    assert text == (
        f"Found({len(summary['slices'])} slices of {summary['errors']} errors among "
        f"{summary['rows']} images, {verified} verified; slice 1: {first['size']} images, "
        f"error rate {first['error_rate']:.0%})"
    )
    html = found._repr_html_()
    assert html.startswith('<div class="gradpick"><b>Failure slices of outputs</b>')
    rows = re.findall(r"<tr><td>(\d+)</td><td>(yes|no)</td>", html)
    assert rows == [(str(r["rank"]), "yes" if r["verified"] else "no") for r in summary["slices"]]
    cards = re.findall(r'<section class="pick" data-slice="(\d+)"', html)
    assert cards == [str(r["rank"]) for r in summary["slices"][:12]]
    assert len(re.findall(r'<img src="data:image/png;base64,[^"]+"[^>]*data-slice=', html)) == len(
        cards
    )
    for row in summary["slices"]:
        assert html_escape(row["description"]) in html
        if row["verified"]:
            effect = row["effect"]
            assert (
                f"changed {effect['evidence_change']:.0%} of {effect['tested']} calls, the same "
                f"area at random {effect['random_change']:.0%}" in html
            )


def test_the_colour_is_tested_only_where_the_errors_are_clearly_greyer() -> None:
    from gradpick.slices.features import DESCRIPTORS
    from gradpick.slices.stored import colour_rows

    column = DESCRIPTORS.index("image_saturation")
    # Rows 0-3: errors labelled 2 called 0, grey (0.05); rows 4-9 correct birds (0.4);
    # rows 10-13 correct images of other classes, one of them called 0 (left out).
    labels = np.array([2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 3, 4, 0])
    predictions = np.array([0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 1, 3, 4, 0])
    table = np.zeros((14, len(DESCRIPTORS)))
    table[:, column] = [0.05] * 4 + [0.4] * 6 + [0.3] * 4
    found = colour_rows(np.arange(4), table, labels, predictions, 64, np.random.default_rng(0))
    assert found is not None
    treated, control, target, factor = found
    assert list(treated) == [4, 5, 6, 7, 8, 9] and list(control) == [10, 11, 12]
    assert target == 0 and factor == pytest.approx(0.05 / 0.4)
    # Errors as colourful as their label's correct images: no colour test.
    table[:4, column] = 0.38
    assert (
        colour_rows(np.arange(4), table, labels, predictions, 64, np.random.default_rng(0)) is None
    )
