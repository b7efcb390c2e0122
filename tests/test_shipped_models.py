"""The weights in assets/ are the ones their cards describe, and still as accurate as claimed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from gradpick import data, models
from gradpick.infer import infer

TARGET_ACCURACY = {"tutorial": 0.60, "resnet20": 0.90}
"""The accuracy each shipped model must reach on the 10,000 CIFAR-10 test images (issue 3)."""


def _shared_test_split() -> Path:
    configured = os.environ.get(data.CIFAR10_DIR_ENV)
    root = Path(configured) if configured else Path(__file__).parents[2] / "shared/data/cifar10-jpg"
    if not (root / "test").is_dir():
        pytest.skip(
            f"real CIFAR-10 test split not found at {root}/test (set {data.CIFAR10_DIR_ENV})"
        )
    return root


@pytest.fixture(params=list(models.ARCHITECTURES))
def shipped(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if not models.shipped_weights_path(name).is_file():
        pytest.skip(f"no shipped weights for {name} in {models.assets_dir()}")
    return name


def test_card_matches_weights_file(shipped: str) -> None:
    card = models.model_card(shipped)
    assert card is not None, f"{shipped}.pt ships without {shipped}.json"
    assert card["sha256"] == models.sha256_file(models.shipped_weights_path(shipped))
    assert card["weights_file"] == f"{shipped}.pt"
    assert card["parameters"] == sum(p.numel() for p in models.build(shipped).parameters())
    assert card["evaluated_images"] == 10_000
    assert card["test_accuracy"] >= TARGET_ACCURACY[shipped]
    assert set(card["per_class_accuracy"]) == set(data.CIFAR10_CLASSES)
    assert models.shipped_weights_path(shipped).stat().st_size < 5_000_000


def test_shipped_model_loads_ready(shipped: str) -> None:
    model = models.load(shipped)
    assert not model.training
    assert not any(parameter.requires_grad for parameter in model.parameters())


def test_accuracy_on_fixed_slice_matches_card(shipped: str) -> None:
    """Re-measure the card's seeded 1,000-image check slice; rounding may flip a few borderline
    predictions between machines, so allow 0.5 percentage points."""
    card = models.model_card(shipped)
    assert card is not None
    check = card["check_slice"]
    source = data.open_source(_shared_test_split(), "test")
    batch = data.load_batch(source, size=check["size"], seed=check["seed"])
    assert batch.labels is not None
    result = infer(models.load(shipped), batch.images, batch.labels)
    assert result.accuracy == pytest.approx(check["accuracy"], abs=0.005)
    assert torch.equal(batch.labels, result.labels)
