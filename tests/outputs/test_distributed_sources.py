"""Ray inference from the sources and models of Hugging Face: a Hub-layout Parquet dataset
(rows of its shards, read by the workers) and an ``hf:`` model saved to a folder, each store
equal to the one written in this process from the same rows.

One small local Ray instance for the module; deselect with ``-m "not distributed"``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gradpick import data
from gradpick.data import CIFAR10_CLASSES
from gradpick.models import zoo
from gradpick.outputs import distributed
from gradpick.outputs import store_format as store
from gradpick.outputs import stores as stored
from tests.data.test_parquet import _dataset, hub_rows
from tests.outputs.local_ray import local_ray

pytestmark = pytest.mark.distributed

ray = pytest.importorskip("ray", reason="Ray is the optional extra gradpick[distributed]")

__all__ = ["hub_rows"]  # the Parquet writer's fixture, used here


@pytest.fixture(scope="module", autouse=True)
def ray_session() -> Iterator[None]:
    """One local Ray instance; its workers inherit this environment (Hugging Face offline)."""
    with local_ray({"HF_HUB_OFFLINE": "1"}):
        yield


def _on_ray(loaded: zoo.LoadedModel, source: Any, out: Path) -> None:
    """``gradpick infer --engine ray`` as the command runs it."""
    positions = list(range(len(source)))
    root, rows = distributed.source_rows(source, positions, loaded.classes)
    distributed.infer_on_ray(
        distributed.model_recipe(loaded.name),
        rows,
        root,
        loaded.spec,
        store.store_metadata(loaded.identity(), loaded.spec, source),
        out,
        distributed.ClusterOptions(workers=1, batch_size=16),  # two batches, one worker
    )


def _list(table: Any, column: str) -> torch.Tensor:
    return torch.tensor(np.stack(table.column(column).to_numpy(zero_copy_only=False)))


def _assert_same_store(ray_out: Path, here_out: Path) -> store.OpenedStore:
    """The two stores hold the same rows, columns and output kind (floats up to rounding)."""
    on_ray, here = store.open_store(ray_out), store.open_store(here_out)
    assert on_ray.table.schema.remove_metadata() == here.table.schema.remove_metadata()
    assert on_ray.metadata["output"] == here.metadata["output"]
    assert on_ray.metadata["source"]["fingerprint"] == here.metadata["source"]["fingerprint"]
    for column in ("position", "name", "label", "prediction"):
        assert on_ray.table.column(column).to_pylist() == here.table.column(column).to_pylist()
    for column in ("confidence", "loss"):
        torch.testing.assert_close(
            torch.tensor(on_ray.table.column(column).to_pylist()),
            torch.tensor(here.table.column(column).to_pylist()),
        )
    lists = [c for c in ("logits", "probabilities") if c in here.table.column_names]
    for column in lists:
        torch.testing.assert_close(_list(on_ray.table, column), _list(here.table, column))
    return on_ray


def test_a_hub_parquet_dataset_on_ray_equals_its_store_in_this_process(
    hub_rows: dict[str, list[tuple[bytes, str, int]]], tmp_path: Path
) -> None:
    root = _dataset(tmp_path / "hub", hub_rows, card=True)
    loaded = zoo.load_model("resnet20")  # its shipped weights
    source = data.open_source(root, split="train", spec=loaded.spec)
    assert len(source.shards) == 2 and len(source) == 20  # rows across shards and row groups
    _on_ray(loaded, source, tmp_path / "ray")
    stored.infer_to_store(loaded, source, range(len(source)), tmp_path / "here")
    opened = _assert_same_store(tmp_path / "ray", tmp_path / "here")
    assert opened.table.column("name").to_pylist()[0] == "data/train-00000-of-00002.parquet#0"
    assert opened.table.column("label").null_count == 0


@pytest.fixture(scope="module")
def multi_label_hf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Hugging Face ResNet of CIFAR-10's labels, multi-label, saved offline."""
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("hf-resnet")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        config = transformers.ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=10,
            id2label=dict(enumerate(CIFAR10_CLASSES)),
            label2id={name: i for i, name in enumerate(CIFAR10_CLASSES)},
            problem_type="multi_label_classification",
        )  # fmt: skip
        transformers.ResNetForImageClassification(config).save_pretrained(folder)
    transformers.BitImageProcessor(
        size={"shortest_edge": 40}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(folder)
    return folder


def test_an_hf_model_on_ray_equals_its_store_in_this_process(
    multi_label_hf: Path, generated_folder: Path, tmp_path: Path
) -> None:
    loaded = zoo.load_model(f"hf:{multi_label_hf}")
    assert loaded.kind == "hf" and loaded.output == "sigmoid"
    source = data.image_folder(generated_folder / "test", spec=loaded.spec)
    _on_ray(loaded, source, tmp_path / "ray")
    stored.infer_to_store(loaded, source, range(len(source)), tmp_path / "here")
    opened = _assert_same_store(tmp_path / "ray", tmp_path / "here")
    # each label's own probability, through the workers' model too
    torch.testing.assert_close(
        _list(opened.table, "probabilities"), torch.sigmoid(_list(opened.table, "logits"))
    )
    assert opened.metadata["model"]["identity"] == loaded.store_identity
    assert os.environ["HF_HUB_OFFLINE"] == "1"
