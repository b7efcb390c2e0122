"""The README's and the docs' code blocks run as written, on tiny data made here.

Every ```python and ```bash block of README.md and docs/**/*.md runs in a fresh process (forked
by ``tests/warm_python.py`` from a Python that imported torch and gradpick once), from
a temporary folder holding ``photos/`` (an ImageFolder tree in CIFAR-10's class names, so the
shipped models understand its labels) and ``outputs/`` (a store of it), with ``gradpick`` on
PATH and this checkout's ``src`` on PYTHONPATH. An HTML comment on the line before a block
says how to treat it:

* ``<!-- no-test: why -->``: never run (servers, training, downloads, the user's own files);
* ``<!-- test: cifar10 -->``: run with the real CIFAR-10 copy as ``GRADPICK_CIFAR10_DIR``,
  skipped with a reason when it is absent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gradpick.data import CIFAR10_CLASSES

__all__: list[str] = []

RUN_LANGUAGES = ("python", "bash")
MARKER = re.compile(r"<!--\s*(no-test|test)\s*:\s*(.*?)\s*-->")
FENCE = re.compile(r"^```(\w*)\s*$")
BLOCK_TIMEOUT_S = 900
"""A hang guard, not a speed bound: the slowest block takes about 16 s of CPU, and on two cores
shared with a dozen other processes (load 24, measured) a block ran past a 2-minute guard. A
block that still runs past it fails alone, with what it printed; the others keep their results."""
PARALLEL_RUNS = 3
REPO_ROOT = Path(__file__).resolve().parents[1]
WARM_PYTHON = Path(__file__).with_name("warm_python.py")
WARM_SOCKET = "warm.sock"
"""In the workspace: the socket of the Python that forks each block's and command's process."""


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language, its code and its marker."""

    path: Path
    line: int
    language: str
    code: str
    marker: tuple[str, str] | None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"


def _blocks(path: Path) -> list[Block]:
    """Fenced blocks at the top level of a page (inside admonitions they would be indented)."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        before = next((line for line in reversed(lines[:index]) if line.strip()), "")
        marked = MARKER.search(before)
        found.append(
            Block(
                path=path,
                line=index + 1,
                language=opening.group(1),
                code="\n".join(lines[index + 1 : end]) + "\n",
                marker=None if marked is None else (marked.group(1), marked.group(2)),
            )
        )
        index = end + 1
    return found


PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
BLOCKS = [block for page in PAGES for block in _blocks(page) if block.language in RUN_LANGUAGES]
RUN = [block for block in BLOCKS if block.marker is None or block.marker[0] == "test"]


def _cifar10_dir() -> Path | None:
    configured = os.environ.get("GRADPICK_CIFAR10_DIR")
    candidate = Path(configured) if configured else REPO_ROOT.parent / "shared/data/cifar10-jpg"
    return candidate if (candidate / "test").is_dir() else None


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """photos/ (two noise images per CIFAR-10 class, of mixed sizes) and its store outputs/."""
    from gradpick.cli import main

    root = tmp_path_factory.mktemp("docs-workspace")
    rng = np.random.default_rng(0)
    for index in range(2 * len(CIFAR10_CLASSES)):
        folder = root / "photos" / CIFAR10_CLASSES[index % len(CIFAR10_CLASSES)]
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (36, 40 + index, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{index:04d}.png")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "gradpick"
    launcher.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" "{WARM_PYTHON}" run "{root / WARM_SOCKET}" '
        '-m gradpick "$@"\n'
    )
    launcher.chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    assert main(["infer", "--data", str(root / "photos"), "--out", str(root / "outputs")]) == 0
    return root


def _needs_skip(block: Block) -> str | None:
    if block.marker == ("test", "cifar10") and _cifar10_dir() is None:
        return (
            "needs the real CIFAR-10 copy: set GRADPICK_CIFAR10_DIR to a folder with "
            "train/ and test/ ImageFolder trees (or ../shared/data/cifar10-jpg)"
        )
    return None


def _run(block: Block, workspace: Path, work: Path) -> subprocess.CompletedProcess[str]:
    """Run one block in ``work``, a fresh copy of the workspace's data."""
    for name in ("photos", "outputs"):
        shutil.copytree(workspace / name, work / name)
    script = work / ("snippet.py" if block.language == "python" else "snippet.sh")
    script.write_text(block.code)
    command = (
        [sys.executable, str(WARM_PYTHON), "run", str(workspace / WARM_SOCKET), script.name]
        if block.language == "python"
        else ["bash", "-euo", "pipefail", script.name]
    )
    cifar10 = _cifar10_dir() if block.marker == ("test", "cifar10") else None
    try:
        return subprocess.run(
            command,
            cwd=work,
            env=_environment(workspace, cifar10),
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as expired:
        return subprocess.CompletedProcess(
            command,
            returncode=-1,
            stdout=_text(expired.stdout),
            stderr=f"{_text(expired.stderr)}\nstill running after {BLOCK_TIMEOUT_S} s: stopped",
        )


def _text(output: str | bytes | None) -> str:
    """What a stopped run had printed (bytes when the run was stopped mid-line)."""
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


@pytest.fixture(scope="module")
def ran(
    workspace: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], subprocess.CompletedProcess[str]]:
    """Every distinct block that is to run, run a few at a time: most of each run is importing
    torch, so on busy cores they overlap well. A block repeated on two pages runs once."""
    distinct = {(block.language, block.code): block for block in RUN if _needs_skip(block) is None}
    with _warm_python(workspace), ThreadPoolExecutor(max_workers=PARALLEL_RUNS) as pool:
        futures = {
            key: pool.submit(_run, block, workspace, tmp_path_factory.mktemp("block"))
            for key, block in distinct.items()
        }
        return {key: future.result() for key, future in futures.items()}


@contextmanager
def _warm_python(workspace: Path) -> Iterator[None]:
    """The forking Python, in the blocks' environment, for as long as the blocks run."""
    server = subprocess.Popen(
        [sys.executable, str(WARM_PYTHON), "serve", str(workspace / WARM_SOCKET)],
        cwd=workspace,
        env=_environment(workspace, None),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline() == "ready\n"
        yield
    finally:
        server.kill()
        server.wait()


def _environment(root: Path, cifar10: Path | None) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("GRADPICK_") and key != "PYTHONPATH"
    }
    env["PYTHONPATH"] = str(REPO_ROOT / "src")
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["GRADPICK_CACHE_DIR"] = str(root / "cache")
    env["OMP_NUM_THREADS"] = "1"
    if cifar10 is not None:
        env["GRADPICK_CIFAR10_DIR"] = str(cifar10)
    return env


def test_the_pages_hold_blocks_that_run() -> None:
    """The convention is read: the README's example and the store recipe are among the runs."""
    ids = {block.id for block in RUN}
    assert any(block_id.startswith("README.md:") for block_id in ids)
    assert any("stored-outputs.md" in block_id for block_id in ids)
    assert any(block.marker and block.marker[0] == "no-test" for block in BLOCKS)
    for block in BLOCKS:
        if block.marker is not None:
            assert block.marker[1], f"{block.id}: say why the block is marked"
            if block.marker[0] == "test":
                assert block.marker[1] == "cifar10", f"{block.id}: unknown marker"


@pytest.mark.parametrize("block", RUN, ids=[block.id for block in RUN])
def test_block_runs_as_written(
    block: Block, ran: dict[tuple[str, str], subprocess.CompletedProcess[str]]
) -> None:
    reason = _needs_skip(block)
    if reason is not None:
        pytest.skip(reason)
    result = ran[(block.language, block.code)]
    assert result.returncode == 0, (
        f"{block.id} failed (exit {result.returncode}):\n{block.code}\n"
        f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
    )


@pytest.mark.parametrize("page", sorted((REPO_ROOT / "docs" / "guide").glob("*.md")), ids=str)
def test_every_guide_page_is_listed_in_the_readme_and_on_the_home_page(page: Path) -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    home = (REPO_ROOT / "docs" / "index.md").read_text()
    assert f"(docs/guide/{page.name})" in readme
    assert f"(guide/{page.name})" in home
