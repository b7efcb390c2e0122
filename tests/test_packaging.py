"""gradpick as others install it: a wheel that works outside the checkout, every import declared,
and a hosted deploy (requirements.txt) that installs the same versions as pyproject.toml."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).parents[1]
SHIPPED = ("resnet20", "tutorial")


def _pyproject_dependencies() -> dict[str, Requirement]:
    """The library's dependencies and the explorer's (the app extra), which the hosted demo
    installs together."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = [*project["dependencies"], *project["optional-dependencies"]["app"]]
    return {Requirement(line).name: Requirement(line) for line in lines}


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
    assert ".[app]" in lines, "the app imports gradpick's explorer, so the deploy installs it"
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines


def test_no_lock_file_that_the_host_would_read_first() -> None:
    for name in ("uv.lock", "Pipfile", "Pipfile.lock", "poetry.lock", "environment.yml"):
        assert not (ROOT / name).exists(), f"{name} would override requirements.txt on the host"


# ----------------------------------------------------------------------------- declared imports


FRONT_END_FOLDERS = ("ui", "bench", "cli")
"""Folders of ``src/gradpick`` whose modules may import the app extra's packages at module level:
the explorer, the benchmarks (which serve it) and the command line that starts them."""


def _third_party_imports() -> dict[str, str]:
    """Top-level names of the packages ``src/`` imports that are not gradpick's or the standard
    library's, each with where some module imports it at module level (not in a function):
    "library", "front end" (a module of ``FRONT_END_FOLDERS``), or "" (inside functions only)."""
    rank = {"": 0, "front end": 1, "library": 2}
    found: dict[str, str] = {}
    for path in (ROOT / "src").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        module_level = {id(node) for node in tree.body}
        folder = path.relative_to(ROOT / "src" / "gradpick").parts[0]
        place = "front end" if folder in FRONT_END_FOLDERS else "library"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "gradpick" and top not in sys.stdlib_module_names:
                    here = place if id(node) in module_level else ""
                    found[top] = max(found.get(top, ""), here, key=rank.__getitem__)
    return found


NOT_INSTALLED_EXTRAS = {"umap": "umap-learn"}
"""Import name -> distribution of the optional extras an environment may lack (umap-learn comes
with the test extra, but a plain install of gradpick has none of them)."""


def test_every_imported_package_is_declared() -> None:
    """A package the code imports directly is a dependency of its own, not something another
    dependency happens to bring (pandas came with streamlit). One imported only inside a
    function, behind a check that it is installed, may be an optional extra instead; the
    explorer's modules may import the app extra's packages at module level."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    runtime = {canonicalize_name(Requirement(line).name) for line in project["dependencies"]}
    app = {canonicalize_name(Requirement(line).name) for line in extras["app"]}
    optional = {
        canonicalize_name(Requirement(line).name) for lines in extras.values() for line in lines
    }
    imports = _third_party_imports()
    assert {"torch", "streamlit", "pandas", "PIL"} <= set(imports)
    assert imports["streamlit"] == imports["plotly"] == "front end"
    providers = metadata.packages_distributions()
    allowed_at = {"library": runtime, "front end": runtime | app, "": runtime | optional}
    for import_name, place in sorted(imports.items()):
        if import_name not in providers:
            # An optional extra this environment lacks: it may only
            # be imported inside a function, and its distribution must be an extra.
            assert not place, f"{import_name} is imported at module level"
            distribution = canonicalize_name(NOT_INSTALLED_EXTRAS[import_name])
            assert distribution in optional, f"{import_name} ({distribution}) is not declared"
            continue
        (distribution,) = {canonicalize_name(name) for name in providers[import_name]}
        assert distribution in allowed_at[place], f"{import_name} ({distribution}) is not declared"


def test_the_library_installs_without_the_explorer() -> None:
    """``pip install gradpick`` brings no Streamlit or plotly; ``gradpick[app]`` does."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {canonicalize_name(Requirement(line).name) for line in project["dependencies"]}
    assert {"streamlit", "plotly"}.isdisjoint(runtime)
    app = {
        canonicalize_name(Requirement(line).name)
        for line in project["optional-dependencies"]["app"]
    }
    assert app == {"streamlit", "plotly"}


def test_the_explorer_without_its_extra_names_the_extra() -> None:
    """With Streamlit missing, the library still imports, and the explorer says what to install."""
    code = (
        "import sys; sys.modules['streamlit'] = None\n"
        "import gradpick.gradients.engine, gradpick.outputs.store_format\n"
        "try:\n"
        "    import gradpick.ui.page\n"
        "except ImportError as error:\n"
        "    print(type(error).__name__, error)\n"
    )
    answer = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert answer.stdout.startswith("MissingExtraError The explorer needs streamlit"), answer
    assert "pip install 'gradpick[app]'" in answer.stdout


# ----------------------------------------------------------------------------- the wheel


def _pip(*arguments: str) -> None:
    answer = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *arguments],
        capture_output=True,
        text=True,
    )
    assert answer.returncode == 0, answer.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """gradpick built into a wheel from a copy of the sources (no build/ or egg-info left in the
    checkout), offline with this environment's setuptools, and installed from it, not editable,
    into a fresh target folder."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    shutil.copytree(
        ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    dist = work / "dist"
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(source))
    (wheel,) = dist.glob("gradpick-*.whl")
    target = work / "target"
    _pip("install", "--no-deps", "--no-index", "--no-compile", "--target", str(target), str(wheel))
    return target


def _run_installed(path_entry: Path, arguments: list[str], cwd: Path) -> str:
    """This interpreter without ``site`` (so no .pth file adds the checkout's editable install),
    with only ``path_entry`` and this environment's site-packages (for the dependencies) on its
    path, run from ``cwd``; a fresh environment, so no $GRADPICK_* setting leaks in. Returns
    its standard output."""
    libraries = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    env = {
        "PYTHONPATH": os.pathsep.join([str(path_entry), *libraries]),
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(cwd),
        "OMP_NUM_THREADS": "1",
        "GRADPICK_CACHE_DIR": str(cwd / "cache"),
    }
    answer = subprocess.run(
        [sys.executable, "-S", *arguments], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert answer.returncode == 0, answer.stderr
    return answer.stdout


REPORT = f"""
import json, sys
import gradpick
shipped = gradpick.models.shipped
report = {{"file": gradpick.__file__, "shipped": shipped.shipped_models(), "models": {{}}}}
for name in {SHIPPED!r}:
    card = gradpick.models.shipped.model_card(name)
    model = gradpick.models.shipped.load(name)
    report["models"][name] = {{
        "card_sha256": card["sha256"],
        "file_sha256": shipped.sha256_file(shipped.shipped_weights_path(name)),
        "frozen": not model.training and not any(p.requires_grad for p in model.parameters()),
    }}
if "--app" in sys.argv:
    import gradpick.ui.page
    report["app"] = gradpick.ui.page.__file__
print(json.dumps(report))
"""
"""What an installation holds: where gradpick and (with --app) the app module come from, the
shipped models, and for each the weights' sha256, its card's, and whether it loads frozen."""


def _report(path_entry: Path, cwd: Path, *options: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(_run_installed(path_entry, ["-c", REPORT, *options], cwd))
    return report


@pytest.fixture(scope="module")
def installed_report(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _report(installed, tmp_path_factory.mktemp("elsewhere"), "--app")


def test_the_installed_wheel_ships_both_trained_models(
    installed: Path, installed_report: dict[str, Any]
) -> None:
    assert Path(installed_report["file"]).is_relative_to(installed)
    assert installed_report["shipped"] == list(SHIPPED)
    for name in SHIPPED:
        figures = installed_report["models"][name]
        assert figures["file_sha256"] == figures["card_sha256"], name
        assert figures["frozen"], name


def test_the_installed_app_module_imports(
    installed: Path, installed_report: dict[str, Any]
) -> None:
    assert Path(installed_report["app"]).is_relative_to(installed)


def test_the_shipped_models_load_from_a_zipped_package(installed: Path, tmp_path: Path) -> None:
    """importlib.resources, not a file path: the weights are read from inside a zip too."""
    archive = tmp_path / "gradpick.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted((installed / "gradpick").rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zipped.write(path, path.relative_to(installed).as_posix())
    report = _report(archive, tmp_path)
    assert Path(report["file"]).is_relative_to(archive)
    assert report["shipped"] == list(SHIPPED)
    for name in SHIPPED:
        assert report["models"][name]["file_sha256"] == report["models"][name]["card_sha256"]


def test_the_installed_cli_infers_with_the_card_accuracy(
    installed: Path, tmp_path: Path, shared_cifar10_dir: Path
) -> None:
    card = json.loads((installed / "gradpick" / "assets" / "resnet20.json").read_text())
    arguments = ["-m", "gradpick", "infer", "--size", "200", "--seed", "0"]
    output = _run_installed(installed, [*arguments, "--data", str(shared_cifar10_dir)], tmp_path)
    assert f"resnet20 (shipped weights; card: {card['test_accuracy']:.2%} test accuracy)" in output
    measured = re.search(r"^accuracy: (\d+\.\d\d)% \(\d+ of 200\)$", output, re.M)
    assert measured is not None, output
    assert float(measured[1]) > 80, "the trained weights score ~90%; random ones ~10%"


def test_make_test_installs_the_distributed_extra_so_ci_runs_the_ray_tests() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert [Requirement(line) for line in extras["distributed"]] == [
        Requirement("ray[data]==2.60.0")
    ]
    assert "-e '.[app,test,distributed]'" in (ROOT / "Makefile").read_text()
