"""The trust badges' cost per click on the server, without a browser: ``gradpick bench --badges``.

For each method and click (k picks of the app's default model and batch), it times the click's
server work for the maps as the explorer does it (``heatmaps.compute``, the tiles and the
strips) and then the badges' checks of those maps (``heatmaps.quick_checks``, with the budget
the page gives them: half of the click's time so far, ``quick.BUDGET_SHARE``),
and prints the medians side by side with their ratio. Target: the badges add at most half of
the click's server time (ratio ≤ 0.5). The page's own readout of the same figure is a row of
``gradpick bench --explorer``; this one leaves out Streamlit's own work, so its ratio is the
stricter one. The whole batch is read from ``$GRADPICK_CIFAR10_DIR`` (the test split).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gradpick.bench.rows import markdown_table

__all__ = ["METHODS", "BadgeRow", "badge_rows", "report_text"]

METHODS = ("gradient", "smoothgrad", "integrated_gradients", "gradcam")


@dataclass(frozen=True)
class BadgeRow:
    method: str
    picks: int
    maps_ms: list[float]
    """The click's work for the maps, per click."""
    badges_ms: list[float]
    skipped: list[str]
    """Checks left out by the budget, over all clicks."""

    @property
    def ratio(self) -> float:
        return statistics.median(self.badges_ms) / statistics.median(self.maps_ms)


def badge_rows(
    methods: Sequence[str] = METHODS,
    picks: int = 1,
    clicks: int = 5,
    size: int = 1000,
    progress: Callable[[str], None] | None = None,
) -> list[BadgeRow]:
    """Time ``clicks`` clicks of ``picks`` images each per method (one warm-up click first)."""
    import torch

    from gradpick.infer import infer
    from gradpick.trust.quick import BUDGET_SHARE
    from gradpick.ui import heatmaps, service

    option = service.model_options()[0]
    model = service.load_model(option, torch.device("cpu")).module
    base = service.DataChoice()
    source = service.open_source(base)
    seed = 0 if service.sorted_by_class(source) else None
    batch = service.read_batch(source, replace(base, size=size, seed=seed))
    logits = infer(model, batch.images, batch.labels).logits
    rows = []
    for method in methods:
        request = heatmaps.HeatmapRequest(method=method)
        maps_ms: list[float] = []
        badges_ms: list[float] = []
        skipped: list[str] = []
        for click in range(clicks + 1):
            chosen = [(37 * (click * picks + j) + 11) % size for j in range(picks)]
            started = time.perf_counter()
            shown = heatmaps.compute(model, batch, chosen, request)
            tiles = heatmaps.tiles(batch.images[chosen], shown.maps, False)
            [heatmaps.strip(tile) for tile in tiles]
            middle = time.perf_counter()
            budget = BUDGET_SHARE * (middle - started)
            checks = heatmaps.quick_checks(model, batch, chosen, request, shown, budget, logits)
            ended = time.perf_counter()
            if click:  # the first click warms the model's copy and the allocator
                maps_ms.append((middle - started) * 1000)
                badges_ms.append((ended - middle) * 1000)
                skipped += checks.skipped
        rows.append(BadgeRow(method, picks, maps_ms, badges_ms, skipped))
        if progress is not None:
            progress(f"badges bench: {method} done")
    return rows


def report_text(rows: Sequence[BadgeRow]) -> str:
    columns = [
        "method",
        "k",
        "clicks",
        "maps: click's server work (ms, median)",
        "badges added (ms, median)",
        "badges / maps (target ≤ 0.5)",
        "checks left to the Trust tab",
    ]
    cells = [
        [
            row.method,
            row.picks,
            len(row.maps_ms),
            f"{statistics.median(row.maps_ms):,.1f}",
            f"{statistics.median(row.badges_ms):,.1f}",
            f"{row.ratio:.2f} ({'met' if row.ratio <= 0.5 else 'not met'})",
            ", ".join(f"{name} ×{row.skipped.count(name)}" for name in dict.fromkeys(row.skipped))
            or "none",
        ]
        for row in rows
    ]
    lines = markdown_table(columns, cells, right={"k", "clicks"})
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    lines.append("")
    lines.append(f"- machine: {os.cpu_count()} CPUs, load average {load} after the run")
    return "\n".join(lines)
