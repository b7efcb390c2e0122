"""``gradpick bench --cam``: every row times the floor, gradpick and the installed peers on the
same picks, gradpick's maps equal the floor's, and the table says whether the target is met."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradpick.bench import cam
from gradpick.cli import main

TINY = cam.CamBenchConfig(sizes=(8, 32), picks=(1, 3), repeats=1, min_seconds=0.0)


def test_every_row_times_all_four_on_the_same_layer() -> None:
    report = cam.run_cam_benchmark(TINY)
    assert [(row.n, row.k) for row in report.rows] == [(8, 1), (8, 3), (32, 1), (32, 3)]
    for row in report.rows:
        assert row.layer == "layer3"
        assert set(row.ms) == {cam.FLOOR, cam.GRADPICK, cam.PYTORCH_GRAD_CAM, cam.TORCHCAM}
        assert all(value > 0 for value in row.ms.values())
        assert row.ratio == pytest.approx(row.ms[cam.GRADPICK] / row.ms[cam.FLOOR])
    text = cam.report_text(report)
    assert "torch-cam GradCAM ms" in text and text.count("\n") == 1 + len(report.rows)


def test_a_row_meets_the_target_only_within_the_floor_ratio_and_faster_than_both_peers() -> None:
    fast = {cam.FLOOR: 10.0, cam.GRADPICK: 10.5, cam.PYTORCH_GRAD_CAM: 20.0, cam.TORCHCAM: 11.0}
    assert cam.CamRow(8, 1, "layer3", fast).met
    assert not cam.CamRow(8, 1, "layer3", {**fast, cam.GRADPICK: 11.5}).met  # 1.15x the floor
    assert not cam.CamRow(8, 1, "layer3", {**fast, cam.TORCHCAM: 10.2}).met  # a peer is faster


def test_the_command_prints_the_table_and_writes_json(capsys, tmp_path: Path) -> None:
    out = tmp_path / "cam.json"
    status = main(["bench", "--cam", "--n", "8", "--k", "2", "--repeats", "1", "--json", str(out)])
    assert status == 0
    assert "| resnet20 | `layer3` | 8 | 2 |" in capsys.readouterr().out
    record = json.loads(out.read_text())
    assert record["floor_target"] == cam.FLOOR_TARGET and len(record["rows"]) == 1
    assert record["environment"]["versions"]["torchcam"] != "not installed"
