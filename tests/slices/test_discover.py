"""The clustering and the slices' summaries on tables whose right answer is known."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradpick.errors import InputError
from gradpick.slices.discover import (
    aligned_mean,
    clustering_space,
    cut_to_cells,
    describe,
    kmeans,
    ranked_clusters,
    split_apart,
    summarise,
)
from gradpick.slices.features import DESCRIPTORS


def test_kmeans_finds_separated_blobs_exactly() -> None:
    generator = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    truth = np.repeat(np.arange(3), 20)
    points = centres[truth] + generator.normal(0, 0.5, (60, 2))
    found = kmeans(points, 3, seed=1)
    # The same partition whatever the numbering.
    pairs = {(int(t), int(f)) for t, f in zip(truth, found, strict=True)}
    assert len(pairs) == 3 and len({f for _, f in pairs}) == 3


def test_the_clustering_space_weighs_prediction_label_and_error() -> None:
    table = np.array([[1.0, 5.0], [3.0, 5.0]])
    space = clustering_space(table, np.array([0, 1]), np.array([0, 0]), 2, weights=(3, 1, 4))
    # Standardised descriptors (a constant column stays 0), one-hot prediction x 3, label x 1,
    # error x 4.
    assert np.allclose(space, [[-1, 0, 3, 0, 1, 0, 0], [1, 0, 3, 0, 0, 1, 4]])
    with pytest.raises(InputError, match="one descriptor row"):
        clustering_space(table, np.array([0]), np.array([0, 0]), 2)


def test_clusters_rank_by_error_count_times_rate() -> None:
    assignment = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2])
    errors = np.array([1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0], dtype=bool)
    # cluster 0: 2 errors at rate 1/2 -> 1; cluster 1: 3 at 1 -> 3; cluster 2: 3 at 1/2 -> 1.5
    ranked = ranked_clusters(assignment, errors)
    assert [list(members) for members in ranked] == [
        [4, 5, 6],
        [7, 8, 9, 10, 11, 12],
        [0, 1, 2, 3],
    ]
    # A correct row standing for 3 (a sample) lowers its cluster's rate: 2 / (2 + 3 + 3).
    weights = np.array([1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1], dtype=float)
    assert [list(m) for m in ranked_clusters(assignment, errors, weights)][-1] == [0, 1, 2, 3]
    # With the calls, a cluster counts only its errors called its commonest call: cluster 1's
    # three errors called three ways count 1 (rate 1 -> 1), cluster 2's called one way count 3
    # (rate 1/2 -> 1.5), cluster 0's two called alike 2 (rate 1/2 -> 1, larger than cluster 1).
    predictions = np.array([5, 5, 0, 0, 1, 2, 3, 4, 4, 4, 0, 0, 0])
    ranked = ranked_clusters(assignment, errors, predictions=predictions)
    assert [int(m[0]) for m in ranked] == [7, 0, 4]


def test_the_aligned_mean_puts_every_peak_at_the_centre() -> None:
    maps = torch.zeros(2, 8, 8)
    maps[0, 1, 6] = 2.0
    maps[1, 5, 2] = 7.0
    mean = aligned_mean(maps)
    expected = np.zeros((8, 8))
    expected[4, 4] = 1.0
    assert np.allclose(mean, expected)


def test_a_slice_is_described_against_the_rest_of_its_class() -> None:
    table = np.zeros((6, len(DESCRIPTORS)))
    saturation = DESCRIPTORS.index("region_saturation")
    table[:, saturation] = [0.9, 0.95, 0.2, 0.25, 0.3, 0.5]
    inside = np.array([True, True, False, False, False, False])
    labels = np.array([0, 2, 1, 1, 1, 0])
    predictions = np.array([1, 1, 1, 1, 1, 0])
    words = describe(inside, table, labels, predictions, ("cat", "frog", "dog"))
    assert words.startswith("2 error(s) called frog (2), labelled cat (1), dog (1)")
    assert "more saturated evidence (0.93 vs 0.25)" in words


def test_summaries_count_members_errors_and_confusions() -> None:
    table = np.arange(12.0).reshape(6, 2).repeat(len(DESCRIPTORS) // 2 + 1, axis=1)
    table = table[:, : len(DESCRIPTORS)]
    labels = np.array([0, 0, 1, 1, 2, 2])
    predictions = np.array([1, 1, 1, 0, 2, 2])
    assignment = np.array([0, 0, 0, 1, 1, 1])
    found = summarise(assignment, table, torch.rand(6, 4, 4), labels, predictions)
    first, second = found
    assert (first.rank, list(first.members), first.errors) == (1, [0, 1, 2], 2)
    assert first.error_rate == pytest.approx(2 / 3)
    assert first.confusions == ((0, 1, 2),)
    assert (second.rank, second.errors, second.confusions) == (2, 1, ((1, 0, 1),))


def test_a_cluster_mostly_in_one_confusion_cell_is_cut_to_that_cell() -> None:
    # Cluster 0: four errors labelled 2 called 0, one labelled 8 called 0, one correct row.
    # Cluster 1: errors of four labels, all called 6 (a shortcut): no cell holds 60%.
    # Cluster 2: only errors of one cell: nothing to cut.
    labels = np.array([2, 2, 2, 2, 8, 0, 1, 3, 4, 5, 5, 5])
    predictions = np.array([0, 0, 0, 0, 0, 0, 6, 6, 6, 6, 3, 3])
    assignment = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
    cut = cut_to_cells(assignment, labels, predictions)
    groups = {tuple(np.flatnonzero(cut == n)) for n in np.unique(cut)}
    assert groups == {(0, 1, 2, 3), (4, 5), (6, 7, 8, 9), (10, 11)}
    # Under the share asked for, the cluster stays whole; so does a shortcut of two labels.
    kept = cut_to_cells(assignment, labels, predictions, share=0.9)
    assert len(np.unique(kept)) == 3
    two = cut_to_cells(np.zeros(4, dtype=np.int64), np.array([1, 1, 2, 2]), np.full(4, 6))
    assert len(np.unique(two)) == 1


def _one_cell(low: int, high: list[float], noise_seed: int = 0) -> tuple[np.ndarray, ...]:
    """A cluster of errors of one cell (bird called airplane): column 0 is ``low`` zeros (grey
    images) then ``high`` (colour ones); column 1 is noise that parts nothing."""
    count = low + len(high)
    column = np.array([0.0] * low + high)
    noise = np.random.default_rng(noise_seed).normal(size=count)
    return np.stack([column, noise], axis=1), np.full(count, 2), np.zeros(count, dtype=np.int64)


def test_a_cell_of_two_separate_groups_is_split_in_two() -> None:
    table, labels, predictions = _one_cell(16, [0.2, 0.3, 0.3, 0.4])
    assignment = np.zeros(20, dtype=np.int64)
    # By hand: the sides' means 0 and 0.3, the high side's squares 0.01 + 0 + 0 + 0.01 over 20
    # rows: within-side spread sqrt(0.001) = 0.0316, so the groups stand 0.3 / 0.0316 = 9.49
    # apart.
    split = split_apart(assignment, table, labels, predictions, apart=9.4)
    groups = {tuple(np.flatnonzero(split == n)) for n in np.unique(split)}
    assert groups == {tuple(range(16)), (16, 17, 18, 19)}
    kept = split_apart(assignment, table, labels, predictions, apart=9.5)
    assert len(np.unique(kept)) == 1


def test_a_cell_is_not_split_by_one_outlier_noise_or_other_cells() -> None:
    # One far outlier is under the smaller side's 3 rows.
    table, labels, predictions = _one_cell(19, [5.0])
    assert (
        len(np.unique(split_apart(np.zeros(20, dtype=np.int64), table, labels, predictions))) == 1
    )
    # Noise alone (column 0 constant) parts nothing.
    table, labels, predictions = _one_cell(40, [], noise_seed=3)
    assert (
        len(np.unique(split_apart(np.zeros(40, dtype=np.int64), table, labels, predictions))) == 1
    )
    # The same two groups, but with a correct row or an error of another cell: not one cell.
    table, labels, predictions = _one_cell(16, [0.2, 0.3, 0.3, 0.4])
    for row, (label, prediction) in ((0, (0, 0)), (5, (3, 0))):
        mixed_labels, mixed_predictions = labels.copy(), predictions.copy()
        mixed_labels[row], mixed_predictions[row] = label, prediction
        split = split_apart(np.zeros(20, dtype=np.int64), table, mixed_labels, mixed_predictions)
        assert len(np.unique(split)) == 1
