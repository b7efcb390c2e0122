"""What comparing two models costs: two stored outputs, and the maps of k picks.

The stored half opens two stores of ``rows`` images (written here from seeded logits of two
made-up models) and derives everything a comparison without maps reports: the pairing, the
flips, the per-class accuracies, the confusion difference and the drift ranking. The maps half
maps k picks with both shipped models (tutorial and ResNet-20) and sets that against two plain
k-image gradient steps, the least a two-model map comparison can cost.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from gradpick import attribution, data
from gradpick import compare as versus
from gradpick.bench.rows import markdown_table
from gradpick.models import zoo
from gradpick.outputs import store_format as store

__all__ = ["CompareBench", "report_text", "run_compare_benchmark"]


@dataclass(frozen=True)
class CompareBench:
    """Median wall times of ``repeats`` runs."""

    rows: int
    classes: int
    repeats: int
    stored_seconds: float
    """Open both stores, pair, flips, per-class, confusion difference, drift ranking."""
    picks: int
    maps_seconds: float | None
    """``compare_maps`` of ``picks`` images by the two shipped models (None: not measured)."""
    two_steps_seconds: float | None
    """Two plain gradient steps of ``picks`` images, one per model."""

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2) + "\n")


def _median(repeats: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _write_store(path: Path, source: data.ImageSource, logits: torch.Tensor, name: str) -> None:
    metadata = store.store_metadata({"identity": name, "name": name}, source.spec, source)
    positions = list(range(len(source)))
    with store.StoreWriter(path, metadata) as writer:
        writer.write(
            store.output_table(positions, source.names(positions), source.labels(), logits)
        )


def _stored_seconds(rows: int, classes: int, repeats: int) -> float:
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, classes, (rows,), generator=generator)
    source = data.ArraySource(
        images=torch.zeros(rows, 3, 1, 1, dtype=torch.uint8),
        label_tensor=labels,
        class_names=tuple(f"class {index}" for index in range(classes)),
        description=f"{rows:,} made-up images",
    )
    with tempfile.TemporaryDirectory() as folder:
        paths = (Path(folder) / "first", Path(folder) / "second")
        for path, skill in zip(paths, (2.0, 3.0), strict=True):
            logits = torch.randn(rows, classes, generator=generator)
            logits[torch.arange(rows), labels] += skill
            _write_store(path, source, logits, path.name)

        def compare() -> None:
            opened = (store.open_store(path, versus.STORE_COLUMNS) for path in paths)
            pairing = versus.pair(*versus.sides_of_stores(*opened))
            versus.flips(pairing)
            versus.per_class(pairing)
            versus.confusion_difference(pairing)
            versus.drift_table(pairing)

        return _median(repeats, compare)


def _maps_seconds(picks: int, repeats: int) -> tuple[float, float]:
    first, second = (zoo.load_model(name, device="cpu") for name in ("tutorial", "resnet20"))
    images = torch.randint(0, 256, (picks, 3, 32, 32), generator=torch.Generator().manual_seed(1))
    source = data.ArraySource(
        images=images.to(torch.uint8),
        label_tensor=torch.arange(picks) % 10,
        class_names=data.CIFAR10_CLASSES,
        description=f"{picks} noise images",
    )
    pairing = versus.pair(*versus.sides_of_models(first, second, source))
    rows = list(range(picks))
    classes = pairing.references.tolist()
    pixels = images.float() / 255

    def two_steps() -> None:
        for loaded in (first, second):
            attribution.attribute(loaded.module, pixels, rows, target="logit", classes=classes)

    maps = _median(repeats, lambda: versus.compare_maps(first, second, source, pairing, rows))
    return maps, _median(repeats, two_steps)


def run_compare_benchmark(
    rows: int = 10_000, classes: int = 10, repeats: int = 5, picks: int = 8, maps: bool = True
) -> CompareBench:
    """Time the stored comparison of ``rows`` images and, with ``maps``, the maps of ``picks``."""
    maps_seconds, steps_seconds = _maps_seconds(picks, repeats) if maps else (None, None)
    return CompareBench(
        rows=rows,
        classes=classes,
        repeats=repeats,
        stored_seconds=_stored_seconds(rows, classes, repeats),
        picks=picks,
        maps_seconds=maps_seconds,
        two_steps_seconds=steps_seconds,
    )


def report_text(report: CompareBench) -> str:
    def seconds(value: float | None) -> str:
        return "not measured" if value is None else f"{value * 1000:.1f} ms"

    lines = markdown_table(
        ("comparison", "median wall time"),
        [
            (
                f"two stores of {report.rows:,} rows ({report.classes} classes): flips, "
                "per-class, confusion difference, drift ranking",
                seconds(report.stored_seconds),
            ),
            (
                f"maps of {report.picks} picks, tutorial vs ResNet-20 (gradient)",
                seconds(report.maps_seconds),
            ),
            (f"two plain {report.picks}-image gradient steps", seconds(report.two_steps_seconds)),
        ],
        right=("median wall time",),
    )
    return "\n".join(lines)
