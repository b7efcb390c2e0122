"""Model-parameter randomisation test: does a map change when the model's weights are random?

Adebayo et al., "Sanity Checks for Saliency Maps" (NeurIPS 2018): a map that survives the
randomisation of the weights it claims to explain says little about the model. Layers are
randomised on a deep copy, cumulatively from the output layer towards the input (``cascade``)
or one layer at a time (``independent``); after each step every method is recomputed on the
same images for the same held classes and compared with its map from the trained model by the
Spearman rank correlation of |attribution| and by SSIM (each map scaled to [0, 1] by its
maximum). The served model is never touched.

A layer method (Grad-CAM and its family, at ``MethodSettings.layer``) goes through the same
cascade over every layer, not only those above its layer: the layers above it change
d target / d activation, and those at and below it change the activation itself, so every one
of them can move its map, and every method's curve has the same steps. A ReLU'd map that
becomes all zero has no order: its Spearman correlation is NaN (null in the report).

Example::

    curves = randomisation_test(model, images, [3, 7], methods=("gradient",))
    [step.spearman.mean() for step in curves["gradient"].steps]
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.outputs.inference import call_model
from gradpick.trust.baselines import seeded_generator
from gradpick.trust.engine import (
    MethodSettings,
    attribute_maps,
    check_count,
    check_methods,
    held_classes,
    picked_images,
    scaled_saliency,
    served_view,
)
from gradpick.trust.metrics import spearman, ssim

__all__ = [
    "MODES",
    "Progress",
    "RandomisationCurve",
    "RandomisationStep",
    "check_mode",
    "randomisable_layers",
    "randomisation_test",
    "randomise_layer",
]

MODES = ("cascade", "independent")
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class RandomisationStep:
    """One step: which layers are random, and how far each pick's map moved [k]."""

    layer: str
    """The layer randomised at this step (in cascade mode, on top of all earlier ones)."""
    randomised: tuple[str, ...]
    spearman: torch.Tensor
    ssim: torch.Tensor
    maps: torch.Tensor
    """The maps [k, C, H, W] of the randomised model."""


@dataclass(frozen=True)
class RandomisationCurve:
    method: str
    mode: str
    original: torch.Tensor
    """The maps [k, C, H, W] of the trained model."""
    steps: tuple[RandomisationStep, ...]


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InputError(f"Unknown randomisation mode '{mode}'; use one of {', '.join(MODES)}.")
    return mode


def randomisable_layers(model: nn.Module, example: torch.Tensor) -> list[str]:
    """Names of the modules holding parameters of their own, in the order a forward runs them.

    The order comes from one forward of ``example`` (one image is enough) with hooks, since the
    order modules are declared in need not be the order they are used; modules the forward
    never reaches are left out.
    """
    names = {module: name for name, module in model.named_modules()}
    seen: list[str] = []

    def record(module: nn.Module, *_: object) -> None:
        name = names.get(module)
        if name is not None and name not in seen:
            seen.append(name)

    hooks = [
        module.register_forward_pre_hook(record)
        for module in model.modules()
        if any(True for _ in module.parameters(recurse=False))
    ]
    try:
        with torch.no_grad():
            call_model(model, example)
    finally:
        for hook in hooks:
            hook.remove()
    return [name or type(model).__name__ for name in seen]


def _module(model: nn.Module, name: str) -> nn.Module:
    return model if name == type(model).__name__ else model.get_submodule(name)


def randomise_layer(layer: nn.Module, seed: int, position: int) -> None:
    """Redraw each parameter of ``layer`` (in place) from N(0, rms^2) of its trained values.

    The root-mean-square keeps each tensor's scale, so activations neither vanish nor blow up
    and the maps stay comparable, while every learned pattern is gone. Drawn on the CPU from a
    generator seeded by (seed, position), so the test is repeatable on any device and never
    touches the global random state other threads use. Buffers (BatchNorm's running
    statistics) are kept: they are statistics of the data, not learned weights.
    """
    generator = seeded_generator(seed, position)
    with torch.no_grad():
        for parameter in layer.parameters(recurse=False):
            scale = float(parameter.detach().cpu().double().square().mean().sqrt())
            draw = torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
            parameter.copy_((draw * scale).to(parameter.dtype))


def randomisation_test(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    methods: Sequence[str] = ("gradient",),
    classes: int | Sequence[int] | torch.Tensor | None = None,
    settings: MethodSettings | None = None,
    mode: str = "cascade",
    layers: int | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> dict[str, RandomisationCurve]:
    """The randomisation curve of each method on ``images[indices]``.

    ``classes``: the class each pick is explained for (default: the trained model's
    prediction, held at every step). ``layers``: randomise only this many layers, counted from
    the output (default: all). ``progress(done, total)`` is called after each step.
    """
    check_mode(mode)
    methods = check_methods(methods)
    settings = settings or MethodSettings()
    served = served_view(model)
    held = held_classes(served, images, indices, classes)
    trial = copy.deepcopy(served)
    names = randomisable_layers(trial, picked_images(trial, images, indices[:1]))
    if not names:
        raise InputError(
            "The model has no layers with parameters, so there is nothing to randomise."
        )
    if layers is not None:
        check_count("The number of layers to randomise", layers, len(names))
    order = list(reversed(names))[: layers or len(names)]

    def maps_now() -> dict[str, torch.Tensor]:
        return {m: attribute_maps(trial, images, indices, m, held, settings) for m in methods}

    original = maps_now()
    scaled = {method: scaled_saliency(maps) for method, maps in original.items()}
    steps: dict[str, list[RandomisationStep]] = {method: [] for method in methods}
    for position, name in enumerate(order):
        layer = _module(trial, name)
        kept = {key: value.clone() for key, value in layer.state_dict(keep_vars=False).items()}
        randomise_layer(layer, seed, position)
        randomised = tuple(order[: position + 1]) if mode == "cascade" else (name,)
        for method, maps in maps_now().items():
            moved = scaled_saliency(maps)
            steps[method].append(
                RandomisationStep(
                    layer=name,
                    randomised=randomised,
                    spearman=spearman(scaled[method], moved),
                    ssim=ssim(scaled[method], moved),
                    maps=maps,
                )
            )
        if mode == "independent":
            layer.load_state_dict(kept)
        if progress is not None:
            progress(position + 1, len(order))
    return {
        method: RandomisationCurve(method, mode, original[method], tuple(steps[method]))
        for method in methods
    }
