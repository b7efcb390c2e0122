"""Whether the trust badges keep to their budget on big models: ``gradpick bench-badges --budget``.

Per model (default: torchvision's ViT-B/16 and ResNet-50 at 224 px, random weights; the ViT's
head, which torchvision initialises to zeros, redrawn so its logits and maps are not all zero)
and method, it clicks one CIFAR-10 test image after another (``$GRADPICK_CIFAR10_DIR``) as the
explorer does without a browser: the maps (``heatmaps.compute``, the tiles and the strips), then
the badges (``heatmaps.quick_checks``) with the page's budget, ``BUDGET_SHARE`` of the click's
server time so far. The first click of a model pays its first-use costs (the layer probe, the
randomised copy); a check that does not fit is not run. Printed per click: the maps' time, the
budget, the badges' time, which checks ran, and whether the badges kept to the budget.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from gradpick.bench.rows import markdown_table
from gradpick.data import load_batch
from gradpick.data.folders import image_folder
from gradpick.errors import DataError
from gradpick.gradients.layers import user_model
from gradpick.models.zoo import load_model
from gradpick.outputs.inference import infer
from gradpick.trust.quick import BUDGET_SHARE

__all__ = ["METHODS", "MODELS", "BudgetRow", "budget_rows", "redraw_zero_head", "report_text"]

MODELS = ("torchvision:vit_b_16", "torchvision:resnet50")
METHODS = ("gradient", "gradcam")
BATCH = 16
"""Images read for the clicks (each click maps one of them)."""


@dataclass(frozen=True)
class BudgetRow:
    model: str
    method: str
    click: int
    """1 is the model's first click with this method (0 would be a warm-up; none is made)."""
    maps_ms: float
    budget_ms: float
    badges_ms: float
    ran: tuple[str, ...]
    skipped: tuple[str, ...]


def redraw_zero_head(model: nn.Module) -> bool:
    """Redraw the last Linear layer when its weights are all zero (torchvision's ViT head at
    random init): N(0, 1 / fan_in), seeded, so the logits depend on the image. True if redrawn."""
    inner, _ = user_model(model)
    linears = [module for module in inner.modules() if isinstance(module, nn.Linear)]
    if not linears or bool(linears[-1].weight.detach().any()):
        return False
    head = linears[-1]
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        draw = torch.randn(head.weight.shape, generator=generator, dtype=torch.float64)
        head.weight.copy_(draw / head.weight.shape[1] ** 0.5)
    return True


def budget_rows(
    models: Sequence[str] = MODELS,
    clicks: int = 3,
    methods: Sequence[str] = METHODS,
    progress: Callable[[str], None] | None = None,
) -> list[BudgetRow]:
    """``clicks`` clicks of one image each per model and method, the first one cold."""
    from gradpick.ui import heatmaps

    root = os.environ.get("GRADPICK_CIFAR10_DIR", "")
    if not root:
        raise DataError("Set GRADPICK_CIFAR10_DIR to the CIFAR-10 ImageFolder tree.")
    rows: list[BudgetRow] = []
    for name in models:
        loaded = load_model(name)
        model = loaded.module
        redraw_zero_head(model)
        source = image_folder(Path(root) / "test", loaded.spec)
        batch = load_batch(source, size=BATCH, seed=0)
        logits = infer(model, batch.float_images(), None).logits
        for method in methods:
            request = heatmaps.HeatmapRequest(method=method)
            for click in range(1, clicks + 1):
                chosen = [(5 * click + len(rows)) % BATCH]
                started = time.perf_counter()
                shown = heatmaps.compute(model, batch, chosen, request)
                tiles = heatmaps.tiles(batch.images[chosen], shown.maps, False)
                [heatmaps.strip(tile) for tile in tiles]
                maps_s = time.perf_counter() - started
                before = time.perf_counter()
                checks = heatmaps.quick_checks(
                    model, batch, chosen, request, shown, BUDGET_SHARE * maps_s, logits
                )
                badges_s = time.perf_counter() - before
                rows.append(
                    BudgetRow(
                        name, method, click, maps_s * 1000, BUDGET_SHARE * maps_s * 1000,
                        badges_s * 1000, tuple(check for check, _ in checks.check_ms),
                        checks.skipped,
                    )
                )  # fmt: skip
                if progress is not None:
                    progress(f"bench-badges --budget: {name} {method} click {click}")
    return rows


def report_text(rows: Sequence[BudgetRow]) -> str:
    columns = [
        "model",
        "method",
        "click",
        "maps (ms)",
        "budget (ms)",
        "badges (ms)",
        "click with badges (ms)",
        "within budget",
        "ran",
        "not run",
    ]
    cells = [
        [
            row.model,
            row.method,
            "first" if row.click == 1 else str(row.click),
            f"{row.maps_ms:,.0f}",
            f"{row.budget_ms:,.0f}",
            f"{row.badges_ms:,.0f}",
            f"{row.maps_ms + row.badges_ms:,.0f}",
            "yes" if row.badges_ms <= row.budget_ms else "**no**",
            ", ".join(row.ran) or "–",
            ", ".join(row.skipped) or "–",
        ]
        for row in rows
    ]
    right = {"maps (ms)", "budget (ms)", "badges (ms)", "click with badges (ms)"}
    lines = markdown_table(columns, cells, right=right)
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    lines += [
        "",
        f"- budget: {BUDGET_SHARE:.0%} of the click's server time before the badges",
        f"- machine: {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, load "
        f"average {load} after the run",
    ]
    return "\n".join(lines)
