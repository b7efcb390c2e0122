"""Pickers, typed index lists, merges and chart clicks over an inference result."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gradpick.errors import SelectionError
from gradpick.outputs.inference import InferenceResult, infer
from gradpick.picking.rules import (
    RULES,
    confusion_cell,
    format_indices,
    indices_from_plotly_selection,
    merge,
    parse_indices,
    pick,
)

# Eight images, three classes. Rows 1 and 5 are identical (a tie in loss and confidence).
LOGITS = [
    [4.0, 0.0, 0.0],  # 0: predicts 0, label 0, confident and right
    [0.0, 1.0, 0.0],  # 1: predicts 1, label 2: wrong
    [0.0, 0.0, 3.0],  # 2: predicts 2, label 2: right
    [2.0, 0.0, 0.0],  # 3: predicts 0, label 1: wrong
    [0.0, 0.5, 0.0],  # 4: predicts 1, label 1: right, unsure
    [0.0, 1.0, 0.0],  # 5: as row 1
    [0.0, 0.0, 6.0],  # 6: predicts 2, label 0: very wrong
    [0.0, 5.0, 0.0],  # 7: predicts 1, label 1: right
]
LABELS = [0, 2, 2, 1, 1, 2, 0, 1]


def _result(labelled: bool = True) -> InferenceResult:
    logits = torch.tensor(LOGITS)
    labels = torch.tensor(LABELS) if labelled else None
    probabilities = logits.softmax(dim=1)
    confidences, predictions = probabilities.max(dim=1)
    return InferenceResult(
        logits=logits,
        probabilities=probabilities,
        predictions=predictions,
        confidences=confidences,
        labels=labels,
        losses=None if labels is None else F.cross_entropy(logits, labels, reduction="none"),
        device="cpu",
        milliseconds=1.0,
    )


@pytest.fixture
def result() -> InferenceResult:
    return _result()


def test_misclassified_in_index_order(result):
    assert pick(result, "misclassified") == [1, 3, 5, 6]
    assert pick(result, "misclassified", k=2) == [1, 3]


def test_top_k_loss_sorts_by_loss_then_index(result):
    losses = result.losses.tolist()
    assert losses[6] > losses[3] > losses[1] == losses[5]
    assert pick(result, "top_k_loss", k=4) == [6, 3, 1, 5]
    assert pick(result, "top_k_loss", k=100) == sorted(range(8), key=lambda i: (-losses[i], i))


def test_least_confident_sorts_by_confidence_then_index(result):
    confidences = result.confidences.tolist()
    assert pick(result, "least_confident", k=3) == [4, 1, 5]
    assert pick(result, "least_confident", k=8) == sorted(
        range(8), key=lambda i: (confidences[i], i)
    )


def test_class_rules(result):
    assert pick(result, "true_class", class_index=1) == [3, 4, 7]
    assert pick(result, "predicted_class", class_index=1) == [1, 4, 5, 7]
    assert pick(result, "predicted_class", class_index=1, k=2) == [1, 4]
    assert pick(result, "true_class", class_index=2, k=1) == [1]


def test_random_is_seeded_distinct_and_sorted(result):
    first = pick(result, "random", k=5, seed=3)
    assert first == pick(result, "random", k=5, seed=3)
    assert len(set(first)) == 5 and first == sorted(first)
    assert all(0 <= index < 8 for index in first)
    draws = {tuple(pick(result, "random", k=5, seed=seed)) for seed in range(10)}
    assert len(draws) > 1
    assert pick(result, "random", k=50) == list(range(8))  # k larger than the batch: all of it


def test_rules_work_on_a_real_inference_result(tiny_cnn, random_batch):
    inferred = infer(tiny_cnn, random_batch.images, random_batch.labels, features=True)
    wrong = (inferred.predictions != inferred.labels).nonzero().flatten().tolist()
    assert pick(inferred, "misclassified", k=16) == wrong
    losses = inferred.losses.tolist()
    assert pick(inferred, "top_k_loss", k=3) == sorted(range(16), key=lambda i: -losses[i])[:3]
    for rule in RULES:
        if rule not in ("true_class", "predicted_class", "judged", "label_threshold"):
            picked = pick(inferred, rule, k=4, anchor=2)
            assert len(picked) == 4 and all(isinstance(index, int) for index in picked)


def test_no_match_gives_an_empty_list(result):
    assert pick(result, "predicted_class", class_index=0) == [0, 3]
    everything_right = InferenceResult(**{**result.__dict__, "labels": result.predictions})
    assert pick(everything_right, "misclassified") == []


@pytest.mark.parametrize("rule", ["misclassified", "top_k_loss", "true_class"])
def test_rules_needing_labels_explain_themselves(rule):
    with pytest.raises(SelectionError, match=f"'{rule}' needs the true labels"):
        pick(_result(labelled=False), rule, class_index=0)


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ("least_confident", [4, 1]),  # confidence 0.45, then the 0.58 tie of rows 1 and 5
        ("predicted_class", [1, 4]),  # rows 1, 4, 5 and 7 predict class 1
        ("random", sorted(np.random.default_rng(0).choice(8, size=2, replace=False))),
    ],
)
def test_rules_without_labels_work_on_unlabelled_images(rule, expected):
    """They read only the outputs, so without labels they pick what they pick with them."""
    unlabelled = pick(_result(labelled=False), rule, k=2, class_index=1)
    assert unlabelled == expected
    assert unlabelled == pick(_result(), rule, k=2, class_index=1)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"rule": "best"}, "Unknown rule 'best'"),
        ({"rule": "misclassified", "k": 0}, "k must be a whole number of at least 1; got 0"),
        ({"rule": "random", "k": 2.5}, "k must be a whole number"),
        ({"rule": "random", "k": True}, "k must be a whole number"),
        ({"rule": "random", "seed": -1}, "seed must be a whole number of at least 0"),
        ({"rule": "true_class"}, r"Choose a true class \(0 to 2\)"),
        ({"rule": "predicted_class", "class_index": 3}, r"Class 3 is out of range.*0 to 2"),
        ({"rule": "predicted_class", "class_index": -1}, "Class -1 is out of range"),
    ],
)
def test_bad_pick_arguments(result, arguments, message):
    with pytest.raises(SelectionError, match=message):
        pick(result, **arguments)


def test_confusion_cell(result):
    assert confusion_cell(result, 2, 1) == [1, 5]
    assert confusion_cell(result, 1, 1) == [4, 7]
    assert confusion_cell(result, 0, 1) == []
    cells = [confusion_cell(result, t, p) for t in range(3) for p in range(3)]
    assert sorted(index for cell in cells for index in cell) == list(range(8))
    with pytest.raises(SelectionError, match="Class 5 is out of range"):
        confusion_cell(result, 5, 0)
    with pytest.raises(SelectionError, match="needs the true labels"):
        confusion_cell(_result(labelled=False), 0, 0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3, 7, 10-12", [3, 7, 10, 11, 12]),
        (" 10 - 12 ,3;  0 ", [10, 11, 12, 3, 0]),
        ("5-5", [5]),
        ("0-19", list(range(20))),
    ],
)
def test_parse_indices(text, expected):
    assert parse_indices(text, 20) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3, 7, x", r"'x' is not an index.*valid indices are 0 to 19"),
        ("3, 7.5", r"'7.5' is not an index"),
        ("3, -2", r"'-2' is not an index"),
        ("3, 20", r"'20' is out of range: the batch holds 20 images \(valid indices are 0 to 19\)"),
        ("18-25", r"'18-25' is out of range"),
        ("12-10", "The range '12-10' runs backwards; write it as 10-12"),
        ("", "No indices given"),
        (" , ", r"No indices given.*0 to 19"),
        ("\u00b2", "is not an index"),
        ("12 3 3 7", "Index 3 is given more than once in '12 3 3 7'"),
        ("11, 10-12", "Index 11 is given more than once"),
        ("0, 0", "Index 0 is given more than once"),
    ],
)
def test_parse_indices_rejects_with_the_bad_token(text, message):
    with pytest.raises(SelectionError, match=message):
        parse_indices(text, 20)


def test_parse_indices_on_an_empty_batch():
    with pytest.raises(SelectionError, match="holds no images"):
        parse_indices("0", 0)


@pytest.mark.parametrize(
    ("indices", "text"),
    [
        ([3, 7, 10, 11, 12], "3, 7, 10-12"),
        ([], ""),
        ([5], "5"),
        ([4, 5], "4-5"),
        ([12, 11, 10], "12, 11, 10"),
        ([0, 1, 2, 9, 3, 4], "0-2, 9, 3-4"),
    ],
)
def test_format_indices(indices, text):
    assert format_indices(indices) == text


def test_format_then_parse_round_trips():
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        indices = torch.randperm(60, generator=generator)[:25].tolist()
        indices += list(range(70, 75))
        assert parse_indices(format_indices(indices), 100) == indices


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("replace", [9, 3, 4]), ("add", [3, 1, 4, 9]), ("remove", [1])],
)
def test_merge(mode, expected):
    assert merge([3, 1, 4, 1], [9, 3, 4, 9], mode) == expected


def test_merge_rejects_an_unknown_mode():
    with pytest.raises(SelectionError, match="Unknown merge mode 'toggle'"):
        merge([1], [2], "toggle")


def test_indices_from_plotly_selection():
    event = {
        "selection": {
            "points": [
                {"curve_number": 0, "point_index": 0, "customdata": [12, "cat", 0.9]},
                {"curve_number": 1, "point_index": 4, "customdata": 3},
                {"curve_number": 0, "point_index": 2, "customdata": [12.0]},
                {"curve_number": 2, "point_index": 1, "x": 1, "y": 2},  # no customdata
                {"customdata": []},
                {"customdata": ["cat"]},
                {"customdata": [2.5]},
                {"customdata": [True]},
                "not a point",
                {"customdata": [7]},
            ],
            "box": [{"x": [0, 1], "y": [0, 1]}],
            "lasso": [],
        }
    }
    assert indices_from_plotly_selection(event) == [12, 3, 7]


@pytest.mark.parametrize(
    "event",
    [None, {}, {"selection": None}, {"selection": {}}, {"selection": {"points": None}}, []],
)
def test_indices_from_an_empty_or_missing_selection(event):
    assert indices_from_plotly_selection(event) == []


def test_indices_from_streamlit_plotly_state():
    """Streamlit hands back a read-only attribute dictionary, not a plain dict."""
    from streamlit.elements.plotly_chart import PlotlyState

    state = PlotlyState({"selection": {"points": [{"customdata": [5]}, {"customdata": [2]}]}})
    assert indices_from_plotly_selection(state) == [5, 2]


def test_nearest_neighbours_rule_picks_the_anchor_then_its_closest_images(result):
    features = torch.tensor(
        [
            [1.0, 0.0],
            [0.0, 1.0],
            [0.9, 0.1],
            [0.1, 0.9],
            [1.0, 1.0],
            [-1.0, 0.0],
            [0.7, 0.0],
            [0.0, -1.0],
        ]
    )
    with_features = InferenceResult(**{**result.__dict__, "features": features})
    assert pick(with_features, "nearest_neighbours", k=3, anchor=0) == [0, 6, 2]
    assert pick(with_features, "nearest_neighbours", k=1, anchor=5) == [5]


def test_nearest_neighbours_rule_needs_features_and_an_anchor(result):
    with pytest.raises(SelectionError, match="penultimate-layer features"):
        pick(result, "nearest_neighbours", k=3, anchor=0)
    with_features = InferenceResult(**{**result.__dict__, "features": torch.eye(8)})
    with pytest.raises(SelectionError, match="Choose the image"):
        pick(with_features, "nearest_neighbours", k=3)
    with pytest.raises(SelectionError, match="valid indices are 0 to 7"):
        pick(with_features, "nearest_neighbours", k=3, anchor=8)


def test_the_verdict_rule_picks_the_judged_images_in_index_order(result):
    judged = {5: "label_wrong", 1: "fine", 3: "label_wrong", 99: "label_wrong"}  # 99: not here
    assert pick(result, "judged", k=8, judged=judged, verdict="label_wrong") == [3, 5]
    assert pick(result, "judged", k=8, judged=judged) == [1, 3, 5]  # any verdict
    assert pick(result, "judged", k=1, judged=judged, verdict="label_wrong") == [3]
    assert pick(result, "judged", judged=judged, verdict="ambiguous") == []
    with pytest.raises(SelectionError, match="no verdict; choose one of label_wrong"):
        pick(result, "judged", judged=judged, verdict="wrong")
    with pytest.raises(SelectionError, match="Triage tab"):
        pick(result, "judged", judged={}, verdict="fine")


def test_the_label_threshold_rule_picks_by_each_labels_own_sigmoid(tiny_cnn, random_batch):
    sigmoid = infer(tiny_cnn, random_batch.images, random_batch.labels, output="sigmoid")
    label = 1
    column = 1 / (1 + torch.exp(-sigmoid.logits[:, label].double()))
    ordered = column.sort().values
    threshold = float(ordered[7] + ordered[8]) / 2  # between two images: no rounding decides
    expected = [i for i, p in enumerate(column.tolist()) if p >= threshold]
    picked = pick(sigmoid, "label_threshold", k=16, class_index=label, threshold=threshold)
    assert picked == expected and 0 < len(picked) < 16
    assert (
        pick(sigmoid, "label_threshold", k=2, class_index=label, threshold=threshold)
        == (expected[:2])
    )
    with pytest.raises(SelectionError, match="out of range"):
        pick(sigmoid, "label_threshold", class_index=99)
    with pytest.raises(SelectionError, match="a probability, 0 to 1"):
        pick(sigmoid, "label_threshold", class_index=0, threshold=1.5)
    softmax = infer(tiny_cnn, random_batch.images, random_batch.labels)
    with pytest.raises(SelectionError, match="needs a sigmoid"):
        pick(softmax, "label_threshold", class_index=0)
