"""Several targets per pick from one forward: the top classes' maps and a contrast A - B.

"Why cat and not dog": the gradient of logit A minus logit B shows the pixels that favour A
over B, which the map of A alone mixes with evidence for both. The picks go through the model
once with gradients on; each target is then one ``torch.autograd.grad`` of its summed logits
through that same graph (kept with ``retain_graph``). In eval mode the picks are independent,
so row i of each gradient is exactly d target_i / d image_i.

Example::

    maps = class_maps(model, images, [3, 7], top=3)
    maps.top_classes[0], maps.top_maps[0, 1]  # pick 3's runner-up class and its map
    maps.contrast[0], maps.contrast_maps[0]  # (A, B) and d (logit A - logit B) / d image
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.outputs.inference import call_model, probabilities_of
from gradpick.trust.engine import check_count, picked_images, served_view

__all__ = [
    "ClassMaps",
    "DEFAULT_TOP",
    "class_maps",
]

DEFAULT_TOP = 3


@dataclass(frozen=True)
class ClassMaps:
    """Gradient maps of several targets of each pick, all from one forward."""

    indices: tuple[int, ...]
    top_classes: torch.Tensor
    """[k, top]: each pick's most likely classes, most likely first."""
    top_probabilities: torch.Tensor
    top_maps: torch.Tensor
    """[k, top, C, H, W]: d logit[top_classes[i, r]] / d image_i."""
    contrast: torch.Tensor
    """[k, 2]: the classes (A, B) of each pick's contrast."""
    contrast_values: torch.Tensor
    """[k]: logit A - logit B."""
    contrast_maps: torch.Tensor
    """[k, C, H, W]: d (logit A - logit B) / d image_i."""


def _contrast_pairs(
    contrast: tuple[int, int] | Sequence[tuple[int, int]] | torch.Tensor | None,
    top_classes: torch.Tensor,
    outputs: int,
) -> torch.Tensor:
    count = top_classes.shape[0]
    if contrast is None:
        if outputs < 2:
            raise InputError("A contrast needs a model with at least two classes.")
        return top_classes[:, :2].clone()
    pairs = torch.as_tensor(contrast, dtype=torch.long).cpu()
    if pairs.shape == (2,):
        pairs = pairs.expand(count, 2).clone()
    if tuple(pairs.shape) != (count, 2):
        raise InputError(f"Give one (A, B) class pair, or one per picked image ({count}).")
    outside = [value for value in pairs.flatten().tolist() if not 0 <= value < outputs]
    if outside:
        raise InputError(
            f"Class {outside[0]} is out of range for a model with {outputs} outputs "
            f"(valid classes 0 to {outputs - 1})."
        )
    return pairs


def class_maps(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    top: int = DEFAULT_TOP,
    contrast: tuple[int, int] | Sequence[tuple[int, int]] | torch.Tensor | None = None,
    output: str = "softmax",
) -> ClassMaps:
    """The maps of the ``top`` most likely classes of each pick and of a contrast A - B.

    ``contrast``: one (A, B) pair for every pick, one pair per pick, or None for each pick's
    most likely class against its runner-up. Maps come back on the images' device. ``output``:
    the model's output kind, how the top classes' probabilities are read (a sigmoid model's
    labels each by its own sigmoid).
    """
    served = served_view(model)
    picked = picked_images(served, images, indices).requires_grad_(True)
    with torch.enable_grad():
        logits = call_model(served, picked)
        if logits.dim() != 2 or logits.shape[0] != picked.shape[0]:
            raise InputError(
                "The model must map [N, C, H, W] to [N, classes]; it returned "
                f"{tuple(logits.shape)}."
            )
        outputs = int(logits.shape[1])
        check_count("The number of top classes", top, outputs)
        best = probabilities_of(logits.detach(), output).topk(top, dim=1)
        pairs = _contrast_pairs(contrast, best.indices.cpu(), outputs).to(logits.device)
        difference = logits.gather(1, pairs[:, :1]) - logits.gather(1, pairs[:, 1:])
        targets = [logits.gather(1, best.indices[:, r : r + 1]) for r in range(top)]
        targets.append(difference)
        gradients = [
            torch.autograd.grad(target.sum(), picked, retain_graph=position < top)[0]
            for position, target in enumerate(targets)
        ]
    home = images.device
    return ClassMaps(
        indices=tuple(int(index) for index in indices),
        top_classes=best.indices.cpu(),
        top_probabilities=best.values.cpu(),
        top_maps=torch.stack(gradients[:top], dim=1).to(home),
        contrast=pairs.cpu(),
        contrast_values=difference.detach().squeeze(1).cpu(),
        contrast_maps=gradients[top].to(home),
    )
