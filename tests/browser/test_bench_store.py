"""``gradpick bench --explorer --store`` on a tiny store, compared with a second model's store of
the same images: every row of its table is measured and is a number (its figures are never
asserted on: targets live in the table)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from gradpick import data
from gradpick.bench import explorer_store
from gradpick.cli import main
from gradpick.outputs import pixels
from tests.serving import chromium_executable


def test_the_store_benchmark_measures_every_row(image_folder_factory: Any, tmp_path: Path) -> None:
    chromium = chromium_executable()
    folder = image_folder_factory(list(data.CIFAR10_CLASSES), per_class=3)
    store = tmp_path / "outputs"
    assert main(["infer", "--data", str(folder), "--out", str(store), "--embeddings"]) == 0
    second = tmp_path / "second"
    assert main(["infer", "--data", str(folder), "--out", str(second), "--model", "tutorial"]) == 0
    kept = tmp_path / f"outputs{pixels.PIXELS_SUFFIX}"
    kept.write_bytes(b"left by an earlier server")
    log = tmp_path / "server.log"
    config = explorer_store.StoreBenchConfig(
        store, switches=1, restart=False, log=log, compare_with=second
    )
    report = explorer_store.run_store_benchmark(config, chromium)
    assert report.context["failed"] == [] and report.context["rows"] == 30
    untimed = {  # not timed without restart
        "second server started → healthy",
        "first page settled, second server (pixels kept)",
    }
    for row in report.rows:
        if row.name in untimed:
            assert row.samples == []
            continue
        # Back to the Explore tab after each round of the others: once more than each switch.
        rounds = 2 if row.name.startswith("tab Explore: later switch") else 1
        assert len(row.samples) == rounds and len(row.loads) == rounds
        assert all(math.isfinite(value) and value > 0 for value in row.samples)
        assert all(math.isfinite(load) and load >= 0 for load in row.loads)
    assert kept.read_bytes() != b"left by an earlier server"  # removed, then kept again
    # The launcher opened the store and had its folder checked before the server served.
    assert "the store, its folder's check" in log.read_text()
    text = explorer_store.report_text(report)
    names = {row.name for row in report.rows}
    table = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert {line.split(" | ")[0][2:] for line in table[1:]} == names
    for view in ("Confidence vs loss", "Confusion matrix", "Feature space", "Table"):
        assert f"view {view}: first opening" in names and f"view {view}: later switch" in names
    for tab in ("Strategies", "Trust", "Compare", "Triage", "Slices"):
        assert f"tab {tab}: first opening" in names and f"tab {tab}: later switch" in names
    compared = [name for name in names if name.startswith("compare")]
    assert len(compared) == 4 and f"compared with {second}" in text
    for line in table[1:]:
        cells = line.strip("| ").split(" | ")
        if cells[0] in untimed:
            assert cells[2] == "–"
            continue
        assert re.fullmatch(r"[\d,.]+", cells[2]) and re.fullmatch(r"[\d.]+", cells[5])
