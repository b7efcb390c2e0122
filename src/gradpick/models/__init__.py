"""Any image classifier by name, at its own input spec: the zoo, the shipped models, weights,
training.

``zoo.load_model`` is the one model loader (shipped CIFAR-10 models, ``torchvision:``, ``timm:``,
your factory); ``spec`` says what a model takes; ``shipped`` holds the two built-in
architectures and their weights; ``weights`` reads and freezes state dicts; ``training`` is the
resumable recipe that made the shipped weights.
Names resolve on first use (``gradpick._lazy``), so importing the package runs none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradpick._lazy import lazy_exports

if TYPE_CHECKING:
    from gradpick.models.shipped import model_card, shipped_models
    from gradpick.models.spec import InputSpec
    from gradpick.models.training import TrainConfig, evaluate, train
    from gradpick.models.weights import freeze
    from gradpick.models.zoo import LoadedModel, from_factory, load_model

__all__ = [
    "InputSpec",
    "LoadedModel",
    "TrainConfig",
    "evaluate",
    "freeze",
    "from_factory",
    "load_model",
    "model_card",
    "shipped_models",
    "train",
]

__getattr__, __dir__ = lazy_exports(__name__)
