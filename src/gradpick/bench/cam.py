"""The Grad-CAM benchmark behind ``gradpick bench --cam``: k picked maps out of a batch of N.

For each N and k it times Grad-CAM of the k picks at one layer four ways, on the same images
and the same layer, interleaved (``compare.interleaved_medians``):

* the floor: a hand-written forward of the k picks with a hook at the layer, one backward of
  their predicted logits to the activation, the channel-weighted map, ReLU and the bilinear
  upsampling to the input size, the least any Grad-CAM of those images can do;
* gradpick: ``GradCAM(layer).attribute(GradientRequest.build(model, images, picks))`` over
  all N images (the engine forwards only the picks);
* pytorch-grad-cam's ``GradCAM`` and torch-cam's ``GradCAM``, each given the k images (and
  each made per call, since their hooks stay on the layer while they live).

Targets: gradpick at most ``FLOOR_TARGET`` x the floor and faster than both peers, at every N
(its cost must not grow with N). Images are seeded random pixels; gradpick's maps are checked
against the floor's before any timing.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gradpick import attribution
from gradpick.bench.rows import markdown_table
from gradpick.errors import InputError
from gradpick.gradients import layers
from gradpick.gradients.request import GradientRequest
from gradpick.gradients.timing import MIN_MEASURED_SECONDS, interleaved_medians
from gradpick.models import shipped as models
from gradpick.runtime import devices
from gradpick.runtime.versions import installed_version, library_versions

__all__ = [
    "CAM_MODELS",
    "FLOOR_TARGET",
    "QUICK",
    "CamBenchConfig",
    "CamReport",
    "CamRow",
    "report_text",
    "run_cam_benchmark",
]

FLOOR_TARGET = 1.1
"""gradpick's Grad-CAM may take at most this many times the floor's time."""
FLOOR = "floor (hand-written hook)"
GRADPICK = "gradpick GradCAM"
PYTORCH_GRAD_CAM = "pytorch-grad-cam GradCAM"
TORCHCAM = "torch-cam GradCAM"
CAM_MODELS = {"resnet20": 32, "resnet18": 224}
"""The models the benchmark runs (random weights, nothing downloaded) and their input side."""


@dataclass(frozen=True)
class CamBenchConfig:
    model: str = "resnet20"
    sizes: tuple[int, ...] = (256, 1024, 4096)
    picks: tuple[int, ...] = (1, 8, 32)
    repeats: int = 5
    seed: int = 0
    threads: int | None = 1
    """torch intra-op threads (one: steady on a machine whose cores do other work too)."""
    min_seconds: float = MIN_MEASURED_SECONDS


QUICK = CamBenchConfig(sizes=(256, 2048), picks=(1, 8), repeats=3, min_seconds=0.25)


@dataclass(frozen=True)
class CamRow:
    n: int
    k: int
    layer: str
    ms: dict[str, float]

    @property
    def ratio(self) -> float:
        """gradpick's time over the floor's."""
        return self.ms[GRADPICK] / self.ms[FLOOR]

    @property
    def met(self) -> bool:
        peers = [self.ms[name] for name in (PYTORCH_GRAD_CAM, TORCHCAM) if name in self.ms]
        return self.ratio <= FLOOR_TARGET and all(self.ms[GRADPICK] < peer for peer in peers)


@dataclass(frozen=True)
class CamReport:
    config: CamBenchConfig
    rows: list[CamRow]
    environment: dict[str, Any] = field(default_factory=dict)

    def write_json(self, path: str | Path) -> None:
        record = {
            "config": asdict(self.config),
            "environment": self.environment,
            "floor_target": FLOOR_TARGET,
            "rows": [{**asdict(row), "ratio": row.ratio, "met": row.met} for row in self.rows],
        }
        Path(path).write_text(json.dumps(record, indent=2) + "\n")


def _model(name: str) -> nn.Module:
    """The benchmark's model with seeded random weights, eval mode, parameters frozen."""
    if name not in CAM_MODELS:
        raise InputError(f"Unknown model '{name}'; use one of {', '.join(CAM_MODELS)}.")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if name == "resnet18":
            import torchvision

            return models.freeze(torchvision.models.resnet18(weights=None).eval())
        return models.freeze(models.build(name).eval())


def _floor(model: nn.Module, module: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """Grad-CAM of the predicted logit of ``picked`` by one hook, written out by hand."""

    def run(picked: torch.Tensor) -> torch.Tensor:
        kept: list[torch.Tensor] = []
        handle = module.register_forward_hook(lambda m, i, output: kept.append(output))
        try:
            logits = model(picked.requires_grad_(True))
        finally:
            handle.remove()
        (gradient,) = torch.autograd.grad(logits.amax(dim=1).sum(), kept[0])
        weights = gradient.mean(dim=(2, 3), keepdim=True)
        cams = torch.relu((weights * kept[0]).sum(dim=1, keepdim=True))
        size = picked.shape[-2:]
        return F.interpolate(cams, size=size, mode="bilinear", align_corners=False)[:, 0]

    return run


def _peers(model: nn.Module, module: nn.Module) -> dict[str, Callable[[torch.Tensor], object]]:
    """The peers that are installed, each called on the k picked images."""
    calls: dict[str, Callable[[torch.Tensor], object]] = {}
    try:
        from pytorch_grad_cam import GradCAM as PeerGradCAM

        def grad_cam(picked: torch.Tensor) -> object:
            # Made per call: its hooks stay on the layer while it lives, and would slow the
            # other calls down.
            with PeerGradCAM(model, target_layers=[module]) as extractor:
                # Its maps need a graph to the layer: the frozen model's input must carry one.
                return extractor(picked.clone().requires_grad_(True), targets=None)

        calls[PYTORCH_GRAD_CAM] = grad_cam
    except ImportError:
        pass
    try:
        from torchcam.methods import GradCAM as TorchCamGradCAM

        def torchcam(picked: torch.Tensor) -> object:
            with TorchCamGradCAM(model, target_layer=module) as extractor:
                scores = model(picked.clone().requires_grad_(True))
                return extractor(scores.argmax(dim=1).tolist(), scores)

        calls[TORCHCAM] = torchcam
    except ImportError:
        pass
    return calls


def _bound(call: Callable[[torch.Tensor], object], picked: torch.Tensor) -> Callable[[], object]:
    """``call`` on a fresh copy of ``picked`` (no call sees another's graph or grad flag)."""
    return lambda: call(picked.clone())


def run_cam_benchmark(
    config: CamBenchConfig, progress: Callable[[str], None] | None = None
) -> CamReport:
    """Every (N, k) row of ``config`` on the CPU."""
    device = torch.device("cpu")
    model = _model(config.model)
    side = CAM_MODELS[config.model]
    generator = torch.Generator().manual_seed(config.seed)
    images = torch.rand(max(config.sizes), 3, side, side, generator=generator)
    layer = layers.resolve(model, None, images[:1])
    inner, _ = layers.user_model(model)
    module = inner.get_submodule(layer.name)
    floor, peers = _floor(model, module), _peers(model, module)
    method = attribution.GradCAM(layer=layer.name)
    rows = []
    with devices.cpu_threads(config.threads):
        for n in config.sizes:
            batch = images[:n]
            for k in config.picks:
                picks = torch.randperm(n, generator=generator)[:k]
                picked = batch[picks]

                def ours(batch: torch.Tensor = batch, picks: torch.Tensor = picks) -> object:
                    request = GradientRequest.build(model, batch, picks, target="logit")
                    return method.attribute(request).maps

                expected = floor(picked.clone())
                got = ours()
                assert isinstance(got, torch.Tensor)
                torch.testing.assert_close(got[:, 0], expected, rtol=1e-4, atol=1e-6)
                calls: dict[str, Callable[[], object]] = {
                    FLOOR: _bound(floor, picked),
                    GRADPICK: ours,
                    **{name: _bound(call, picked) for name, call in peers.items()},
                }
                ms = interleaved_medians(calls, device, config.repeats, config.min_seconds)
                row = CamRow(n, k, layer.name, ms)
                rows.append(row)
                if progress is not None:
                    progress(f"N={n} k={k}: gradpick {row.ratio:.2f}x the floor")
    environment = {
        "platform": platform.platform(),
        "processor": platform.processor(),
        "threads": torch.get_num_threads() if config.threads is None else config.threads,
        "versions": {
            **library_versions(),
            "grad-cam": installed_version("grad-cam"),
            "torchcam": installed_version("torchcam"),
        },
    }
    return CamReport(config, rows, environment)


def report_text(report: CamReport) -> str:
    """The rows as a markdown table: times in ms, gradpick's ratio to the floor, the target."""
    names = [FLOOR, GRADPICK, PYTORCH_GRAD_CAM, TORCHCAM]
    shown = [name for name in names if any(name in row.ms for row in report.rows)]
    columns = ["model", "layer", "N", "k", *(f"{name} ms" for name in shown), "gradpick / floor"]
    columns.append(f"target (≤ {FLOOR_TARGET}x floor, faster than peers)")
    lines = markdown_table(
        columns,
        (
            [
                report.config.model,
                f"`{row.layer}`",
                f"{row.n:,}",
                row.k,
                *(f"{row.ms[name]:,.1f}" if name in row.ms else "n/a" for name in shown),
                f"{row.ratio:.2f}x",
                "met" if row.met else "missed",
            ]
            for row in report.rows
        ),
        right={"N", "k", *(f"{name} ms" for name in shown), "gradpick / floor"},
    )
    return "\n".join(lines)
