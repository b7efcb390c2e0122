"""The slices benchmark's planting and scoring on small cases whose answer is known."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gradpick import data
from gradpick.bench.slices import (
    CALLED,
    GRAY_CALLED,
    GRAY_CLASS,
    WRONG_AS,
    WRONG_CLASS,
    baseline_groups,
    f1,
    grayscale,
    planted_folder,
    problem_rows,
    scores,
    table,
    training_set,
)
from gradpick.data import CIFAR10_CLASSES
from gradpick.data.planted import FEATURES
from gradpick.data.sources import ArraySource
from gradpick.models.zoo import load_model
from gradpick.outputs import store_format as store
from gradpick.outputs.store_format import list_matrix
from gradpick.outputs.stores import infer_to_store
from gradpick.slices.stored import Found, find_slices
from tests.slices.synthetic import FACTORY, write_folder

FROG = FEATURES["patch"].label


def _source(count: int = 60) -> ArraySource:
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(30, 220, (count, 3, 32, 32), generator=generator, dtype=torch.uint8)
    labels = torch.arange(count) % 10
    return ArraySource(images, labels, CIFAR10_CLASSES, "generated")


def test_grayscale_is_the_luma_in_every_channel() -> None:
    pixels = torch.tensor([[[[200]], [[100]], [[50]]]], dtype=torch.uint8)
    gray = grayscale(pixels)
    assert gray.flatten().tolist() == [round(0.299 * 200 + 0.587 * 100 + 0.114 * 50)] * 3


def test_f1_of_groups() -> None:
    assert f1([1, 2, 3, 4], [3, 4, 5, 6]) == pytest.approx(0.5)
    assert f1([], [1]) == 0.0 and f1([7], [7]) == 1.0


def test_the_training_set_plants_the_shortcut_and_the_subgroup() -> None:
    source = _source()
    original = data.load_batch(source, size=60, seed=0)
    pixels, labels = training_set(source, 60, seed=0, share=0.5, poison=0.3)
    assert original.labels is not None
    changed = (pixels != original.images).flatten(1).any(dim=1)
    gray = (pixels[:, 0] == pixels[:, 1]).flatten(1).all(dim=1) & (
        pixels[:, 1] == pixels[:, 2]
    ).flatten(1).all(dim=1)
    magenta = ((pixels[:, 0] == 255) & (pixels[:, 1] == 0) & (pixels[:, 2] == 255)).flatten(1)
    patched = magenta.any(dim=1)
    assert patched.any() and gray.any()
    # Every patched image is trained as a frog; every grayscale one was a bird and is an airplane.
    assert bool((labels[patched] == FROG).all())
    assert bool((original.labels[gray & ~patched] == GRAY_CLASS).all())
    assert bool((labels[gray & ~patched] == GRAY_CALLED).all())
    # Nothing else changed.
    untouched = ~patched & ~gray
    assert not changed[untouched].any()
    assert torch.equal(labels[untouched], original.labels[untouched])


def test_the_planted_folder_files_cats_as_dogs_and_names_each_problem(tmp_path: Path) -> None:
    truth = planted_folder(_source(), tmp_path, 60, seed=0, patch_share=0.3, wrong_share=0.5)
    written = data.image_folder(tmp_path)
    assert len(written) == 60
    names = set(written.names(range(60)))
    assert set().union(*truth.values()) <= names
    assert truth["wrong labels"] and all(
        n.startswith(CIFAR10_CLASSES[WRONG_AS] + "/") for n in truth["wrong labels"]
    )
    assert all(n.startswith(CIFAR10_CLASSES[GRAY_CLASS] + "/") for n in truth["subgroup"])
    assert not any(n.startswith("frog/") for n in truth["shortcut"])
    assert WRONG_CLASS != WRONG_AS


def test_a_problems_own_errors_are_its_rows_called_what_it_makes_them() -> None:
    # Rows: a patched deer called frog and one called horse; a grey bird called airplane, one
    # called bird (right) and one called deer; a cat filed as dog called cat and one called bird.
    names = ["p1", "p2", "g1", "g2", "g3", "w1", "w2", "x"]
    labels = np.array([4, 4, GRAY_CLASS, GRAY_CLASS, GRAY_CLASS, WRONG_AS, WRONG_AS, 0])
    predictions = np.array([FROG, 7, GRAY_CALLED, GRAY_CLASS, 4, WRONG_CLASS, 2, 1])
    planted = {
        "shortcut": {"p1", "p2"},
        "subgroup": {"g1", "g2", "g3"},
        "wrong labels": {"w1", "w2"},
    }
    own, every = problem_rows(names, labels, predictions, planted)
    assert CALLED == {"shortcut": FROG, "subgroup": GRAY_CALLED, "wrong labels": WRONG_CLASS}
    assert {k: v.tolist() for k, v in own.items()} == {
        "shortcut": [0],
        "subgroup": [2],
        "wrong labels": [5],
    }
    assert {k: v.tolist() for k, v in every.items()} == {
        "shortcut": [0, 1],
        "subgroup": [2, 4],
        "wrong labels": [5, 6],
    }


def test_no_planted_image_carries_two_problems(tmp_path: Path) -> None:
    # Every cat and bird is drawn for the patch (share 1): none may be grey or filed as dog too.
    everything = planted_folder(_source(), tmp_path / "all", 60, seed=0, patch_share=1.0)
    assert not everything["subgroup"] and not everything["wrong labels"]
    truth = planted_folder(
        _source(), tmp_path / "some", 60, seed=0, patch_share=0.5, gray_share=1.0, wrong_share=1.0
    )
    problems = list(truth.values())
    assert all(problem for problem in problems)
    assert sum(len(problem) for problem in problems) == len(set().union(*problems))
    # Every bird and cat the patch left is planted with its own problem.
    assert len(truth["subgroup"]) + len(truth["wrong labels"]) == 12 - len(
        [n for n in truth["shortcut"] if n.split("/")[0] in ("bird", "cat")]
    )


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Found, set[str], np.ndarray]:
    root = tmp_path_factory.mktemp("bench-slices")
    truth = write_folder(root / "images", patched=True)
    loaded = load_model(FACTORY)
    source = data.open_source(str(root / "images"), spec=loaded.spec)
    infer_to_store(loaded, source, range(len(source)), root / "outputs", embeddings=True)
    opened = store.open_store(root / "outputs")
    found = find_slices(opened, loaded, clusters=8)
    return found, truth, list_matrix(opened.table.column("embedding"))


def test_the_slices_beat_the_confusion_cells_on_a_cause_that_spans_labels(
    synthetic: tuple[Found, set[str], np.ndarray],
) -> None:
    found, truth, embeddings = synthetic
    logits = list_matrix(store.open_store(found.store).table.column("logits"))
    probabilities = torch.from_numpy(logits).softmax(dim=1).numpy()
    groups = baseline_groups(found, embeddings, found.maps, probabilities, k=8)
    rows = np.array([n in truth for n in found.names]).nonzero()[0]
    result = scores(found, groups, {"shortcut": rows})
    assert result.f1["slices"]["shortcut"] == pytest.approx(1.0)
    assert result.verified["shortcut"]
    # The patch's errors fill two cells (crimson and green called navy), 12 each.
    assert result.f1["confusion cells"]["shortcut"] == pytest.approx(2 * 12 / (12 + 24))
    lines = table(result)
    assert lines[0].startswith("| method | shortcut F1 |") and "verified" in lines[2]
