"""``gradpick check-deploy`` end to end against an environment made as the host makes it
(``.venv-cpu``, which ``make test`` builds from requirements.txt; making a fresh one takes
minutes): it serves the app in hosted mode from that environment's installed wheel, a browser
opens and clicks it, and the report's verdict and exit status agree with its own rows."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gradpick.bench import deploy
from gradpick.data import CIFAR10_DIR_ENV
from tests.serving import REPO, chromium_executable, cifar10_images


def test_check_deploy_serves_the_hosted_app_and_reports_every_target(
    cifar_like_factory: Callable[[int], Path],
) -> None:
    chromium_executable()
    python = deploy.cpu_python(REPO)
    if python is None:
        pytest.skip("no .venv-cpu (make .venv-cpu/.installed makes it from requirements.txt)")
    env = {**os.environ, CIFAR10_DIR_ENV: str(cifar10_images(cifar_like_factory))}
    env["PYTHONPATH"] = str(REPO / "src")  # this checkout's command; the server runs the wheel
    command = [sys.executable, "-m", "gradpick", "check-deploy", "--python", python]
    done = subprocess.run(
        [*command, "--clicks", "2"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode in (0, 1), done.stderr
    lines = done.stdout.splitlines()
    rows = [line for line in lines if line.startswith("| ") and "step" not in line]
    assert len(rows) == 4, lines
    met = [row.rstrip(" |").rsplit("| ", 1)[1] for row in rows]
    memory = next(line for line in lines if "peak resident memory" in line)
    fits = float(memory.split(": ")[1].split(" MB")[0].replace(",", "")) < 1000
    every = all(value == "yes" for value in met) and fits
    assert done.returncode == (0 if every else 1)
    assert ("- every target met" in lines) == every
    served = next(Path(REPO / "artifacts").glob("first-visit-hosted-0.log")).read_text()
    assert "gradpick: warm-up: began (server start)" in served
