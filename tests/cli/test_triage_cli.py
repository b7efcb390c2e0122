"""``gradpick triage`` on stores: the suspects file, the summary, the relabelling, bad stores;
and the benchmark's noisy copy."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from gradpick import data
from gradpick.bench.triage import noisy_copy
from gradpick.cli import main
from gradpick.models import shipped as models
from gradpick.models import zoo
from gradpick.outputs import store_format as store
from gradpick.outputs import stores as stored
from gradpick.triage import ranking as triage
from gradpick.triage.verdicts import Verdict, VerdictBook

MISLABELLED = (3, 17, 28)
"""Rows whose logits point firmly at the next class: the suspects a reader expects first."""


def write_store(
    root: Path, out: Path, labels: bool = True, embeddings: bool = True
) -> store.OpenedStore:
    """A store of ``root`` with hand-made outputs: every row confident in its given label but
    the MISLABELLED ones, which the model and their neighbours place in the next class."""
    source = data.image_folder(root)
    given = source.labels()
    assert given is not None
    count, classes = len(source), len(source.class_names)
    true = given.clone()
    for row in MISLABELLED:
        true[row] = (given[row] + 1) % classes
    logits = torch.full((count, classes), -2.0)
    logits[torch.arange(count), true] = 3.0
    generator = torch.Generator().manual_seed(0)
    features = torch.eye(classes)[true] * 5 + 0.1 * torch.randn(count, classes, generator=generator)
    identity = {
        "identity": "hand-made",
        "name": "hand-made",
        "weights_sha256": None,
        "trained_on": {"source": "cifar10", "split": "train"},
    }
    metadata = store.store_metadata(identity, source.spec, source, embeddings)
    with store.StoreWriter(out, metadata, embeddings=embeddings) as writer:
        rows = list(range(count))
        writer.write(
            store.output_table(
                rows,
                source.names(rows),
                given if labels else None,
                logits,
                features if embeddings else None,
            )
        )
    return store.open_store(out)


@pytest.fixture
def cifar_like(cifar_like_factory: Callable[[int], Path]) -> Path:
    return cifar_like_factory(40)


def test_suspects_are_most_suspect_first_readable_by_pandas_and_duckdb(
    cifar_like: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    duckdb = pytest.importorskip("duckdb")
    opened = write_store(cifar_like / "test", tmp_path / "outputs")
    out, summary = tmp_path / "suspects.parquet", tmp_path / "summary.json"
    assert (
        main(
            [
                "triage",
                "--outputs",
                str(opened.path),
                "--out",
                str(out),
                "--json",
                str(summary),
                "--k",
                "10",
            ]
        )
        == 0
    )
    frame = pd.read_parquet(out)
    names = opened.table.column("name").to_pylist()
    assert set(frame["name"].head(3)) == {names[row] for row in MISLABELLED}
    assert frame["flagged"].head(3).all() and not frame["flagged"].iloc[3:].any()
    for column in ("position", "given_label", "suggested_label", "score", "neighbour_agreement"):
        assert column in frame
    given = opened.table.column("label").to_numpy()
    for row in MISLABELLED:
        suspect = frame[frame["position"] == row].iloc[0]
        assert suspect["suggested_label"] == (given[row] + 1) % 10
        assert suspect["given_label"] == given[row]
    first = duckdb.sql(f"SELECT name FROM '{out}' ORDER BY rank LIMIT 1").fetchall()[0]
    assert first[0] == frame["name"].iloc[0]
    info = json.loads(summary.read_text())
    assert info["flagged"] == 3 and info["neighbours_used"] and info["k"] == 10
    assert info["sample_warning"] is None  # a store of the test split
    assert not list(tmp_path.glob(".*.partial"))
    assert frame["name"].iloc[0] in capsys.readouterr().out


def test_a_store_of_the_training_split_carries_the_in_sample_warning(
    cifar_like: Path, tmp_path: Path
) -> None:
    opened = write_store(cifar_like / "train", tmp_path / "outputs")
    summary = tmp_path / "summary.json"
    assert main(["triage", "--outputs", str(opened.path), "--json", str(summary)]) == 0
    assert "in sample" in json.loads(summary.read_text())["sample_warning"]


def test_the_shipped_models_training_split_reaches_the_store(
    cifar_like: Path, tmp_path: Path
) -> None:
    if "resnet20" not in models.shipped_models():
        pytest.skip("no shipped resnet20 weights")
    loaded = zoo.load_model("resnet20")
    assert loaded.card is not None
    assert loaded.card["trained_on"] == {"source": "cifar10", "split": "train"}
    source = data.image_folder(cifar_like / "train", loaded.spec)
    stored.infer_to_store(loaded, source, range(10), tmp_path / "outputs", embeddings=True)
    opened = store.open_store(tmp_path / "outputs")
    assert opened.metadata["model"]["trained_on"] == {"source": "cifar10", "split": "train"}
    assert "in sample" in (triage.sample_warning(opened.metadata) or "")


def test_without_embeddings_the_neighbours_are_skipped_and_said_so(
    cifar_like: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    opened = write_store(cifar_like / "test", tmp_path / "outputs", embeddings=False)
    out, summary = tmp_path / "suspects.parquet", tmp_path / "summary.json"
    assert (
        main(["triage", "--outputs", str(opened.path), "--out", str(out), "--json", str(summary)])
        == 0
    )
    info = json.loads(summary.read_text())
    assert not info["neighbours_used"] and info["k"] is None
    assert "no embeddings" in capsys.readouterr().err
    assert "neighbour_agreement" not in pd.read_parquet(out)


def test_a_store_without_labels_is_one_clear_error(
    cifar_like: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    opened = write_store(cifar_like / "test", tmp_path / "outputs", labels=False)
    out = tmp_path / "suspects.parquet"
    assert main(["triage", "--outputs", str(opened.path), "--out", str(out)]) == 2
    assert "no labels" in capsys.readouterr().err and not out.exists()


def test_export_writes_the_relabelling_and_leaves_stale_verdicts_out(
    cifar_like: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    opened = write_store(cifar_like / "test", tmp_path / "outputs")
    names = opened.table.column("name").to_pylist()
    class_names = opened.metadata["class_names"]
    book = VerdictBook.beside(opened.path)
    book.record(Verdict(3, names[3], "label_wrong", new_label=7))
    book.record(Verdict(17, names[17], "fine"))
    book.record(Verdict(28, "gone/0001.png", "label_wrong", new_label=1))  # image replaced
    before = sorted(p.name for p in (cifar_like / "test").rglob("*"))
    relabel = tmp_path / "relabel.csv"
    assert main(["triage", "--outputs", str(opened.path), "--export", str(relabel)]) == 0
    given = opened.table.column("label").to_numpy()
    assert pd.read_csv(relabel).values.tolist() == [
        [names[3], class_names[given[3]], class_names[7]]
    ]
    assert "1 stale verdict" in capsys.readouterr().out
    assert sorted(p.name for p in (cifar_like / "test").rglob("*")) == before


def test_the_noisy_copy_is_seeded_links_under_wrong_classes(
    cifar_like: Path, tmp_path: Path
) -> None:
    first = noisy_copy(cifar_like / "test", tmp_path / "a", 0.25, seed=3)
    again = noisy_copy(cifar_like / "test", tmp_path / "b", 0.25, seed=3)
    assert first == again and len(first) == 10
    source = data.image_folder(tmp_path / "a")
    assert (
        len(source) == 40
        and source.class_names == data.image_folder(cifar_like / "test").class_names
    )
    for link, (true, given) in first.items():
        assert true != given and link.startswith(source.class_names[given] + "/")
        assert (tmp_path / "a" / link).is_symlink()
        assert (tmp_path / "a" / link).resolve().parent.name == source.class_names[true]
    unmoved = [n for n in source.names(range(40)) if n not in first]
    assert all(n.split("/")[0] == n.split("/")[1].split("-")[0] for n in unmoved)
    assert np.isin(list(first), source.names(range(40))).all()


def test_the_benchmark_times_stacked_rows_and_measures_recall_against_brute_force(
    cifar_like: Path, tmp_path: Path
) -> None:
    from gradpick.bench.triage import neighbour_recall, report_text, scoring_seconds

    opened = write_store(cifar_like / "test", tmp_path / "outputs")
    timed = scoring_seconds(opened, rows=100, repeats=1, sample=50)
    assert timed.rows == 100 and "stacked 3 times" in timed.source
    assert timed.exact and timed.recall == 1.0  # exact neighbours find every exact one
    text = report_text([], timed)
    assert (
        "| neighbours (exact) |" in text and "Neighbour recall against brute force: 1.000" in text
    )

    rng = np.random.default_rng(1)
    embeddings = rng.normal(size=(30, 4)).astype(np.float32)
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    nearest = np.argsort(-similarity, axis=1)[:, :3]
    assert neighbour_recall(embeddings, nearest) == 1.0
    farthest = np.argsort(similarity, axis=1)[:, 1:4]  # the diagonal sorts first
    assert neighbour_recall(embeddings, farthest) == 0.0
    half = nearest.copy()
    half[:15] = farthest[:15]
    assert neighbour_recall(embeddings, half) == pytest.approx(0.5)
