"""What each of the trust badges' checks costs per click, without a browser:
``gradpick bench --badges``.

For each method and click (k picks of the app's default model and batch), it times the click's
server work for the maps as the explorer does it (``heatmaps.compute``, the tiles and the
strips), then runs the badges' checks of those maps with no time limit
(``heatmaps.quick_checks``), and prints the median of each check's own time
(``QuickChecks.check_ms``) beside the maps'. The page runs a check only when it fits in half of
the click's server time before the badges (``quick.BUDGET_SHARE``): a check of c ms needs a
click of at least 2c ms before it. Whether they fit in the page, and how often, is a row of
``gradpick bench --explorer``, which reads the page's own readouts. The whole batch is read from
``$GRADPICK_CIFAR10_DIR`` (the test split).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gradpick.bench.rows import markdown_table

__all__ = ["METHODS", "BadgeRow", "badge_rows", "report_text"]

METHODS = ("gradient", "smoothgrad", "integrated_gradients", "gradcam")


CHECKS = ("class", "randomised", "completeness", "road")
"""The columns, in the order the checks run (completeness: Integrated Gradients only)."""


@dataclass(frozen=True)
class BadgeRow:
    method: str
    picks: int
    maps_ms: list[float]
    """The click's work for the maps, per click."""
    check_ms: dict[str, list[float]]
    """Each check's own time per click (a check that does not apply to the method: none)."""

    def median(self, check: str) -> float | None:
        times = self.check_ms.get(check)
        return statistics.median(times) if times else None


def badge_rows(
    methods: Sequence[str] = METHODS,
    picks: int = 1,
    clicks: int = 5,
    size: int = 1000,
    progress: Callable[[str], None] | None = None,
) -> list[BadgeRow]:
    """Time ``clicks`` clicks of ``picks`` images each per method (one warm-up click first)."""
    import torch

    from gradpick.outputs.inference import infer
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
        check_ms: dict[str, list[float]] = {}
        for click in range(clicks + 1):
            chosen = [(37 * (click * picks + j) + 11) % size for j in range(picks)]
            started = time.perf_counter()
            shown = heatmaps.compute(model, batch, chosen, request)
            tiles = heatmaps.tiles(batch.images[chosen], shown.maps, False)
            [heatmaps.strip(tile) for tile in tiles]
            maps_done = time.perf_counter()
            checks = heatmaps.quick_checks(model, batch, chosen, request, shown, math.inf, logits)
            if click:  # the first click warms the model's copy and the allocator
                maps_ms.append((maps_done - started) * 1000)
                for check, ms in checks.check_ms:
                    check_ms.setdefault(check, []).append(ms)
        rows.append(BadgeRow(method, picks, maps_ms, check_ms))
        if progress is not None:
            progress(f"badges bench: {method} done")
    return rows


def report_text(rows: Sequence[BadgeRow]) -> str:
    columns = [
        "method",
        "k",
        "clicks",
        "maps: click's server work (ms, median)",
        *(f"{check} check (ms, median)" for check in CHECKS),
    ]
    cells = [
        [
            row.method,
            row.picks,
            len(row.maps_ms),
            f"{statistics.median(row.maps_ms):,.1f}",
            *(
                "–" if (median := row.median(check)) is None else f"{median:,.1f}"
                for check in CHECKS
            ),
        ]
        for row in rows
    ]
    lines = markdown_table(columns, cells, right={"k", "clicks"})
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    lines.append("")
    lines.append(
        "- the page runs a check when it fits in half of the click's server time before the "
        "badges: a check of c ms needs at least 2c ms of click before it"
    )
    lines.append(f"- machine: {os.cpu_count()} CPUs, load average {load} after the run")
    return "\n".join(lines)
