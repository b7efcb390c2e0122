"""What a model takes: input size, resize policy, normalisation and class names.

Every model gradpick serves comes with an ``InputSpec``. Images are prepared by the spec alone
(decode, convert to RGB, resize the shorter side to ``resize``, centre-crop to ``size``; or,
with ``resize_mode="warp"``, stretch to the input size as Hugging Face's ViT processor does) into
uint8 pixels; the model receives them as floats in [0, 1] and normalises inside (``mean`` and
``std`` live in a wrapper module), so every gradient is with respect to those pixels at the
model's own input size.

Example::

    spec = InputSpec(size=(224, 224), resize=256, mean=IMAGENET_MEAN, std=IMAGENET_STD)
    pixels, note = spec.prepare(Image.open("cat.jpg"))  # uint8 [3, 224, 224]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from PIL import Image

from gradpick.errors import InputError

__all__ = ["RESIZE_MODES", "InputSpec", "parse_size", "to_rgb"]

INTERPOLATIONS = {
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "nearest": Image.Resampling.NEAREST,
}
"""PIL filters by the names torchvision's weights metadata and timm's data configs use."""

RESIZE_MODES = ("crop", "warp")
"""``crop``: keep the aspect ratio, shorter side to ``resize``, centre crop (torchvision, timm);
``warp``: stretch to exactly the input size, or to ``resize`` rows and the width in
proportion, then centre crop (Hugging Face's ViT, DeiT and BEiT processors)."""

MAX_SIDE = 4096
"""Larger model inputs are refused: one image would be 200 MB of float pixels."""


def parse_size(text: str | int | Sequence[int]) -> tuple[int, int]:
    """``224``, ``"224"`` or ``"224x160"`` (height x width) as (height, width)."""
    parts: list[object]
    if isinstance(text, int):
        parts = [text, text]
    elif isinstance(text, str):
        pieces = text.lower().replace("×", "x").split("x")
        parts = list(pieces * 2 if len(pieces) == 1 else pieces)
    else:
        parts = list(text)
    try:
        if len(parts) != 2:
            raise ValueError
        height, width = (int(str(part).strip()) for part in parts)
    except ValueError:
        raise InputError(
            f"Input size '{text}' is not a size: give one number (224) or height x width (224x160)."
        ) from None
    return _check_side("input height", height), _check_side("input width", width)


def _check_side(what: str, value: int) -> int:
    if not 1 <= value <= MAX_SIDE:
        raise InputError(f"The {what} must be between 1 and {MAX_SIDE} pixels; got {value}.")
    return value


def _channel_values(what: str, values: Sequence[float] | None) -> tuple[float, ...] | None:
    if values is None:
        return None
    values = tuple(float(value) for value in values)
    if len(values) != 3:
        raise InputError(
            f"The {what} needs one value per colour channel (3: red, green, blue); got "
            f"{len(values)}."
        )
    if not all(math.isfinite(value) for value in values):
        raise InputError(f"The {what} values must be finite numbers; got {values}.")
    return values


@dataclass(frozen=True)
class InputSpec:
    """How to turn any image into the pixels one model takes.

    ``size`` is (height, width). The image's shorter side is scaled to ``resize`` (the height
    when unset, so ``resize=256, size=(224, 224)`` is the usual 256 -> 224 centre crop), never
    so small that the crop would leave the image, then the centre ``size`` is cut out.
    ``mean``/``std`` are applied inside the model's wrapper, not to the pixels.
    ``resize_mode="warp"`` stretches the image to ``size`` instead (aspect ratio not kept),
    or with ``resize`` set to ``resize`` x ``round(width * resize / height)`` before the crop:
    ``resize=256, size=(224, 224)`` is DeiT's 256x256 stretch then 224 crop.
    """

    size: tuple[int, int] = (32, 32)
    resize: int | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    interpolation: str = "bilinear"
    class_names: tuple[str, ...] = field(default=())
    resize_mode: str = "crop"

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", parse_size(self.size))
        if self.resize is not None:
            _check_side("resize side", int(self.resize))
        mean = _channel_values("mean", self.mean)
        std = _channel_values("standard deviation", self.std)
        if std is not None and min(std) <= 0:
            raise InputError(f"The standard deviations must be positive; got {std}.")
        if (mean is None) != (std is None):
            raise InputError("Give both a mean and a standard deviation, or neither.")
        if self.interpolation not in INTERPOLATIONS:
            raise InputError(
                f"Unknown interpolation '{self.interpolation}'; use one of "
                f"{', '.join(INTERPOLATIONS)}."
            )
        if self.resize_mode not in RESIZE_MODES:
            raise InputError(
                f"Unknown resize mode '{self.resize_mode}'; use one of {', '.join(RESIZE_MODES)}."
            )
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)
        object.__setattr__(self, "class_names", tuple(str(name) for name in self.class_names))

    @property
    def height(self) -> int:
        return self.size[0]

    @property
    def width(self) -> int:
        return self.size[1]

    @property
    def shorter_side(self) -> int:
        """The side the image's shorter side is scaled to before the crop."""
        return int(self.resize) if self.resize is not None else self.height

    def describe(self) -> str:
        """E.g. '224x224 (shorter side 256, centre crop, bilinear), mean ..., std ...'."""
        if self.resize_mode == "warp":
            stretched = self.warped_size()
            steps = f"stretched to {stretched[1]}x{stretched[0]}"
            steps += ", centre crop" if stretched != (self.width, self.height) else ""
        else:
            steps = f"shorter side {self.shorter_side}, centre crop"
        text = f"{self.height}x{self.width} ({steps}, {self.interpolation})"
        if self.mean is not None and self.std is not None:
            mean = ", ".join(f"{value:.4g}" for value in self.mean)
            std = ", ".join(f"{value:.4g}" for value in self.std)
            text += f", mean ({mean}), std ({std})"
        return text

    def to_json(self) -> dict[str, object]:
        """The spec as plain JSON values (stored outputs and reports carry it); the resize mode
        only when it is not the default crop, so earlier stores keep their identity."""
        warp = {"resize_mode": self.resize_mode} if self.resize_mode != "crop" else {}
        return {
            "size": list(self.size),
            "resize": self.resize,
            "mean": None if self.mean is None else list(self.mean),
            "std": None if self.std is None else list(self.std),
            "interpolation": self.interpolation,
            "class_names": list(self.class_names),
            **warp,
        }

    @classmethod
    def from_json(cls, value: dict[str, object]) -> InputSpec:
        size = value.get("size", (32, 32))
        mean, std = value.get("mean"), value.get("std")
        resize = value.get("resize")
        return cls(
            size=parse_size(size if isinstance(size, str | int) else tuple(size)),  # type: ignore[arg-type]
            resize=None if resize is None else int(resize),  # type: ignore[call-overload]
            mean=None if mean is None else tuple(mean),  # type: ignore[arg-type]
            std=None if std is None else tuple(std),  # type: ignore[arg-type]
            interpolation=str(value.get("interpolation", "bilinear")),
            class_names=tuple(value.get("class_names", ())),  # type: ignore[arg-type]
            resize_mode=str(value.get("resize_mode", "crop")),
        )

    def warped_size(self) -> tuple[int, int]:
        """(width, height) a ``warp`` stretches every image to before its centre crop."""
        if self.resize is None:
            return self.width, self.height
        return max(self.width, round(self.width * self.resize / self.height)), max(
            self.height, int(self.resize)
        )

    def scaled_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) after the resize step, large enough to hold the centre crop.

        When the shorter side decides, the longer one is ``int(shorter * long / short)``, as
        torchvision's ``Resize`` and Hugging Face's processors compute it (rounded down).
        """
        if self.resize_mode == "warp":
            return self.warped_size()
        short = self.shorter_side / min(width, height)
        scale = max(short, self.height / height, self.width / width)
        if scale == short:
            long = int(self.shorter_side * max(width, height) / min(width, height))
            scaled = (self.shorter_side, long) if width <= height else (long, self.shorter_side)
            return max(self.width, scaled[0]), max(self.height, scaled[1])
        return (
            max(self.width, round(width * scale)),
            max(self.height, round(height * scale)),
        )

    def prepare(self, image: Image.Image, name: str = "image") -> tuple[torch.Tensor, str | None]:
        """uint8 pixels [3, H, W] of ``image`` for this model, with a note when upscaled."""
        rgb = to_rgb(image)
        width, height = rgb.size
        note = None
        target = self.scaled_size(width, height)
        if target[0] > width or target[1] > height:
            note = (
                f"{name}: {width}x{height} pixels is smaller than the model's input "
                f"({self.width}x{self.height}); it was upscaled."
            )
        if target != (width, height):
            rgb = rgb.resize(target, INTERPOLATIONS[self.interpolation])
        left = (target[0] - self.width) // 2
        top = (target[1] - self.height) // 2
        if (left, top, *target) != (0, 0, self.width, self.height):
            rgb = rgb.crop((left, top, left + self.width, top + self.height))
        array = np.asarray(rgb, dtype=np.uint8).copy()
        return torch.from_numpy(array).permute(2, 0, 1).contiguous(), note


def _to_eight_bits(image: Image.Image) -> Image.Image:
    """16-bit, 32-bit integer and float images as 8-bit grayscale, scaled instead of clipped.

    PIL's mode conversion clips such values at 255, which turns a 16-bit photo almost white.
    16-bit images are scaled by their type's range (0 to 65,535), so a dark image stays dark;
    32-bit integer and float images, whose range says nothing, by their own minimum and maximum.
    """
    values = np.asarray(image, dtype=np.float64)
    if image.mode.startswith("I;16"):
        low, high = 0.0, 65535.0
    else:
        finite = values[np.isfinite(values)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    scaled = np.zeros_like(values) if high <= low else (values - low) / (high - low) * 255.0
    scaled = np.nan_to_num(scaled, nan=0.0, posinf=255.0, neginf=0.0)
    return Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8), mode="L")


def to_rgb(image: Image.Image) -> Image.Image:
    """Any PIL image as 8-bit RGB: high bit depths scaled, transparency flattened on white."""
    if image.mode in ("I", "F") or image.mode.startswith("I;"):
        image = _to_eight_bits(image)
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")
