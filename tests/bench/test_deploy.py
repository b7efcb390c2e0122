"""The first visitors' benchmark and the deployment check, without a browser: which pins a
fresh environment installs, the rows and their targets, the memory verdict, and the command's
clear refusals. (Their browser runs are tests/browser/test_check_deploy.py; no figure of a run
is asserted.)"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from gradpick.bench import deploy
from gradpick.cli import main
from gradpick.data import CIFAR10_DIR_ENV
from gradpick.units import MB

REPO = Path(__file__).resolve().parents[2]


def test_a_fresh_environment_installs_every_requirement_but_the_host_only_torch_wheels() -> None:
    text = (REPO / "requirements.txt").read_text()
    requirement_lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "-", "."))
    ]
    host_only = [line for line in requirement_lines if line.startswith(("torch==", "torchvision"))]
    assert len(host_only) == 2  # the host's CPU wheels, from PyTorch's index
    pins = deploy.requirement_pins(text)
    assert pins == [line for line in requirement_lines if line not in host_only]
    assert any(pin.startswith("streamlit==") for pin in pins)


def test_pins_leave_out_options_comments_and_the_checkout() -> None:
    text = "# a comment\n--extra-index-url https://x\ntorch==2+cpu\nnumpy>=1  # why\n.[app]\n\n"
    assert deploy.requirement_pins(text + "torchmetrics==1\ntorchvision==0.1\n") == [
        "numpy>=1",
        "torchmetrics==1",
    ]


def test_every_target_is_held_in_every_run() -> None:
    visits = [
        deploy.Visit(3000.0, [700.0, 200.0, 250.0], 900 * MB),
        deploy.Visit(4100.0, [500.0, 310.0, 320.0], 990 * MB),
    ]
    rows = {
        name.split(": ", 1)[1]: (samples, limit)
        for name, samples, _, limit in deploy.rows(deploy.PLAIN, visits)
    }
    assert rows["first page settled (from the request)"] == ([3000.0, 4100.0], 4000.0)
    assert rows["first click → page settled"] == ([700.0, 500.0], 800.0)
    medians = [statistics.median([700, 200, 250]), statistics.median([500, 310, 320])]
    assert rows["click → page settled, each run's median"] == (medians, 300.0)
    every = rows["click → page settled, every click (first included)"]
    assert sorted(every[0]) == sorted([700.0, 200.0, 250.0, 500.0, 310.0, 320.0])
    assert deploy.rows(deploy.PLAIN, []) == []


@pytest.mark.parametrize(("peak", "fits"), [(999 * MB, True), (1000 * MB, False)])
def test_the_memory_verdict_is_the_peak_of_every_run_under_1_gb(peak: int, fits: bool) -> None:
    visits = [deploy.Visit(1.0, [1.0], 400 * MB), deploy.Visit(1.0, [1.0], peak)]
    assert deploy.verdict(visits) == (peak / MB, fits)


def test_check_deploy_needs_the_cifar10_copy_and_a_real_python(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv(CIFAR10_DIR_ENV, raising=False)
    assert main(["check-deploy", "--python", str(tmp_path / "none")]) == 2
    assert CIFAR10_DIR_ENV in capsys.readouterr().err
    monkeypatch.setenv(CIFAR10_DIR_ENV, str(tmp_path))
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/chromium")
    assert main(["check-deploy", "--python", str(tmp_path / "none")]) == 2
    assert "no such file" in capsys.readouterr().err
