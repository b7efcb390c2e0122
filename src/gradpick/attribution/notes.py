"""Why a map shows nothing, in words: every front end says it where it draws or exports a map.

An all-zero map drawn as it is looks like a black square with a scale of "0 to 1e-38"; a
constant one looks like an even wash. Neither is a finding about the image, and each has a
known cause: a class activation map keeps only what raises its target (a ReLU), so a target
nothing raises (a confident image's loss) leaves it empty; a gradient is zero where the output
is flat; and a model whose outputs are the same for every image (torchvision's ViT built
without weights, whose head is zeroed) gives zero maps everywhere. Example::

    result = attribute(model, images, [0, 1], labels=labels, method="gradcam")
    for index, note in zip([0, 1], map_notes(result, "logit[predicted]")):
        if note is not None:
            print(index, note.short, note.why)
    print(model_note(logits, "vit_b_16") or "the outputs depend on the images")
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gradpick.attribution.base import Attribution

__all__ = ["MapNote", "grouped_notes", "map_notes", "model_note", "note_texts"]


@dataclass(frozen=True)
class MapNote:
    """What is wrong with one map: ``short`` for a caption, ``why`` the sentence behind it."""

    short: str
    why: str

    @property
    def text(self) -> str:
        """The caption and the sentence together, e.g. for a JSON ``notes`` entry."""
        return f"{self.short}: {self.why}"


def _empty_layer_map(target: str, quantity: str, layer: str | None) -> str:
    where = f"layer {layer}" if layer else "the layer"
    if target == "loss":
        return (
            f"nothing at {where} raises this image's loss, and a class activation map keeps "
            "only what raises its target (a ReLU); a confidently right image has almost "
            "nothing that would raise its loss. Explain the class's logit (target logit, the "
            "layer methods' default) to see its evidence."
        )
    return (
        f"no part of {where}, weighted by its gradient, raises {quantity} on this image, and "
        "a class activation map keeps only what raises its target (a ReLU). Try another "
        "layer or class."
    )


def map_notes(result: Attribution, quantity: str) -> list[MapNote | None]:
    """One entry per map of ``result``: None for a map that varies, else why it is all zero
    or constant. ``quantity`` is the explained quantity in words (``export.quantity``)."""
    maps = result.maps.detach()
    flat = maps.flatten(1)
    target = result.gradients.target
    is_layer = result.layer_maps is not None
    notes: list[MapNote | None] = []
    step = result.gradients.gradients.detach()
    for position, row in enumerate(flat):
        low, high = float(row.min()), float(row.max())
        if not bool(torch.isfinite(row).all()):
            why = f"the map holds NaN or infinite values: {quantity} or its gradient overflows"
            notes.append(MapNote("not finite", why + " for this image."))
        elif low == high == 0.0:
            where = f"layer {result.layer}'s activation" if is_layer else "any pixel"
            why = (
                _empty_layer_map(target, quantity, result.layer)
                if is_layer and bool(step[position].any())
                else f"{quantity} does not change with {where} on this image (its gradient "
                "is zero): the model's output is flat here (saturated, or not depending on "
                "the input)."
            )
            notes.append(MapNote("all zero", why))
        elif low == high:
            why = "every pixel has the same value, so the map singles out no place in the image"
            if is_layer:
                why += " (a layer whose grid is 1x1 gives such maps by nature)"
            notes.append(MapNote(f"constant {low:.3g}", why + "."))
        else:
            notes.append(None)
    return notes


def note_texts(result: Attribution, quantity: str) -> list[str | None]:
    """``map_notes`` as plain sentences (None where the map varies), for JSON and reports."""
    return [None if note is None else note.text for note in map_notes(result, quantity)]


def grouped_notes(notes: Sequence[MapNote | None], names: Sequence[str]) -> list[str]:
    """One line per distinct note, naming the maps it is about, e.g. 'images 3, 7: all zero:
    ...': ``names`` says each map's image (its index or title)."""
    by_text: dict[str, list[str]] = {}
    for note, name in zip(notes, names, strict=True):
        if note is not None:
            by_text.setdefault(note.text, []).append(name)
    return [
        f"{'image' if len(which) == 1 else 'images'} {', '.join(which)}: {text}"
        for text, which in by_text.items()
    ]


def model_note(logits: torch.Tensor, model: str) -> str | None:
    """A sentence when ``model``'s outputs do not depend on its input (the same logits for
    every image of ``logits`` [N, classes], or all zero), else None: every map of such a model
    is zero, which is the model's doing, not the images'."""
    values = logits.detach()
    if values.ndim != 2 or values.numel() == 0 or not bool(torch.isfinite(values).all()):
        return None
    zero = not bool(values.any())
    same = values.shape[0] > 1 and bool((values == values[:1]).all())
    if not (zero or same):
        return None
    what = "all zero" if zero else "the same for every image"
    return (
        f"{model}'s outputs are {what}: they do not depend on the input, so every gradient "
        "and map of it is zero or meaningless. A torchvision model built without its trained "
        "weights has a zeroed classification head (vit_b_16 among others): load its weights, "
        "or check the model's last layer."
    )
