"""gradpick: exact input gradients for the images you pick from a batch.

``gradpick.input_gradients`` is the public entry point; it is resolved lazily so that importing a
light module such as ``gradpick.errors`` does not pay for importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["GradientResult", "input_gradients"]

if TYPE_CHECKING:
    from gradpick.gradients import GradientResult, input_gradients


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gradpick import gradients

        return getattr(gradients, name)
    raise AttributeError(f"module 'gradpick' has no attribute '{name}'")
