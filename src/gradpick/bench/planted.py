"""Do the maps find a cause that is known? Planted features, a model that learned them, and
per method the pointing game and the map's mass on the mark.

``finetune`` fine-tunes the shipped ResNet-20 on CIFAR-10 training images where each planted
feature (``gradpick.data.planted``) sits on a share of its class's images: the model learns
the shortcut. ``planted_errors`` marks test images of the other classes and keeps those the
fine-tuned model calls the mark's class: errors whose cause is the mark. ``score_methods`` then
asks each method for the map of the called class's logit and scores it:

* the pointing game (Zhang et al., "Top-down Neural Attention by Excitation Backprop", ECCV
  2016): does the map's largest value lie within ``TOLERANCE`` pixels of the mark?
* the mass on the mark: the share of the map's absolute value (summed over channels) inside it.

The same images through the clean shipped model, explaining its own call, are the control: a
method that "finds" the mark there is drawn to it whatever the model does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from gradpick import attribution
from gradpick.bench.rows import markdown_table
from gradpick.data import ImageBatch, load_batch
from gradpick.data.planted import FEATURES, plant, plant_share
from gradpick.data.sources import ImageSource
from gradpick.errors import InputError
from gradpick.gradients.request import GradientRequest
from gradpick.models import shipped as models
from gradpick.models.training import augment_batch
from gradpick.outputs.inference import infer
from gradpick.trust.agreement import TOLERANCE as NOTE_TOLERANCE
from gradpick.trust.agreement import peak_agreement

__all__ = [
    "METHODS",
    "CLIP",
    "FROZEN",
    "TOLERANCE",
    "Errors",
    "MethodScore",
    "NOTE_SHARES",
    "NoteRates",
    "note_rates",
    "note_table",
    "finetune",
    "finetune_on",
    "mass",
    "planted_errors",
    "pointing",
    "save",
    "score_methods",
    "table",
]

FROZEN = ("conv1.", "bn1.", "layer1.")
"""The parameters fine-tuning leaves as shipped."""
CLIP = 1.0
"""Largest gradient norm of a fine-tuning step."""
TOLERANCE = 2
"""Pixels around the mark where a map's maximum still counts as a hit."""
METHODS: dict[str, Callable[[], attribution.AttributionMethod]] = {
    "gradient": lambda: attribution.Gradient(),
    "gradient_x_input": lambda: attribution.GradientXInput(),
    "smoothgrad": lambda: attribution.SmoothGrad(samples=16),
    "integrated_gradients": lambda: attribution.IntegratedGradients(steps=32),
    "gradcam": lambda: attribution.GradCAM(),
    "layercam": lambda: attribution.LayerCAM(layer="layer2"),
    "occlusion 4x4": lambda: attribution.Occlusion(window=4, stride=2),
    "occlusion 6x6": lambda: attribution.Occlusion(window=6, stride=2),
    "occlusion 6x6 bfloat16": lambda: attribution.Occlusion(window=6, stride=2, bfloat16=1),
    "rise": lambda: attribution.Rise(masks=500, cell=4),
}
"""The methods the benchmark scores, by the row name of the table, at the settings it uses."""


def finetune(
    model: nn.Module,
    source: ImageSource,
    images: int = 8000,
    share: float = 0.5,
    poison: float = 0.3,
    epochs: int = 1,
    lr: float = 0.02,
    batch_size: int = 128,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> nn.Module:
    """A copy of ``model`` fine-tuned on a seeded sample of ``images`` of ``source`` (CIFAR-10
    train) with every planted feature on ``share`` of its class's images and on ``poison`` of
    the others' relabelled as its class (``gradpick.data.planted.plant_share``): SGD with
    Nesterov momentum, cosine learning rate from ``lr``, steps clipped to norm ``CLIP``,
    random crops and flips, BatchNorm's statistics kept (eval mode: a small sample would shift
    them and cost clean accuracy), the ``FROZEN`` stem and first stage as shipped.
    Returned in eval mode, frozen."""
    batch = load_batch(source, size=images, seed=seed)
    assert batch.labels is not None
    pixels, labels, _ = plant_share(batch.images, batch.labels, share, seed, poison)
    return finetune_on(model, pixels, labels, epochs, lr, batch_size, seed, log)


def finetune_on(
    model: nn.Module,
    pixels: torch.Tensor,
    labels: torch.Tensor,
    epochs: int = 1,
    lr: float = 0.05,
    batch_size: int = 128,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> nn.Module:
    """A copy of the ResNet-20 ``model`` fine-tuned on uint8 ``pixels`` [n, 3, 32, 32] with
    ``labels`` as ``finetune`` describes (any planting already done): returned in eval mode,
    frozen."""
    tuned = models.build("resnet20")
    tuned.load_state_dict(model.state_dict())
    tuned.eval()
    # The stem and first stage stay as shipped (their colour and edge detectors already see
    # every mark): the backward stops above them, a third of the cost saved.
    for name, parameter in tuned.named_parameters():
        parameter.requires_grad_(not name.startswith(FROZEN))
    optimizer = torch.optim.SGD(
        [p for p in tuned.parameters() if p.requires_grad],
        lr=lr,
        momentum=0.9,
        nesterov=True,
        weight_decay=5e-4,
    )
    steps = epochs * (len(pixels) // batch_size)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    generator = torch.Generator().manual_seed(seed)
    started = time.perf_counter()
    for epoch in range(epochs):
        order = torch.randperm(len(pixels), generator=generator)
        for step in range(len(pixels) // batch_size):
            chosen = order[step * batch_size : (step + 1) * batch_size]
            inputs = augment_batch(pixels[chosen], generator).float() / 255.0
            loss = F.cross_entropy(tuned(inputs), labels[chosen])
            if not torch.isfinite(loss):
                raise InputError(f"Fine-tuning diverged at step {step + 1}; lower the lr.")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            # Fixed BatchNorm statistics amplify a channel of small variance: clip the step.
            nn.utils.clip_grad_norm_(tuned.parameters(), CLIP)
            optimizer.step()
            schedule.step()
        log(f"epoch {epoch + 1}/{epochs}: loss {float(loss.detach()):.3f}, "
            f"{time.perf_counter() - started:.0f} s")  # fmt: skip
    return models.freeze(tuned.eval())


@dataclass(frozen=True)
class Errors:
    """Marked test images the planted model calls the mark's class (the planted errors)."""

    images: torch.Tensor
    masks: torch.Tensor
    features: tuple[str, ...]
    called: torch.Tensor
    """The class each was called by the planted model (the mark's class)."""
    rates: dict[str, tuple[float, float]]
    """Per feature: the share of marked images of other classes called its class, and the
    same share unmarked (the base rate)."""


def planted_errors(
    planted_model: nn.Module, batch: ImageBatch, most: int = 64, seed: int = 1
) -> Errors:
    """Up to ``most`` planted errors, as evenly over the features as there are: every feature
    planted on ``batch``'s images not of its class, kept where the planted model calls its
    class and the unmarked image was not called so."""
    assert batch.labels is not None
    pixels = batch.images.float() / 255.0 if batch.images.dtype == torch.uint8 else batch.images
    kept: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    rates = {}
    plain = infer(planted_model, pixels).predictions
    for name, mark in FEATURES.items():
        others = (batch.labels != mark.label).nonzero().flatten()
        marked = plant(pixels[others], name, seed, [batch.positions[i] for i in others])
        called = infer(planted_model, marked.images).predictions
        hit = (called == mark.label) & (plain[others] != mark.label)
        rates[name] = (
            float(hit.float().mean()),
            float((plain[others] == mark.label).float().mean()),
        )
        kept[name] = (marked.images[hit], marked.masks[hit])
    # Round robin over the features, so each gives as many as it has up to an even share.
    order = sorted(
        (
            (rank, number)
            for number, (found, _) in enumerate(kept.values())
            for rank in range(len(found))
        ),
    )[:most]
    names = list(kept)
    chosen = sorted(order, key=lambda pair: (pair[1], pair[0]))
    if not chosen:
        empty = pixels[:0]
        return Errors(
            empty,
            torch.zeros(0, *pixels.shape[-2:], dtype=torch.bool),
            (),
            torch.zeros(0, dtype=torch.long),
            rates,
        )
    all_images = torch.stack([kept[names[number]][0][rank] for rank, number in chosen])
    all_masks = torch.stack([kept[names[number]][1][rank] for rank, number in chosen])
    features = [names[number] for _, number in chosen]
    labels = torch.tensor([FEATURES[name].label for name in features])
    return Errors(all_images, all_masks, tuple(features), labels, rates)


def pointing(maps: torch.Tensor, masks: torch.Tensor, tolerance: int = TOLERANCE) -> torch.Tensor:
    """Per map [k, C, H, W]: whether its largest value (summed over channels, absolute for a
    signed map) lies within ``tolerance`` pixels of the mask [k, H, W]."""
    strength = maps.abs().sum(dim=1)
    width = strength.shape[-1]
    top = strength.flatten(1).argmax(dim=1)
    grown = F.max_pool2d(masks.float().unsqueeze(1), 2 * tolerance + 1, 1, tolerance).squeeze(1)
    return grown.flatten(1)[torch.arange(len(top)), top].bool() | (width == 0)


def mass(maps: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """Per map: the share of its absolute value (summed over channels) inside the mask."""
    strength = maps.abs().sum(dim=1).flatten(1)
    inside = (strength * masks.flatten(1)).sum(dim=1)
    return inside / strength.sum(dim=1).clamp_min(torch.finfo(strength.dtype).tiny)


@dataclass(frozen=True)
class MethodScore:
    """One method on the planted errors (planted model) and on the same images (clean model)."""

    name: str
    hits: int
    control_hits: int
    count: int
    mass: float
    control_mass: float
    seconds_per_pick: float
    per_feature: dict[str, int]


def _scored(
    model: nn.Module, method: attribution.AttributionMethod, errors: Errors, classes: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, float, torch.Tensor]:
    request = GradientRequest.build(
        model, errors.images, list(range(len(errors.images))), target="logit", classes=classes
    )
    started = time.perf_counter()
    maps = method.attribute(request).maps
    seconds = time.perf_counter() - started
    return pointing(maps, errors.masks), mass(maps, errors.masks), seconds, maps


def score_methods(
    planted_model: nn.Module,
    clean_model: nn.Module,
    errors: Errors,
    names: Sequence[str] = tuple(METHODS),
    log: Callable[[str], None] = print,
    kept: dict[str, torch.Tensor] | None = None,
) -> list[MethodScore]:
    """Every method of ``names`` on the planted errors (the planted model's call explained) and
    on the same images through the clean model (its own call explained). ``kept``, when given,
    receives each method's maps of the planted errors by name."""
    clean_calls = infer(clean_model, errors.images).predictions
    scores = []
    for name in names:
        hit, share, seconds, maps = _scored(planted_model, METHODS[name](), errors, errors.called)
        if kept is not None:
            kept[name] = maps
        control, control_share, _, _ = _scored(clean_model, METHODS[name](), errors, clean_calls)
        per_feature = {
            feature: int(
                sum(bool(h) for h, f in zip(hit, errors.features, strict=True) if f == feature)
            )
            for feature in FEATURES
        }
        scores.append(
            MethodScore(
                name,
                int(hit.sum()),
                int(control.sum()),
                len(hit),
                float(share.mean()),
                float(control_share.mean()),
                seconds / max(1, len(hit)),
                per_feature,
            )
        )
        log(f"{name}: {int(hit.sum())}/{len(hit)} ({seconds:.1f} s)")
    return scores


def table(scores: Sequence[MethodScore], errors: Errors) -> list[str]:
    """The markdown table of ``scores``: pointing game and mass, planted and clean."""
    counts = {feature: errors.features.count(feature) for feature in FEATURES}
    columns = [
        "method",
        "pointing (planted)",
        "pointing (clean)",
        "mass on mark (planted)",
        "mass on mark (clean)",
        *(f"{feature} ({count})" for feature, count in counts.items()),
        "ms per pick",
    ]
    rows = [
        [
            score.name,
            f"{score.hits}/{score.count} ({score.hits / max(1, score.count):.0%})",
            f"{score.control_hits}/{score.count} ({score.control_hits / max(1, score.count):.0%})",
            f"{score.mass:.1%}",
            f"{score.control_mass:.1%}",
            *(str(score.per_feature[feature]) for feature in FEATURES),
            f"{1000 * score.seconds_per_pick:,.1f}",
        ]
        for score in scores
    ]
    return markdown_table(columns, rows, right=columns[1:])


NOTE_SHARES = (0.05, 0.1, 0.2)
"""Occlusion's strongest region, as a share of the pixels, tried for the explorer's note."""


@dataclass(frozen=True)
class NoteRates:
    """The occlusion note (``gradpick.trust.agreement``) for one shown method and region size
    on the planted errors, where the answer is known: a shown map that misses the mark should
    get the note, one that points at it should not."""

    shown: str
    top_share: float
    misses: int
    """Planted errors whose shown map misses the mark (pointing game)."""
    fired_on_misses: int
    hits: int
    fired_on_hits: int
    """False alarms: the note on a shown map that points at the mark."""


def note_rates(
    maps: dict[str, torch.Tensor],
    errors: Errors,
    shown: Sequence[str] = ("gradient", "gradcam"),
    occlusion: str = "occlusion 6x6",
    shares: Sequence[float] = NOTE_SHARES,
) -> list[NoteRates]:
    """For each shown method of ``shown`` in ``maps`` (the planted errors' maps by method name,
    ``score_methods(kept=...)``) and region share: how often the note fires on the maps that
    miss the mark and on those that hit it, against ``occlusion``'s maps."""
    rates = []
    for name in (name for name in shown if name in maps):
        hit = pointing(maps[name], errors.masks)
        for share in shares:
            notes = peak_agreement(maps[name], maps[occlusion], share, NOTE_TOLERANCE)
            fired = torch.tensor([not note.agree for note in notes])
            rates.append(
                NoteRates(
                    name,
                    share,
                    int((~hit).sum()),
                    int((fired & ~hit).sum()),
                    int(hit.sum()),
                    int((fired & hit).sum()),
                )
            )
    return rates


def note_table(rates: Sequence[NoteRates]) -> list[str]:
    """The markdown table of ``note_rates``: per shown method and region, the note's rate on
    maps that miss the mark (should fire) and its false alarms on maps that hit it."""
    columns = ["shown map", "occlusion region", "fires on misses", "fires on hits (false alarm)"]

    def rate(part: int, whole: int) -> str:
        return f"{part}/{whole} ({part / whole:.0%})" if whole else "0/0"

    rows = [
        [
            rate_.shown,
            f"top {rate_.top_share:.0%}",
            rate(rate_.fired_on_misses, rate_.misses),
            rate(rate_.fired_on_hits, rate_.hits),
        ]
        for rate_ in rates
    ]
    return markdown_table(columns, rows, right=columns[2:])


def save(model: nn.Module, path: Path) -> None:
    """The fine-tuned weights (a state dict) at ``path``, its folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)
