"""The strategy registry: every way gradpick computes picked gradients, and what each costs.

Four strategies compute the same numbers at very different costs:

* ``recompute`` (default): forward only the k picked images with gradients on and take one
  ``torch.autograd.grad`` of their summed targets. For a model whose samples are independent
  (eval mode) the sum's gradient row j is exactly d target_j / d image_j, and the cost depends
  on k alone, never on the batch size N.
* ``summed``: the usual forum answer: one forward of all N with gradients, one backward of the
  summed picked targets. Right with a sum, but it pays for all N.
* ``retain_graph``: the naive loop, one backward per index through the graph of all N,
  kept alive with ``retain_graph=True``.
* ``vmap``: ``torch.func.vmap(torch.func.grad(...))`` over the picked images, one image per call.

Each entry of ``REGISTRY`` says what the strategy forwards (the k picks or all N), whether it
runs in chunks under a memory budget, its rough cost in single-image forward passes and its
help text; the engine, the CLI, the explorer, the benchmark and the experiments all read these
facts from here. A new strategy is one step function, one entry, and its tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F

from gradpick.errors import InputError
from gradpick.outputs.inference import call_model, check_logits

if TYPE_CHECKING:
    from gradpick.gradients.request import GradientRequest

__all__ = [
    "NAMES",
    "REGISTRY",
    "CostModel",
    "Strategy",
    "TimeEstimate",
    "budgeted",
    "get",
    "help_text",
    "whole_batch",
]

StepOutput = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""(gradients [k, C, H, W], target values [k], classes [k]) on the run device."""
Step = Callable[["GradientRequest", slice], StepOutput]


def _recompute(request: GradientRequest, order: slice) -> StepOutput:
    picked = request.images[request.indices[order]].to(request.device).requires_grad_(True)
    values, classes = request.picked_targets(call_model(request.model, picked), order)
    (gradients,) = torch.autograd.grad(request.scaled_sum(values), picked)
    return gradients, values.detach(), classes


def _vmap(request: GradientRequest, order: slice) -> StepOutput:
    """``vmap(grad(f))``: each picked image runs through the model as a batch of one."""
    from torch.func import grad, vmap

    picked = request.images[request.indices[order]].to(request.device)
    given = request.given_classes(order)
    if given is not None:
        # Out-of-range classes must fail with a clear message here, not as an indexing error
        # deep inside vmap: one image's logits give the number of classes.
        with torch.no_grad():
            logits = call_model(request.model, picked[:1])
        request.picked_targets(logits.expand(picked.shape[0], -1), order)
    else:
        given = torch.full((picked.shape[0],), -1)  # -1: use the predicted class
    scale = request.scale
    versus = given if request.versus is None else request.versus[order]

    def target_of_one(
        image: torch.Tensor, wanted: torch.Tensor, against: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        logits = request.model(image.unsqueeze(0))[0]
        chosen = torch.where(wanted >= 0, wanted, logits.detach().argmax())
        if request.target == "loss":
            value = F.cross_entropy(logits.unsqueeze(0), chosen.unsqueeze(0))
        else:
            value = logits.gather(0, chosen.unsqueeze(0))[0]
            if request.versus is not None:
                value = value - logits.gather(0, against.unsqueeze(0))[0]
        return value * scale, (value.detach(), chosen)

    try:
        gradients, (values, classes) = vmap(grad(target_of_one, has_aux=True))(
            picked, given.to(request.device), versus.to(request.device)
        )
    except RuntimeError as error:
        raise InputError(
            f"vmap could not run this model ({str(error)[:160]}); use strategy='recompute'."
        ) from None
    return gradients, values, classes


def _forward_everything(request: GradientRequest) -> tuple[torch.Tensor, torch.Tensor]:
    """All N images with gradients on, and their logits."""
    everything = request.images.to(request.device).requires_grad_(True)
    logits = call_model(request.model, everything)
    check_logits(logits, int(everything.shape[0]))
    return everything, logits


def _summed(request: GradientRequest, order: slice) -> StepOutput:
    """One forward of all N, one backward of the summed picked targets, each distinct one once.

    Two targets of one image (an index picked with two classes) would add up in that image's
    gradient, so backward pass r takes the r-th distinct target of each image: a single pass
    in the usual case of one target per image. A repeated target reuses its gradient.
    """
    everything, logits = _forward_everything(request)
    rows = request.indices[order]
    values, classes = request.picked_targets(logits[rows.to(logits.device)], order)
    against = [-1] * len(rows) if request.versus is None else request.versus[order].tolist()
    # (image, class, class subtracted or -1)
    targets = list(zip(rows.tolist(), classes.tolist(), against, strict=True))
    pass_of_target: dict[tuple[int, int, int], int] = {}
    targets_of_image: dict[int, int] = {}
    passes: list[list[int]] = []  # positions of the targets each backward pass sums
    for position, target in enumerate(targets):
        if target not in pass_of_target:
            pass_index = targets_of_image.get(target[0], 0)
            targets_of_image[target[0]] = pass_index + 1
            pass_of_target[target] = pass_index
            if pass_index == len(passes):
                passes.append([])
            passes[pass_index].append(position)
    pass_of_row = torch.tensor([pass_of_target[target] for target in targets])
    gradients = torch.empty(
        (len(rows), *everything.shape[1:]), dtype=everything.dtype, device=everything.device
    )
    for pass_index, positions in enumerate(passes):
        summed = values[torch.tensor(positions, device=values.device)].sum() * request.scale
        (gradient,) = torch.autograd.grad(
            summed, everything, retain_graph=pass_index < len(passes) - 1
        )
        filled = (pass_of_row == pass_index).nonzero().flatten()
        gradients[filled.to(gradients.device)] = gradient[rows[filled].to(gradient.device)]
    return gradients, values.detach(), classes


def _retain_graph(request: GradientRequest, order: slice) -> StepOutput:
    """The naive loop: one backward per picked index through the whole batch's graph."""
    everything, logits = _forward_everything(request)
    rows = request.indices[order].to(request.device)
    values, classes = request.picked_targets(logits[rows], order)
    gradients = []
    for position, row in enumerate(rows.tolist()):
        (gradient,) = torch.autograd.grad(
            values[position] * request.scale, everything, retain_graph=True
        )
        gradients.append(gradient[row])
    return torch.stack(gradients), values.detach(), classes


@dataclass(frozen=True)
class Strategy:
    """One way to compute picked gradients, and the facts every caller needs about it."""

    name: str
    step: Step
    """Computes rows ``order`` of the request: (gradients, target values, classes)."""
    forwards: Literal["picked", "batch"]
    """What runs through the model with gradients on: the k picked images or all N."""
    chunks: bool
    """Whether large k runs in chunks under a memory budget (and halves them on CUDA OOM)."""
    help: str
    passes: Callable[[int, int], int] | None = None
    """Rough cost in single-image forward passes for batch size n and k picks (a backward
    costs about two), for the strategies whose cost grows with N; None when it depends on k
    alone, which never needs a budget."""
    counts_saved: bool = True
    """Whether autograd's saved-tensor hooks see its saved tensors (torch.func's do not)."""
    targets: tuple[str, ...] = ("loss", "logit", "bce")
    """The targets it computes (``GradientRequest.build`` refuses the others)."""

    @property
    def whole_batch(self) -> bool:
        return self.forwards == "batch"


REGISTRY: dict[str, Strategy] = {
    strategy.name: strategy
    for strategy in (
        Strategy(
            "recompute",
            _recompute,
            forwards="picked",
            chunks=True,
            help="forward only the picked images again with gradients (cost depends on k)",
        ),
        Strategy(
            "summed",
            _summed,
            forwards="batch",
            chunks=False,
            help="forward all N with gradients, one backward of the summed targets",
            passes=lambda n, k: 3 * n,
        ),
        Strategy(
            "retain_graph",
            _retain_graph,
            forwards="batch",
            chunks=False,
            help="the naive loop, one backward per index through all N",
            passes=lambda n, k: n * (1 + 2 * k),
        ),
        Strategy(
            "vmap",
            _vmap,
            forwards="picked",
            chunks=True,
            help="torch.func.vmap(grad(...)), one image per call",
            counts_saved=False,
            targets=("loss", "logit"),
        ),
    )
}
NAMES: tuple[str, ...] = tuple(REGISTRY)
"""Every strategy's name, the default (``recompute``) first."""


def get(name: str) -> Strategy:
    """The registered strategy ``name``, or an InputError listing the known ones."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise InputError(f"Unknown strategy '{name}'; use one of {', '.join(NAMES)}.") from None


def whole_batch() -> tuple[str, ...]:
    """Strategies that forward the whole batch with gradients; the others touch only the picks."""
    return tuple(name for name, strategy in REGISTRY.items() if strategy.whole_batch)


def budgeted() -> tuple[str, ...]:
    """Strategies whose cost grows with N, so the benchmark and the explorer estimate them."""
    return tuple(name for name, strategy in REGISTRY.items() if strategy.passes is not None)


def help_text() -> str:
    """One line per strategy, for a selector's help."""
    return " ".join(f"{name}: {strategy.help}." for name, strategy in REGISTRY.items())


@dataclass(frozen=True)
class TimeEstimate:
    """How long ``runs`` runs of a strategy at (n, k) would take, at ``seconds`` each."""

    seconds: float
    runs: int
    n: int
    k: int

    @property
    def total(self) -> float:
        return self.seconds * self.runs

    def describe(self) -> str:
        """E.g. 'would take about 30 s (3 runs of ~10.0 s for k = 4, N = 1,000)'."""
        return (
            f"would take about {self.total:.0f} s ({self.runs} runs of ~{self.seconds:.1f} s "
            f"for k = {self.k}, N = {self.n:,})"
        )


class CostModel:
    """Estimates the budgeted strategies' time from a forward time per image.

    Starts from the model's forward time per image (measured by inference) and, when told
    about a measurement (``observe``), uses that strategy's own time per pass from then on.
    """

    def __init__(self, forward_ms_per_image: float) -> None:
        self.ms_per_pass = {name: forward_ms_per_image for name in budgeted()}

    def estimate(self, name: str, n: int, k: int, runs: int = 1) -> TimeEstimate:
        passes = REGISTRY[name].passes
        assert passes is not None, f"{name}'s cost does not grow with N"
        return TimeEstimate(self.ms_per_pass[name] * passes(n, k) / 1000, runs, n, k)

    def observe(self, name: str, n: int, k: int, milliseconds: float) -> None:
        passes = REGISTRY[name].passes
        assert passes is not None, f"{name}'s cost does not grow with N"
        self.ms_per_pass[name] = milliseconds / passes(n, k)

    def over_budget(
        self, n: int, k: int, runs: int, budget_seconds: float
    ) -> dict[str, TimeEstimate]:
        """The budgeted strategies whose ``runs`` runs at (n, k) would exceed the budget."""
        estimates = {name: self.estimate(name, n, k, runs) for name in budgeted()}
        return {name: e for name, e in estimates.items() if e.total > budget_seconds}
