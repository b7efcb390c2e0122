"""Evidence descriptors against their definitions on maps and images where each is known, and
the maps against Grad-CAM written out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.slices.features import (
    DESCRIPTORS,
    descriptors,
    evidence_maps,
    peak_windows,
    window_side,
)

COLUMN = {name: number for number, name in enumerate(DESCRIPTORS)}


def _one_pixel_map(row: int, column: int, size: int = 16) -> torch.Tensor:
    maps = torch.zeros(1, size, size)
    maps[0, row, column] = 1.0
    return maps


def test_a_single_pixel_map_is_fully_concentrated_and_a_flat_one_not_at_all() -> None:
    images = torch.full((2, 3, 16, 16), 0.5)
    maps = torch.cat([_one_pixel_map(4, 9), torch.ones(1, 16, 16)])
    table = descriptors(images, maps)
    assert table.shape == (2, len(DESCRIPTORS))
    assert table[0, COLUMN["concentration"]] == pytest.approx(1.0)
    assert table[1, COLUMN["concentration"]] == pytest.approx(0.0, abs=1e-12)
    assert table[0, COLUMN["peak_share"]] == pytest.approx(1.0)
    side = window_side(16, 16)
    assert table[1, COLUMN["peak_share"]] == pytest.approx(side * side / 256)
    assert table[0, COLUMN["top_size"]] == pytest.approx(1 / 256)
    assert table[1, COLUMN["top_size"]] == pytest.approx(128 / 256)
    centre = 7.5
    expected = math.hypot(4 - centre, 9 - centre) / math.hypot(centre, centre)
    assert table[0, COLUMN["peak_distance"]] == pytest.approx(expected)


def test_the_evidence_region_colour_is_read_under_the_map() -> None:
    images = torch.full((1, 3, 16, 16), 0.2)
    images[0, :, 2:6, 10:14] = torch.tensor([1.0, 0.0, 1.0]).view(3, 1, 1)  # magenta
    maps = torch.zeros(1, 16, 16)
    maps[0, 2:6, 10:14] = 1.0
    maps[0, 3, 11] = 2.0  # within the region, the largest
    table = descriptors(images, maps)[0]
    # The peak window (3 x 3 of 16 x 16) sits inside the magenta square.
    assert window_side(16, 16) == 3
    assert table[COLUMN["region_red"]] == pytest.approx(1.0)
    assert table[COLUMN["region_green"]] == pytest.approx(0.0)
    assert table[COLUMN["region_saturation"]] == pytest.approx(1.0)
    assert table[COLUMN["region_brightness"]] == pytest.approx(0.299 + 0.114)
    assert table[COLUMN["image_saturation"]] == pytest.approx(16 / 256)  # gray elsewhere


def test_a_diffuse_maps_evidence_colour_is_read_at_its_peak() -> None:
    # A magenta patch the map peaks on, in a map spread at 60% of its peak over the whole left
    # half of a grey image: the evidence's colour is the patch's, not the half's.
    images = torch.full((1, 3, 16, 16), 0.2)
    images[0, :, 6:10, 2:6] = torch.tensor([1.0, 0.0, 1.0]).view(3, 1, 1)
    maps = torch.zeros(1, 16, 16)
    maps[0, :, :8] = 0.6
    maps[0, 6:10, 2:6] = 1.0
    table = descriptors(images, maps)[0]
    side = window_side(16, 16)
    rows, columns = peak_windows(maps, side)
    top, left = int(rows[0]), int(columns[0])
    assert top >= 6 and top + side <= 10 and left >= 2 and left + side <= 6  # on the patch
    # Half the peak or more would be the whole left half: red 0.2 + 16 / 128 * 0.8 = 0.3.
    assert table[COLUMN["region_red"]] == pytest.approx(1.0)
    assert table[COLUMN["region_green"]] == pytest.approx(0.0)
    assert table[COLUMN["region_saturation"]] == pytest.approx(1.0)


def test_grayscale_images_have_no_saturation_and_flat_ones_no_texture() -> None:
    generator = torch.Generator().manual_seed(0)
    gray = torch.rand(2, 1, 8, 8, generator=generator).expand(2, 3, 8, 8).contiguous()
    flat = torch.full((1, 3, 8, 8), 0.3)
    table = descriptors(torch.cat([gray, flat]), torch.rand(3, 8, 8, generator=generator))
    assert np.allclose(table[:, COLUMN["image_saturation"]], 0)
    assert table[2, COLUMN["image_texture"]] == pytest.approx(0)
    luma = gray[0, 0].double()
    padded = torch.nn.functional.pad(luma[None, None], (1, 1, 1, 1), mode="replicate")[0, 0]
    laplacian = (
        padded[:-2, 1:-1] + padded[2:, 1:-1] + padded[1:-1, :-2] + padded[1:-1, 2:] - 4 * luma
    )
    assert table[0, COLUMN["image_texture"]] == pytest.approx(float(laplacian.abs().mean()))


def test_descriptors_do_not_move_with_the_evidence() -> None:
    """The same patch and map at two places give the same descriptors (but the distance)."""
    images = torch.full((2, 3, 24, 24), 0.4)
    maps = torch.zeros(2, 24, 24)
    for row, (top, left) in enumerate([(3, 4), (14, 15)]):
        images[row, :, top : top + 4, left : left + 4] = torch.tensor([1.0, 0.0, 1.0]).view(3, 1, 1)
        maps[row, top : top + 4, left : left + 4] = torch.tensor([[1.0, 2, 2, 1]] * 4)
    table = descriptors(images, maps)
    moving = COLUMN["peak_distance"]
    kept = [number for number in range(len(DESCRIPTORS)) if number != moving]
    assert np.allclose(table[0, kept], table[1, kept])


def test_the_peak_window_covers_a_plateau_whole() -> None:
    maps = torch.zeros(1, 12, 12)
    maps[0, 5:9, 2:6] = 1.0  # a 4 x 4 plateau: its first pixel is its corner
    rows, columns = peak_windows(maps, 6)
    top, left = int(rows[0]), int(columns[0])
    assert top <= 5 and top + 6 >= 9 and left <= 2 and left + 6 >= 6


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(InputError, match="Descriptors need"):
        descriptors(torch.zeros(2, 3, 8, 8), torch.zeros(2, 4, 4))


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3, padding=1)
        self.relu = nn.ReLU()
        self.head = nn.Linear(5, 4)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.relu(self.conv(images)).mean(dim=(2, 3)))


def test_the_maps_are_grad_cam_of_the_called_class_written_out() -> None:
    """ReLU(sum_c mean_ij(d logit / d A_c) A_c) at the ReLU's output, the same in chunks."""
    torch.manual_seed(0)
    model = _Net().eval()
    images = torch.rand(5, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    classes = torch.tensor([0, 3, 1, 1, 2])
    maps = evidence_maps(model, images, classes, layer="relu", chunk_rows=2)
    for row in range(5):
        activation = model.relu(model.conv(images[row : row + 1])).detach().requires_grad_(True)
        logit = model.head(activation.mean(dim=(2, 3)))[0, classes[row]]
        (gradient,) = torch.autograd.grad(logit, activation)
        weights = gradient.mean(dim=(2, 3), keepdim=True)
        expected = torch.relu((weights * activation).sum(dim=1))[0]
        assert torch.allclose(maps[row], expected.detach(), atol=1e-6)


def test_the_maps_need_one_class_per_image() -> None:
    with pytest.raises(InputError, match="one class per image"):
        evidence_maps(_Net().eval(), torch.rand(2, 3, 8, 8), torch.tensor([0]))
