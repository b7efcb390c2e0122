"""``gradpick report --check``: the checks of the maps shown (method and layer), the steps said
as they start, ROAD and class-sensitivity tables with named classes, the layer in the Method
box, the record embedded as JSON, and no path of the machine that wrote it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradpick.cli.report import say
from gradpick.data import CIFAR10_CLASSES
from gradpick.errors import InputError
from gradpick.share.record import read_record
from tests.share.test_report import Page, _command


def test_report_check_checks_the_shown_grad_cam_at_its_layer(
    generated_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cam.html"
    status = _command(
        "--data", str(generated_folder), "--model", "tutorial", "--size", "20",
        "--indices", "1, 4", "--method", "gradcam", "--layer", "conv2",
        "--check", "--layers", "1", "--out", str(out),
    )  # fmt: skip
    assert status == 0
    err = capsys.readouterr().err
    steps = err.splitlines()  # not a terminal: one line per step
    assert steps[0] == "maps: Grad-CAM"
    for step in ("checks: randomisation", "checks: randomised 1 of 1 layers", "checks: ROAD",
                 "checks: class sensitivity"):  # fmt: skip
        assert step in steps
    assert "checks: completeness" not in steps  # Integrated Gradients is not checked
    document = out.read_text()
    record = read_record(document)
    picks, checks = record["picks"], record["checks"]
    assert picks["layer"]["name"] == "conv2" and picks["target"] == "logit"
    assert checks["settings"]["methods"] == ["gradcam"]
    assert list(checks["randomisation"]) == ["gradcam"]
    assert checks["completeness"] == [] and list(checks["road"]["methods"]) == ["gradcam"]
    assert {row["method"] for row in checks["class_sensitivity"]} == {"gradcam"}
    text = " ".join(Page(document).text)
    assert "conv2 (10×10 grid, upsampled to the image)" in text  # the Method box
    assert "ROAD (remove and debias)" in text and "Class sensitivity" in text
    row = checks["class_sensitivity"][0]
    assert f"{CIFAR10_CLASSES[row['class']]} {CIFAR10_CLASSES[row['other_class']]}" in text
    assert "checks: trust badges" in steps
    badges = checks["badges"]  # the explorer's verdicts, one row per pick and check
    assert {(row["index"], row["method"]) for row in badges} == {(1, "gradcam"), (4, "gradcam")}
    assert {row["verdict"] for row in badges} <= {"pass", "weak", "fail", "not_run"}
    assert "Trust badges" in text and badges[0]["reason"] in text
    assert str(tmp_path) not in document and str(generated_folder) not in document
    assert "/tmp/" not in document


def test_methods_and_layers_need_check(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="add --check"):
        _command("--indices", "1", "--methods", "gradient", "--out", str(tmp_path / "r.html"))


class _Terminal:
    def __init__(self) -> None:
        self.written: list[str] = []

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> None:
        self.written.append(text)

    def flush(self) -> None:
        pass


def test_on_a_terminal_each_step_overwrites_the_last() -> None:
    terminal = _Terminal()
    say("maps: Grad-CAM", terminal)  # type: ignore[arg-type]
    say("checks: ROAD", terminal)  # type: ignore[arg-type]
    assert terminal.written == ["\r\033[Kmaps: Grad-CAM", "\r\033[Kchecks: ROAD"]
