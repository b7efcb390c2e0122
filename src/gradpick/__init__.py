"""gradpick: exact input gradients for the images you pick from a batch.

``gradpick.input_gradients`` is the public entry point, and the library's modules are attributes
of the package (``gradpick.models.load("resnet20")`` after a bare ``import gradpick``). Both are
resolved lazily (PEP 562), so ``import gradpick`` stays light: it imports no torch until a name
that needs it is used.
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
    "beside",
    "compare",
    "data",
    "devices",
    "distributed",
    "embedding",
    "errors",
    "export",
    "gradients",
    "infer",
    "layers",
    "measure",
    "models",
    "notebook",
    "process",
    "render",
    "report",
    "report_checks",
    "report_record",
    "request",
    "selection",
    "selections",
    "spec",
    "store",
    "stored",
    "strategies",
    "train",
    "triage",
    "trust",
    "units",
    "verdicts",
    "versions",
    "versus",
    "weights",
    "zoo",
]
_FROM_GRADIENTS = ("GradientResult", "input_gradients")
SUBMODULES = tuple(name for name in __all__ if name not in _FROM_GRADIENTS)
"""The public modules. The command line (``gradpick.cli``), the benchmarks (``gradpick.bench``)
and the explorer (``gradpick.ui``) are importable as usual but are not library API."""

if TYPE_CHECKING:
    from gradpick import (
        attribution,
        beside,
        compare,
        data,
        devices,
        distributed,
        embedding,
        errors,
        export,
        gradients,
        infer,
        layers,
        measure,
        models,
        notebook,
        process,
        render,
        report,
        report_checks,
        report_record,
        request,
        selection,
        selections,
        spec,
        store,
        stored,
        strategies,
        train,
        triage,
        trust,
        units,
        verdicts,
        versions,
        versus,
        weights,
        zoo,
    )
    from gradpick.gradients import GradientResult, input_gradients


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return importlib.import_module("gradpick._version").__version__
    if name in _FROM_GRADIENTS:
        return getattr(importlib.import_module("gradpick.gradients"), name)
    if name in SUBMODULES:
        return importlib.import_module(f"gradpick.{name}")
    raise AttributeError(f"module 'gradpick' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
