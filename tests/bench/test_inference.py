"""The inference benchmark on a tiny folder: its rows, table and JSON (never the real grid)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from gradpick import data
from gradpick.bench import inference as infer_bench
from gradpick.bench.inference import GRADPICK, HAND_WRITTEN, InferBenchConfig
from gradpick.cli import main
from gradpick.outputs.inference import infer_source


def test_the_hand_written_loop_computes_what_infer_source_computes(
    image_folder_factory: Any,
) -> None:
    root = image_folder_factory(classes=2, per_class=3, size=(50, 40))
    model, spec, _ = infer_bench.bench_model(32, torch.device("cpu"))
    source = data.image_folder(root, spec)
    expected = infer_source(model, source, batch_size=4).result.logits
    got = infer_bench.hand_written_pass(model, list(source.files), 32, 4, 0, torch.device("cpu"))
    assert torch.allclose(got, expected, atol=1e-5)


def test_rows_table_and_json(image_folder_factory: Any, tmp_path: Path, capsys: Any) -> None:
    root = image_folder_factory(classes=2, per_class=6)
    out = tmp_path / "bench.json"
    arguments = ["bench-infer", "--data", str(root), "--sides", "32", "--images", "8"]
    extra = ["--store-rows", "12", "--repeats", "1", "--workers", "0", "--memory", "4"]
    assert main([*arguments, *extra, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| throughput | 32 | 8 | hand-written DataLoader loop |" in printed
    assert "reopen in the explorer, total" in printed and "target < 1 s" in printed
    assert "infer_source / hand-written throughput, worst:" in printed
    rows = json.loads(out.read_text())["rows"]
    kinds = [(row["kind"], row["what"]) for row in rows]
    assert kinds[:2] == [("throughput", HAND_WRITTEN), ("throughput", GRADPICK)]
    assert [row["images"] for row in rows if row["kind"] == "memory"] == [4]
    assert all(row["seconds"] > 0 for row in rows)
    assert rows[1]["ratio"] > 0


def test_the_default_counts_are_per_side() -> None:
    config = InferBenchConfig("x")
    assert (config.count(32), config.count(224)) == (2000, 256)
    assert InferBenchConfig("x", images={224: 50}).count(224) == 50
