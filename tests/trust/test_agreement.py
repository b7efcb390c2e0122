"""The occlusion note: the shown map's peak against occlusion's strongest region, by a rule
written out pixel by pixel, and occlusion taken from captum."""

from __future__ import annotations

import pytest
import torch

from gradpick import attribution
from gradpick.errors import InputError
from gradpick.gradients.request import GradientRequest
from gradpick.trust.agreement import TOLERANCE, TOP_SHARE, occlusion_agreement, peak_agreement
from tests.attribution.test_perturbation import _captum


def _by_hand(shown: torch.Tensor, occlusion: torch.Tensor, share: float, tolerance: int) -> bool:
    """One pick [C, H, W] each: the rule in loops. The shown peak is the largest |value| over
    channels; occlusion's region the share of pixels of largest |drop| (ties at the cut in,
    the map's smallest value never in it); the peak agrees when some region pixel is within
    ``tolerance`` rows and columns."""
    height, width = shown.shape[-2:]
    drawn = shown.abs().amax(dim=0).tolist()
    strength = occlusion.abs().amax(dim=0).tolist()
    peak = max(
        ((y, x) for y in range(height) for x in range(width)), key=lambda p: drawn[p[0]][p[1]]
    )
    values = sorted((v for row in strength for v in row), reverse=True)
    cut = values[max(1, round(share * height * width)) - 1]
    return any(
        cut <= strength[y][x] > values[-1]
        for y in range(max(0, peak[0] - tolerance), min(height, peak[0] + tolerance + 1))
        for x in range(max(0, peak[1] - tolerance), min(width, peak[1] + tolerance + 1))
    )


def _block(y: int, x: int, side: int = 4, size: int = 16) -> torch.Tensor:
    """A [1, 1, size, size] map of zeros with a side x side block of ones at (y, x)."""
    values = torch.zeros(1, 1, size, size)
    values[..., y : y + side, x : x + side] = 1.0
    return values


@pytest.mark.parametrize(
    ("peak", "agree"),
    [((5, 5), True), ((2, 8), True), ((1, 8), False), ((12, 12), False), ((9, 9), True)],
)
def test_the_peak_agrees_within_two_pixels_of_occlusions_region(peak, agree):
    occlusion = _block(4, 4)  # the top 10% cuts at 0, the smallest value: the block alone
    shown = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(0)) * 0.1
    shown[0, 1, peak[0], peak[1]] = -5.0  # the largest |value|, in one channel, negative
    (note,) = peak_agreement(shown, occlusion)
    assert note.agree is agree is _by_hand(shown[0], occlusion[0], TOP_SHARE, TOLERANCE)
    assert note.shown_peak == peak and note.occlusion_peak == (4, 4)
    assert ("agree:" if agree else "disagree:") in note.line("Gradient")


def test_a_constant_occlusion_map_never_agrees():
    shown = _block(0, 0)
    assert [n.agree for n in peak_agreement(shown, torch.zeros(1, 1, 16, 16))] == [False]
    assert [n.agree for n in peak_agreement(shown, torch.full((1, 1, 16, 16), 2.0))] == [False]


def test_the_share_and_tolerance_follow_the_rule_written_out():
    generator = torch.Generator().manual_seed(3)
    shown = torch.randn(24, 3, 20, 20, generator=generator, dtype=torch.float64)
    occlusion = torch.randn(24, 1, 20, 20, generator=generator, dtype=torch.float64)
    occlusion = occlusion.expand(-1, 3, -1, -1)
    seen = set()
    for share, tolerance in [(0.05, 0), (0.1, 2), (0.2, 1), (0.5, 0)]:
        notes = peak_agreement(shown, occlusion, share, tolerance)
        expected = [_by_hand(s, o, share, tolerance) for s, o in zip(shown, occlusion, strict=True)]
        assert [note.agree for note in notes] == expected
        seen.update(expected)
    assert seen == {True, False}


def test_maps_that_do_not_match_are_refused():
    with pytest.raises(InputError, match="same picks"):
        peak_agreement(torch.zeros(2, 3, 8, 8), torch.zeros(3, 3, 8, 8))
    with pytest.raises(InputError, match="height and width"):
        peak_agreement(torch.zeros(2, 3, 8, 8), torch.zeros(2, 3, 8, 9))
    with pytest.raises(InputError, match="top_share"):
        peak_agreement(torch.zeros(1, 3, 8, 8), torch.ones(1, 3, 8, 8), top_share=0)


def test_the_shown_map_is_checked_against_captums_occlusion_of_the_same_target(tiny_bn_cnn):
    images = torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    request = GradientRequest.build(tiny_bn_cnn, images, [0, 2, 3, 5], target="logit")
    for name in ("gradient", "gradcam"):
        shown = attribution.get(name)().attribute(request)
        notes = occlusion_agreement(request, shown, attribution.Occlusion(window=6, stride=2))
        occluded = _captum(tiny_bn_cnn, images[[0, 2, 3, 5]], "logit", None, 6, 2, 0.5)
        expected = [
            _by_hand(s, o, TOP_SHARE, TOLERANCE) for s, o in zip(shown.maps, occluded, strict=True)
        ]
        assert [note.agree for note in notes] == expected, name
