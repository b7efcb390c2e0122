"""What every attribution method is: its settings, its result, and the one call.

A method declares its label, its parameters (default, lower bound, the explorer's range, help)
and the unit of its maps; ``gradpick.attribution.METHODS`` lists them by name.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from gradpick.errors import InputError
from gradpick.gradients.engine import GradientResult
from gradpick.gradients.request import GradientRequest
from gradpick.show.notebook import attribution_html

__all__ = ["Attribution", "AttributionMethod", "Parameter", "Settings"]

Settings = dict[str, float | int]


@dataclass(frozen=True)
class Parameter:
    """One setting of a method: what it is called, its default, and which values it takes."""

    name: str
    label: str
    default: float | int
    help: str
    whole: bool = False
    """A whole number (an int) rather than any finite number."""
    least: float | None = None
    """The smallest value accepted (None: any)."""
    shown: tuple[float, float] | None = None
    """The explorer's slider range; None keeps the setting at its default there."""
    switch: bool = False
    """An on/off setting: 1 or 0 (True or False), a toggle in the explorer."""

    def check(self, value: object) -> float | int:
        """``value`` as the method uses it, or an InputError saying what is wrong with it."""
        if self.switch:
            if not isinstance(value, bool | int | np.integer) or value not in (0, 1):
                raise InputError(f"{self.name} is on (1) or off (0); got {value!r}.")
            return int(value)
        if self.whole:
            least = int(self.least or 0)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least:
                raise InputError(
                    f"{self.name} must be a whole number of at least {least}; got {value!r}."
                )
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise InputError(f"{self.name} must be a number; got {value!r}.")
        number = float(value)
        if not math.isfinite(number) or (self.least is not None and number < self.least):
            bound = f" of at least {self.least}" if self.least is not None else ""
            raise InputError(f"{self.name} must be a finite number{bound}; got {value!r}.")
        return number


@dataclass(frozen=True)
class Attribution:
    """Attribution maps [k, C, H, W] of the picked images, and how they were made.

    Input-gradient methods give signed maps per channel. Layer methods (class activation maps)
    give one non-negative map per image at the input size, the same in every channel, and
    keep it at the layer's own grid in ``layer_maps`` [k, h, w] with the ``layer``'s name.
    """

    maps: torch.Tensor
    method: str
    gradients: GradientResult
    milliseconds: float
    settings: Settings
    stacked: GradientResult | None = None
    """The one engine call over all noisy copies or path points (None for gradient views)."""
    layer_maps: torch.Tensor | None = None
    """A layer method's maps at the layer's grid, before upsampling [k, h, w]; else None."""
    layer: str | None = None
    """The layer's dotted name in the user's model (``named_modules()``); else None."""

    def _repr_html_(self) -> str:
        """Jupyter shows one map per pick and the method's readouts (``gradpick.show.notebook``)."""
        return attribution_html(self)


class AttributionMethod(ABC):
    """A way to turn the engine's gradients into attribution maps.

    Subclasses set ``name``, ``label``, ``unit`` (with ``{quantity}`` for the differentiated
    quantity, e.g. 'loss') and ``parameters``, and implement ``attribute``. Instances hold
    validated settings; ``attribute(request)`` is the one call.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    unit: ClassVar[str]
    parameters: ClassVar[tuple[Parameter, ...]] = ()
    takes_layer: ClassVar[bool] = False
    """Whether the method works at a layer (``layer=`` in its constructor)."""
    default_target: ClassVar[str] = "loss"
    """What the method explains when no target is given (see ``attribution.default_target``):
    the loss for input-gradient methods, whose signed maps show what would lower or raise it."""

    def __init__(self, **settings: object) -> None:
        known = {parameter.name for parameter in self.parameters}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise InputError(
                f"{self.label} takes no setting '{unknown[0]}'; "
                f"its settings: {', '.join(sorted(known)) or 'none'}."
            )
        self.settings: Settings = {
            parameter.name: parameter.check(settings.get(parameter.name, parameter.default))
            for parameter in self.parameters
        }

    @abstractmethod
    def attribute(self, request: GradientRequest) -> Attribution:
        """Maps of ``request``'s picked images; ``milliseconds`` is the whole method's wall
        time, device synchronised. Maps come back in the images' dtype on their device."""
