"""``gradpick bench-infer``: inference from a folder, stored outputs reopened, and memory.

Three kinds of rows, each printed in one markdown table:

* throughput of ``gradpick.outputs.inference.infer_source`` over the first ``images`` files of a
folder,
  against a hand-written ``torch.utils.data.DataLoader`` + model loop over the same files (the
  same preprocessing written out with PIL, the same batch size and worker count), timed in
  alternating rounds (``compare.interleaved_medians``); target at least 0.9x;
* the time the explorer takes to reopen a stored table of ``store_rows`` rows (open the
  Parquet store, derive every row's outputs, check the folder's fingerprint); target under 1 s;
* with ``memory``, the resident memory of a folder source plus streamed inference, each in a
  fresh process: the main process's RSS after opening the source and its peak (VmHWM) during
  the pass, and the largest DataLoader worker's peak RSS.

Models: ResNet-20 at 32 pixels and ``torchvision.models.resnet18(num_classes=10)`` at 224, both
with seeded random weights: the cost of a forward does not depend on the weights' values.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch import nn

from gradpick import data
from gradpick.bench.process import status_kilobytes
from gradpick.bench.rows import markdown_table
from gradpick.errors import InputError
from gradpick.gradients.timing import interleaved_medians
from gradpick.models import shipped as models
from gradpick.models.spec import InputSpec
from gradpick.outputs import store_format as store
from gradpick.outputs.inference import infer_source
from gradpick.runtime.devices import resolve_device
from gradpick.runtime.versions import library_versions

__all__ = [
    "GRADPICK",
    "HAND_WRITTEN",
    "REOPEN_TARGET_SECONDS",
    "THROUGHPUT_TARGET",
    "bench_model",
    "hand_written_pass",
    "HandWrittenFiles",
    "InferBenchConfig",
    "InferRow",
    "measure_memory",
    "memory_rows",
    "reopen_rows",
    "run",
    "table",
    "throughput_rows",
    "write_json",
]

THROUGHPUT_TARGET = 0.9
REOPEN_TARGET_SECONDS = 1.0
HAND_WRITTEN = "hand-written DataLoader loop"
GRADPICK = "gradpick infer_source"


@dataclass(frozen=True)
class InferBenchConfig:
    folder: str
    sides: tuple[int, ...] = (32, 224)
    images: dict[int, int] | None = None
    """Images per side (default: 2,000 at 32 pixels, 256 at 224, where a CPU does ~20/s)."""
    batch_size: int = 64
    workers: int | None = None
    """DataLoader workers for both loops (default: ``data.default_workers``)."""
    repeats: int = 3
    store_rows: int = 50_000
    memory_counts: tuple[int, ...] = ()
    """Image counts for the memory rows (empty: no memory rows)."""
    memory_stand_in: tuple[int, ...] = ()
    """Sides whose memory rows use the pooling stand-in instead of the benchmark's model."""
    fixed_mmap_threshold: bool = False
    """Memory runs with the explorer's allocator setting (``gradpick.runtime.process``): glibc
    otherwise
    keeps freed activation buffers of every batch on its heap, and resident memory creeps up."""
    device: str = "auto"
    threads: int | None = None

    def count(self, side: int) -> int:
        defaults = {32: 2000, 224: 256}
        return (self.images or {}).get(side, defaults.get(side, 256))


@dataclass(frozen=True)
class InferRow:
    kind: str
    side: int | None
    images: int
    what: str
    seconds: float | None
    note: str = ""
    ratio: float | None = None


def bench_model(
    side: int, device: torch.device, stand_in: bool = False
) -> tuple[nn.Module, InputSpec, str]:
    """ResNet-20 for 32-pixel inputs, torchvision's ResNet-18 (10 classes) for larger ones;
    ``stand_in``: a pooling + linear model that costs next to nothing, so a memory run over
    50,000 images measures the source and the decoding rather than a CPU's convolutions."""
    model: nn.Module
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if stand_in:
            model = nn.Sequential(nn.AdaptiveAvgPool2d(8), nn.Flatten(), nn.Linear(192, 10))
            name = "pooling stand-in"
        elif side == data.IMAGE_SIZE:
            model, name = models.build("resnet20"), "resnet20"
        else:
            from torchvision.models import resnet18

            model, name = resnet18(num_classes=10), "torchvision resnet18"
    return models.freeze(model).to(device), InputSpec(size=(side, side)), name


class HandWrittenFiles(torch.utils.data.Dataset[torch.Tensor]):
    """The baseline's dataset: open, RGB, bilinear resize of the shorter side, centre crop,
    torchvision's ``pil_to_tensor`` (uint8 [3, H, W], contiguous: a permuted HWC array would
    be collated channels-last, which ran ResNet-18 at half the speed on this CPU)."""

    def __init__(self, files: list[Path], side: int) -> None:
        self.files = files
        self.side = side

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> torch.Tensor:
        from torchvision.transforms.functional import pil_to_tensor

        with Image.open(self.files[index]) as opened:
            rgb = opened.convert("RGB")
        scale = self.side / min(rgb.size)
        size = (max(self.side, round(rgb.width * scale)), max(self.side, round(rgb.height * scale)))
        if size != rgb.size:
            rgb = rgb.resize(size, Image.Resampling.BILINEAR)
        left, top = (size[0] - self.side) // 2, (size[1] - self.side) // 2
        if size != (self.side, self.side):
            rgb = rgb.crop((left, top, left + self.side, top + self.side))
        return pil_to_tensor(rgb)


def hand_written_pass(
    model: nn.Module,
    files: list[Path],
    side: int,
    batch_size: int,
    workers: int,
    device: torch.device,
) -> torch.Tensor:
    """What a user would write: a DataLoader over the files, the model over its batches."""
    loader = torch.utils.data.DataLoader(
        HandWrittenFiles(files, side),
        batch_size=batch_size,
        num_workers=workers,
        pin_memory=device.type == "cuda",
    )
    outputs = []
    with torch.inference_mode():
        for batch in loader:
            pixels = batch.to(device, non_blocking=True).float() / 255.0
            outputs.append(model(pixels).float().cpu())
    return torch.cat(outputs)


def throughput_rows(config: InferBenchConfig, device: torch.device) -> list[InferRow]:
    return [row for side in config.sides for row in _throughput_pair(config, side, device)]


def _throughput_pair(config: InferBenchConfig, side: int, device: torch.device) -> list[InferRow]:
    """The hand-written loop and infer_source over the same files, alternating."""
    model, spec, name = bench_model(side, device)
    source = data.image_folder(config.folder, spec)
    count = min(config.count(side), len(source))
    positions = list(range(count))
    files = list(source.files[:count])
    chunks = -(-count // config.batch_size)
    workers = data.default_workers(chunks) if config.workers is None else config.workers

    def baseline() -> None:
        hand_written_pass(model, files, side, config.batch_size, workers, device)

    def ours() -> None:
        infer_source(model, source, positions, config.batch_size, device, workers=workers)

    expected = hand_written_pass(model, files[:4], side, 4, 0, device)
    got = infer_source(model, source, positions[:4], 4, device, workers=0).result.logits
    difference = float((expected - got).abs().max())
    calls: dict[str, Callable[[], object]] = {HAND_WRITTEN: baseline, GRADPICK: ours}
    medians = interleaved_medians(calls, device, config.repeats, 0.0)
    ratio = medians[HAND_WRITTEN] / medians[GRADPICK]
    rows = []
    for what in (HAND_WRITTEN, GRADPICK):
        seconds = medians[what] / 1000
        note = f"{name}, {count / seconds:,.0f} images/s, {workers} worker(s)"
        if what == GRADPICK:
            note += (
                f"; {ratio:.2f}x the hand-written throughput; "
                f"largest logit difference {difference:.1e}"
            )
        mine = ratio if what == GRADPICK else None
        rows.append(InferRow("throughput", side, count, what, seconds, note, mine))
    return rows


def reopen_rows(config: InferBenchConfig) -> list[InferRow]:
    """Write a store of ``store_rows`` rows over the folder's first files, then time what the
    explorer does to reopen it (the images of the page's batch are decoded separately)."""
    from gradpick.outputs import stores as stored

    source = data.image_folder(config.folder)
    count = min(config.store_rows, len(source))
    positions = list(range(count))
    names = source.names(positions)
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(count, 10, generator=generator)
    all_labels = source.labels()
    assert all_labels is not None
    labels = all_labels[:count]
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "outputs"
        metadata = store.store_metadata({"identity": "bench:0"}, source.spec, source)
        with store.StoreWriter(out, metadata) as writer:
            for start in range(0, count, 8192):
                part = slice(start, start + 8192)
                writer.write(
                    store.output_table(positions[part], names[part], labels[part], logits[part])
                )
        batch = data.ImageBatch(
            images=torch.empty(count, 3, 0, 0, dtype=torch.uint8),  # the rows only
            labels=labels,
            class_names=source.class_names,
            names=tuple(names),
            positions=tuple(positions),
            source=source.description,
        )
        started = time.perf_counter()
        opened = stored.open_stored(str(out))
        opened_at = time.perf_counter()
        result = stored.stored_result(opened, batch)
        derived_at = time.perf_counter()
        current = stored.is_current(opened, stored.stored_source(opened))
        checked_at = time.perf_counter()
    if not current or not torch.equal(result.predictions, logits.argmax(dim=1)):
        raise InputError("The reopened store does not hold what was written.")
    total = checked_at - started
    verdict = "PASS" if total < REOPEN_TARGET_SECONDS else "FAIL"
    return [
        InferRow("reopen", None, count, "open the Parquet store", opened_at - started),
        InferRow("reopen", None, count, "derive every row's outputs", derived_at - opened_at),
        InferRow(
            "reopen", None, count, "list the folder, check its fingerprint", checked_at - derived_at
        ),
        InferRow(
            "reopen",
            None,
            count,
            "reopen in the explorer, total",
            total,
            f"target < {REOPEN_TARGET_SECONDS:.0f} s: {verdict}",
        ),
    ]


def measure_memory(
    folder: str,
    side: int,
    count: int,
    batch_size: int,
    device: str,
    stand_in: bool = False,
    fixed_mmap_threshold: bool = False,
) -> dict[str, Any]:
    """Run in a fresh process: open the folder, stream ``count`` images through the model."""
    if fixed_mmap_threshold:
        from gradpick.runtime.process import return_freed_memory_promptly

        return_freed_memory_promptly()
    torch.set_num_threads(1)
    run_device = resolve_device(device)
    model, spec, name = bench_model(side, run_device, stand_in)
    source = data.image_folder(folder, spec)
    count = min(count, len(source))
    opened_kb = status_kilobytes("VmRSS")
    started = time.perf_counter()
    inferred = infer_source(model, source, range(count), batch_size, run_device)
    seconds = time.perf_counter() - started
    return {
        "model": name,
        "side": side,
        "images": len(inferred.positions),
        "rss_after_open_mb": opened_kb / 1024,
        "peak_rss_mb": status_kilobytes("VmHWM") / 1024,
        "largest_worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "outputs_mb": inferred.result.logits.numel() * 4 * 4 / 2**20,
        "seconds": seconds,
    }


def memory_rows(config: InferBenchConfig) -> list[InferRow]:
    rows = []
    for side in config.sides:
        for count in config.memory_counts:
            command = [
                sys.executable,
                "-c",
                "import json, sys; from gradpick.bench.inference import measure_memory; "
                "print(json.dumps(measure_memory(*json.loads(sys.argv[1]))))",
                json.dumps(
                    [
                        config.folder,
                        side,
                        count,
                        config.batch_size,
                        config.device,
                        side in config.memory_stand_in,
                        config.fixed_mmap_threshold,
                    ]
                ),
            ]
            environment = {**os.environ, "OMP_NUM_THREADS": "1"}
            shown = subprocess.run(command, capture_output=True, text=True, env=environment)
            if shown.returncode != 0:
                raise InputError(f"The memory run failed: {shown.stderr.strip()[-400:]}")
            figure = json.loads(shown.stdout.strip().splitlines()[-1])
            rows.append(
                InferRow(
                    "memory",
                    side,
                    figure["images"],
                    f"{figure['model']}: peak RSS, main process",
                    figure["seconds"],
                    _memory_note(figure),
                )
            )
    return rows


def _memory_note(figure: dict[str, Any]) -> str:
    return (
        f"{figure['peak_rss_mb']:,.0f} MB peak (VmHWM), {figure['rss_after_open_mb']:,.0f} MB "
        f"after opening the source; largest worker {figure['largest_worker_peak_rss_mb']:,.0f} "
        f"MB; outputs (logits, probabilities, ...) {figure['outputs_mb']:,.1f} MB"
    )


def run(config: InferBenchConfig) -> tuple[list[InferRow], dict[str, Any]]:
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    rows = throughput_rows(config, device) + reopen_rows(config) + memory_rows(config)
    environment = {**library_versions(), "device": str(device), "threads": torch.get_num_threads()}
    return rows, environment


def table(rows: list[InferRow]) -> str:
    cells = [
        [
            row.kind,
            "–" if row.side is None else row.side,
            f"{row.images:,}",
            row.what,
            "–" if row.seconds is None else f"{row.seconds:,.3f}",
            row.note,
        ]
        for row in rows
    ]
    columns = ["kind", "side", "images", "what", "seconds", "note"]
    lines = markdown_table(columns, cells, right={"side", "images", "seconds"})
    ratios = [row.ratio for row in rows if row.ratio is not None]
    if ratios:
        worst = min(ratios)
        verdict = "PASS" if worst >= THROUGHPUT_TARGET else "FAIL"
        lines.append(
            f"\ninfer_source / hand-written throughput, worst: {worst:.2f}x "
            f"(target >= {THROUGHPUT_TARGET}x): {verdict}"
        )
    return "\n".join(lines)


def write_json(
    path: str | Path, config: InferBenchConfig, rows: list[InferRow], environment: dict[str, Any]
) -> None:
    record = {
        "config": asdict(config),
        "environment": environment,
        "rows": [asdict(row) for row in rows],
    }
    Path(path).write_text(json.dumps(record, indent=2, default=str) + "\n")
