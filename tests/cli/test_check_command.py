"""``gradpick check`` on a generated image folder with tiny weights: JSON round trip, bad input,
and the printed summary of a report built by hand."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
import torch

import tests.cli.test_cli as test_cli
from gradpick import data
from gradpick.cli import main
from gradpick.cli.arguments import step_progress
from gradpick.models import shipped as models
from gradpick.trust import command
from gradpick.trust.command import summary, write_json
from gradpick.trust.engine import MethodSettings
from gradpick.trust.report import CheckOptions, report_dict, run_checks
from tests.trust.test_report import hand_made_report

folder, fitting, weights = test_cli.folder, test_cli.fitting, test_cli.weights
"""The command line tests' fixtures: a 12-image folder (3 classes), a 40-image one (10 classes)
and tiny tutorial weights."""
QUICK = ["--samples", "3", "--steps", "4", "--layers", "2", "--ig-steps", "6"]


def check(capsys, folder: Path, weights: Path, *extra: str) -> tuple[int, str, str]:
    arguments = ["--data", str(folder), "--model", "tutorial", "--weights", str(weights)]
    status = main(["check", *arguments, *extra])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_the_json_report_round_trips_and_equals_the_library(capsys, folder, weights, tmp_path):
    out = tmp_path / "checks.json"
    status, printed, _ = check(
        capsys, folder, weights, "--indices", "5, 1-2", *QUICK, "--json", str(out)
    )
    assert status == 0, printed
    record = json.loads(out.read_text())
    assert record["indices"] == [5, 1, 2]
    assert record["image_names"] == data.image_folder(folder).names([5, 1, 2])
    assert record["model"]["name"] == "tutorial" and "versions" in record
    assert len(record["class_names"]) == 3
    batch = data.load_batch(data.image_folder(folder))
    model = models.load("tutorial", weights)
    options = CheckOptions(settings=MethodSettings(samples=3, steps=4), layers=2, ig_steps=6)
    expected = json.loads(
        json.dumps(report_dict(run_checks(model, batch.float_images(), [5, 1, 2], None, options)))
    )
    for field in ("classes", "randomisation", "completeness", "faithfulness", "class_maps"):
        assert json.dumps(record[field]) == json.dumps(expected[field]), field
    assert "randomisation (Spearman / SSIM" in printed and f"wrote {out}" in printed
    assert not list(tmp_path.glob(".*.partial"))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--samples", "0"], "SmoothGrad samples must be a whole number from 1 to 1,024"),
        (["--steps", "9999"], "Integrated Gradients steps must be a whole number from 1 to 4,096"),
        (["--layers", "9"], "layers to randomise must be a whole number from 1 to 5"),
        (["--indices", "99"], "out of range"),
    ],
)
def test_bad_input_is_one_clear_line_and_writes_nothing(
    capsys, folder, weights, tmp_path, extra, message
):
    out = tmp_path / "checks.json"
    indices = [] if "--indices" in extra else ["--indices", "0"]
    status, _, err = check(capsys, folder, weights, *indices, *extra, "--json", str(out))
    assert status == 2
    assert "gradpick check: error:" in err and message in err
    assert "Traceback" not in err and not out.exists()


def test_the_output_must_be_json_in_an_existing_folder(capsys, folder, weights, tmp_path):
    status, _, err = check(capsys, folder, weights, "--indices", "0", "--json", "x.txt")
    assert status == 2 and "--json must end in .json" in err
    missing = tmp_path / "nowhere" / "x.json"
    status, _, err = check(capsys, folder, weights, "--indices", "0", "--json", str(missing))
    assert status == 2 and "does not exist" in err


def test_check_has_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["check", "--help"])
    assert exit_info.value.code == 0
    assert "--ig-steps" in capsys.readouterr().out


def test_a_class_by_name_is_explained_for_every_pick(capsys, fitting, weights, tmp_path):
    folder = fitting  # classes the ten-output model's own: their names name its outputs
    out = tmp_path / "checks.json"
    names = data.image_folder(folder).class_names
    methods = ["gradient", "integrated_gradients"]  # completeness checks the latter
    extra = ["--methods", *methods, "--baselines", "black", "--class", names[2]]
    status, _, err = check(
        capsys, folder, weights, "--indices", "0, 4", *QUICK, *extra, "--json", str(out)
    )
    assert status == 0, err
    record = json.loads(out.read_text())
    assert record["classes"] == [2, 2] and record["class_names"] == [names[2]] * 2
    assert [row["class"] for row in record["completeness"]] == [2, 2]
    assert list(record["randomisation"]) == methods


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_one_line_per_step_unless_on_a_terminal():
    log = io.StringIO()
    progress = step_progress("randomising layers", log)
    for done in (1, 2, 3):
        progress(done, 3)
    assert log.getvalue().splitlines() == [f"randomising layers: {n} of 3" for n in (1, 2, 3)]
    terminal = _Terminal()
    progress = step_progress("randomising layers", terminal)
    for done in (1, 2, 3):
        progress(done, 3)
    text = terminal.getvalue()
    assert text.count("\r") == 3 and text.endswith("randomising layers: 3 of 3\n")
    assert text.count("\n") == 1  # every step overwrites the last on the same line


def test_check_progress_in_a_log_is_one_line_per_layer(capsys, folder, weights, tmp_path):
    out = tmp_path / "checks.json"
    status, _, err = check(capsys, folder, weights, "--indices", "0", *QUICK, "--json", str(out))
    assert status == 0
    steps = [line for line in err.splitlines() if "randomising layers" in line]
    assert steps and all(line.startswith("randomising layers: ") for line in steps)
    assert all(line.count(" of ") == 1 for line in steps) and "\r" not in err
    total = steps[-1].rsplit(" of ", 1)[1]
    assert steps[-1] == f"randomising layers: {total} of {total}"


def test_classes_are_named_as_the_model_names_them_when_the_folder_does_not_fit(
    capsys, folder, weights, tmp_path
):
    """Three class folders for a ten-output model: class 2 is CIFAR-10's 'bird', not the
    folder's third class, and --class takes the model's names."""
    out = tmp_path / "checks.json"
    extra = ["--methods", "gradient", "--baselines", "black", "--class", "bird"]
    status, _, err = check(
        capsys, folder, weights, "--indices", "0", *QUICK, *extra, "--json", str(out)
    )
    assert status == 0, err
    record = json.loads(out.read_text())
    assert record["classes"] == [data.CIFAR10_CLASSES.index("bird")]
    assert record["class_names"] == ["bird"]


def test_the_json_report_has_road_and_class_sensitivity(capsys, folder, weights, tmp_path):
    out = tmp_path / "checks.json"
    arguments = ["--indices", "0, 4", "--methods", "gradient", *QUICK, "--json", str(out)]
    status, printed, _ = check(capsys, folder, weights, *arguments)
    assert status == 0, printed
    record = json.loads(out.read_text())
    batch = data.load_batch(data.image_folder(folder))
    model = models.load("tutorial", weights)
    options = CheckOptions(
        methods=("gradient",), settings=MethodSettings(samples=3, steps=4), layers=2, ig_steps=6
    )
    expected = json.loads(
        json.dumps(report_dict(run_checks(model, batch.float_images(), [0, 4], None, options)))
    )
    for field in ("road", "class_sensitivity"):
        assert json.dumps(record[field]) == json.dumps(expected[field]), field
    assert [row["kind"] for row in record["class_sensitivity"]] == ["runner_up"] * 2 + [
        "random"
    ] * 2
    assert "ROAD (AUC under noisy linear imputation" in printed
    assert "class sensitivity (mean Spearman" in printed


def test_the_summary_of_a_hand_made_report_line_by_line() -> None:
    lines = summary(report_dict(hand_made_report())).splitlines()
    assert lines == [
        "randomisation (Spearman / SSIM, mean over picks, at the first and last step):",
        "  gradient               fc: 0.500 / 0.500   all 1 layers: 0.500 / 0.500",
        "completeness (IG: sum of attributions vs F(x) - F(baseline)):",
        "  #4     black              8 steps  sum       1.5  difference      1.75  error 14.29%",
        "  #1     black              8 steps  sum       0.5  difference         0  error n/a",
        "faithfulness (AUC, mean over picks; random order in brackets):",
        "  gradient               deletion 0.500 (0.688)  insertion 0.375 (0.188)",
        "ROAD (AUC under noisy linear imputation, mean over picks; gap = LeRF - MoRF):",
        "  gradient               MoRF 0.281  LeRF 0.375  gap 0.094",
        "class sensitivity (mean Spearman of |map| vs another class's; picks flagged):",
        "  gradient               runner_up 0.950 (1 of 2)  random 0.575 (1 of 2)",
    ]


def test_a_mean_over_no_defined_values_is_not_available() -> None:
    record = report_dict(hand_made_report())
    record["randomisation"]["gradient"]["steps"][0]["spearman"] = {"mean": None, "std": None}
    for row in record["class_sensitivity"][:2]:  # the runner-up rows
        row["spearman"], row["insensitive"] = None, False
    lines = summary(record).splitlines()
    assert lines[1] == "  gradient               fc: n/a / 0.500   all 1 layers: n/a / 0.500"
    assert lines[-1] == "  gradient               runner_up n/a (0 of 2)  random 0.575 (1 of 2)"


def test_randomisation_is_summed_up_at_its_first_and_last_steps() -> None:
    record = report_dict(hand_made_report())
    steps = record["randomisation"]["gradient"]["steps"]
    for layers, layer, value in ((2, "conv2", 0.25), (3, "conv1", 0.125)):
        spread = {"mean": value, "std": 0.0}
        steps.append({"layer": layer, "randomised_layers": layers, "spearman": spread,
                      "ssim": spread})  # fmt: skip
    assert summary(record).splitlines()[1] == (
        "  gradient               fc: 0.500 / 0.500   all 3 layers: 0.125 / 0.125"
    )


def test_the_json_file_is_indented_and_refuses_nan(tmp_path: Path) -> None:
    out = tmp_path / "checks.json"
    write_json(out, {"indices": [4, 1], "model": {"name": "tutorial"}})
    assert out.read_text() == (
        '{\n  "indices": [\n    4,\n    1\n  ],\n  "model": {\n    "name": "tutorial"\n  }\n}\n'
    )
    with pytest.raises(ValueError, match="Out of range float values"):
        write_json(tmp_path / "nan.json", {"spearman": math.nan})
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checks.json"]


def test_a_class_is_named_when_the_names_reach_it_and_numbered_otherwise() -> None:
    names = ["cat", "dog"]
    assert [command._name(names, index) for index in (0, 1, 2, -1)] == ["cat", "dog", "2", "-1"]


def test_a_sigmoid_models_checks_explain_and_read_the_labels_own_output(
    capsys, fitting, weights, tmp_path
):
    """``--output sigmoid --class L``: every check explains label L's logit, and the curves
    and the top labels read its own sigmoid, not a softmax over labels that are not exclusive."""
    out = tmp_path / "checks.json"
    names = data.image_folder(fitting).class_names
    extra = ["--methods", "gradient", "--baselines", "black", "--output", "sigmoid"]
    status, _, err = check(
        capsys, fitting, weights, "--indices", "0, 4", *QUICK, *extra, "--class", names[2],
        "--json", str(out),
    )  # fmt: skip
    assert status == 0, err
    record = json.loads(out.read_text())
    assert record["classes"] == [2, 2] and record["model"]["output"] == "sigmoid"
    batch = data.load_batch(data.image_folder(fitting))
    model = models.load("tutorial", weights)
    with torch.no_grad():
        logits = model(batch.float_images()[[0, 4]]).double()
    own = 1 / (1 + torch.exp(-logits))  # each label's sigmoid, written out
    softmax = logits.softmax(dim=1)[:, 2]
    road = record["road"]
    assert road["fractions"][0] == 0  # nothing removed yet: the unchanged images
    unchanged = [row[0] for row in road["methods"]["gradient"]["morf_curve_per_image"]]
    assert unchanged == pytest.approx(own[:, 2].tolist(), abs=1e-6)
    assert unchanged != pytest.approx(softmax.tolist(), abs=1e-3)
    deletion = record["faithfulness"]["methods"]["gradient"]["deletion_curve"]
    assert deletion[0] == pytest.approx(float(own[:, 2].mean()), abs=1e-6)
    top = record["class_maps"]["top_probabilities"]
    ranked = own.sort(dim=1, descending=True).values[:, : len(top[0])]
    assert top == [pytest.approx(row, abs=1e-6) for row in ranked.tolist()]
