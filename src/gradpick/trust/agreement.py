"""Does the shown map put the evidence where occlusion does? One note per pick.

Occlusion measures what hiding each patch does to the target, so on planted causes it points
at the cause far more often than the gradient maps do (``gradpick bench-planted``). A shown map
whose peak lies outside occlusion's strongest region is suspect: the note says so per pick. The
rule, with its false-alarm and miss rates on planted errors (``docs/methods.md``): the shown
map's largest value (its saliency as drawn, the largest |value| over channels) lies within
``TOLERANCE`` pixels of the ``TOP_SHARE`` of pixels where occlusion's |drop| is largest.

Example::

    shown = attribution.get("gradient")().attribute(request)
    notes = occlusion_agreement(request, shown)          # k x (positions + 1) forwards
    [note.agree for note in notes], notes[0].line()
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gradpick.attribution import Attribution, AttributionMethod, Occlusion
from gradpick.errors import InputError
from gradpick.gradients.request import GradientRequest
from gradpick.trust.engine import saliency

__all__ = ["TOLERANCE", "TOP_SHARE", "PeakAgreement", "occlusion_agreement", "peak_agreement"]

TOP_SHARE = 0.05
"""Occlusion's strongest region: this share of the pixels, by |drop|."""
TOLERANCE = 2
"""Pixels around occlusion's region where the shown map's peak still agrees (as the pointing
game of ``gradpick bench-planted`` counts a hit)."""


@dataclass(frozen=True)
class PeakAgreement:
    """One pick: whether the shown map's peak lies in occlusion's strongest region."""

    agree: bool
    shown_peak: tuple[int, int]
    """(row, column) of the shown map's largest value."""
    occlusion_peak: tuple[int, int]
    """(row, column) of occlusion's largest |drop|."""

    def line(self, shown_label: str = "the map") -> str:
        """The note shown beside the pick."""
        (y, x), (oy, ox) = self.shown_peak, self.occlusion_peak
        if self.agree:
            return (
                f"{shown_label} and occlusion agree: its peak (row {y}, column {x}) lies in "
                "occlusion's strongest region"
            )
        return (
            f"{shown_label} and occlusion disagree: its peak (row {y}, column {x}) lies outside "
            f"occlusion's strongest region (peak at row {oy}, column {ox}): hiding what the map "
            "points at moves the target less than hiding that region"
        )


def _peak(values: torch.Tensor) -> tuple[int, int]:
    place = int(values.flatten().argmax())
    return place // values.shape[-1], place % values.shape[-1]


def peak_agreement(
    shown: torch.Tensor,
    occlusion: torch.Tensor,
    top_share: float = TOP_SHARE,
    tolerance: int = TOLERANCE,
) -> list[PeakAgreement]:
    """Per pick, for maps [k, C, H, W] of the same picks: whether ``shown``'s largest |value|
    (over channels, as drawn) lies within ``tolerance`` px of the ``top_share`` of pixels of
    largest |``occlusion``| (ties at the cut all in). A constant occlusion map (hiding nothing
    moved the target) has no region: it never agrees."""
    if shown.dim() != 4 or occlusion.dim() != 4 or shown.shape[0] != occlusion.shape[0]:
        raise InputError(
            f"Both maps must be [k, C, H, W] of the same picks; got {tuple(shown.shape)} and "
            f"{tuple(occlusion.shape)}."
        )
    if shown.shape[-2:] != occlusion.shape[-2:]:
        raise InputError("The shown map and occlusion's map must have the same height and width.")
    if not 0 < top_share <= 1:
        raise InputError(f"top_share must be in (0, 1]; got {top_share!r}.")
    drawn = saliency(shown).double().cpu()
    strength = saliency(occlusion).double().cpu()
    flat = strength.flatten(1)
    keep = max(1, round(top_share * flat.shape[1]))
    cut = flat.topk(keep, dim=1).values[:, -1:]
    region = (flat >= cut) & (flat > flat.amin(dim=1, keepdim=True))
    grown = F.max_pool2d(
        region.reshape(strength.shape).double().unsqueeze(1), 2 * tolerance + 1, 1, tolerance
    ).squeeze(1)
    notes = []
    for pick in range(len(drawn)):
        y, x = _peak(drawn[pick])
        notes.append(PeakAgreement(bool(grown[pick, y, x] > 0), (y, x), _peak(strength[pick])))
    return notes


def occlusion_agreement(
    request: GradientRequest,
    shown: Attribution,
    occlusion: AttributionMethod | None = None,
    top_share: float = TOP_SHARE,
    tolerance: int = TOLERANCE,
) -> list[PeakAgreement]:
    """``peak_agreement`` of ``shown`` (the maps of ``request``'s picks) and occlusion's maps
    of the same request, so the same target and classes (``occlusion``: default
    ``Occlusion()``, 6 x 6 windows at stride 2; its cost is ``occlusion.forwards(request)``)."""
    method = Occlusion() if occlusion is None else occlusion
    return peak_agreement(shown.maps, method.attribute(request).maps, top_share, tolerance)
