"""Two models on the same images: flips, per-class deltas, drift and both models' maps."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from gradpick import attribution, data
from gradpick import compare as versus
from gradpick.cli import main
from gradpick.errors import InputError
from gradpick.models import zoo
from gradpick.outputs import store_format as store

FACTORIES = '''
import torch
from torch import nn


def pooled():
    """Any input size: conv, adaptive pooling, linear."""
    torch.manual_seed(5)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        nn.Flatten(), nn.Linear(64, 10),
    )


def four_classes():
    torch.manual_seed(6)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 4))
'''

LABELS = [0, 0, 1, 1, 2, 2]
FIRST = [0, 1, 1, 1, 2, 0]
SECOND = [0, 0, 2, 1, 1, 0]
"""By hand: both right 0 and 3; only the first right 2 and 4; only the second 1; both wrong 5."""


@pytest.fixture
def folder(image_folder_factory: Any) -> data.FolderSource:
    return data.image_folder(image_folder_factory(3, per_class=2))


@pytest.fixture
def factories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: Any) -> str:
    name = "gp_versus_" + request.node.name.split("[")[0].removeprefix("test_")[:40]
    (tmp_path / f"{name}.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _logits(predictions: list[int], classes: int = 3) -> torch.Tensor:
    logits = torch.zeros(len(predictions), classes)
    logits[torch.arange(len(predictions)), torch.tensor(predictions)] = 3.0
    return logits


def _store(
    path: Path, source: data.ImageSource, predictions: list[int], name: str, classes: int = 3
) -> Path:
    model = {"identity": name, "name": name, "weights_sha256": None}
    metadata = store.store_metadata(model, source.spec, source)
    positions = list(range(len(source)))
    labels = source.labels() if classes == 3 else None
    with store.StoreWriter(path, metadata) as writer:
        writer.write(
            store.output_table(
                positions, source.names(positions), labels, _logits(predictions, classes)
            )
        )
    return path


def test_flips_and_per_class_deltas_of_two_stores_match_a_hand_count(
    folder: data.FolderSource, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert folder.labels() is not None and folder.labels().tolist() == LABELS
    a = _store(tmp_path / "a", folder, FIRST, "first")
    b = _store(tmp_path / "b", folder, SECOND, "second")
    pairing = versus.pair(*versus.sides_of_stores(store.open_store(a), store.open_store(b)))
    assert versus.flips(pairing) == {
        "both_right": 2,
        "first_only_right": 2,
        "second_only_right": 1,
        "both_wrong": 1,
    }
    assert {name: rows.tolist() for name, rows in versus.flip_groups(pairing).items()} == {
        "both_right": [0, 3],
        "first_only_right": [2, 4],
        "second_only_right": [1],
        "both_wrong": [5],
    }
    rows = versus.per_class(pairing)
    assert [(r["first_accuracy"], r["second_accuracy"]) for r in rows] == [
        (0.5, 1.0),
        (1.0, 0.5),
        (0.5, 0.0),
    ]
    assert [r["difference"] for r in rows] == [0.5, -0.5, -0.5]
    expected = np.zeros((3, 3), dtype=np.int64)
    for label, first, second in zip(LABELS, FIRST, SECOND, strict=True):
        expected[label, first] -= 1
        expected[label, second] += 1
    difference = versus.confusion_difference(pairing)
    assert difference is not None and difference.tolist() == expected.tolist()
    assert expected.tolist() == [[1, -1, 0], [0, -1, 1], [0, 1, -1]]

    report, drift = tmp_path / "report.json", tmp_path / "drift.parquet"
    arguments = ["compare", "--outputs", str(a), "--outputs", str(b), "--json", str(report)]
    assert main([*arguments, "--out", str(drift)]) == 0
    written = json.loads(report.read_text())
    assert written["flips"] == versus.flips(pairing)
    assert written["confusion_difference"] == expected.tolist()
    assert written["models"][0]["identity"]["identity"] == "first"
    assert written["source"]["fingerprint"] == folder.fingerprint()
    assert "versions" in written and "created" in written
    table = pq.read_table(drift).to_pydict()
    # stayed (same prediction): 0, 3, 5; flipped: 1, 2, 4, each ranked from 1
    assert table["kind"] == ["stayed"] * 3 + ["flipped"] * 3
    assert sorted(table["position"][:3]) == [0, 3, 5]
    assert table["rank"] == [1, 2, 3, 1, 2, 3]
    # the drift rule's picks: the drift table's first stayed rows, by hand 0, 3, 5 in its order
    rows_of = {int(p): row for row, p in enumerate(pairing.positions)}
    assert versus.most_drifted(pairing, 2) == [rows_of[p] for p in table["position"][:2]]
    assert sorted(versus.most_drifted(pairing, 8)) == sorted(rows_of[p] for p in (0, 3, 5))
    printed = capsys.readouterr().out
    assert "6 images: both right 2" in printed
    # Which model is which, and how right each is overall: 4 and 3 of the 6, by hand.
    summaries = [(model["name"], model["accuracy"]) for model in written["models"]]
    assert summaries == [("first", 4 / 6), ("second", 3 / 6)]
    assert "first:  first (accuracy 66.67%)" in printed
    assert "second:  second (accuracy 50.00%)" in printed


def test_without_labels_the_models_agreement_is_counted(
    folder: data.FolderSource, tmp_path: Path
) -> None:
    a = _store(tmp_path / "a", folder, [0, 1, 2, 3, 0, 1], "first", classes=4)
    b = _store(tmp_path / "b", folder, [0, 1, 0, 3, 0, 1], "second", classes=4)
    pairing = versus.pair(*versus.sides_of_stores(store.open_store(a), store.open_store(b)))
    assert versus.flips(pairing) == {"agree": 5, "disagree": 1}
    assert versus.confusion_difference(pairing) is None
    assert [r["difference"] for r in versus.per_class(pairing)] == [1, 0, -1, 0]
    assert pairing.reference_kind == "first model's prediction"


def test_a_model_compared_with_itself_flips_nothing_and_its_maps_agree(
    image_folder_factory: Any, factories: str
) -> None:
    folder = data.image_folder(image_folder_factory(list(data.CIFAR10_CLASSES), per_class=1))
    loaded = zoo.load_model(f"{factories}:pooled", device="cpu")
    pairing = versus.pair(*versus.sides_of_models(loaded, loaded, folder))
    counts = versus.flips(pairing)
    assert counts["first_only_right"] == counts["second_only_right"] == 0
    assert counts["both_right"] + counts["both_wrong"] == len(folder)
    for method in ("gradient", "smoothgrad", "layercam"):
        maps = versus.compare_maps(loaded, loaded, folder, pairing, range(len(folder)), method)
        assert maps.spearman.tolist() == pytest.approx([1.0] * len(folder))
        assert maps.ssim.tolist() == pytest.approx([1.0] * len(folder))


def test_models_of_different_input_sizes_compare_on_one_folder(
    image_folder_factory: Any, factories: str, tmp_path: Path
) -> None:
    root = image_folder_factory(list(data.CIFAR10_CLASSES), per_class=1, size=(80, 80))
    source = data.image_folder(root)
    small = zoo.load_model("tutorial", device="cpu")
    large = zoo.load_model(f"{factories}:pooled", device="cpu", input_size=64)
    pairing = versus.pair(*versus.sides_of_models(small, large, source))
    maps = versus.compare_maps(small, large, source, pairing, [0, 3])
    assert maps.size == (32, 32) and maps.maps[1].shape == (2, 32, 32)
    # the 64-pixel maps, resized to 32 by hand, give the same Spearman
    images = source.at_spec(large.spec).read([0, 3]).float() / 255
    images.requires_grad_(True)
    logits = large.module(images)
    logits[torch.arange(2), torch.tensor([0, 3])].sum().backward()
    assert images.grad is not None
    by_hand = torch.nn.functional.interpolate(
        images.grad.abs().amax(dim=1, keepdim=True).double(),
        size=(32, 32),
        mode="bilinear",
        align_corners=False,
    )[:, 0]
    by_hand = by_hand / by_hand.flatten(1).amax(dim=1).view(-1, 1, 1)
    assert torch.allclose(maps.maps[1], by_hand, atol=1e-6)

    report = tmp_path / "report.json"
    module = f"{factories}:pooled"
    arguments = ["compare", "--model", "tutorial", "--model", module, "--input-size", "64"]
    assert main([*arguments, "--data", str(root), "--indices", "0, 3", "--json", str(report)]) == 0
    written = json.loads(report.read_text())
    assert written["models"][1]["identity"]["input_spec"]["size"] == [64, 64]
    assert written["maps"]["compared_at"] == [32, 32]
    assert written["maps"]["class"] == "each pick's true label"
    assert [row["index"] for row in written["maps"]["rows"]] == [0, 3]
    assert [row["spearman"] for row in written["maps"]["rows"]] == pytest.approx(
        maps.spearman.tolist()
    )


def test_stores_of_different_sources_are_refused(
    image_folder_factory: Any, folder: data.FolderSource, tmp_path: Path
) -> None:
    other = data.image_folder(image_folder_factory(3, per_class=3, name="other"))
    a = _store(tmp_path / "a", folder, FIRST, "first")
    b = _store(tmp_path / "b", other, [*SECOND, 0, 0, 0], "second")
    with pytest.raises(InputError, match="written from different images"):
        versus.sides_of_stores(store.open_store(a), store.open_store(b))


def test_different_class_counts_need_matching_class_names(
    folder: data.FolderSource, tmp_path: Path
) -> None:
    a = _store(tmp_path / "a", folder, FIRST, "first")
    b = _store(tmp_path / "b", folder, [0, 1, 3, 1, 2, 0], "second", classes=4)
    sides = versus.sides_of_stores(store.open_store(a), store.open_store(b))
    with pytest.raises(InputError, match="3 outputs and the second 4: give both"):
        versus.pair(*sides)
    first_names = ("cat", "dog", "fox")
    with pytest.raises(InputError, match="no class 'fox'"):
        versus.pair(*sides, (first_names, ("dog", "cat", "owl", "emu")))
    # by name: the second's 'cat' is its output 1, 'dog' 0, 'fox' 3; its output 2 is none
    pairing = versus.pair(*sides, (first_names, ("dog", "cat", "owl", "fox")))
    assert pairing.second.tolist() == [1, 0, 2, 0, versus.OTHER, 1]
    assert versus.flips(pairing) == {
        "both_right": 0,
        "first_only_right": 4,
        "second_only_right": 1,
        "both_wrong": 1,
    }


def test_a_missing_second_model_is_explained(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report = tmp_path / "r.json"
    assert main(["compare", "--model", "tutorial", "--json", str(report)]) == 2
    assert not report.exists()
    assert "Give 2 models (--model NAME [--weights FILE], once for each); got 1" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        main(["compare", "--weights", "w.pt", "--model", "tutorial", "--json", "r.json"])
    assert "--weights belongs to a model: give it after that model's --model" in (
        capsys.readouterr().err
    )


def _occluded_by_hand(
    model: torch.nn.Module, image: torch.Tensor, label: int, window: int, stride: int
) -> torch.Tensor:
    """Occlusion's definition, one window at a time: the mean drop of the logit over the
    windows (grey 0.5, the last cut at the border) that cover each pixel."""
    height, width = image.shape[-2:]
    starts = [range(0, side - window + stride, stride) for side in (height, width)]
    with torch.no_grad():
        whole = model(image[None])[0, label]
        summed = torch.zeros(height, width, dtype=torch.float64)
        counts = torch.zeros(height, width, dtype=torch.float64)
        for y in starts[0]:
            for x in starts[1]:
                hidden = image.clone()
                hidden[:, y : y + window, x : x + window] = 0.5
                summed[y : y + window, x : x + window] += float(
                    whole - model(hidden[None])[0, label]
                )
                counts[y : y + window, x : x + window] += 1
    return summed / counts


def _risen_by_hand(
    model: torch.nn.Module, image: torch.Tensor, label: int, masks: torch.Tensor, keep: float
) -> torch.Tensor:
    """RISE's definition from its masks: the target under each mask, weighed by the mask."""
    with torch.no_grad():
        scores = model(image[None] * masks[:, None])[:, label].double()
    return (scores[:, None, None] * masks.double()).sum(dim=0) / (len(masks) * keep)


@pytest.mark.parametrize("method", ["occlusion", "rise"])
def test_perturbation_methods_compare_two_models_by_their_definition(
    image_folder_factory: Any, factories: str, tmp_path: Path, method: str
) -> None:
    root = image_folder_factory(list(data.CIFAR10_CLASSES), per_class=1)
    source = data.image_folder(root)
    first = zoo.load_model("tutorial", device="cpu")
    second = zoo.load_model(f"{factories}:pooled", device="cpu")
    pairing = versus.pair(*versus.sides_of_models(first, second, source))
    rows = [1, 4]
    settings = {"window": 8, "stride": 4} if method == "occlusion" else {"masks": 60, "cell": 8}
    maps = versus.compare_maps(first, second, source, pairing, rows, method, settings)
    assert maps.method == method and maps.maps[0].shape == (2, 32, 32)
    images = source.read(rows).float() / 255
    masks = attribution.Rise(**settings).masks(32, 32) if method == "rise" else None
    for side, loaded in enumerate((first, second)):
        model = copy.deepcopy(loaded.module).double()
        by_hand = torch.stack(
            [
                _occluded_by_hand(model, image.double(), int(label), 8, 4)
                if method == "occlusion"
                else _risen_by_hand(model, image.double(), int(label), masks, 0.5)
                for image, label in zip(images, source.labels()[rows], strict=True)
            ]
        ).abs()
        by_hand = by_hand / by_hand.flatten(1).amax(dim=1).view(-1, 1, 1)
        # float32 maps against the float64 definition: equal up to rounding
        assert torch.allclose(maps.maps[side], by_hand, atol=1e-4), side

    report = tmp_path / "report.json"
    arguments = ["compare", "--model", "tutorial", "--model", f"{factories}:pooled"]
    assert main([*arguments, "--data", str(root), "--indices", "1, 4", "--method", method,
                 "--json", str(report)]) == 0  # fmt: skip
    written = json.loads(report.read_text())
    assert written["maps"]["method"] == method
    assert [row["index"] for row in written["maps"]["rows"]] == rows
    assert all(-1 <= row["spearman"] <= 1 for row in written["maps"]["rows"])
