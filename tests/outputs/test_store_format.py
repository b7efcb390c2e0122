"""Stored outputs: Parquet rows from logits, metadata, atomic publishing and refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import torch
import torch.nn.functional as F

from gradpick.data import image_folder
from gradpick.errors import DataError
from gradpick.models.spec import InputSpec
from gradpick.outputs import store_format as store
from gradpick.outputs.store_format import (
    StoreWriter,
    check_store,
    open_store,
    output_table,
    store_metadata,
)

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


def test_a_store_opened_for_some_columns_reads_only_those_it_has(
    tmp_path: Path, source: Any
) -> None:
    """The page opens a store for its outputs alone: position first (the order), columns the
    store lacks (no embeddings) left out, the rows as the whole store holds them."""
    logits, _, _ = write(tmp_path / "out", source, rows=9)
    opened = open_store(tmp_path / "out", ["logits", "embedding"])
    assert opened.table.column_names == ["position", "logits"]
    assert opened.table["position"].to_pylist() == list(range(9)) and len(opened) == 9
    assert torch.equal(torch.tensor(opened.table["logits"].to_pylist()), logits)
    assert opened.metadata == open_store(tmp_path / "out").metadata


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
    with pytest.raises(DataError, match="store format 99.*Infer again") as raised:
        open_store(tmp_path / "old")
    assert f"format 99 by gradpick {store.__version__};" in str(raised.value)


def test_a_store_is_never_written_inside_another(tmp_path: Path, source: Any) -> None:
    write(tmp_path / "outputs", source)
    with pytest.raises(DataError, match="lies inside the store"):
        write(tmp_path / "outputs" / "train", source)
    assert not (tmp_path / "outputs" / "train").exists()
    assert len(open_store(tmp_path / "outputs")) == 6


def test_a_folder_that_is_not_a_store_is_refused_and_left_as_it_was(
    tmp_path: Path, source: Any
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("keep me")
    with pytest.raises(DataError, match=r"not a gradpick output store \(it holds todo.txt\)"):
        write(notes, source)
    assert (notes / "todo.txt").read_text() == "keep me"
    # a plain folder holding a store is not a store either: writing there would delete it
    write(tmp_path / "outputs" / "train", source)
    with pytest.raises(DataError, match="not a gradpick output store"):
        write(tmp_path / "outputs", source)
    assert len(open_store(tmp_path / "outputs" / "train")) == 6
    empty = tmp_path / "empty"
    empty.mkdir()
    write(empty, source, rows=2)
    assert len(open_store(empty)) == 2


def test_an_earlier_store_is_replaced_and_the_writer_says_so(tmp_path: Path, source: Any) -> None:
    out = tmp_path / "out"
    metadata = store_metadata(MODEL, InputSpec(), source)
    with StoreWriter(out, metadata) as first:
        first.write(output_table([0, 1, 2], ["a", "b", "c"], None, torch.zeros(3, 4)))
    assert first.replaced is None
    with StoreWriter(out, metadata) as second:
        second.write(output_table([0], ["a"], None, torch.ones(1, 4)))
    assert second.replaced == f"replaced the earlier store at {out}"
    assert len(open_store(out)) == 1
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".out")]  # nor retired


def test_a_store_holding_anything_else_is_not_replaced(tmp_path: Path, source: Any) -> None:
    out = tmp_path / "out"
    write(out, source)
    (out / "README.txt").write_text("what these are")
    (out / "old").mkdir()
    with pytest.raises(DataError, match="also holds README.txt, old; replacing it would delete"):
        write(out, source, rows=2)
    assert (out / "README.txt").exists() and (out / "old").is_dir() and len(open_store(out)) == 6


def test_a_store_nested_by_an_earlier_gradpick_is_not_read_as_part_of_it(
    tmp_path: Path, source: Any
) -> None:
    import shutil

    write(tmp_path / "outer", source, rows=6)
    write(tmp_path / "inner", source, rows=3)
    shutil.move(tmp_path / "inner", tmp_path / "outer" / "train")  # what older versions allowed
    assert open_store(tmp_path / "outer").table["position"].to_pylist() == list(range(6))


def tutorial_weights(folder: Path) -> Path:
    from gradpick.models import shipped as models

    weights = folder / "tutorial.pt"
    torch.save(models.build("tutorial").state_dict(), weights)
    return weights


def test_the_cli_refuses_nesting_and_says_when_it_replaces_a_store(
    tmp_path: Path, source: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from gradpick.cli import main

    weights = tutorial_weights(tmp_path)
    infer = ["infer", "--model", "tutorial", "--weights", str(weights), "--data", str(source.root)]
    outputs = tmp_path / "outputs"
    assert main([*infer, "--out", str(outputs)]) == 0
    assert "replaced" not in capsys.readouterr().out
    assert main([*infer, "--out", str(outputs / "train")]) != 0
    assert "lies inside the store" in capsys.readouterr().err
    assert not (outputs / "train").exists()
    assert main([*infer, "--size", "2", "--out", str(outputs)]) == 0
    assert f"note: replaced the earlier store at {outputs}" in capsys.readouterr().out
    assert len(open_store(outputs)) == 2


def test_a_store_opens_from_any_folder_and_after_moving_with_its_images(
    tmp_path: Path, image_folder_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from gradpick.cli import main
    from gradpick.outputs import stores as stored

    project = tmp_path / "project"
    project.mkdir()
    shutil.move(image_folder_factory(classes=2, per_class=2), project / "photos")
    weights = tutorial_weights(tmp_path)
    monkeypatch.chdir(project)
    infer = ["infer", "--model", "tutorial", "--weights", str(weights), "--data", "photos"]
    assert main([*infer, "--out", "outputs"]) == 0
    monkeypatch.chdir(tmp_path)  # another working folder
    opened = open_store(project / "outputs")
    assert opened.metadata["source"]["root"] == str(project / "photos")
    assert stored.stored_source(opened).root == project / "photos"
    shutil.move(project, tmp_path / "moved")  # the pair moved together
    opened = open_store(tmp_path / "moved" / "outputs")
    assert stored.stored_source(opened).root.resolve() == tmp_path / "moved" / "photos"


def test_a_store_written_at_another_input_spec_is_refused(tmp_path: Path, source: Any) -> None:
    from gradpick.models.zoo import load_model

    weights = tutorial_weights(tmp_path)
    at_32 = load_model("tutorial", weights, "cpu")
    cropped = load_model("tutorial", weights, "cpu", resize=36)
    assert at_32.weights_sha256 == cropped.weights_sha256  # the same net, its images cropped
    metadata = store_metadata(at_32.identity(), at_32.spec, source)
    with StoreWriter(tmp_path / "out", metadata) as writer:
        writer.write(output_table([0], ["a.png"], None, torch.zeros(1, 10)))
    opened = open_store(tmp_path / "out")
    check_store(opened, at_32.store_identity)
    with pytest.raises(DataError, match="written by model tutorial:.*choose that model"):
        check_store(opened, cropped.store_identity)


@pytest.mark.parametrize(
    ("written", "message"),
    [([0, 1, 3], r"3 rows for 4 images \(1 missing, 0 repeated\)"),
     ([0, 1, 2, 2, 3], r"5 rows for 4 images \(0 missing, 1 repeated\)"),
     ([0, 1, 2, 2], r"4 rows for 4 images \(1 missing, 1 repeated\)")],
)  # fmt: skip
def test_a_ray_run_missing_or_repeating_a_position_is_not_published(
    tmp_path: Path, written: list[int], message: str
) -> None:
    """The cluster's parts must hold each image once: a lost or retried block is refused."""
    import pyarrow.parquet as pq

    from gradpick.errors import ClusterError
    from gradpick.outputs.distributed import _check_every_row_once, _written_positions

    partial = tmp_path / ".out.partial-0123456789ab"
    partial.mkdir()
    for part, positions in enumerate([written[:2], written[2:]]):
        table = output_table(
            positions, ["x"] * len(positions), None, torch.zeros(len(positions), 3)
        )
        pq.write_table(table, partial / f"part-{part}.parquet")
    with pytest.raises(ClusterError, match=message + "; the store was not published"):
        _check_every_row_once(_written_positions(partial), [0, 1, 2, 3])
    # The same rows pass when they are the images asked for.
    _check_every_row_once(_written_positions(partial), sorted(written))


def test_a_users_own_parquet_is_neither_replaced_nor_taken_for_a_store_around_out(
    tmp_path: Path, source: Any
) -> None:
    import pyarrow.parquet as pq

    project = tmp_path / "project"
    project.mkdir()
    pq.write_table(pa.table({"x": [1]}), project / "mine.parquet")  # not gradpick's
    with pytest.raises(DataError, match=r"not a gradpick output store \(it holds mine.parquet\)"):
        write(project, source)
    assert pq.read_table(project / "mine.parquet").num_rows == 1
    write(project / "outputs", source)  # beside the user's file, not inside a store
    assert len(open_store(project / "outputs")) == 6


def test_parts_another_writer_put_are_adopted_with_the_stores_metadata(
    tmp_path: Path, source: Any
) -> None:
    """Ray's Parquet writer fills ``partial`` itself; its parts may lack the metadata."""
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    with StoreWriter(out, store_metadata(MODEL, InputSpec(), source)) as writer:
        for name, positions in [("b_000000.parquet", [2, 3, 4]), ("a_000000.parquet", [0, 1])]:
            table = output_table(positions, ["x"] * len(positions), None, torch.eye(5)[positions])
            pq.write_table(table.replace_schema_metadata(None), writer.partial / name)
        assert writer.adopt_parts() == 5 and writer.rows == 5
        for part in writer.partial.glob("*.parquet"):  # rewritten at once, not only at publish
            assert pq.read_schema(part).metadata == writer.schema.metadata
    assert sorted(path.name for path in out.iterdir()) == ["a_000000.parquet", "b_000000.parquet"]
    opened = open_store(out)
    assert opened.table["position"].to_pylist() == [0, 1, 2, 3, 4]
    assert torch.equal(torch.tensor(opened.table["logits"].to_pylist()), torch.eye(5))


def test_parts_read_out_of_position_order_open_sorted_and_in_order_as_they_are(
    tmp_path: Path, source: Any
) -> None:
    """Parts are read in their names' order: a distributed run's may hold later positions
    first, and the store still opens ordered by position, each row with its own outputs."""
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    with StoreWriter(out, store_metadata(MODEL, InputSpec(), source)) as writer:
        for name, positions in [("a_000000.parquet", [3, 4]), ("b_000000.parquet", [0, 1, 2])]:
            table = output_table(positions, ["x"] * len(positions), None, torch.eye(5)[positions])
            pq.write_table(table.replace_schema_metadata(None), writer.partial / name)
        writer.adopt_parts()
    opened = open_store(out)
    assert opened.table["position"].to_pylist() == [0, 1, 2, 3, 4]
    assert torch.equal(torch.tensor(opened.table["logits"].to_pylist()), torch.eye(5))
    in_order = open_store(out, ["logits"])
    assert in_order.table["position"].to_pylist() == [0, 1, 2, 3, 4]


def test_a_part_with_other_columns_is_refused_and_nothing_is_published(
    tmp_path: Path, source: Any
) -> None:
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    with (
        pytest.raises(DataError, match=r"part.parquet: columns \['position', 'name'\] are not"),
        StoreWriter(out, store_metadata(MODEL, InputSpec(), source)) as writer,
    ):
        pq.write_table(pa.table({"position": [0], "name": ["a"]}), writer.partial / "part.parquet")
        writer.adopt_parts()
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


def test_the_schema_says_which_columns_may_be_null_and_carries_no_metadata_unasked() -> None:
    schema = store.output_schema()
    nullable = {field.name: field.nullable for field in schema}
    assert nullable == {
        "position": False, "name": False, "label": True, "prediction": False,
        "confidence": False, "loss": True, "logits": False,
    }  # fmt: skip
    assert schema.metadata is None
    assert not store.output_schema(embeddings=True).field("embedding").nullable


def test_rows_are_derived_in_float32_from_half_precision_outputs() -> None:
    """A half-precision model's logits: softmax and loss in float32, labels of any integer type,
    as written out by hand here (exp over the sum, minus the log of the label's share)."""
    logits = (torch.randn(4, 3, generator=torch.Generator().manual_seed(1)) * 4).half()
    labels = torch.tensor([0, 2, 1, 2], dtype=torch.int32)
    table = output_table(
        range(4), list("abcd"), labels, logits, logits[:, :2], metadata={"made": "here"}
    )
    wide = logits.float()
    shares = wide.exp() / wide.exp().sum(dim=1, keepdim=True)
    confidence = torch.tensor(table["confidence"].to_pylist())
    assert torch.allclose(confidence, shares.max(dim=1).values, rtol=0, atol=1e-6)
    picked = shares[torch.arange(4), labels.long()]
    assert torch.allclose(torch.tensor(table["loss"].to_pylist()), -picked.log(), atol=1e-5)
    assert table["label"].to_pylist() == [0, 2, 1, 2]
    assert torch.equal(torch.tensor(table["logits"].to_pylist()), wide)
    assert torch.equal(torch.tensor(table["embedding"].to_pylist()), wide[:, :2])
    assert table.schema.metadata == {store.METADATA_KEY: b'{"made": "here"}'}


@pytest.mark.parametrize("width", [0, 1, 2])
def test_embeddings_of_any_width_are_one_list_per_row(width: int) -> None:
    features = torch.arange(3 * width, dtype=torch.float32).reshape(3, width)
    table = output_table([0, 1, 2], ["a", "b", "c"], None, torch.zeros(3, 2), features)
    assert table["embedding"].to_pylist() == features.tolist()


def test_without_pyarrow_the_message_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # importing it now raises ImportError
    message = "Stored outputs need pyarrow: pip install pyarrow (it comes with gradpick)."
    with pytest.raises(DataError) as raised:
        store.output_schema()
    assert str(raised.value) == message


def test_the_batch_is_recorded_else_read_off_the_rows(tmp_path: Path, source: Any) -> None:
    recorded = {"start": 5, "size": 2, "seed": 3, "other": 1}
    metadata = store_metadata(MODEL, InputSpec(), source, batch=recorded)
    assert metadata["batch"] == {"start": 5, "size": 2, "seed": 3}
    assert metadata["class_names"] == list(source.class_names) and metadata["embeddings"] is False
    with StoreWriter(tmp_path / "new", metadata) as writer:
        writer.write(output_table([7, 12], ["x", "y"], None, torch.zeros(2, 3)))
    assert store.stored_batch(open_store(tmp_path / "new")) == {"start": 5, "size": 2, "seed": 3}
    older = store_metadata(MODEL, InputSpec(), source)  # written before batches were recorded
    assert "batch" not in older
    with StoreWriter(tmp_path / "old", older) as writer:
        writer.write(output_table([9, 7, 8], ["x", "y", "z"], None, torch.zeros(3, 3)))
    assert store.stored_batch(open_store(tmp_path / "old")) == {"start": 7, "size": 3, "seed": None}
    with StoreWriter(tmp_path / "empty", older):
        pass  # no rows: one empty part, the batch of one image at 0
    assert [path.name for path in (tmp_path / "empty").iterdir()] == ["part-00000.parquet"]
    empty = open_store(tmp_path / "empty")
    assert len(empty) == 0 and store.stored_batch(empty) == {"start": 0, "size": 1, "seed": None}
    with pytest.raises(ValueError, match="^model metadata needs an 'identity'$"):
        store_metadata({"name": "tiny"}, InputSpec(), source)


def test_parts_are_numbered_from_zero_each_holding_part_rows_in_order(
    tmp_path: Path, source: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.parquet as pq

    monkeypatch.setattr(store, "PART_ROWS", 2)
    with StoreWriter(tmp_path / "out", store_metadata(MODEL, InputSpec(), source)) as writer:
        for position in range(5):
            writer.write(output_table([position], ["x"], None, torch.zeros(1, 3)))
    assert writer.rows == 5
    parts = sorted((tmp_path / "out").iterdir())
    assert [part.name for part in parts] == [f"part-0000{n}.parquet" for n in range(3)]
    held = [pq.read_table(part)["position"].to_pylist() for part in parts]
    assert held == [[0, 1], [2, 3], [4]]


def test_the_refusals_say_exactly_what_to_do(tmp_path: Path, source: Any) -> None:
    write(tmp_path / "outputs", source)
    inner = tmp_path / "outputs" / "train"
    with pytest.raises(DataError) as raised:
        write(inner, source)
    assert str(raised.value) == (
        f"{inner} lies inside the store {tmp_path / 'outputs'}: a store inside another is read "
        "as part of it. Choose an --out outside it."
    )
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError) as raised:
        write(tmp_path / "file", source)
    assert (
        str(raised.value)
        == f"{tmp_path / 'file'} exists and is not a folder; choose another --out."
    )
    folder = tmp_path / "notes"
    folder.mkdir()
    for name in "edcba":
        (folder / f"{name}.txt").write_text(name)
    with pytest.raises(DataError) as raised:
        write(folder, source)
    assert str(raised.value) == (
        f"{folder} exists and is not a gradpick output store (it holds a.txt, b.txt, c.txt and 2 "
        "more); writing there would delete it: choose another --out or an empty folder."
    )
    (tmp_path / "outputs" / "notes.txt").write_text("mine")
    with pytest.raises(DataError) as raised:
        write(tmp_path / "outputs", source)
    assert str(raised.value) == (
        f"{tmp_path / 'outputs'} is a store that also holds notes.txt; replacing it would delete "
        "them: move them out, or choose another --out."
    )
    with pytest.raises(DataError) as raised:
        check_store(open_store(tmp_path / "outputs"), "resnet20:fff")
    assert "written by model tiny:abc, not by resnet20:fff" in str(raised.value)
    assert store._named([tmp_path / name for name in "abc"]) == "a, b, c"
    assert store._named([tmp_path / name for name in "dcba"]) == "a, b, c and 1 more"


def test_an_older_formats_message_names_the_version_or_a_question_mark(
    tmp_path: Path, source: Any
) -> None:
    import pyarrow.parquet as pq

    write(tmp_path / "old", source)
    part = next((tmp_path / "old").glob("*.parquet"))
    table = pq.read_table(part)
    meta = {**open_store(tmp_path / "old").metadata, "format": 0}
    del meta["gradpick_version"]
    encoded = store.json.dumps(meta).encode()
    pq.write_table(table.replace_schema_metadata({store.METADATA_KEY: encoded}), part)
    with pytest.raises(DataError) as raised:
        open_store(tmp_path / "old")
    assert str(raised.value) == (
        f"{tmp_path / 'old'}: written in store format 0 by gradpick ?; this gradpick reads "
        f"format {store.STORE_FORMAT}. Infer again to rewrite it."
    )
    (tmp_path / "none").mkdir()
    with pytest.raises(DataError, match="no stored outputs here"):
        open_store(tmp_path / "none")
    anonymous = store.OpenedStore(table=None, metadata={}, path=tmp_path / "old")
    with pytest.raises(DataError, match="written by model unknown, not by tiny:abc"):
        check_store(anonymous, "tiny:abc")


def test_publishing_refused_at_the_end_leaves_no_parts_behind(tmp_path: Path, source: Any) -> None:
    """Another process filled ``out`` while the writer ran: refused, its files kept."""
    (tmp_path / "work").mkdir()
    out = tmp_path / "work" / "out"
    with (
        pytest.raises(DataError, match="not a gradpick output store"),
        StoreWriter(out, store_metadata(MODEL, InputSpec(), source)) as writer,
    ):
        writer.write(output_table([0], ["a"], None, torch.zeros(1, 3)))
        out.mkdir()
        (out / "theirs.txt").write_text("theirs")
    assert [path.name for path in (tmp_path / "work").iterdir()] == ["out"]
    assert (out / "theirs.txt").read_text() == "theirs"


def test_an_empty_folder_is_filled_without_saying_it_replaced_a_store(
    tmp_path: Path, source: Any
) -> None:
    (tmp_path / "out").mkdir()
    with StoreWriter(tmp_path / "out", store_metadata(MODEL, InputSpec(), source)) as writer:
        writer.write(output_table([0], ["a"], None, torch.zeros(1, 3)))
    assert writer.replaced is None and len(open_store(tmp_path / "out")) == 1


def test_only_the_stores_visible_parquet_files_are_read_and_broken_parquet_is_no_store(
    tmp_path: Path, source: Any
) -> None:
    import pyarrow.parquet as pq

    write(tmp_path / "out", source)
    foreign = pa.table({"x": [1.0]})
    for hidden in (".draft.parquet", "_common.parquet"):
        pq.write_table(foreign, tmp_path / "out" / hidden)
    (tmp_path / "out" / "folder.parquet").mkdir()
    assert open_store(tmp_path / "out").table["position"].to_pylist() == list(range(6))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "part.parquet").write_bytes(b"not parquet")
    with pytest.raises(DataError, match=r"not a gradpick output store \(it holds part.parquet\)"):
        write(tmp_path / "broken", source)


def test_a_source_without_a_root_is_recorded_as_it_is(tmp_path: Path) -> None:
    metadata = {"model": MODEL, "source": {"kind": "arrays", "root": None}}
    with StoreWriter(tmp_path / "out", metadata) as writer:
        writer.write(output_table([0], ["#0"], None, torch.zeros(1, 3)))
    assert open_store(tmp_path / "out").metadata["source"] == {"kind": "arrays", "root": None}
    assert store.source_root(open_store(tmp_path / "out")) is None


def test_the_fingerprint_is_the_sha256_of_every_name_size_and_mtime_in_order(
    tmp_path: Path,
) -> None:
    """Written out from its definition over 20 files."""
    import hashlib
    import os

    names = [f"{n:02d}.png" for n in range(14)]  # files at the top, and in folders
    names += ["cat/b.png", "cat/a.png", "dog/x.jpg", "cat/c.png", "deep/er/d.png", "top.png"]
    for n, name in enumerate(names):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * n)
    lines = []
    for name in names:
        status = os.stat(tmp_path / name)
        lines.append(f"{name}\0{status.st_size}\0{status.st_mtime_ns}\n")
    expected = hashlib.sha256("".join(lines).encode()).hexdigest()
    assert store.source_fingerprint(tmp_path, names) == expected
    (tmp_path / "cat" / "a.png").unlink()
    with pytest.raises(FileNotFoundError):
        store.source_fingerprint(tmp_path, names)


@pytest.mark.parametrize("slow", [False, True])
def test_a_fingerprint_goes_to_threads_only_when_its_stats_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slow: bool
) -> None:
    """Stats of a local disk run in the calling thread; ones that wait (a network disk, here a
    stat that sleeps) go to the threads after the timed probe; the digest is the same."""
    import os
    import threading
    import time

    names = [f"{n:02d}.png" for n in range(20)]
    for n, name in enumerate(names):
        (tmp_path / name).write_bytes(b"x" * n)
    plain = store.source_fingerprint(tmp_path, names)
    stat, caller, callers = os.stat, threading.get_ident(), set()

    def timed_stat(path: str, **options: Any) -> os.stat_result:
        callers.add(threading.get_ident())
        if slow:
            time.sleep(0.002)  # 40 times SLOW_STAT_S
        return stat(path, **options)

    monkeypatch.setattr(store, "FINGERPRINT_PROBE", 4)
    if not slow:  # a bound no stat reaches, however busy the cores
        monkeypatch.setattr(store, "SLOW_STAT_S", 1.0)
    monkeypatch.setattr(store.os, "stat", timed_stat)
    assert store.source_fingerprint(tmp_path, names) == plain
    assert caller in callers
    assert (len(callers) > 1) == slow


def test_a_list_column_becomes_a_writable_float32_matrix_over_chunks_and_slices() -> None:
    rows = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [10.0, 11.0, 12.0]]
    lists = pa.array(rows, type=pa.list_(pa.float32()))
    chunked = pa.chunked_array([lists.slice(1, 2), lists.slice(0, 0), lists.slice(3, 1)])
    matrix = store.list_matrix(chunked)
    assert matrix.dtype.name == "float32"
    assert matrix.tolist() == rows[1:4] and matrix.flags.writeable
    empty = store.list_matrix(pa.chunked_array([], type=pa.list_(pa.float32())))
    assert empty.shape[0] == 0
