"""The package reads top to bottom: front ends over the library, never the other way round.

Read from the source with ``ast`` (no import runs), so a cycle or an upward import is found even
where it hides inside a function. Layers, top first::

    cli → bench → ui → trust / export → attribution → gradients → models / data

A module of a lower layer never imports one of a higher; the library (everything outside
``gradpick.cli``, ``gradpick.bench`` and ``gradpick.ui``) imports none of the three front ends.

One designed exception: a result's ``_repr_html_`` (Jupyter's hook) imports
``gradpick.notebook``, which draws results and so sits above them; the import runs only when a
notebook displays a result.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SOURCE / "gradpick"
FRONT_ENDS = ("gradpick.cli", "gradpick.bench", "gradpick.ui", "gradpick.__main__")
MOST_LINES = 700
"""A module longer than this does more than one job."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path) -> Iterator[tuple[str, bool]]:
    """(imported gradpick module, whether the import runs at import time) for each import.

    ``from gradpick import x`` names module ``gradpick.x`` when that is a module; imports under
    ``if TYPE_CHECKING:`` never run and are left out."""
    tree = ast.parse(path.read_text(), filename=str(path))
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(child) for child in ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "_repr_html_":
            type_only.update(
                id(child)
                for child in ast.walk(node)
                if isinstance(child, ast.ImportFrom) and child.module == "gradpick.notebook"
            )
    at_import_time = {id(child) for statement in tree.body for child in _top_level(statement)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        eager = id(node) in at_import_time
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gradpick"):
                    yield _nearest_module(alias.name), eager
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if not base.startswith("gradpick"):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield (candidate if candidate in MODULES else _nearest_module(base)), eager


def _top_level(statement: ast.stmt) -> Iterator[ast.AST]:
    """The nodes that run when the module is imported: not inside functions."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
        return
    yield statement
    for child in ast.iter_child_nodes(statement):
        if isinstance(child, ast.stmt):
            yield from _top_level(child)
        else:
            yield from ast.walk(child)


def _nearest_module(dotted: str) -> str:
    while dotted not in MODULES and "." in dotted:
        dotted = dotted.rpartition(".")[0]
    return dotted


def _is_front_end(name: str) -> bool:
    return any(name == end or name.startswith(end + ".") for end in FRONT_ENDS)


GRAPH = {name: sorted(set(_imports(name, path))) for name, path in MODULES.items()}


def test_no_library_module_imports_a_front_end() -> None:
    upward = [
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        if not _is_front_end(name) and name != "gradpick"
        for target, _ in targets
        if _is_front_end(target)
    ]
    assert not upward, upward


def test_front_ends_import_in_order_cli_bench_ui() -> None:
    rank = {"gradpick.cli": 0, "gradpick.bench": 1, "gradpick.ui": 2}

    def front(name: str) -> int | None:
        return next(
            (r for end, r in rank.items() if name == end or name.startswith(end + ".")), None
        )

    upward = [
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        for target, _ in targets
        if (here := front(name)) is not None
        and (there := front(target)) is not None
        and there < here
    ]
    assert not upward, upward


LIBRARY_LAYERS = {
    "gradpick.trust": 4,
    "gradpick.export": 4,
    "gradpick.attribution": 3,
    "gradpick.gradients": 2,
    "gradpick.models": 1,
    "gradpick.zoo": 1,
    "gradpick.data": 1,
}
"""The library's named layers, higher over lower (trust/export → attribution → gradients →
models/data)."""


def _layer(name: str) -> int | None:
    return next(
        (rank for top, rank in LIBRARY_LAYERS.items() if name == top or name.startswith(top + ".")),
        None,
    )


def test_the_library_layers_import_downward() -> None:
    upward = [
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        for target, _ in targets
        if (here := _layer(name)) is not None
        and (there := _layer(target)) is not None
        and there > here
    ]
    assert not upward, upward


def _cycles(eager_only: bool) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    edges = {
        name: [
            t for t, eager in targets if t in MODULES and t != name and (eager or not eager_only)
        ]
        for name, targets in GRAPH.items()
    }
    # A package's __init__ importing its own submodules (a re-export) is no loop: the submodule
    # is importable first. Leave the edge from a package to its children out.
    edges = {
        name: [t for t in targets if not t.startswith(name + ".")]
        for name, targets in edges.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in edges:
        if node not in index:
            visit(node)
    return groups


def test_no_import_loop_even_inside_functions() -> None:
    assert _cycles(eager_only=False) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_declares_its_public_names(name: str) -> None:
    if name.endswith("__main__"):
        pytest.skip("the `python -m gradpick` entry point has no names")
    tree = ast.parse(MODULES[name].read_text())
    declared = [
        node
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and any(
            isinstance(target, ast.Name) and target.id == "__all__"
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
    ]
    assert declared, f"{name} has no __all__"
    module = __import__(name, fromlist=["*"])
    missing = [item for item in module.__all__ if not hasattr(module, item)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_does_too_many_jobs(name: str) -> None:
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MOST_LINES, f"{name}: {lines} lines"


PANELS = ("gradpick.ui.sidebar", "gradpick.ui.outputs")


def _is_panel(name: str) -> bool:
    return name.startswith("gradpick.ui.") and (name.endswith("_panel") or name in PANELS)


def test_no_panel_imports_another_panel() -> None:
    crossing = [
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        if _is_panel(name)
        for target, _ in targets
        if _is_panel(target) and target != name
    ]
    assert not crossing, crossing
