"""``gradpick slices`` on a store whose one systematic failure is known: the Parquet, the JSON's
schema, the file beside the store, and what it says when the store has no embeddings; then
``gradpick triage`` reading that file."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from gradpick import data
from gradpick.cli import main
from gradpick.models.zoo import load_model
from gradpick.outputs.stores import infer_to_store
from tests.slices.synthetic import FACTORY, write_folder

SLICE_KEYS = {
    "colour_effect",
    "rank",
    "size",
    "errors",
    "error_rate",
    "prediction",
    "positions",
    "names",
    "confusions",
    "description",
    "typical",
    "mean_map",
    "effect",
    "verified",
}
EFFECT_KEYS = {
    "evidence_change",
    "random_change",
    "ratio",
    "odds_ratio",
    "statistic",
    "p_value",
    "tested",
    "verified",
}


def _store(root: Path, embeddings: bool = True) -> tuple[Path, set[str]]:
    truth = write_folder(root / "images", patched=True)
    loaded = load_model(FACTORY)
    source = data.open_source(str(root / "images"), spec=loaded.spec)
    infer_to_store(loaded, source, range(len(source)), root / "outputs", embeddings=embeddings)
    return root / "outputs", truth


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str], dict, pd.DataFrame]:
    root = tmp_path_factory.mktemp("slices-cli")
    outputs, truth = _store(root)
    code = main(
        [
            "slices",
            "--outputs",
            str(outputs),
            "--out",
            str(root / "slices.parquet"),
            "--json",
            str(root / "summary.json"),
            "--clusters",
            "8",
        ]
    )
    assert code == 0
    summary = json.loads((root / "summary.json").read_text())
    return outputs, truth, summary, pd.read_parquet(root / "slices.parquet")


def test_the_summary_has_the_slices_ranked_with_their_effect(
    ran: tuple[Path, set[str], dict, pd.DataFrame],
) -> None:
    _, truth, summary, _ = ran
    slices = summary["slices"]
    assert [row["rank"] for row in slices] == list(range(1, len(slices) + 1))
    for row in slices:
        assert set(row) == SLICE_KEYS
        assert row["effect"] is None or set(row["effect"]) == EFFECT_KEYS
        assert row["effect"] is None or row["effect"]["statistic"] == "ratio"
        assert row["colour_effect"] is None or set(row["colour_effect"]) == EFFECT_KEYS
        assert row["colour_effect"] is None or row["colour_effect"]["statistic"] == "odds_ratio"
        assert len(row["positions"]) == len(row["names"]) == row["size"]
    verified = [row for row in slices if row["verified"]]
    assert len(verified) == 1 and set(verified[0]["names"]) == truth


def test_the_parquet_has_one_row_per_image_with_its_slice(
    ran: tuple[Path, set[str], dict, pd.DataFrame],
) -> None:
    _, truth, summary, frame = ran
    assert len(frame) == summary["rows"] == 120
    verified = next(row["rank"] for row in summary["slices"] if row["verified"])
    assert set(frame.loc[frame["slice"] == verified, "name"]) == truth
    assert frame.loc[frame["verified"], "name"].tolist() == sorted(truth)


def test_the_result_is_kept_beside_the_store_and_triage_reads_it(
    ran: tuple[Path, set[str], dict, pd.DataFrame], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    outputs, truth, summary, _ = ran
    beside = outputs.with_name(outputs.name + ".slices.json")
    assert json.loads(beside.read_text())["slices"] == summary["slices"]
    capsys.readouterr()
    code = main(["triage", "--outputs", str(outputs), "--out", str(tmp_path / "t.parquet"),
                 "--json", str(tmp_path / "t.json")])  # fmt: skip
    assert code == 0
    assert "read the slices in" in capsys.readouterr().err
    info = json.loads((tmp_path / "t.json").read_text())
    assert info["slices_file"] == str(beside.resolve())
    suspects = pd.read_parquet(tmp_path / "t.parquet")
    rank = next(row["rank"] for row in summary["slices"] if row["verified"])
    explained = suspects[suspects["explained_by_slice"].notna()]
    assert set(explained["name"]) == truth and set(explained["explained_by_slice"]) == {rank}
    assert not explained["flagged"].any()
    assert info["explained_by_slice"] == len(truth)
    # The natural errors (tinted images) are not explained by any slice.
    assert (
        suspects.loc[suspects["name"].str.endswith(("000.png", "001.png")), "explained_by_slice"]
        .isna()
        .all()
    )


def test_a_store_without_embeddings_is_refused_with_what_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    outputs, _ = _store(tmp_path, embeddings=False)
    assert main(["slices", "--outputs", str(outputs)]) == 2
    error = capsys.readouterr().err
    assert "gradpick slices: error:" in error and "gradpick infer --embeddings" in error
