"""Class sensitivity: does a map change when it is asked about another class?

The random-logit test (Sixt et al., "When Explanations Lie", ICML 2020; Adebayo et al., "Sanity
Checks for Saliency Maps", NeurIPS 2018): a map of the held class that is nearly the same as the
map of another class explains the image, not the class. Per pick and method, the map for the
held class is compared with the map for its runner-up class (the most likely other class) and
for a seeded random other class, by the Spearman rank correlation of |attribution| and by SSIM
(each map scaled to [0, 1] by its maximum), as the randomisation test compares its maps.

Example::

    rows = class_sensitivity(model, images, [3, 7], methods=("gradient",))
    [(row.kind, row.spearman.tolist(), row.insensitive.tolist()) for row in rows]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.trust.baselines import seeded_generator
from gradpick.trust.engine import (
    MethodSettings,
    attribute_maps,
    check_methods,
    held_classes,
    logits_of,
    picked_images,
    saliency,
    scaled_saliency,
    served_view,
)
from gradpick.trust.metrics import spearman, ssim

__all__ = [
    "INSENSITIVE_SPEARMAN",
    "KINDS",
    "ClassSensitivity",
    "class_sensitivity",
    "other_classes",
]

KINDS = ("runner_up", "random")
"""The other classes a map is compared against: the most likely other one, a random one."""
INSENSITIVE_SPEARMAN = 0.9
"""A map whose Spearman with another class's map is at least this is flagged class-insensitive."""


@dataclass(frozen=True)
class ClassSensitivity:
    """One method's maps of the held classes against those of one kind of other class [k]."""

    method: str
    kind: str
    """``runner_up`` or ``random``."""
    indices: tuple[int, ...]
    classes: torch.Tensor
    """The held class of each pick [k]."""
    other_classes: torch.Tensor
    """The class each pick's map is compared against [k]."""
    spearman: torch.Tensor
    """Spearman of |map| for the held class against |map| for the other class [k]."""
    ssim: torch.Tensor
    other_maps: torch.Tensor
    """The maps [k, C, H, W] of the other classes."""

    @property
    def insensitive(self) -> torch.Tensor:
        """[k] bool: the map barely changes with the class (Spearman >= INSENSITIVE_SPEARMAN)."""
        return self.spearman >= INSENSITIVE_SPEARMAN


def other_classes(
    logits: torch.Tensor, held: torch.Tensor, indices: Sequence[int], seed: int = 0
) -> dict[str, torch.Tensor]:
    """Each pick's runner-up class and a random other class [k] (CPU, long).

    The runner-up is the class with the largest logit other than the held one. The random class
    is drawn uniformly from the classes that are neither, seeded by (seed, batch index), so a
    pick gets the same class whichever other images are picked with it; with only two classes
    it is the runner-up.
    """
    outputs = int(logits.shape[1])
    if outputs < 2:
        raise InputError("Class sensitivity needs a model with at least two classes.")
    held = held.to(torch.long).cpu()
    rows = torch.arange(len(held))
    others = logits.detach().cpu().double().clone()
    others[rows, held] = -torch.inf
    runner_up = others.argmax(dim=1)
    drawn = []
    for index, own, second in zip(indices, held.tolist(), runner_up.tolist(), strict=True):
        excluded = {own, second} if outputs > 2 else {own}
        choices = [value for value in range(outputs) if value not in excluded]
        position = torch.randint(len(choices), (1,), generator=seeded_generator(seed, index))
        drawn.append(choices[int(position)])
    return {"runner_up": runner_up, "random": torch.tensor(drawn, dtype=torch.long)}


def class_sensitivity(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    methods: Sequence[str] = ("gradient",),
    classes: int | Sequence[int] | torch.Tensor | None = None,
    settings: MethodSettings | None = None,
    seed: int = 0,
    held_maps: Mapping[str, torch.Tensor] | None = None,
) -> list[ClassSensitivity]:
    """Class sensitivity of each method on ``images[indices]``: one row per method and kind.

    ``classes``: the class each pick is explained for (default: the model's prediction).
    ``held_maps``: the maps [k, C, H, W] of those classes by method when already computed (the
    randomisation test's trained maps); the others are computed with the other classes' maps,
    all classes of a method in one attribution call.
    """
    methods = check_methods(methods)
    settings = settings or MethodSettings()
    served = served_view(model)
    indices = [int(index) for index in indices]
    held = held_classes(served, images, indices, classes)
    logits = logits_of(served, picked_images(served, images, indices))
    others = other_classes(logits, held, indices, seed)
    rows = []
    for method in methods:
        given = None if held_maps is None else held_maps.get(method)
        targets = [others[kind] for kind in KINDS] + ([held] if given is None else [])
        repeated = [index for _ in targets for index in indices]
        maps = attribute_maps(served, images, repeated, method, torch.cat(targets), settings)
        parts = maps.split(len(indices))
        own = parts[-1] if given is None else given
        own_scaled, own_saliency = scaled_saliency(own), saliency(own)
        for kind, other in zip(KINDS, parts, strict=False):
            rows.append(
                ClassSensitivity(
                    method=method,
                    kind=kind,
                    indices=tuple(indices),
                    classes=held,
                    other_classes=others[kind],
                    spearman=spearman(own_saliency, saliency(other)),
                    ssim=ssim(own_scaled, scaled_saliency(other)),
                    other_maps=other,
                )
            )
    return rows
