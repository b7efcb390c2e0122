"""One export schema: its arrays (the pixels among them), its JSON, its files, and the docs'
table of them. That ``gradpick grads`` and the explorer write the same is in test_cli."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from gradpick import attribution
from gradpick.errors import InputError
from gradpick.gradients.request import GradientRequest
from gradpick.share import export

EXPORT_PAGE = Path(__file__).resolve().parents[2] / "docs" / "export.md"


def test_images_are_the_pixels_the_gradients_are_taken_with_respect_to(
    tiny_cnn: nn.Module, random_batch
) -> None:
    images, labels = random_batch
    request = GradientRequest.build(tiny_cnn, images, [4, 0, 4], labels)
    result = attribution.Gradient().attribute(request)
    arrays = export.arrays(_plain_export(result, request))
    assert list(arrays) == list(export.ARRAYS)
    np.testing.assert_array_equal(arrays["images"], images[[4, 0, 4]].numpy())
    assert arrays["images"].shape == arrays["gradients"].shape == arrays["channel_maps"].shape
    picked = images[[4, 0, 4]].clone().requires_grad_(True)
    loss = nn.functional.cross_entropy(tiny_cnn(picked), labels[[4, 0, 4]], reduction="sum")
    (expected,) = torch.autograd.grad(loss, picked)
    np.testing.assert_allclose(arrays["gradients"], expected.numpy(), rtol=1e-5, atol=1e-7)


def _plain_export(result: attribution.Attribution, request: GradientRequest) -> export.Export:
    indices = request.indices.tolist()
    return export.Export(
        result,
        indices=indices,
        images=request.picked_images,
        positions=indices,
        names=[f"image {index}" for index in indices],
        labels=None,
        class_names=(),
        quantity="loss",
        model={"name": "tiny", "weights": "memory"},
        source=export.source_record("random pixels", len(request.images)),
    )


@pytest.mark.parametrize("suffix", export.SUFFIXES)
def test_write_leaves_the_arrays_and_their_json_and_nothing_partial(
    tmp_path: Path, tiny_cnn: nn.Module, random_batch, suffix: str
) -> None:
    images, labels = random_batch
    request = GradientRequest.build(tiny_cnn, images, [1, 2], labels)
    written = _plain_export(attribution.Gradient().attribute(request), request)
    sidecar = export.write(tmp_path / f"x{suffix}", written)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([f"x{suffix}", "x.json"])
    record = json.loads(sidecar.read_text())
    assert record["gradients_file"] == f"x{suffix}" and record["schema"] == export.SCHEMA
    assert record["class_names"] == [str(c) for c in record["classes"]]  # no names given
    with pytest.raises(InputError, match=r"\.pt or \.npz"):
        export.write(tmp_path / "x.csv", written)


def test_the_docs_document_every_array_and_field() -> None:
    text = EXPORT_PAGE.read_text()
    for name in (*export.ARRAYS, *export.FIELDS):
        assert f"| `{name}` |" in text, f"docs/export.md's tables lack {name}"


def test_an_interrupted_write_leaves_no_file_that_looks_whole(
    tmp_path: Path, tiny_cnn: nn.Module, random_batch, monkeypatch: pytest.MonkeyPatch
) -> None:
    images, labels = random_batch
    request = GradientRequest.build(tiny_cnn, images, [1], labels)
    written = _plain_export(attribution.Gradient().attribute(request), request)

    def interrupted(*_: object) -> bytes:
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "metadata_json", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export.write(tmp_path / "x.npz", written)
    assert not (tmp_path / "x.npz").exists() and not (tmp_path / "x.json").exists()
