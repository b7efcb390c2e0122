"""The hosted deploy (requirements.txt) installs the same versions as pyproject.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).parents[1]


def _pyproject_dependencies() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {Requirement(line).name: Requirement(line) for line in project["dependencies"]}


def _hosted_requirements() -> dict[str, Requirement]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    wanted = [line.strip() for line in lines if re.match(r"^[A-Za-z]", line.strip())]
    return {Requirement(line).name: Requirement(line) for line in wanted}


def test_requirements_pin_cpu_builds_of_the_pyproject_versions() -> None:
    pyproject = _pyproject_dependencies()
    hosted = _hosted_requirements()
    assert set(hosted) == set(pyproject)
    for name, requirement in pyproject.items():
        for specifier in requirement.specifier:
            pinned = [Version(spec.version) for spec in hosted[name].specifier]
            if specifier.operator == "==":
                assert len(pinned) == 1 and pinned[0].public == specifier.version, name
            else:
                assert str(hosted[name].specifier) == str(requirement.specifier), name
    for name in ("torch", "torchvision"):
        (pin,) = hosted[name].specifier
        assert Version(pin.version).local == "cpu", f"{name} must be the CPU-only build"


def test_requirements_install_gradpick_and_use_the_cpu_index() -> None:
    lines = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    assert "." in lines, "the app imports gradpick, so the deploy must install the package"
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines


def test_no_lock_file_that_the_host_would_read_first() -> None:
    for name in ("uv.lock", "Pipfile", "Pipfile.lock", "poetry.lock", "environment.yml"):
        assert not (ROOT / name).exists(), f"{name} would override requirements.txt on the host"


def test_make_test_installs_the_distributed_extra_so_ci_runs_the_ray_tests() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert [Requirement(line) for line in extras["distributed"]] == [
        Requirement("ray[data]==2.60.0")
    ]
    assert "-e '.[test,distributed]'" in (ROOT / "Makefile").read_text()
