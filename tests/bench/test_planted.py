"""The planted-feature benchmark's scores: the pointing game and the mass on the mark against
their definitions, and the whole scoring on models whose evidence is known by construction."""

from __future__ import annotations

import torch
from torch import nn

from gradpick.bench.planted import (
    Errors,
    mass,
    note_rates,
    note_table,
    planted_errors,
    pointing,
    score_methods,
    table,
)
from gradpick.cli import main
from gradpick.data import CIFAR10_CLASSES, ImageBatch
from gradpick.data.planted import plant


def test_the_pointing_game_allows_two_pixels_around_the_mark():
    masks = torch.zeros(4, 16, 16, dtype=torch.bool)
    masks[:, 5:8, 5:8] = True
    maps = torch.zeros(4, 3, 16, 16)
    maps[0, 1, 6, 6] = 1.0  # on the mark
    maps[1, 0, 9, 9] = -2.0  # 2 px off diagonally, and negative: |map| counts
    maps[2, 2, 5, 10] = 1.0  # 3 px off to the right
    maps[3, :, 0, 0] = 1.0  # far away
    assert pointing(maps, masks).tolist() == [True, True, False, False]


def test_the_mass_is_the_share_of_absolute_value_inside():
    masks = torch.zeros(1, 4, 4, dtype=torch.bool)
    masks[0, :2, :2] = True
    maps = torch.zeros(1, 3, 4, 4)
    maps[0, 0, 0, 0] = 3.0
    maps[0, 1, 3, 3] = -1.0
    assert float(mass(maps, masks)[0]) == 0.75


class _Reader(nn.Module):
    """Logit 6 = 10 x the summed ReLU(R - G + B - 1.5): only magenta pixels count (the patch's
    border); every other logit is 0. Or, ``aside``: logit 6 reads the top-left 8 x 8 corner."""

    def __init__(self, aside: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 1, 1)
        self.aside = aside
        with torch.no_grad():
            self.conv.weight.copy_(torch.tensor([1.0, -1.0, 1.0]).view(1, 3, 1, 1))
            self.conv.bias.fill_(-1.5 if not aside else 0.0)
        self.conv.requires_grad_(False)
        self.eval()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        evidence = torch.relu(self.conv(images))
        if self.aside:
            evidence = evidence[..., :8, :8]
        logits = torch.zeros(images.shape[0], 10, dtype=images.dtype)
        return logits.index_add(1, torch.tensor([6]), 10 * evidence.sum(dim=(1, 2, 3))[:, None])


def test_methods_find_the_mark_a_model_reads_and_not_one_it_ignores():
    pixels = 0.3 + 0.4 * torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    marked = plant(pixels, "patch", seed=0, positions=range(6))
    # Keep only marks away from the ignoring model's corner.
    away = ~marked.masks[:, :10, :10].flatten(1).any(dim=1)
    errors = Errors(
        marked.images[away],
        marked.masks[away],
        ("patch",) * int(away.sum()),
        torch.full((int(away.sum()),), 6),
        {"patch": (1.0, 0.0)},
    )
    names = ("gradient", "occlusion 4x4", "rise")
    scores = score_methods(_Reader(False), _Reader(True), errors, names, log=lambda _: None)
    for score in scores:
        assert score.hits == score.count == int(away.sum()), score
        assert score.control_hits == 0, score
        assert score.mass > score.control_mass
    lines = table(scores, errors)
    assert lines[0].startswith("| method | pointing (planted) | pointing (clean)")
    assert len(lines) == 2 + len(names)


def test_planted_errors_are_the_marked_images_the_model_calls_the_mark_s_class():
    pixels = 0.3 + 0.4 * torch.rand(12, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 6])
    batch = ImageBatch(
        images=(pixels * 255).round().to(torch.uint8),
        labels=labels,
        class_names=CIFAR10_CLASSES,
        names=tuple(f"{i}.png" for i in range(12)),
        positions=tuple(range(100, 112)),
        source="generated",
    )
    # The reader calls class 6 only for magenta pixels: of the four marks, the patch alone.
    errors = planted_errors(_Reader(False), batch, most=64, seed=0)
    assert errors.features == ("patch",) * 10  # the ten images not of class 6
    assert errors.called.tolist() == [6] * 10
    assert errors.rates["patch"] == (1.0, 0.0) and errors.rates["stripe"] == (0.0, 0.0)
    expected = plant(
        batch.float_images()[labels != 6],
        "patch",
        0,
        [100 + i for i in range(12) if labels[i] != 6],
    )
    assert torch.equal(errors.masks, expected.masks)
    torch.testing.assert_close(errors.images, expected.images)
    assert len(planted_errors(_Reader(False), batch, most=4, seed=0).images) == 4


def test_the_command_names_the_known_methods(capsys):
    status = main(["bench-planted", "--methods", "lime"])
    err = capsys.readouterr().err
    assert status == 2 and "Unknown method 'lime'; use one of gradient" in err


def test_no_planted_errors_is_an_empty_set():
    batch = ImageBatch(
        images=torch.full((3, 3, 32, 32), 100, dtype=torch.uint8),
        labels=torch.tensor([0, 1, 2]),
        class_names=CIFAR10_CLASSES,
        names=("a", "b", "c"),
        positions=(0, 1, 2),
        source="generated",
    )
    errors = planted_errors(_Reader(True), batch)  # reads only a corner: no mark flips it
    assert errors.images.shape == (0, 3, 32, 32) and errors.features == ()


def _spot(y: int, x: int, side: int = 1) -> torch.Tensor:
    """A [3, 32, 32] map of zeros with a side x side square of 5s at (y, x)."""
    values = torch.zeros(3, 32, 32)
    values[:, y : y + side, x : x + side] = 5.0
    return values


def test_the_note_fires_on_shown_maps_that_miss_the_mark_and_counts_its_false_alarms():
    # Six errors, each with a 4 x 4 mark at (20, 20). The shown map hits it on the first
    # three and peaks at (2, 2) on the others; occlusion finds the mark except on the third
    # error, where its region is at (2, 2): a hit the note wrongly flags, and on the sixth
    # error a miss it does not.
    masks = torch.zeros(6, 32, 32, dtype=torch.bool)
    masks[:, 20:24, 20:24] = True
    errors = Errors(torch.zeros(6, 3, 32, 32), masks, ("patch",) * 6, torch.full((6,), 6), {})
    shown = torch.stack([_spot(21, 21)] * 3 + [_spot(2, 2)] * 3)
    occlusion = torch.stack([_spot(20, 20, 6)] * 2 + [_spot(0, 0, 6)] + [_spot(20, 20, 6)] * 2
                            + [_spot(0, 0, 6)])  # fmt: skip
    maps = {"gradient": shown, "occlusion 6x6": occlusion}
    (rates,) = note_rates(maps, errors, shares=(0.05,))
    assert (rates.shown, rates.top_share) == ("gradient", 0.05)
    assert (rates.misses, rates.fired_on_misses) == (3, 2)
    assert (rates.hits, rates.fired_on_hits) == (3, 1)
    # A method that was not run is left out; every share gives a row.
    assert [r.top_share for r in note_rates(maps, errors, ("gradcam", "gradient"))] == [
        0.05, 0.1, 0.2,
    ]  # fmt: skip
    lines = note_table([rates])
    assert lines[2] == "| gradient | top 5% | 2/3 (67%) | 1/3 (33%) |"
