"""gradpick: exact input gradients for the images you pick from a batch.

``gradpick.input_gradients`` is the public entry point. The library's folders are named by their
job, top to bottom: the deciding layer (``trust``, ``triage``, ``compare``, ``share``) over
``attribution``, over ``gradients``, over ``models``, ``outputs``, ``picking`` and ``data``, over
``show`` and ``runtime``. Each is an attribute of the package (``gradpick.models.load_model(
"resnet20")`` after a bare ``import gradpick``), resolved lazily (PEP 562), so ``import gradpick``
stays light: it imports no torch until a name that needs it is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__: str
"""The package's version (from ``gradpick._version``, resolved lazily like the modules)."""

__all__ = [
    "GradientResult",
    "input_gradients",
    "attribution",
    "compare",
    "data",
    "errors",
    "gradients",
    "models",
    "multilabel",
    "outputs",
    "picking",
    "runtime",
    "share",
    "show",
    "slices",
    "triage",
    "trust",
    "units",
]
_FROM_GRADIENTS = ("GradientResult", "input_gradients")
SUBMODULES = tuple(name for name in __all__ if name not in _FROM_GRADIENTS)
"""The public subpackages and modules. The command line (``gradpick.cli``), the benchmarks
(``gradpick.bench``) and the explorer (``gradpick.ui``) are importable as usual but are not
library API."""

if TYPE_CHECKING:
    from gradpick import (
        attribution,
        compare,
        data,
        errors,
        gradients,
        models,
        multilabel,
        outputs,
        picking,
        runtime,
        share,
        show,
        slices,
        triage,
        trust,
        units,
    )
    from gradpick.gradients.engine import GradientResult, input_gradients


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return importlib.import_module("gradpick._version").__version__
    if name in _FROM_GRADIENTS:
        return getattr(importlib.import_module("gradpick.gradients.engine"), name)
    if name in SUBMODULES:
        return importlib.import_module(f"gradpick.{name}")
    raise AttributeError(f"module 'gradpick' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
