"""Packages that import nothing until a name is used (PEP 562).

A subpackage's ``__init__`` lists its public names as imports under ``if TYPE_CHECKING:`` (what
type checkers and the API reference read) and hands its own name to ``lazy_exports``, which maps
each of those names to the module it is imported from and resolves it on first use. So
``import gradpick.outputs`` stays light, a module deep in one package can import a sibling of
another without running that package's other modules, and the names are written once.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports"]


def _type_checking_imports(source: str) -> dict[str, str]:
    """Public name -> defining module, from the ``if TYPE_CHECKING:`` block of ``source``."""
    origins: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    for alias in statement.names:
                        origins[alias.asname or alias.name] = statement.module
    return origins


def lazy_exports(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: its typed names, then its submodules.

    The ``__init__``'s source comes from its loader, so a zipped or frozen install reads it too.
    """
    module = importlib.import_module(package)
    loader = getattr(module.__spec__, "loader", None)
    source = loader.get_source(package) if loader is not None else None
    if source is None:
        raise ImportError(f"{package}: no source to read its public names from")
    origins = _type_checking_imports(source)
    namespace = module.__dict__

    def __getattr__(name: str) -> Any:
        if name in origins:
            value = getattr(importlib.import_module(origins[name]), name)
        else:
            try:
                value = importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as missing:
                if missing.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *origins})

    return __getattr__, __dir__
