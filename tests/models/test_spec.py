"""The input spec's two resize modes against torchvision's own PIL transforms, pixel for pixel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from PIL import Image

from gradpick.errors import InputError
from gradpick.models.spec import InputSpec

SIZES = [(451, 300), (300, 451), (97, 61), (61, 97), (20, 33)]
"""(width, height): both orientations, long sides with fractions above and below a half."""


def _photo(width: int, height: int) -> Image.Image:
    pixels = np.random.default_rng(width * 1000 + height).integers(0, 256, (height, width, 3))
    return Image.fromarray(pixels.astype(np.uint8))


def _centre(image: Image.Image, height: int, width: int) -> Image.Image:
    """The centre crop anchored at floor(margin / 2), as Hugging Face's processors and gradpick
    cut it (torchvision's ``CenterCrop`` rounds an odd margin's half up instead)."""
    left, top = (image.width - width) // 2, (image.height - height) // 2
    return image.crop((left, top, left + width, top + height))


def _tensor(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)


@pytest.mark.parametrize(("width", "height"), SIZES)
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_crop_is_torchvisions_resize_and_centre_crop(
    width: int, height: int, interpolation: str
) -> None:
    spec = InputSpec(size=(40, 40), resize=46, interpolation=interpolation)
    mode = T.InterpolationMode(interpolation)
    expected = _centre(T.Resize(46, mode)(_photo(width, height)), 40, 40)
    assert torch.equal(spec.prepare(_photo(width, height))[0], _tensor(expected))


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_warp_stretches_to_the_input_size_and_keeps_no_aspect(width: int, height: int) -> None:
    spec = InputSpec(size=(40, 32), resize_mode="warp")
    expected = T.Resize((40, 32), T.InterpolationMode.BILINEAR)(_photo(width, height))
    assert torch.equal(spec.prepare(_photo(width, height))[0], _tensor(expected))


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_warp_with_a_resize_stretches_then_crops_the_centre(width: int, height: int) -> None:
    spec = InputSpec(size=(32, 32), resize=36, resize_mode="warp", interpolation="bicubic")
    transform = T.Compose([T.Resize((36, 36), T.InterpolationMode.BICUBIC), T.CenterCrop(32)])
    assert torch.equal(
        spec.prepare(_photo(width, height))[0], _tensor(transform(_photo(width, height)))
    )
    assert "stretched to 36x36, centre crop" in spec.describe()


def test_the_mode_travels_in_json_and_the_default_leaves_json_as_it_was() -> None:
    warp = InputSpec(size=(32, 32), resize_mode="warp")
    assert InputSpec.from_json(warp.to_json()) == warp
    assert "resize_mode" not in InputSpec(size=(32, 32)).to_json()
    with pytest.raises(InputError, match="Unknown resize mode 'squash'"):
        InputSpec(resize_mode="squash")


def test_a_warp_of_a_smaller_image_notes_the_upscale() -> None:
    _, note = InputSpec(size=(40, 40), resize_mode="warp").prepare(_photo(60, 30))
    assert note is not None and "upscaled" in note
    _, note = InputSpec(size=(40, 40), resize_mode="warp").prepare(_photo(60, 50))
    assert note is None
