"""Mutation testing of gradpick's core, one module at a time (``make mutants``).

mutmut runs each mutant against the tests that reached the mutated function in a stats run.
Over the whole suite nearly every test reaches ``GradientRequest.build``, so one mutant would
cost minutes; here each module is run against its own test files only, in its own work folder
(``build/mutants/<module>``) whose pyproject is the checkout's with ``[tool.mutmut]`` narrowed
to that module. Prints killed / survived / timeout and the score per module.

    python tools/mutants.py [module ...] [--jobs N] [--timeout SECONDS] [--survivors]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections import Counter
from pathlib import Path

__all__ = ["MODULES", "main", "run_module"]

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "mutants"


def _tests(pattern: str) -> list[str]:
    return sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").glob(pattern))


_TRUST_SHARED = ("chunks", "command", "engine", "quick", "report")
_MEASURES = (
    "baselines",
    "completeness",
    "contrastive",
    "faithfulness",
    "metrics",
    "randomisation",
    "road",
    "sensitivity",
)

# module: (files mutated, the tests that mirror them). request and strategies were split out of
# the gradient engine, whose tests (every strategy against the per-sample loop) still pin them.
MODULES: dict[str, tuple[list[str], list[str]]] = {
    "request": (
        ["src/gradpick/gradients/request.py"],
        ["tests/gradients/test_request.py", "tests/gradients/test_engine.py"],
    ),
    "strategies": (
        ["src/gradpick/gradients/strategies.py"],
        ["tests/gradients/test_strategies.py", "tests/gradients/test_engine.py"],
    ),
    "gradients": (["src/gradpick/gradients/engine.py"], ["tests/gradients/test_engine.py"]),
    "attribution": (
        ["src/gradpick/attribution/*"],
        ["tests/attribution/test_gradient_methods.py", "tests/attribution/test_cam.py"],
    ),
    # store's rows, batch and sources are pinned where they are read back (stored, infer, the
    # CLI); its Ray path (adopt_parts) by test_store's hand-written parts, not by Ray (minutes).
    "store": (
        ["src/gradpick/outputs/store_format.py"],
        [
            "tests/outputs/test_store_format.py",
            "tests/outputs/test_stores.py",
            "tests/outputs/test_inference.py",
            "tests/cli/test_cli.py",
        ],
    ),
    # The checks' shared engine, chunks, command, quick checks and report, against every trust
    # test; the measures each against their own tests (the layer methods' included): under
    # the whole trust list every run_checks test reaches them, minutes per mutant.
    "trust": (
        [f"src/gradpick/trust/{name}.py" for name in ("__init__", *_TRUST_SHARED)],
        _tests("trust/test_*.py"),
    ),
    "measures": (
        [f"src/gradpick/trust/{name}.py" for name in _MEASURES],
        [f"tests/trust/test_{name}.py" for name in (*_MEASURES, "layers")],
    ),
    # zoo's from_factory is pinned where the models module builds through it.
    "zoo": (
        ["src/gradpick/models/zoo.py"],
        ["tests/models/test_zoo.py", "tests/models/test_shipped.py"],
    ),
}

_RESULT = re.compile(r"^\s*(\S+): (.+)$")


def _pyproject_for(module: str) -> str:
    """The checkout's pyproject.toml with [tool.mutmut] naming one module and its tests."""
    text = (ROOT / "pyproject.toml").read_text()
    base = tomllib.loads(text)["tool"]["mutmut"]
    files, tests = MODULES[module]
    tests = [test for test in tests if (ROOT / test).exists()]
    settings = {**base, "only_mutate": files, "pytest_add_cli_args_test_selection": tests}
    lines = ["[tool.mutmut]"]
    for key, value in settings.items():
        rendered = (
            "[" + ", ".join(f'"{v}"' for v in value) + "]"
            if isinstance(value, list)
            else f'"{value}"'
            if isinstance(value, str)
            else str(value).lower()
        )
        lines.append(f"{key} = {rendered}")
    head = text.split("[tool.mutmut]")[0].rstrip()
    return head + "\n\n" + "\n".join(lines) + "\n"


def _work_folder(module: str) -> Path:
    """build/mutants/<module>: src and tests linked from the checkout, its own pyproject."""
    folder = WORK / module
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("src", "tests"):
        link = folder / name
        if not link.exists():
            link.symlink_to(ROOT / name)
    (folder / "pyproject.toml").write_text(_pyproject_for(module))
    return folder


def run_module(
    module: str, jobs: int, timeout: float, survivors_only: bool = False
) -> tuple[Counter[str], float]:
    """Run mutmut over one module; (count per status, wall seconds).

    mutmut keeps a mutant's verdict until its function changes, so a test written since does
    not re-check a survivor; ``survivors_only`` re-runs exactly the last run's survivors and the
    mutants no test reached then (``unreached.txt``), which a new test may reach now.
    """
    folder = _work_folder(module)
    names = []
    if survivors_only:
        for listed in ("survivors.txt", "unreached.txt"):
            if (folder / listed).exists():
                names += (folder / listed).read_text().split()
    mutmut = str(Path(sys.executable).with_name("mutmut"))
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    environment.pop("PYTHONPATH", None)  # mutmut puts its mutated copy of src/ first itself
    started = time.monotonic()
    with open(folder / "run.log", "w") as log:
        # Its own process group: on a timeout mutmut's fork server and workers stop with it.
        process = subprocess.Popen(
            [mutmut, "run", "--max-children", str(jobs), *names],
            cwd=folder,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait()
            print(f"{module}: stopped after {timeout:.0f} s; unchecked mutants remain", flush=True)
    seconds = time.monotonic() - started
    results = subprocess.run(
        [mutmut, "results", "--all", "true"],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    statuses: Counter[str] = Counter()
    listed: dict[str, list[str]] = {"survived": [], "no tests": []}
    for line in results.splitlines():
        match = _RESULT.match(line)
        if match:
            statuses[match[2]] += 1
            if match[2] in listed:
                listed[match[2]].append(match[1])
    for status, file in (("survived", "survivors.txt"), ("no tests", "unreached.txt")):
        (folder / file).write_text("".join(f"{name}\n" for name in listed[status]))
    return statuses, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", choices=[[], *MODULES], help="default: all")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once (default 1)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per module")
    parser.add_argument("--fresh", action="store_true", help="forget earlier results first")
    parser.add_argument(
        "--survivors",
        action="store_true",
        help="re-run only the last run's survivors and unreached mutants",
    )
    arguments = parser.parse_args(argv)
    print(
        f"{'module':<12} {'mutants':>7} {'killed':>6} {'survived':>8} {'timeout':>7} "
        f"{'other':>5} {'score':>6} {'wall':>7}"
    )
    for module in arguments.modules or list(MODULES):
        if arguments.fresh:
            shutil.rmtree(WORK / module / "mutants", ignore_errors=True)
        statuses, seconds = run_module(
            module, arguments.jobs, arguments.timeout, arguments.survivors
        )
        total = sum(statuses.values())
        checked = total - statuses["not checked"]
        killed, survived, timeout = statuses["killed"], statuses["survived"], statuses["timeout"]
        other = checked - killed - survived - timeout
        # A timeout counts as killed: the mutant made the tests hang, which they notice.
        score = 100 * (killed + timeout) / checked if checked else 0.0
        print(
            f"{module:<12} {total:>7} {killed:>6} {survived:>8} {timeout:>7} {other:>5} "
            f"{score:>5.1f}% {seconds:>6.0f}s"
            + (f"  ({statuses['not checked']} not checked)" if checked < total else ""),
            flush=True,
        )
        print(f"{'':<12} survivors: {(WORK / module / 'survivors.txt').relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
