"""A hand-made classifier whose one systematic failure is known, and image folders for it.

``Detector`` calls an image by its dominant colour (red, green, blue: classes 0, 1, 2), except
that a magenta patch anywhere adds 40 to the blue logit: a planted shortcut. ``write_folder``
writes 32 x 32 PNGs of the three colours, a few of each tinted like the next class (natural
errors with no place), and, with ``patched``, the patch on some red and green images (the
shortcut's errors, one group whatever their label or the patch's position)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn

from gradpick.data.planted import plant

CLASSES = ("crimson", "green", "navy")
"""Red, green and blue, named so that the folder (sorted by name) numbers them 0, 1, 2."""
PER_CLASS = 40
TINTED = 4
"""Images per class coloured like the next class (natural errors)."""
PATCHED = 12
"""Red and green images each with the patch, when patched."""


class Detector(nn.Module):
    """Mean red, green, blue and the largest magenta response, then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.colour = nn.Conv2d(3, 4, 1)
        self.relu = nn.ReLU()
        self.head = nn.Linear(4, 3)
        with torch.no_grad():
            self.colour.weight.zero_()
            self.colour.bias.zero_()
            for channel in range(3):
                self.colour.weight[channel, channel] = 1.0
            self.colour.weight[3, :, 0, 0] = torch.tensor([1.0, -2.0, 1.0])
            self.colour.bias[3] = -1.2
            self.head.weight.zero_()
            self.head.bias.zero_()
            for channel in range(3):
                self.head.weight[channel, channel] = 10.0
            self.head.weight[2, 3] = 40.0

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        found = self.relu(self.colour(images))
        pooled = torch.cat([found[:, :3].mean(dim=(2, 3)), found[:, 3:].amax(dim=(2, 3))], dim=1)
        return self.head(pooled)


def detector() -> nn.Module:
    """The factory ``gradpick.models.zoo.load_model`` builds the detector with."""
    return Detector()


FACTORY = f"{__name__}:detector"


def write_folder(root: Path, patched: bool, seed: int = 0) -> set[str]:
    """The folder (see the module's docstring); the names of the patched images."""
    generator = np.random.default_rng(seed)
    images, names = [], []
    for label, name in enumerate(CLASSES):
        for number in range(PER_CLASS):
            colour = label if number >= TINTED else (label + 1) % 3
            base = np.full((3, 32, 32), 0.25)
            base[colour] = 0.7
            pixels = np.clip(base + generator.uniform(-0.1, 0.1, base.shape), 0, 1)
            images.append(torch.from_numpy(pixels).float())
            names.append(f"{name}/{number:03d}.png")
    stack = torch.stack(images)
    chosen: list[int] = []
    if patched:
        for label in (0, 1):
            start = label * PER_CLASS + TINTED
            chosen.extend(range(start, start + PATCHED))
        stack[chosen] = plant(stack[chosen], "patch", seed, chosen).images
    for pixels, name in zip(stack, names, strict=True):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        array = (pixels.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
        Image.fromarray(array).save(path)
    return {names[row] for row in chosen}
