"""One export schema: the CLI's files and the explorer's downloads hold the same arrays and JSON
fields for the same request, and the README documents every one of them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from gradpick import attribution, data, export, models
from gradpick.cli import main
from gradpick.errors import InputError
from gradpick.request import GradientRequest
from gradpick.ui import heatmaps, service
from gradpick.ui.heatmaps import HeatmapRequest

README = Path(__file__).resolve().parents[1] / "README.md"
PICKED = [7, 2, 9]
STEP_FIELDS = (
    "schema", "arrays", "shape", "dtype", "rows", "k", "indices", "source_positions",
    "image_names", "labels", "target", "quantity", "classes", "class_names", "method",
    "strategy", "reduction", "chunks",
)  # fmt: skip
"""The fields that describe the step itself (the rest say where, when and how long)."""


@pytest.fixture
def folder(image_folder_factory) -> Path:
    return image_folder_factory(classes=3, per_class=4)


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        state = models.build("tutorial").state_dict()
    path = tmp_path / "tutorial.pt"
    torch.save(state, path)
    return path


def _explorer_export(folder: Path, weights: Path, request: HeatmapRequest) -> export.Export:
    """What the explorer's downloads hold for ``PICKED`` of the whole folder."""
    choice = service.DataChoice(kind="folder", folder=str(folder), size=None)
    batch = data.load_batch(data.image_folder(folder))
    model = models.load("tutorial", weights)
    result = heatmaps.compute(model, batch, PICKED, request)
    option = service.ModelOption("tutorial")
    return heatmaps.export_of(
        result,
        batch,
        PICKED,
        request,
        None,
        service.model_record(option),
        service.source_record(choice, batch),
        {"colour_scale": "shared"},
    )


@pytest.mark.parametrize(
    ("arguments", "request_"),
    [
        ([], HeatmapRequest()),
        (
            ["--target", "logit", "--class", "1", "--strategy", "summed"],
            HeatmapRequest(target_mode="class", target_class=1, strategy="summed"),
        ),
    ],
)
@pytest.mark.parametrize("suffix", export.SUFFIXES)
def test_the_cli_and_the_explorer_export_the_same_arrays_and_fields(
    capsys, folder: Path, weights: Path, tmp_path: Path, arguments, request_, suffix: str
) -> None:
    out = tmp_path / f"grads{suffix}"
    indices = ", ".join(str(index) for index in PICKED)
    status = main(
        [
            "grads",
            *("--data", str(folder), "--model", "tutorial", "--weights", str(weights)),
            *("--indices", indices, "--out", str(out), *arguments),
        ]
    )
    assert status == 0, capsys.readouterr().err
    explorer = _explorer_export(folder, weights, request_)
    if suffix == ".npz":
        from_cli = dict(np.load(out, allow_pickle=False))
        from_explorer = dict(np.load(io.BytesIO(export.npz_bytes(explorer)), allow_pickle=False))
    else:
        from_cli = torch.load(out, weights_only=True)
        from_explorer = torch.load(io.BytesIO(export.pt_bytes(explorer)), weights_only=True)
    assert list(from_cli) == list(from_explorer)
    for name, value in from_cli.items():
        if isinstance(value, torch.Tensor | np.ndarray):
            np.testing.assert_array_equal(np.asarray(value), np.asarray(from_explorer[name]))
        else:
            assert value == from_explorer[name], name
    sidecar = json.loads(out.with_suffix(".json").read_text())
    report = json.loads(export.metadata_json(explorer))
    assert list(sidecar) == list(export.FIELDS)
    assert list(report) == [*export.FIELDS, "explorer"]
    assert {name: sidecar[name] for name in STEP_FIELDS} == {
        name: report[name] for name in STEP_FIELDS
    }
    assert sidecar["target_values"] == pytest.approx(report["target_values"], rel=1e-6)
    assert list(sidecar["model"]) == list(report["model"])
    assert list(sidecar["source"]) == list(report["source"]) and sidecar["source"]["N"] == 12


def test_images_are_the_pixels_the_gradients_are_taken_with_respect_to(
    tiny_cnn: nn.Module, random_batch
) -> None:
    images, labels = random_batch
    request = GradientRequest.build(tiny_cnn, images, [4, 0, 4], labels)
    result = attribution.Gradient().attribute(request)
    arrays = export.arrays(_plain_export(result, request))
    assert list(arrays) == list(export.ARRAYS)
    np.testing.assert_array_equal(arrays["images"], images[[4, 0, 4]].numpy())
    assert arrays["images"].shape == arrays["gradients"].shape == arrays["maps"].shape
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
        model=export.model_record("tiny", "memory", None, None),
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


def test_the_readme_documents_every_array_and_field() -> None:
    text = README.read_text().split("## Export schema", 1)[1].split("\n## ", 1)[0]
    for name in (*export.ARRAYS, *export.FIELDS):
        assert f"| `{name}` |" in text, f"README's export table lacks {name}"
