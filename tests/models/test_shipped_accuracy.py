"""The shipped weights are the ones their cards describe, and still as accurate as claimed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gradpick import data
from gradpick.data import ImageBatch
from gradpick.models import shipped as models
from gradpick.outputs.inference import infer

TARGET_ACCURACY = {"tutorial": 0.60, "resnet20": 0.90}
"""The accuracy each shipped model must reach on the 10,000 CIFAR-10 test images."""
CARD_TOLERANCE = 0.002
"""Re-measured accuracy may differ from the card's by 0.2 points (20 of 10,000 images): rounding
differs between machines and thread counts and can flip a few borderline predictions."""
SLICE_TOLERANCE = 0.005
"""The same for the 1,000-image check slice (5 images)."""


@pytest.fixture(params=list(models.ARCHITECTURES))
def shipped(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if not models.shipped_weights_path(name).is_file():
        pytest.skip(f"no shipped weights for {name} in {models.assets_dir()}")
    return name


@pytest.fixture(scope="module")
def test_split(shared_cifar10_dir: Path) -> ImageBatch:
    """All 10,000 shared CIFAR-10 test images, decoded once for both models."""
    source = data.open_source(shared_cifar10_dir, "test")
    assert len(source) == 10_000
    return data.load_batch(source)


def test_card_matches_weights_file(shipped: str) -> None:
    card = models.model_card(shipped)
    assert card is not None, f"{shipped}.pt ships without {shipped}.json"
    assert card["sha256"] == models.sha256_file(models.shipped_weights_path(shipped))
    assert card["weights_file"] == f"{shipped}.pt"
    assert card["parameters"] == sum(p.numel() for p in models.build(shipped).parameters())
    assert card["evaluated_images"] == 10_000
    assert set(card["per_class_accuracy"]) == set(data.CIFAR10_CLASSES)
    assert len(models.shipped_weights_path(shipped).read_bytes()) < 5_000_000


def test_shipped_model_loads_ready(shipped: str) -> None:
    model = models.load(shipped)
    assert not model.training
    assert not any(parameter.requires_grad for parameter in model.parameters())


def test_accuracy_on_all_test_images_matches_card(shipped: str, test_split: ImageBatch) -> None:
    """Re-measure top-1 on the whole test split, per class and on the card's seeded check
    slice, and hold the model to its target on the measured figure, not the card's."""
    card = models.model_card(shipped)
    assert card is not None
    labels = test_split.labels
    assert labels is not None
    result = infer(models.load(shipped), test_split.images, labels)
    assert result.correct is not None and result.accuracy is not None
    assert result.accuracy >= TARGET_ACCURACY[shipped]
    assert result.accuracy == pytest.approx(card["test_accuracy"], abs=CARD_TOLERANCE)
    for label, name in enumerate(test_split.class_names):
        of_class = result.correct[labels == label].float().mean().item()
        assert of_class == pytest.approx(card["per_class_accuracy"][name], abs=0.01), name
    check = card["check_slice"]
    positions = data.batch_positions(len(test_split), size=check["size"], seed=check["seed"])
    sliced = result.correct[torch.tensor(positions)].float().mean().item()
    assert sliced == pytest.approx(check["accuracy"], abs=SLICE_TOLERANCE)
