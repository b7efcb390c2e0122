"""Stored outputs: Parquet rows from logits, metadata, atomic publishing and refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import torch
import torch.nn.functional as F

from gradpick import store
from gradpick.data import image_folder
from gradpick.errors import DataError
from gradpick.spec import InputSpec
from gradpick.store import StoreWriter, check_store, open_store, output_table, store_metadata

MODEL = {"identity": "tiny:abc", "name": "tiny", "weights_sha256": "abc"}


@pytest.fixture
def source(image_folder_factory: Any) -> Any:
    return image_folder(image_folder_factory(classes=2, per_class=3))


def write(out: Path, source: Any, rows: int = 6, labels: bool = True, embed: bool = False) -> Any:
    torch.manual_seed(0)
    logits = torch.randn(rows, 4)
    label_tensor = torch.arange(rows) % 4 if labels else None
    features = torch.randn(rows, 3) if embed else None
    metadata = store_metadata(MODEL, InputSpec(size=(64, 64)), source, embeddings=embed)
    with StoreWriter(out, metadata, embeddings=embed) as writer:
        for start in range(0, rows, 4):
            part = slice(start, start + 4)
            positions = list(range(rows))[part]
            writer.write(
                output_table(
                    positions,
                    [f"image{p}.png" for p in positions],
                    None if label_tensor is None else label_tensor[part],
                    logits[part],
                    None if features is None else features[part],
                )
            )
    return logits, label_tensor, features


def test_a_store_round_trips_columns_dtypes_and_metadata(tmp_path: Path, source: Any) -> None:
    logits, labels, features = write(tmp_path / "out", source, embed=True)
    opened = open_store(tmp_path / "out")
    table = opened.table
    assert table.column_names == [
        "position", "name", "label", "prediction", "confidence", "loss", "logits", "embedding"
    ]  # fmt: skip
    types = {field.name: field.type for field in table.schema}
    assert types["position"] == pa.int64() and types["label"] == pa.int64()
    assert types["confidence"] == pa.float32() and types["loss"] == pa.float32()
    assert types["logits"] == pa.list_(pa.float32())
    assert table["position"].to_pylist() == list(range(6))
    assert torch.equal(torch.tensor(table["logits"].to_pylist()), logits)
    assert torch.equal(torch.tensor(table["embedding"].to_pylist()), features)
    assert table["prediction"].to_pylist() == logits.argmax(dim=1).tolist()
    losses = F.cross_entropy(logits, labels, reduction="none")
    assert torch.allclose(torch.tensor(table["loss"].to_pylist()), losses)
    meta = opened.metadata
    assert meta["format"] == store.STORE_FORMAT and meta["model"] == MODEL
    assert meta["input_spec"]["size"] == [64, 64]
    assert meta["source"]["fingerprint"] == source.fingerprint()
    assert meta["source"]["root"] == str(source.root) and meta["source"]["count"] == 6
    assert ds.dataset(str(tmp_path / "out")).to_table().num_rows == 6  # any reader sees one table


def test_without_labels_the_label_and_loss_are_null(tmp_path: Path, source: Any) -> None:
    write(tmp_path / "out", source, labels=False)
    table = open_store(tmp_path / "out").table
    assert table["label"].null_count == 6 and table["loss"].null_count == 6
    assert "embedding" not in table.column_names


def test_a_store_of_another_model_is_refused(tmp_path: Path, source: Any) -> None:
    write(tmp_path / "out", source)
    opened = open_store(tmp_path / "out")
    check_store(opened, "tiny:abc")
    with pytest.raises(DataError, match="written by model tiny:abc, not by resnet20:fff"):
        check_store(opened, "resnet20:fff")
    assert store.store_is_current(opened, source.fingerprint())
    assert not store.store_is_current(opened, "changed")


def test_an_interrupted_write_leaves_nothing_that_opens(tmp_path: Path, source: Any) -> None:
    metadata = store_metadata(MODEL, InputSpec(), source)
    table = output_table([0], ["a.png"], None, torch.zeros(1, 4))
    with pytest.raises(KeyboardInterrupt), StoreWriter(tmp_path / "out", metadata) as writer:
        writer.write(table)
        raise KeyboardInterrupt
    with pytest.raises(DataError, match="no stored outputs here"):
        open_store(tmp_path / "out")
    assert not [path for path in tmp_path.iterdir() if "out" in path.name]


def test_a_killed_runs_parts_never_open_and_are_removed_by_the_next_run(
    tmp_path: Path, source: Any
) -> None:
    import pyarrow.parquet as pq

    killed = tmp_path / ".out.partial-0123456789ab"
    killed.mkdir()
    table = output_table([0], ["a.png"], None, torch.zeros(1, 4))
    pq.write_table(table, killed / "part-00000.parquet")  # what a killed process leaves
    with pytest.raises(DataError, match="no stored outputs here"):
        open_store(tmp_path / "out")
    writer = StoreWriter(tmp_path / "out", store_metadata(MODEL, InputSpec(), source))
    assert writer.discarded == 1 and not killed.exists()


def test_late_metadata_reaches_every_part(
    tmp_path: Path, source: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "PART_ROWS", 2)
    metadata = store_metadata(MODEL, InputSpec(), source)
    with StoreWriter(tmp_path / "out", metadata) as writer:
        for position in range(5):
            writer.write(output_table([position], ["x"], None, torch.zeros(1, 3)))
        writer.annotate(skipped=["broken.png: not a readable image"])
    parts = sorted((tmp_path / "out").glob("*.parquet"))
    assert len(parts) == 3
    for part in parts:
        assert b"broken.png" in pa.parquet.read_schema(part).metadata[store.METADATA_KEY]
    assert open_store(tmp_path / "out").metadata["skipped"] == ["broken.png: not a readable image"]


def test_another_format_or_foreign_parquet_is_refused(tmp_path: Path, source: Any) -> None:
    import pyarrow.parquet as pq

    (tmp_path / "foreign").mkdir()
    pq.write_table(pa.table({"x": [1]}), tmp_path / "foreign" / "part.parquet")
    with pytest.raises(DataError, match="not written by gradpick"):
        open_store(tmp_path / "foreign")
    write(tmp_path / "old", source)
    part = next((tmp_path / "old").glob("*.parquet"))
    table = pq.read_table(part)
    meta = table.schema.metadata[store.METADATA_KEY].replace(b'"format": 1', b'"format": 99')
    pq.write_table(table.replace_schema_metadata({store.METADATA_KEY: meta}), part)
    with pytest.raises(DataError, match="store format 99.*Infer again"):
        open_store(tmp_path / "old")
