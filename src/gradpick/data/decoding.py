"""Decoding one image file into the uint8 pixels a model's input spec asks for.

The bottom of ``gradpick.data``: it knows bytes, PIL and ``InputSpec``, nothing about sources,
so every source type (folders, uploads) and every worker decodes the same way.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import torch
from PIL import Image, UnidentifiedImageError

from gradpick.errors import DataError
from gradpick.models.spec import InputSpec

__all__ = [
    "DEFAULT_SPEC",
    "IMAGE_SIZE",
    "MAX_IMAGE_PIXELS",
    "DecodedImage",
    "decode",
    "decode_image",
]

DEFAULT_SPEC = InputSpec()
"""The built-in models' input: 32x32 pixels, the shorter side resized to 32, centre crop."""
IMAGE_SIZE = DEFAULT_SPEC.height
"""The side of ``DEFAULT_SPEC`` (CIFAR-10's 32), for code about the built-in models only."""
MAX_IMAGE_PIXELS = 40_000_000
"""Larger images are refused before decoding: a decompression bomb must not exhaust memory."""


@dataclass(frozen=True)
class DecodedImage:
    """One image's pixels at a spec and what was done to it on the way."""

    pixels: torch.Tensor
    upscaled: bool = False
    """The image was smaller than the model's input and was enlarged."""
    animated: bool = False
    """Only the first frame of an animated image was used."""


def decode(data: bytes, name: str = "image", spec: InputSpec = DEFAULT_SPEC) -> DecodedImage:
    """Decode PNG/JPEG/WebP/... bytes into uint8 [3, H, W] RGB at ``spec``.

    Any size is accepted up to ``MAX_IMAGE_PIXELS``: ``spec.prepare`` resizes the shorter side
    and crops the centre. Transparency is flattened onto white, grayscale is expanded to RGB
    and an animated image gives its first frame. Deeper images are scaled to 8 bits, not
    clipped: 16-bit ones by their type's full range (0 to 65,535), the same for every image, so
    a dark photo stays dark and two exposures keep their difference (a scale per image would
    stretch each one's contrast on its own); 32-bit integer and float ones, whose type says
    nothing of their range, by their own minimum and maximum.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as opened:
                width, height = opened.size
                if width * height > MAX_IMAGE_PIXELS:
                    raise DataError(
                        f"{name}: {width}x{height} pixels is too large "
                        f"(limit {MAX_IMAGE_PIXELS:,} pixels); downscale it first."
                    )
                animated = getattr(opened, "n_frames", 1) > 1
                if animated:
                    opened.seek(0)
                opened.load()
                pixels, note = spec.prepare(opened, name)
    except DataError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise DataError(
            f"{name}: the image is too large to decode safely (limit {MAX_IMAGE_PIXELS:,} "
            "pixels); downscale it first."
        ) from None
    except UnidentifiedImageError:
        raise DataError(
            f"{name}: not a readable image (expected PNG, JPEG, WebP, BMP, GIF or TIFF)."
        ) from None
    except (OSError, SyntaxError, ValueError, EOFError) as error:
        raise DataError(f"{name}: the image file is corrupt or truncated ({error}).") from None
    return DecodedImage(pixels, upscaled=note is not None, animated=animated)


def decode_image(
    data: bytes, name: str = "image", spec: InputSpec = DEFAULT_SPEC
) -> tuple[torch.Tensor, str | None]:
    """``decode`` as (pixels, a note when the image was adapted beyond resizing)."""
    decoded = decode(data, name, spec)
    notes = []
    if decoded.animated:
        notes.append(f"{name}: animated image, only its first frame is used.")
    if decoded.upscaled:
        notes.append(
            f"{name}: smaller than the model's input ({spec.width}x{spec.height}); it was upscaled."
        )
    return decoded.pixels, " ".join(notes) or None
