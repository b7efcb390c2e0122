"""Label triage against hand computations, brute force and cleanlab on the same probabilities."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gradpick.errors import InputError
from gradpick.triage import ranking as triage


def _noisy_problem(seed: int = 0, count: int = 600, classes: int = 4, share: float = 0.1):
    """Images in clusters, one per class, with a share of labels moved to another class."""
    rng = np.random.default_rng(seed)
    true = rng.integers(0, classes, count)
    centres = rng.normal(size=(classes, 8)) * 3
    embeddings = centres[true] + rng.normal(size=(count, 8))
    logits = embeddings @ centres.T / 4 + rng.normal(size=(count, classes))
    probabilities = np.exp(logits - logits.max(1, keepdims=True))
    probabilities /= probabilities.sum(1, keepdims=True)
    given = true.copy()
    moved = rng.choice(count, int(share * count), replace=False)
    given[moved] = (true[moved] + rng.integers(1, classes, len(moved))) % classes
    return probabilities, given, true, embeddings.astype(np.float32)


def test_thresholds_and_confident_labels_by_hand() -> None:
    probabilities = np.array(
        [[0.9, 0.1, 0.0], [0.6, 0.4, 0.0], [0.2, 0.7, 0.1], [0.5, 0.45, 0.05], [0.1, 0.2, 0.7]]
    )
    labels = np.array([0, 0, 1, 1, 1])
    found = triage.confident_learning(probabilities, labels)
    # t0 = mean(0.9, 0.6); t1 = mean(0.7, 0.45, 0.2); class 2 labels none: never reached.
    np.testing.assert_allclose(found.thresholds, [0.75, 0.45, 2.0])
    # row 1: 0.6 < 0.75 and 0.4 < 0.45, no class; row 3: 0.5 < 0.75, 0.45 >= 0.45 -> 1.
    assert found.confident_label.tolist() == [0, -1, 1, 1, -1]
    assert found.off_diagonal.tolist() == [False] * 5
    flipped = triage.confident_learning(probabilities, np.array([1, 0, 1, 1, 1]))
    # row 0 labelled 1 now: t1 = mean(0.1, 0.7, 0.45, 0.2) = 0.3625, t0 = 0.6.
    np.testing.assert_allclose(flipped.thresholds[:2], [0.6, 0.3625])
    assert flipped.confident_label[0] == 0 and flipped.off_diagonal[0]
    assert flipped.issue_count == int(flipped.off_diagonal.sum())


def test_the_off_diagonal_matches_cleanlabs_confident_joint() -> None:
    cleanlab_count = pytest.importorskip("cleanlab.count")
    probabilities, given, _, _ = _noisy_problem()
    found = triage.confident_learning(probabilities, given)
    joint = cleanlab_count.compute_confident_joint(given, probabilities, calibrate=False)
    np.testing.assert_array_equal(
        np.bincount(
            given[found.confident_label >= 0] * 4
            + found.confident_label[found.confident_label >= 0],
            minlength=16,
        ).reshape(4, 4),
        joint,
    )


def test_self_confidence_ranking_matches_cleanlab_without_embeddings() -> None:
    rank = pytest.importorskip("cleanlab.rank")
    probabilities, given, _, _ = _noisy_problem(seed=1)
    found = triage.triage(probabilities, given)
    quality = rank.get_label_quality_scores(given, probabilities, method="self_confidence")
    np.testing.assert_allclose(found.self_confidence, quality)
    assert found.order.tolist() == np.lexsort((np.arange(len(given)), quality)).tolist()


def test_neighbours_equal_brute_force_in_any_chunking() -> None:
    rng = np.random.default_rng(2)
    embeddings = rng.normal(size=(97, 5)).astype(np.float32)
    labels = rng.integers(0, 3, 97)
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similarity = unit.astype(np.float64) @ unit.T.astype(np.float64)
    np.fill_diagonal(similarity, -np.inf)
    expected = np.argsort(-similarity, axis=1, kind="stable")[:, :4]
    for chunk in (1, 10, 97, 1000):
        found = triage.nearest_neighbours(embeddings, labels, 3, k=4, chunk_rows=chunk)
        np.testing.assert_array_equal(found.indices, expected)
        shares = np.stack([(labels[expected] == c).mean(axis=1) for c in range(3)], axis=1)
        np.testing.assert_allclose(found.label_shares, shares)
        np.testing.assert_allclose(found.agreement(labels), shares[np.arange(97), labels])


def test_the_combined_score_and_suggestion_by_hand() -> None:
    probabilities, given, _, embeddings = _noisy_problem(seed=3, count=200)
    found = triage.triage(probabilities, given, embeddings, k=5, weight=0.2)
    agreement = found.neighbours.agreement(given)
    expected = -np.log(probabilities[np.arange(200), given]) - 0.2 * np.log(agreement + 1 / 5)
    np.testing.assert_allclose(found.score, expected)
    assert np.all(np.diff(found.score[found.order]) <= 0)
    evidence = (probabilities + found.neighbours.label_shares) / 2
    evidence[np.arange(200), given] = -1
    np.testing.assert_array_equal(found.suggested, evidence.argmax(axis=1))
    assert np.all(found.suggested != given)
    assert found.flagged.sum() == found.confident.issue_count
    assert found.flagged[found.order[: found.confident.issue_count]].all()


def test_the_ranking_finds_moved_labels_at_least_as_well_as_each_signal() -> None:
    probabilities, given, true, embeddings = _noisy_problem(seed=4, count=2000, share=0.05)
    moved = given != true
    top = int(moved.sum())
    found = triage.triage(probabilities, given, embeddings)
    combined = moved[found.order[:top]].mean()
    alone = moved[np.argsort(found.self_confidence, kind="stable")[:top]].mean()
    neighbours = moved[np.argsort(found.neighbours.agreement(given), kind="stable")[:top]].mean()
    assert combined >= max(alone, neighbours) - 0.01, (combined, alone, neighbours)
    assert combined > 0.7


def test_the_table_is_most_suspect_first_with_names() -> None:
    probabilities, given, _, embeddings = _noisy_problem(seed=5, count=50)
    found = triage.triage(probabilities, given, embeddings, k=3)
    frame = found.table(
        positions=range(100, 150), names=[f"f{i}" for i in range(50)], class_names="abcd"
    )
    assert frame["rank"].tolist() == list(range(1, 51))
    assert frame["position"].tolist() == (100 + found.order).tolist()
    assert frame["name"].iloc[0] == f"f{found.order[0]}"
    assert frame["given_class"].iloc[0] == "abcd"[given[found.order[0]]]
    assert {"suggested_label", "score", "flagged", "neighbour_agreement"} <= set(frame.columns)


@pytest.mark.parametrize(
    ("probabilities", "labels", "message"),
    [
        (np.ones((3, 2)) / 2, np.array([0, 1]), r"\[N, C\] probabilities"),
        (np.ones((2, 2)) / 2, np.array([0, 2]), r"0\.\.1"),
        (np.ones((2, 2)) / 2, np.array([0.0, 1.0]), "whole class numbers"),
    ],
)
def test_bad_input_says_what_is_wrong(probabilities, labels, message) -> None:
    with pytest.raises(InputError, match=message):
        triage.triage(probabilities, labels)


def test_a_store_of_the_training_split_is_called_in_sample() -> None:
    metadata = {
        "model": {"name": "resnet20", "trained_on": {"source": "cifar10", "split": "train"}},
        "source": {"root": "/data/cifar10-jpg/train"},
    }
    assert "in sample" in triage.sample_warning(metadata)
    metadata["source"]["root"] = "/data/cifar10-jpg/test"
    assert triage.sample_warning(metadata) is None
    assert triage.sample_warning({"model": {}, "source": {"root": "/x/train"}}) is None


def test_neighbours_of_wide_rows_equal_brute_force() -> None:
    """Rows wider than k groups take the grouped first pass: still exactly the k nearest."""
    rng = np.random.default_rng(5)
    embeddings = rng.normal(size=(1000, 8)).astype(np.float32)
    labels = rng.integers(0, 4, 1000)
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similarity = unit.astype(np.float64) @ unit.T.astype(np.float64)
    np.fill_diagonal(similarity, -np.inf)
    expected = np.argsort(-similarity, axis=1, kind="stable")[:, :7]
    for chunk in (333, 4096):
        found = triage.nearest_neighbours(embeddings, labels, 4, k=7, chunk_rows=chunk)
        np.testing.assert_array_equal(found.indices, expected)
        np.testing.assert_allclose(
            found.similarities, np.take_along_axis(similarity, expected, 1), rtol=1e-5
        )


@pytest.mark.parametrize(
    "settings",
    [
        {},  # one k-means of sqrt(N) cells
        {"FLAT_CELLS": 8, "CELL_ROWS": 50},  # 60 cells in two levels, 8 coarse ones
        {"NEAREST_CELLS": 1},  # fewer near cells ranked than searched: every cell searched
    ],
    ids=["one level", "two levels", "every cell searched"],
)
def test_approximate_neighbours_find_most_of_the_brute_force_ones(
    settings: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inverted file (used above EXACT_ROWS rows) against float64 brute force on clustered
    data: most true neighbours found, the similarities are the true ones, never the row itself."""
    for name, value in settings.items():
        monkeypatch.setattr(triage, name, value)
    rng = np.random.default_rng(6)
    centres = rng.normal(size=(12, 16))
    labels = rng.integers(0, 12, 3000)
    embeddings = (centres[labels] + rng.normal(scale=0.8, size=(3000, 16))).astype(np.float32)
    found = triage.nearest_neighbours(embeddings, labels, 12, k=10, exact=False)
    assert not found.exact
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similarity = unit.astype(np.float64) @ unit.T.astype(np.float64)
    np.fill_diagonal(similarity, -np.inf)
    expected = np.argsort(-similarity, axis=1, kind="stable")[:, :10]
    recall = np.mean(
        [len(np.intersect1d(a, b)) / 10 for a, b in zip(expected, found.indices, strict=True)]
    )
    assert recall > 0.9, recall
    assert not (found.indices == np.arange(3000)[:, None]).any()
    np.testing.assert_allclose(
        found.similarities, np.take_along_axis(similarity, found.indices, 1), atol=1e-5
    )
    assert np.all(np.diff(found.similarities, axis=1) <= 1e-6)
    assert triage.nearest_neighbours(embeddings, labels, 12, k=10).exact  # small: exact


def test_kept_neighbours_are_read_back_and_found_again_for_other_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second session reads the neighbours from the file; other embeddings, labels or k find
    it stale; a damaged file is searched again. The triage is the same either way."""
    probabilities, given, _, embeddings = _noisy_problem(seed=5, count=120)
    path, classes = tmp_path / "store.neighbours.npz", probabilities.shape[1]

    def kept(labels: np.ndarray, k: int = triage.NEIGHBOURS) -> triage.Triage:
        neighbours = triage.kept_neighbours(path, embeddings, labels, classes, k)
        return triage.triage(probabilities, labels, embeddings, k, neighbours=neighbours)

    first = kept(given)
    plain = triage.triage(probabilities, given, embeddings)
    np.testing.assert_array_equal(first.order, plain.order)
    searches: list[int] = []
    search = triage.nearest_neighbours
    monkeypatch.setattr(
        triage, "nearest_neighbours", lambda *a, **k: searches.append(1) or search(*a, **k)
    )
    again = kept(given)
    assert searches == [] and again.neighbours is not None and first.neighbours is not None
    np.testing.assert_array_equal(again.neighbours.indices, first.neighbours.indices)
    np.testing.assert_array_equal(again.neighbours.label_shares, first.neighbours.label_shares)
    np.testing.assert_array_equal(again.order, first.order)
    relabelled = given.copy()
    relabelled[0] = (relabelled[0] + 1) % probabilities.shape[1]
    kept(relabelled)
    kept(relabelled, k=5)
    assert searches == [1, 1]
    path.write_bytes(b"damaged")
    kept(relabelled, k=5)
    assert searches == [1, 1, 1] and not list(tmp_path.glob("*.partial*"))
    kept(relabelled, k=5)
    monkeypatch.setattr(triage, "CELL_ROWS", 128)  # another search's neighbours are stale
    kept(relabelled, k=5)
    assert searches == [1, 1, 1, 1]
    # named by an identity (a store's rows), the embeddings are read only to search again
    reads: list[int] = []

    def read() -> np.ndarray:
        reads.append(1)
        return embeddings

    named = tmp_path / "named.neighbours.npz"
    found = triage.kept_neighbours(named, read, given, classes, identity="rows a")
    again = triage.kept_neighbours(named, read, given, classes, identity="rows a")
    assert reads == [1] and np.array_equal(found.indices, again.indices)
    np.testing.assert_array_equal(
        found.indices, triage.nearest_neighbours(embeddings, given, classes).indices
    )
    triage.kept_neighbours(named, read, given, classes, identity="rows b")
    assert reads == [1, 1]


def test_a_stores_triage_reads_its_neighbours_kept_by_its_rows_once_searched(
    image_folder_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``stored_triage`` is the triage of the store's outputs with their neighbours searched in
    its embeddings; ``neighbours_kept`` says whether it would read them rather than search:
    not before the first, then yes, and the second searches nothing."""
    from gradpick import data
    from gradpick.cli import main
    from gradpick.outputs import stores

    folder = image_folder_factory(10, per_class=4)
    out = tmp_path / "outputs"
    assert main(["infer", "--model", "tutorial", "--data", str(folder), "--out", str(out),
                 "--embeddings"]) == 0  # fmt: skip
    opened = stores.open_stored(str(out), stores.OUTPUT_COLUMNS)  # as the page: no embeddings
    result = stores.stored_result(opened, data.load_batch(stores.stored_source(opened)))
    assert isinstance(result, stores.StoredResult) and result.labels is not None
    assert not triage.neighbours_kept(result)
    found = triage.stored_triage(result)
    assert result.features is not None
    probabilities, labels = result.probabilities.double().numpy(), result.labels.numpy()
    plain = triage.triage(probabilities, labels, result.features.numpy())
    np.testing.assert_array_equal(found.order, plain.order)
    np.testing.assert_array_equal(found.flagged, plain.flagged)
    assert triage.neighbours_kept(result)
    monkeypatch.setattr(triage, "nearest_neighbours", lambda *a, **k: pytest.fail("searched"))
    np.testing.assert_array_equal(triage.stored_triage(result).order, found.order)
