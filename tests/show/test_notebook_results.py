"""A triage, a two-model comparison and a check left at the end of a notebook cell: a short
one-line repr, and an HTML display with tables and maps, layer and class names."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import torch
from torch import nn

from gradpick import compare as versus
from gradpick.show import notebook
from gradpick.triage import ranking as triage
from gradpick.trust import CheckOptions, run_checks
from gradpick.trust.engine import MethodSettings
from tests.show.test_notebook import _pictures

CLASSES = ("cat", "dog", "ship", "frog")


def _problem(count: int = 10_000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, len(CLASSES), count)
    logits = rng.normal(size=(count, len(CLASSES)))
    logits[np.arange(count), labels] += 3.0
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return probabilities, labels


def test_a_triage_of_10000_images_has_a_one_line_repr_and_a_table_by_name() -> None:
    probabilities, labels = _problem()
    found = dataclasses.replace(triage.triage(probabilities, labels), class_names=CLASSES)
    text = repr(found)
    assert "\n" not in text and len(text) < 200, text
    top = int(found.order[0])
    assert text == (
        f"Triage(10,000 images, {int(found.flagged.sum()):,} flagged as label issues; most "
        f"suspect: row {top}, given {CLASSES[labels[top]]}, "
        f"suggested {CLASSES[int(found.suggested[top])]})"
    )
    html = found._repr_html_()
    assert len(html) < 5_000
    cells = re.findall(r"<tr><td>(\d+)</td><td[^>]*>(\d+)</td><td>(\w+)</td>", html)
    assert len(cells) == notebook.TRIAGE_ROWS
    for rank, (shown_rank, row, given) in enumerate(cells, start=1):
        assert int(shown_rank) == rank and int(row) == int(found.order[rank - 1])
        assert given == CLASSES[labels[int(row)]]


def _pairing() -> versus.Pairing:
    labels = np.array([0, 0, 1, 1, 2, 2])
    return versus.Pairing(
        positions=np.arange(6),
        names=tuple(f"{i}.png" for i in range(6)),
        labels=labels,
        first=np.array([0, 1, 1, 1, 2, 0]),
        second=np.array([0, 0, 2, 1, 1, 0]),
        probabilities=(np.full(6, 0.5), np.full(6, 0.5)),
        class_names=CLASSES[:3],
        second_classes=np.arange(3),
        models=({"name": "resnet20"}, {"name": "resnet56"}),
        source={},
    )


def test_a_pairing_names_both_models_and_their_accuracies() -> None:
    pairing = _pairing()
    # By hand: the first is right on 0, 2, 3, 4 (4 of 6), the second on 0, 1, 3 (3 of 6).
    assert repr(pairing) == (
        "Pairing(6 images: resnet20 (66.7%) vs resnet56 (50.0%); both right 2, first only "
        "right 2, second only right 1, both wrong 1)"
    )
    html = pairing._repr_html_()
    assert "resnet20, accuracy 66.67%" in html and "resnet56, accuracy 50.00%" in html
    assert all(f"<td>{name}</td>" in html for name in CLASSES[:3])


def test_a_map_comparison_draws_both_models_maps_with_class_and_layer() -> None:
    generator = torch.Generator().manual_seed(0)
    maps = (torch.rand(2, 8, 8, generator=generator), torch.rand(2, 8, 8, generator=generator))
    compared = versus.MapComparison(
        rows=(4, 1),
        classes=(2, 0),
        method="gradcam",
        size=(8, 8),
        maps=maps,
        spearman=torch.tensor([0.5, 0.25]),
        ssim=torch.tensor([0.75, 0.25]),
        class_names=CLASSES[:3],
        layers=("layer3", None),
        names=("resnet20", "resnet56"),
    )
    assert repr(compared) == (
        "MapComparison(gradcam maps of 2 picks at 8x8: mean Spearman 0.375, mean SSIM 0.500)"
    )
    html = compared._repr_html_()
    assert len(_pictures(html)) == 4
    for caption in ("#4 · ship · resnet20", "#1 · cat · resnet56"):
        assert caption in html
    assert "resnet20: layer3; resnet56: automatic" in html


class _Cnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 4)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(images)).mean(dim=(2, 3)))


def test_a_check_of_a_layer_method_names_its_classes_and_layer() -> None:
    model = _Cnn().eval()
    images = torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    options = CheckOptions(
        methods=("gradcam",),
        settings=MethodSettings(layer="conv"),
        baselines=("black",),
        deletion_steps=2,
        top=2,
    )
    checked = run_checks(model, images, [0, 2], [1, 3], options, class_names=CLASSES)
    text = repr(checked)
    assert text.startswith("TrustReport(2 picks explained as dog, frog; methods gradcam")
    assert "(layer methods at conv)" in text and "\n" not in text and len(text) < 300
    html = checked._repr_html_()
    assert "dog, frog" in html and "<th>layer</th><td>conv</td>" in html
