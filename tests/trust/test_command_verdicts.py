"""``gradpick check`` reports what it cannot reach instead of aborting, and runs only the
checks that apply to the chosen methods."""

from __future__ import annotations

import json

import tests.cli.test_cli as test_cli
from tests.cli.test_check_command import QUICK, check

folder, weights = test_cli.folder, test_cli.weights


def test_a_tolerance_one_image_cannot_reach_is_reported_and_the_run_kept(
    capsys, folder, weights, tmp_path
):
    out = tmp_path / "checks.json"
    quick = [a for a in QUICK if a not in ("--ig-steps", "6")]
    status, printed, err = check(
        capsys, folder, weights, "--indices", "0, 5", *quick,
        "--tolerance", "1e-12", "--max-steps", "16", "--json", str(out),
    )  # fmt: skip
    assert status == 0, err
    record = json.loads(out.read_text())
    rows = record["completeness"]
    baselines = record["settings"]["completeness"]["baselines"]
    assert [row["index"] for row in rows] == [0, 5] * len(baselines)
    for row in rows:
        assert row["steps"] == 16 and row["reached"] is False and row["tolerance"] == 1e-12
        assert row["verdict"].startswith("did not reach 1e-10% within 16 steps")
        assert row["relative_error"] > 1e-12
    assert printed.count("did not reach 1e-10% within 16 steps") == len(rows)
    # The other checks kept every image.
    assert len(record["class_sensitivity"]) == 2 * 2 * len(record["settings"]["methods"])
    assert "road" in record and "faithfulness" in record


def test_completeness_runs_only_when_integrated_gradients_is_checked(
    capsys, folder, weights, tmp_path
):
    out = tmp_path / "checks.json"
    status, printed, err = check(
        capsys, folder, weights, "--indices", "1", *QUICK, "--methods", "gradient",
        "--json", str(out),
    )  # fmt: skip
    assert status == 0, err
    record = json.loads(out.read_text())
    assert record["completeness"] == [] and "completeness" not in record["milliseconds"]
    assert "completeness: not run" in printed
    status, _, err = check(
        capsys, folder, weights, "--indices", "1", *QUICK,
        "--methods", "gradient", "integrated_gradients", "--json", str(out),
    )  # fmt: skip
    assert status == 0, err
    rows = json.loads(out.read_text())["completeness"]
    assert {row["index"] for row in rows} == {1} and rows
