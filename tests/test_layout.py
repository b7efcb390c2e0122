"""The package reads top to bottom: front ends over the library, never the other way round.

Read from the source with ``ast`` (no import runs), so a cycle or an upward import is found even
where it hides inside a function. Layers, top first::

    cli → bench → ui → trust / triage / slices / compare / share / picking → attribution
        → gradients → models / outputs / data → show / runtime → errors / units

A module of a lower layer never imports one of a higher; the library (everything outside
``gradpick.cli``, ``gradpick.bench`` and ``gradpick.ui``) imports none of the three front ends.
Imports under ``if TYPE_CHECKING:`` never run and are left out: a result type named by a lower
layer for its annotations only (``gradpick.show.notebook`` draws results it does not import).
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
    "gradpick.trust": 6,
    "gradpick.triage": 6,
    "gradpick.compare": 6,
    "gradpick.slices": 6,
    "gradpick.share": 6,
    "gradpick.multilabel": 6,
    "gradpick.attribution": 5,
    "gradpick.gradients": 4,
    "gradpick.models": 3,
    "gradpick.outputs": 3,
    "gradpick.picking": 6,
    "gradpick.data": 3,
    "gradpick.show": 2,
    "gradpick.runtime": 2,
    "gradpick.errors": 1,
    "gradpick.units": 1,
    "gradpick._version": 1,
    "gradpick._lazy": 1,
}
"""The library's layers, higher over lower. Every library module belongs to one
(``test_every_library_module_has_a_layer``)."""

MOST_TOP_LEVEL_MODULES = 12
"""Modules directly in ``src/gradpick``: the rest live in folders named by their job."""


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


def _is_panel(name: str) -> bool:
    return name.startswith("gradpick.ui.panels.")


def test_no_panel_imports_another_panel() -> None:
    crossing = [
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        if _is_panel(name)
        for target, _ in targets
        if _is_panel(target) and target != name
    ]
    assert not crossing, crossing


def test_every_library_module_has_a_layer() -> None:
    unplaced = [
        name
        for name in MODULES
        if not _is_front_end(name)
        and name not in ("gradpick", "gradpick.__main__")
        and _layer(name) is None
    ]
    assert not unplaced, unplaced


def test_few_modules_directly_in_the_package() -> None:
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= MOST_TOP_LEVEL_MODULES, top


def test_no_two_modules_in_a_folder_differ_by_one_letter() -> None:
    def one_letter_apart(a: str, b: str) -> bool:
        if abs(len(a) - len(b)) > 1 or a == b:
            return False
        shorter, longer = sorted((a, b), key=len)
        if len(a) == len(b):
            return sum(x != y for x, y in zip(a, b, strict=True)) == 1
        return any(longer[:i] + longer[i + 1 :] == shorter for i in range(len(longer)))

    folders: dict[Path, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        folders.setdefault(path.parent, []).append(path.stem)
    close = [
        f"{folder.name}: {a} / {b}"
        for folder, stems in folders.items()
        for i, a in enumerate(sorted(stems))
        for b in sorted(stems)[i + 1 :]
        if one_letter_apart(a, b)
    ]
    assert not close, close


STREAMLIT_MODULES = {
    "gradpick.ui.badges",
    "gradpick.ui.cache",
    "gradpick.ui.guard",
    "gradpick.ui.judged",
    "gradpick.ui.launch",
    "gradpick.ui.layer_select",
    "gradpick.ui.linking",
    "gradpick.ui.media",
    "gradpick.ui.page",
    "gradpick.ui.start",
    "gradpick.ui.tabs",
}
"""The explorer's modules that draw or cache with Streamlit, besides the panels. Every other
module (the library, and the explorer's plain modules: figures, service, keys, links, ...) is
importable and testable without it."""


def _imports_streamlit(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(
        (
            isinstance(node, ast.Import)
            and any(a.name.split(".")[0] == "streamlit" for a in node.names)
        )
        or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "streamlit")
        for node in ast.walk(tree)
    )


def test_only_panels_and_named_modules_import_streamlit() -> None:
    plain = [
        name
        for name, path in MODULES.items()
        if not _is_panel(name) and name not in STREAMLIT_MODULES and _imports_streamlit(path)
    ]
    assert not plain, plain


def test_every_streamlit_cache_lives_in_the_cache_module() -> None:
    caching = [
        name
        for name, path in MODULES.items()
        if name != "gradpick.ui.cache"
        and any(
            isinstance(node, ast.Attribute | ast.Name)
            and getattr(node, "attr", getattr(node, "id", None)) in ("cache_data", "cache_resource")
            for node in ast.walk(ast.parse(path.read_text()))
        )
    ]
    assert not caching, caching
