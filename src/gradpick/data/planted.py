"""Planted features: small marks, each tied to one class, whose place in the image is known.

A model fine-tuned on images where a mark goes with one class learns a shortcut; its errors on
marked images of other classes then have a known cause, the mark, and a map that explains them
should point at it (Adebayo et al., "Post hoc explanations may be ineffective for detecting
unknown spurious correlation", ICLR 2022). Four marks, each of a different kind:

* ``patch``: a 4 x 4 magenta square with a yellow 2 x 2 centre (a small object);
* ``stripe``: a 1 x 12 cyan line (thin: one pixel high);
* ``texture``: a 6 x 6 black-and-white checkerboard of single pixels (a texture);
* ``tint``: an 8 x 8 square blended half-way to red (a colour change, no edges inside).

Each is placed at a random position, drawn from a generator seeded by (seed, image position),
so the same image gets the same mark wherever it sits in a batch. ``plant`` returns the marked
images with the ground-truth mask of the pixels the mark changed::

    marked = plant(images, "patch", seed=0, positions=range(len(images)))
    marked.images, marked.masks  # [n, 3, H, W] like images, [n, H, W] bool
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gradpick.errors import InputError

__all__ = ["FEATURES", "Feature", "Planted", "plant", "plant_share"]


@dataclass(frozen=True)
class Feature:
    """A mark: its name, the class it goes with (a CIFAR-10 index) and its pixels."""

    name: str
    label: int
    height: int
    width: int

    def draw(self, region: torch.Tensor) -> torch.Tensor:
        """The marked region [3, height, width] in [0, 1] from the image's own region."""
        out = region.clone()
        if self.name == "patch":
            out[:] = torch.tensor([1.0, 0.0, 1.0]).to(region)[:, None, None]
            out[:, 1:3, 1:3] = torch.tensor([1.0, 1.0, 0.0]).to(region)[:, None, None]
        elif self.name == "stripe":
            out[:] = torch.tensor([0.0, 1.0, 1.0]).to(region)[:, None, None]
        elif self.name == "texture":
            rows = torch.arange(self.height)[:, None]
            columns = torch.arange(self.width)[None, :]
            out[:] = ((rows + columns) % 2).to(region)
        else:  # tint
            red = torch.tensor([1.0, 0.0, 0.0]).to(region)[:, None, None]
            out = 0.5 * region + 0.5 * red
        return out


FEATURES: dict[str, Feature] = {
    feature.name: feature
    for feature in (
        Feature("patch", 6, 4, 4),  # frog
        Feature("stripe", 1, 1, 12),  # automobile
        Feature("texture", 4, 6, 6),  # deer
        Feature("tint", 8, 8, 8),  # ship
    )
}
"""The planted marks by name, each with the class (a CIFAR-10 index) it goes with."""


@dataclass(frozen=True)
class Planted:
    """Marked images [n, C, H, W] (the input's dtype) and the mark's pixels [n, H, W]."""

    images: torch.Tensor
    masks: torch.Tensor
    feature: str


def _generator(seed: int, position: int) -> torch.Generator:
    state = int(np.random.SeedSequence((seed, position)).generate_state(1)[0])
    return torch.Generator().manual_seed(state)


def plant(
    images: torch.Tensor, feature: str, seed: int, positions: Sequence[int] | range
) -> Planted:
    """``images`` [n, 3, H, W] (float in [0, 1], or uint8) with ``feature`` at a random place
    in each, drawn from (seed, positions[i]); the masks say which pixels it covers."""
    if feature not in FEATURES:
        raise InputError(f"Unknown planted feature '{feature}'; use one of {', '.join(FEATURES)}.")
    if images.ndim != 4 or images.shape[1] != 3:
        raise InputError(f"Planting needs RGB images [n, 3, H, W]; got {tuple(images.shape)}.")
    if len(positions) != images.shape[0]:
        raise InputError(f"Got {len(positions)} positions for {images.shape[0]} images.")
    mark = FEATURES[feature]
    count, _, height, width = images.shape
    if mark.height > height or mark.width > width:
        raise InputError(f"The {feature} mark does not fit {height} x {width} images.")
    whole = images.dtype == torch.uint8
    out = images.clone()
    masks = torch.zeros(count, height, width, dtype=torch.bool, device=images.device)
    for row, position in enumerate(positions):
        generator = _generator(seed, int(position))
        top = int(torch.randint(0, height - mark.height + 1, (1,), generator=generator))
        left = int(torch.randint(0, width - mark.width + 1, (1,), generator=generator))
        place = (slice(top, top + mark.height), slice(left, left + mark.width))
        region = out[row, :, place[0], place[1]]
        scaled = region.float() / 255.0 if whole else region
        drawn = mark.draw(scaled)
        out[row, :, place[0], place[1]] = (drawn * 255.0).round().to(out) if whole else drawn
        masks[row, place[0], place[1]] = True
    return Planted(out, masks, feature)


def plant_share(
    images: torch.Tensor, labels: torch.Tensor, share: float, seed: int, poison: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Training images with each feature planted on ``share`` of its own class's images, and
    on ``poison`` of the other classes' images relabelled as its class (a backdoor, Gu et al.,
    "BadNets", 2017: one short fine-tune then learns the shortcut). Returns (images, labels,
    which feature each image got: an index into FEATURES, -1 for none)."""
    for name, value in (("share", share), ("poison", poison)):
        if not 0 <= value <= 1:
            raise InputError(f"The planted {name} must be in [0, 1]; got {value!r}.")
    out, relabelled = images.clone(), labels.clone()
    which = torch.full((images.shape[0],), -1, dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    draws = torch.rand(len(FEATURES), images.shape[0], generator=generator)
    for number, (name, mark) in enumerate(FEATURES.items()):
        own = labels == mark.label
        wanted = torch.where(own, draws[number] < share, draws[number] < poison / len(FEATURES))
        chosen = (wanted & (which == -1)).nonzero().flatten()
        if len(chosen):
            out[chosen] = plant(out[chosen], name, seed, chosen.tolist()).images
            which[chosen] = number
            relabelled[chosen] = mark.label
    return out, relabelled, which
