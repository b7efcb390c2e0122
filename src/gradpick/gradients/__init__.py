"""Exact input and layer gradients of the picked images: the request, the strategies, the engine.

The one request object (``request``) is built and validated once; a registry of strategies
(``strategies``) says how each computes the same numbers and at what cost; the engine (``engine``)
runs one; ``layers`` gives a named module's activation and its gradient through the same request;
``timing`` measures every strategy side by side against a hand-written floor.
Names resolve on first use (``gradpick._lazy``), so importing the package runs none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradpick._lazy import lazy_exports

if TYPE_CHECKING:
    from gradpick.gradients.engine import (
        DEFAULT_MEMORY_BUDGET,
        STRATEGIES,
        GradientResult,
        LeakageReport,
        compute,
        cross_sample_leakage,
        input_gradients,
        naive_loop,
    )
    from gradpick.gradients.layers import LayerGradients, LayerInfo, layer_gradients, probe
    from gradpick.gradients.request import REDUCTIONS, TARGETS, GradientRequest
    from gradpick.gradients.strategies import REGISTRY, Strategy
    from gradpick.gradients.timing import StrategyRun, compare_strategies

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "GradientRequest",
    "GradientResult",
    "LayerGradients",
    "LayerInfo",
    "LeakageReport",
    "REDUCTIONS",
    "REGISTRY",
    "STRATEGIES",
    "Strategy",
    "StrategyRun",
    "TARGETS",
    "compare_strategies",
    "compute",
    "cross_sample_leakage",
    "input_gradients",
    "layer_gradients",
    "naive_loop",
    "probe",
]

__getattr__, __dir__ = lazy_exports(__name__)
