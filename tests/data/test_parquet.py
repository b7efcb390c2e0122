"""Hugging Face Parquet datasets as a source: shards written here as the Hub lays them out
(image struct of bytes and path, a ClassLabel column, the dataset card and the features in
the schema metadata), read back lazily with their labels, names and pixels."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from gradpick import data
from gradpick.data import parquet
from gradpick.data.decoding import decode
from gradpick.errors import DataError
from gradpick.models.spec import InputSpec
from gradpick.outputs import stores as stored

NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CARD = """---
dataset_info:
  features:
  - name: img
    dtype: image
  - name: label
    dtype:
      class_label:
        names:
{names}
  splits:
  - name: train
  - name: test
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
  - split: test
    path: data/test-*
---
# A tiny CIFAR-10 sample
"""


def _shard(path: Path, rows: list[tuple[bytes, str, int]], features: bool) -> None:
    table = pa.table(
        {
            "img": pa.array(
                [{"bytes": content, "path": name} for content, name, _ in rows],
                pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
            ),
            "label": pa.array([label for _, _, label in rows], pa.int64()),
        }
    )
    if features:
        info = {
            "info": {
                "features": {
                    "img": {"_type": "Image"},
                    "label": {"names": list(NAMES), "_type": "ClassLabel"},
                }
            }
        }
        table = table.replace_schema_metadata({"huggingface": json.dumps(info)})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=3)


@pytest.fixture(scope="module")
def hub_rows(shared_cifar10_dir: Path) -> dict[str, list[tuple[bytes, str, int]]]:
    """Real CIFAR-10 JPEGs, each class twice, per split, as (bytes, file name, label)."""
    rows: dict[str, list[tuple[bytes, str, int]]] = {}
    for split in ("train", "test"):
        chosen = []
        for label, name in enumerate(NAMES):
            for path in sorted((shared_cifar10_dir / split / name).glob("*.jpg"))[:2]:
                chosen.append((path.read_bytes(), f"{name}/{path.name}", label))
        rows[split] = chosen[::2] + chosen[1::2]  # classes interleaved, as a shuffled dataset
    return rows


def _dataset(root: Path, rows: dict[str, list[tuple[bytes, str, int]]], card: bool) -> Path:
    train = rows["train"]
    _shard(root / "data" / "train-00000-of-00002.parquet", train[:11], features=not card)
    _shard(root / "data" / "train-00001-of-00002.parquet", train[11:], features=not card)
    _shard(root / "data" / "test-00000-of-00001.parquet", rows["test"], features=not card)
    if card:
        names = "\n".join(f"          '{i}': {name}" for i, name in enumerate(NAMES))
        (root / "README.md").write_text(CARD.format(names=names))
    return root


@pytest.mark.parametrize("card", [True, False], ids=["dataset-card", "schema-features"])
@pytest.mark.parametrize("split", ["train", "test"])
def test_labels_names_and_pixels_round_trip(
    tmp_path: Path, hub_rows: dict[str, list[tuple[bytes, str, int]]], card: bool, split: str
) -> None:
    root = _dataset(tmp_path, hub_rows, card)
    spec = InputSpec(size=(48, 40), resize_mode="warp")
    source = data.open_source(root, split, spec)
    rows = hub_rows[split]
    assert isinstance(source, data.ParquetSource) and len(source) == len(rows)
    assert source.class_names == NAMES and source.split == split
    assert source.labels() is not None
    assert source.labels().tolist() == [label for _, _, label in rows]
    names = source.names(range(len(source)))
    shard = "data/test-00000-of-00001.parquet" if split == "test" else ""
    assert len(set(names)) == len(rows)
    if split == "test":
        assert names[:2] == [f"{shard}#0", f"{shard}#1"]
    else:
        assert names[11] == "data/train-00001-of-00002.parquet#0"
    expected = torch.stack([decode(content, "x", spec).pixels for content, _, _ in rows])
    assert torch.equal(source.read(range(len(source))), expected)
    assert source.origin()["kind"] == "parquet"


def test_a_pass_streams_it_through_workers_like_a_folder(
    tmp_path: Path, hub_rows: dict[str, list[tuple[bytes, str, int]]]
) -> None:
    source = data.open_source(_dataset(tmp_path, hub_rows, card=True), "train")
    chunks = list(data.stream(source, chunk_size=4, workers=1))
    positions = [p for chunk in chunks for p in chunk.positions]
    assert positions == list(range(len(source)))
    assert torch.equal(torch.cat([c.images for c in chunks]), source.read(positions))


def test_opening_reads_no_image_bytes(
    tmp_path: Path, hub_rows: dict[str, list[tuple[bytes, str, int]]], monkeypatch
) -> None:
    root = _dataset(tmp_path, hub_rows, card=True)
    read_columns: list[list[str] | None] = []
    original = pq.ParquetFile.read

    def spy(self: pq.ParquetFile, columns: list[str] | None = None, **kwargs: object) -> pa.Table:
        read_columns.append(columns)
        return original(self, columns=columns, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read", spy)
    monkeypatch.setattr(parquet, "_row_group", None)  # any image read would fail
    source = data.open_source(root, "train")
    assert len(source) == 20 and read_columns == [["label"], ["label"]]


def test_a_store_of_it_reopens_its_images(
    tmp_path: Path, hub_rows: dict[str, list[tuple[bytes, str, int]]]
) -> None:
    root = _dataset(tmp_path / "hub", hub_rows, card=True)
    out = tmp_path / "store"
    command = [sys.executable, "-m", "gradpick", "infer", "--model", "tutorial", "--data"]
    finished = subprocess.run(
        [*command, str(root), "--split", "train", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr
    opened = stored.open_stored(str(out))
    source = stored.stored_source(opened)
    assert isinstance(source, data.ParquetSource) and len(source) == len(opened) == 20
    assert source.labels().tolist() == [label for _, _, label in hub_rows["train"]]


def test_a_split_it_does_not_have_names_the_ones_it_has(
    tmp_path: Path, hub_rows: dict[str, list[tuple[bytes, str, int]]]
) -> None:
    root = tmp_path / "only-train"
    _shard(root / "data" / "train-00000-of-00001.parquet", hub_rows["train"], features=True)
    with pytest.raises(DataError, match="no 'test' shards; its splits: train"):
        data.open_source(root, "test")


def test_one_file_without_split_or_names_still_reads(
    tmp_path: Path, hub_rows: dict[str, list[tuple[bytes, str, int]]]
) -> None:
    path = tmp_path / "sample.parquet"
    _shard(path, hub_rows["test"], features=False)
    source = data.open_source(path)
    assert source.class_names == tuple(str(i) for i in range(10)) and len(source) == 20


def test_a_table_without_images_is_refused_with_its_columns(tmp_path: Path) -> None:
    path = tmp_path / "numbers.parquet"
    pq.write_table(pa.table({"x": [1, 2], "label": [0, 1]}), path)
    with pytest.raises(DataError, match="no image column.*x, label"):
        data.open_source(path)


def test_a_row_without_bytes_is_a_data_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    image = io.BytesIO()
    Image.new("RGB", (8, 8)).save(image, format="PNG")
    _shard(path, [(image.getvalue(), "a.png", 0), (b"", "b.png", 1)], features=True)
    source = data.open_source(path)
    assert source.read([0]).shape == (1, 3, 32, 32)
    with pytest.raises(DataError, match="no image bytes"):
        source.read([1])


def _saved(root: Path, rows: dict[str, list[tuple[bytes, str, int]]]) -> Path:
    """``datasets``' own ``save_to_disk`` of the rows: a DatasetDict of both splits, written
    by the library, with the JPEG bytes kept as they are."""
    datasets = pytest.importorskip("datasets", reason="datasets writes the save_to_disk folder")
    features = datasets.Features(
        {"img": datasets.Image(), "label": datasets.ClassLabel(names=NAMES)}
    )
    splits = {
        split: datasets.Dataset.from_dict(
            {
                "img": [{"bytes": content, "path": name} for content, name, _ in chosen],
                "label": [label for _, _, label in chosen],
            },
            features=features,
        )
        for split, chosen in rows.items()
    }
    datasets.DatasetDict(splits).save_to_disk(str(root))
    return root


@pytest.mark.parametrize("split", ["train", "test"])
def test_a_save_to_disk_folder_reads_as_the_dataset_it_holds(
    tmp_path: Path, hub_rows: dict[str, list[tuple[bytes, str, int]]], split: str
) -> None:
    root = _saved(tmp_path / "saved", hub_rows)
    spec = InputSpec(size=(40, 40))
    source = data.open_source(root, split, spec)
    rows = hub_rows[split]
    assert source.class_names == NAMES and source.split == split and len(source) == len(rows)
    assert source.labels() is not None
    assert source.labels().tolist() == [label for _, _, label in rows]
    expected = torch.stack([decode(content, "x", spec).pixels for content, _, _ in rows])
    assert torch.equal(source.read(range(len(source))), expected)
    assert source.names([0]) == [f"{split}/data-00000-of-00001.arrow#0"]
    # One split's own folder (a Dataset's save_to_disk) is read whole, whatever split is asked.
    alone = data.open_source(root / split, "test", spec)
    assert len(alone) == len(rows) and torch.equal(alone.read([1]), expected[1:2])


def test_a_save_to_disk_folder_without_the_split_names_the_ones_it_has(
    tmp_path: Path, hub_rows: dict[str, list[tuple[bytes, str, int]]]
) -> None:
    root = _saved(tmp_path / "saved", {"train": hub_rows["train"]})
    with pytest.raises(DataError, match="no 'test' split; its splits: train"):
        data.open_source(root, "test")
