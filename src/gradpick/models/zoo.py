"""Any image classifier by name, served with the input spec it was trained for.

``load_model`` resolves one name into a ``LoadedModel``: the frozen ``eval()`` module, its
``InputSpec`` (size, resize, mean/std, class names) and an identity for provenance. Names:

- ``resnet20``, ``tutorial``: the built-in CIFAR-10 models (shipped weights, or a file), 32x32;
- ``torchvision:NAME``: any torchvision classification model, random weights (seed 0) or a
  weights file; its size, resize and normalisation are those of its first weights enum's recipe;
- ``torchvision:NAME:WEIGHTS``: a weights enum such as ``IMAGENET1K_V1``, its file read from the
  torch hub cache (``$TORCH_HOME/hub/checkpoints``) or downloaded there, spec and class names
  from the weights' metadata;
- ``timm:NAME``: a timm model (``pip install 'gradpick[timm]'``), never pretrained-downloaded:
  random weights or a file, spec from ``timm.data.resolve_data_config``;
- ``hf:PATH_OR_NAME``: a Hugging Face transformers classifier (``pip install 'gradpick[hf]'``),
  a ``save_pretrained`` folder or a Hub name from the local cache, spec from its image
  processor (``gradpick.models.hf``);
- ``package.module:factory``: the user's own callable returning an ``nn.Module``.

Normalisation runs inside the served module (``Normalized``), so gradients are with respect
to pixels in [0, 1] at the model's own input size. Example::

    loaded = load_model("torchvision:resnet18:IMAGENET1K_V1")
    pixels, note = loaded.spec.prepare(Image.open("cat.jpg"))  # uint8 [3, 224, 224]
    logits = loaded.module(pixels[None] / 255.0)
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import json
import math
import os
import re
import urllib.error
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict, Unpack
from urllib.parse import urlparse

import torch
from torch import nn

from gradpick.data import CIFAR10_CLASSES
from gradpick.errors import InputError, ModelError
from gradpick.models import hf
from gradpick.models import shipped as models
from gradpick.models import weights as weights_io
from gradpick.models.spec import INTERPOLATIONS, InputSpec
from gradpick.runtime.devices import resolve_device

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "LoadedModel",
    "Normalized",
    "OUTPUT_KINDS",
    "RANDOM_WEIGHTS_SEED",
    "SpecOverrides",
    "from_factory",
    "given_overrides",
    "load_model",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGENET_SPEC = InputSpec(size=(224, 224), resize=256, mean=IMAGENET_MEAN, std=IMAGENET_STD)
"""The usual ImageNet evaluation recipe, for a torchvision model without a weights enum."""
OUTPUT_KINDS = ("softmax", "sigmoid")
"""How a classifier's logits become scores: exclusive classes, or independent labels
(multi-label: each label's own sigmoid)."""
RANDOM_WEIGHTS_SEED = 0
"""Seed of a model served without weights (torchvision, timm, a built-in's stand-in): the same
network every run."""
WeightsSource = str | Path | bytes


class SpecOverrides(TypedDict, total=False):
    """Spec values the user sets on top of what the model's metadata says.

    ``input_size`` without ``resize`` resets the resize to the input height (no margin crop).
    """

    input_size: str | int | tuple[int, int]
    resize: int
    mean: Sequence[float]
    std: Sequence[float]
    class_names: Sequence[str]
    resize_mode: str
    output: str


def given_overrides(
    input_size: str | int | tuple[int, int] | None = None,
    resize: int | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    class_names: Sequence[str] | None = None,
    resize_mode: str | None = None,
    output: str | None = None,
) -> SpecOverrides:
    """Only the spec values that were given (a flag left out, an empty field): the command line
    and the explorer collect them the same way."""
    overrides: SpecOverrides = {}
    if input_size:
        overrides["input_size"] = input_size
    if resize is not None:
        overrides["resize"] = resize
    if mean is not None:
        overrides["mean"] = mean
    if std is not None:
        overrides["std"] = std
    if class_names:
        overrides["class_names"] = class_names
    if resize_mode:
        overrides["resize_mode"] = resize_mode
    if output:
        overrides["output"] = output
    return overrides


class Normalized(nn.Module):
    """``model`` behind ``(x - mean) / std``: the served module takes pixels in [0, 1].

    The gradient a user sees is then d target / d pixel, chained through the standardisation
    (a per-channel factor 1 / std), not with respect to the standardised tensor.
    """

    def __init__(self, model: nn.Module, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        self.normalize = models.Normalize(tuple(mean), tuple(std))
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(self.normalize(images))


@dataclass(frozen=True)
class LoadedModel:
    """A served classifier: frozen module, the spec of its inputs, and where it came from."""

    module: nn.Module
    spec: InputSpec
    name: str
    kind: str
    """'built-in', 'torchvision', 'timm', 'hf' or 'factory'."""
    classes: int
    """Outputs per image, from one probe forward at load time."""
    weights: str | None = None
    """The weights file read (a path, 'upload' for bytes); None for random weights or a
    factory's own."""
    weights_sha256: str | None = None
    weights_origin: str = ""
    """How the weights were found, for ``describe``: 'shipped weights', 'the torch hub cache'."""
    card: dict[str, Any] | None = field(default=None, compare=False)
    """The shipped model card of a built-in model; None for any other weights."""
    output: str = "softmax"
    """'softmax' (exclusive classes) or 'sigmoid' (independent labels, multi-label)."""

    def describe(self) -> str:
        """One line: the name, whose weights, and the input spec."""
        if self.card is not None and self.card.get("test_accuracy") is not None:
            weights = f"{self.weights_origin}; card: {self.card['test_accuracy']:.2%} test accuracy"
        elif self.weights_origin or self.weights is not None:
            weights = self.weights_origin or f"weights {self.weights}"
        else:
            weights = f"random weights, seed {RANDOM_WEIGHTS_SEED}, untrained"
        labels = "; independent labels (sigmoid)" if self.output == "sigmoid" else ""
        return f"{self.name} ({weights}); input {self.spec.describe()}{labels}"

    @property
    def store_identity(self) -> str:
        """What decides whether stored outputs are this model's: name, weights, input spec.

        Random weights are seeded, so they are named by their seed; a factory's own weights
        by its name alone. A sigmoid model's identity says so: its stored probabilities are
        not the same model's softmax ones.
        """
        weights = self.weights_sha256 or (
            "own-weights" if self.kind == "factory" else f"random-seed{RANDOM_WEIGHTS_SEED}"
        )
        spec = json.dumps(self.spec.to_json(), sort_keys=True).encode()
        output = "" if self.output == "softmax" else f":{self.output}"
        return f"{self.name}:{weights}:{hashlib.sha256(spec).hexdigest()[:12]}{output}"

    def identity(self) -> dict[str, Any]:
        """Plain JSON naming the exact model: sidecars and stored outputs carry it."""
        return {
            "identity": self.store_identity,
            "name": self.name,
            "kind": self.kind,
            "weights": self.weights,
            "weights_sha256": self.weights_sha256,
            "card_sha256": None if self.card is None else self.card.get("sha256"),
            "card_test_accuracy": None if self.card is None else self.card.get("test_accuracy"),
            "trained_on": None if self.card is None else self.card.get("trained_on"),
            "classes": self.classes,
            "input_spec": self.spec.to_json(),
            **({"output": self.output} if self.output != "softmax" else {}),
        }

    def check_images(self, images: torch.Tensor) -> None:
        """Refuse a batch that is not [N, 3, H, W] at this model's input size."""
        if images.dim() != 4 or images.shape[1] != 3:
            raise InputError(f"Images must be [N, 3, H, W]; got {list(images.shape)}.")
        if tuple(images.shape[-2:]) != self.spec.size:
            height, width = images.shape[-2:]
            raise InputError(
                f"The images are {height}x{width} pixels but {self.name} takes "
                f"{self.spec.height}x{self.spec.width}; prepare them with its input spec."
            )


@dataclass(frozen=True)
class _Built:
    """What a resolver hands back before overrides, wrapping and the probe."""

    module: nn.Module
    spec: InputSpec
    weights: str | None
    weights_sha256: str | None
    weights_origin: str = ""
    card: dict[str, Any] | None = None
    normalizes_inside: bool = False
    """The module standardises its input itself (the built-ins): no mean/std may be added."""
    output: str = "softmax"


def _weights_label(weights: WeightsSource) -> str:
    return "upload" if isinstance(weights, bytes) else str(weights)


def _sha256(weights: WeightsSource) -> str:
    if isinstance(weights, bytes):
        return weights_io.sha256_bytes(weights)
    return weights_io.sha256_file(weights)


def _close_matches(kind: str, name: str, known: Sequence[str]) -> ModelError:
    near = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
    hint = f" Close matches: {', '.join(near)}." if near else ""
    return ModelError(f"Unknown {kind} model '{name}'.{hint}")


def _seeded(build: Callable[[], nn.Module]) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RANDOM_WEIGHTS_SEED)
        return build()


def _final_layer_outputs(module: nn.Module, state: dict[str, torch.Tensor]) -> int | None:
    """Outputs of the classifier in ``state`` when they differ from ``module``'s (fine-tuned)."""
    layers = [
        (name, layer)
        for name, layer in module.named_modules()
        if isinstance(layer, nn.Linear | nn.Conv2d)
    ]
    if not layers:
        return None
    name, layer = layers[-1]
    saved = state.get(f"{name}.weight")
    if saved is None or saved.shape[0] == layer.weight.shape[0]:
        return None
    return int(saved.shape[0])


StateAdapter = Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]


def _with_weights(
    build: Callable[[int | None], nn.Module],
    label: str,
    weights: WeightsSource | None,
    class_names: Sequence[str],
    adapt: StateAdapter | None = None,
) -> tuple[nn.Module, str | None, str | None]:
    """Build (for ``len(class_names)`` outputs when given) and load ``weights`` when given.

    A weights file whose last layer has another number of outputs (a fine-tuned copy) rebuilds
    the model with that many, so the user need not say it twice.
    """
    num_classes = len(class_names) or None
    module = _seeded(lambda: build(num_classes))
    if weights is None:
        return module, None, None
    state = weights_io.read_state_dict(weights)
    if adapt is not None:
        state = adapt(state)
    outputs = _final_layer_outputs(module, state)
    if outputs is not None and num_classes is None:
        module = build(outputs)
    weights_io.apply_state_dict(module, state, label)
    return module, _weights_label(weights), _sha256(weights)


# ----------------------------------------------------------------------------- built-ins


def _built_in(
    name: str, weights: WeightsSource | None, class_names: Sequence[str], stand_in: bool = False
) -> _Built:
    spec = InputSpec(size=(32, 32), class_names=tuple(class_names) or CIFAR10_CLASSES)
    if weights is not None:
        module = models.load(name, weights, device="cpu")
        label, digest = _weights_label(weights), _sha256(weights)
        return _Built(module, spec, label, digest, normalizes_inside=True)
    if stand_in:
        module = weights_io.freeze(_seeded(lambda: models.build(name)))
        return _Built(module, spec, None, None, normalizes_inside=True)
    path = models.shipped_weights_path(name)
    return _Built(
        models.load(name, device="cpu"),
        spec,
        # Named within the package, never by the server's own path: identities travel in
        # exports, reports and links, also from the hosted demo.
        f"gradpick/assets/{path.name}",
        weights_io.sha256_file(path),
        weights_origin="shipped weights",
        card=models.model_card(name),
        normalizes_inside=True,
    )


# ----------------------------------------------------------------------------- torchvision


def _torchvision_names() -> list[str]:
    import torchvision.models

    return sorted(torchvision.models.list_models(module=torchvision.models))


def _spec_from_transforms(weights: Any, with_classes: bool) -> InputSpec:
    """The spec of a torchvision weights enum: its eval transform and its categories."""
    transform = weights.transforms()
    crop = list(transform.crop_size)
    resize = list(transform.resize_size)
    interpolation = getattr(transform.interpolation, "value", str(transform.interpolation))
    return InputSpec(
        size=(crop[0], crop[-1]),
        resize=resize[0],
        mean=tuple(transform.mean),
        std=tuple(transform.std),
        interpolation=interpolation if interpolation in INTERPOLATIONS else "bilinear",
        class_names=tuple(weights.meta.get("categories", ())) if with_classes else (),
    )


_DENSENET_LEGACY_KEY = re.compile(
    r"^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|running_mean|running_var))$"
)
"""torchvision's published DenseNet files name layers 'norm.1' where the modules say 'norm1'."""


def _torchvision_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename the legacy keys torchvision itself renames when it loads its DenseNet weights."""
    renamed = {}
    for key, value in state.items():
        legacy = _DENSENET_LEGACY_KEY.match(key)
        renamed[legacy.group(1) + legacy.group(2) if legacy else key] = value
    return renamed


def _hub_checkpoints() -> Path:
    """Where torch keeps downloaded weights: ``$TORCH_HOME/hub/checkpoints``."""
    return Path(torch.hub.get_dir()) / "checkpoints"


def _hub_file(weights: Any) -> Path:
    """The weights enum's file in the hub cache, downloaded there first when absent."""
    url = str(weights.url)
    target = _hub_checkpoints() / os.path.basename(urlparse(url).path)
    if target.is_file():
        return target
    found = torch.hub.HASH_REGEX.search(target.name)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        torch.hub.download_url_to_file(url, str(target), found.group(1) if found else None)
    except (urllib.error.URLError, OSError, RuntimeError) as error:
        reason = getattr(error, "reason", None) or error
        raise ModelError(
            f"Could not download the weights {weights} from {url} ({reason}). Without "
            f"internet, copy the file {target.name} into {target.parent} (the torch hub cache, "
            "$TORCH_HOME/hub/checkpoints) and try again."
        ) from None
    return target


def _enum_build_options(architecture: str, weights: Any) -> dict[str, Any]:
    """The builder arguments torchvision itself sets when it loads ``weights`` (its builders
    do this before reading the file, which they read without ``weights_only``)."""
    options: dict[str, Any] = {}
    if architecture in ("googlenet", "inception_v3"):
        # their published weights expect the input re-standardised inside the network
        options.update(transform_input=True, aux_logits=True, init_weights=False)
    elif architecture.startswith("vit_"):
        options["image_size"] = weights.meta["min_size"][0]
    elif architecture == "maxvit_t":
        options["input_size"] = weights.meta["min_size"]
    return options


def _torchvision(name: str, weights: WeightsSource | None, class_names: Sequence[str]) -> _Built:
    import torchvision.models

    architecture, _, enum_name = name.partition(":")
    known = _torchvision_names()
    if architecture not in known:
        raise _close_matches("torchvision classification", architecture, known)
    enums = torchvision.models.get_model_weights(architecture)
    label = f"torchvision:{architecture}"

    def build(num_classes: int | None, **options: Any) -> nn.Module:
        if num_classes is not None:
            options["num_classes"] = num_classes
        return torchvision.models.get_model(architecture, weights=None, **options)

    if not enum_name:
        recipe = next(iter(enums), None)
        spec = IMAGENET_SPEC if recipe is None else _spec_from_transforms(recipe, False)
        module, path, digest = _with_weights(build, label, weights, class_names, _torchvision_keys)
        return _Built(module, spec, path, digest, "" if path is None else f"weights {path}")
    if weights is not None:
        raise InputError(
            f"torchvision:{name} names its weights already; drop the weights file, or the "
            f"':{enum_name}' to use the file."
        )
    try:
        chosen = enums[enum_name]
    except KeyError:
        choices = ", ".join(["DEFAULT", *(member.name for member in enums)])
        raise ModelError(
            f"{architecture} has no weights '{enum_name}'; choose one of {choices}."
        ) from None
    cached = _hub_file(chosen)
    options = _enum_build_options(architecture, chosen)
    categories = chosen.meta["categories"]
    module, _, digest = _with_weights(
        lambda classes: build(classes, **options), label, cached, categories, _torchvision_keys
    )
    spec = _spec_from_transforms(chosen, True)
    return _Built(module, spec, str(cached), digest, f"{chosen.name} from the torch hub cache")


# ----------------------------------------------------------------------------- timm


def _timm(name: str, weights: WeightsSource | None, class_names: Sequence[str]) -> _Built:
    try:
        timm = importlib.import_module("timm")
        timm_data = importlib.import_module("timm.data")
    except ImportError:
        raise ModelError(
            f"timm:{name} needs the timm package: pip install 'gradpick[timm]'."
        ) from None
    if not timm.is_model(name):
        raise _close_matches("timm", name, timm.list_models())

    def build(num_classes: int | None) -> nn.Module:
        options = {} if num_classes is None else {"num_classes": num_classes}
        module: nn.Module = timm.create_model(name, pretrained=False, **options)
        return module

    module, path, digest = _with_weights(build, f"timm:{name}", weights, class_names)
    config = timm_data.resolve_data_config({}, model=module)
    channels, height, width = config["input_size"]
    if channels != 3:
        raise ModelError(f"timm:{name} takes {channels}-channel images; gradpick serves RGB.")
    interpolation = str(config.get("interpolation", "bilinear"))
    spec = InputSpec(
        size=(height, width),
        resize=math.floor(height / float(config.get("crop_pct", 1.0))),
        mean=tuple(config["mean"]),
        std=tuple(config["std"]),
        interpolation=interpolation if interpolation in INTERPOLATIONS else "bilinear",
    )
    return _Built(module, spec, path, digest, "" if path is None else f"weights {path}")


# ----------------------------------------------------------------------------- Hugging Face


def _hf(name: str, weights: WeightsSource | None, class_names: Sequence[str]) -> _Built:
    if weights is not None:
        raise InputError(f"hf:{name} reads its weights from its own folder; drop the weights file.")
    found = hf.load(name, tuple(class_names))
    return _Built(
        found.module,
        found.spec,
        found.weights,
        found.weights_sha256,
        found.origin,
        output=found.output,
    )


# ----------------------------------------------------------------------------- factories


def from_factory(
    spec: str,
    weights: WeightsSource | None = None,
    device: str | torch.device | None = None,
) -> nn.Module:
    """A user's own model from ``package.module:factory`` (a callable returning an nn.Module).

    The factory's code runs with the user's rights, so only local, non-hosted runs offer this.
    Weights, when given, are read with ``weights_only=True`` like every other weights file.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ModelError(f"'{spec}' is not of the form package.module:factory.")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ModelError(
            f"Cannot import '{spec}': {error}. Is its package on PYTHONPATH?"
        ) from None
    try:
        model = factory()
    except Exception as error:  # the user's code: report whatever it raised, in one line
        raise ModelError(f"'{spec}' raised {type(error).__name__}: {error}") from None
    if not isinstance(model, nn.Module):
        raise ModelError(f"'{spec}' returned {type(model).__name__}, not a torch.nn.Module.")
    if weights is not None:
        weights_io.apply_state_dict(model, weights_io.read_state_dict(weights), spec)
    return weights_io.freeze(model).to(resolve_device(device))


def _factory(name: str, weights: WeightsSource | None, class_names: Sequence[str]) -> _Built:
    module = from_factory(name, weights, "cpu")
    spec = InputSpec(size=(32, 32), class_names=tuple(class_names))
    if weights is None:
        return _Built(module, spec, None, None, "its own weights")
    return _Built(module, spec, _weights_label(weights), _sha256(weights), "")


# ----------------------------------------------------------------------------- the resolver


def _kind(name: str) -> str:
    if name in models.ARCHITECTURES:
        return "built-in"
    prefix, _, rest = name.partition(":")
    if prefix and rest:
        return prefix if prefix in ("torchvision", "timm", "hf") else "factory"
    raise ModelError(
        f"Unknown model '{name}'; use {', '.join(models.ARCHITECTURES)}, torchvision:NAME"
        "[:WEIGHTS], timm:NAME, hf:PATH_OR_NAME or package.module:factory."
    )


def _override(built: _Built, name: str, overrides: SpecOverrides) -> InputSpec:
    spec = built.spec
    changes: dict[str, Any] = {}
    if "input_size" in overrides:
        changes["size"] = overrides["input_size"]
        changes["resize"] = None
    if "resize" in overrides:
        changes["resize"] = int(overrides["resize"])
    for key in ("mean", "std"):
        if key in overrides:
            if built.normalizes_inside:
                raise InputError(
                    f"{name} standardises its input itself; a --{key} would apply twice."
                )
            changes[key] = tuple(overrides[key])
    if overrides.get("class_names"):
        changes["class_names"] = tuple(overrides["class_names"])
    if "resize_mode" in overrides:
        changes["resize_mode"] = overrides["resize_mode"]
    return replace(spec, **changes) if changes else spec


def _probe(module: nn.Module, spec: InputSpec, name: str, device: torch.device) -> int:
    """Outputs per image, from one forward of a zero image; a clear error when it cannot run."""
    parameter = next(module.parameters(), None)
    dtype = parameter.dtype if parameter is not None else torch.float32
    image = torch.zeros(1, 3, spec.height, spec.width, dtype=dtype, device=device)
    try:
        with torch.inference_mode():
            logits = module(image)
    except Exception as error:  # the model's own code: whatever it raised, in one line
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ModelError(
            f"{name} cannot take 3-channel {spec.height}x{spec.width} images "
            f"({type(error).__name__}: {detail}). Check its input channels and --input-size."
        ) from None
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.shape[0] != 1:
        shape = list(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ModelError(
            f"{name} returns {shape} for one image; gradpick needs logits of shape [1, classes]."
        )
    classes = int(logits.shape[1])
    if spec.class_names and classes != len(spec.class_names):
        raise ModelError(
            f"{name} predicts {classes} classes but {len(spec.class_names)} class names are "
            "given; give one name per output."
        )
    return classes


RESOLVERS: dict[str, Callable[[str, WeightsSource | None, Sequence[str]], _Built]] = {
    "built-in": _built_in,
    "torchvision": _torchvision,
    "timm": _timm,
    "hf": _hf,
    "factory": _factory,
}
"""One resolver per kind of model name; each returns the module frozen and unwrapped."""


def load_model(
    name: str,
    weights: WeightsSource | None = None,
    device: str | torch.device | None = None,
    *,
    stand_in: bool = False,
    **overrides: Unpack[SpecOverrides],
) -> LoadedModel:
    """The classifier ``name`` ready to serve: frozen, normalising inside, probed once.

    ``weights`` is a state_dict file (``.pt``/``.pth`` read with ``weights_only=True``, or
    ``.safetensors``) or its bytes. ``overrides`` (``SpecOverrides``: ``input_size``,
    ``resize``, ``mean``, ``std``, ``class_names``, ``resize_mode``) replace what the model's
    metadata says; ``output`` ('softmax' or 'sigmoid') says how its logits become scores.
    A built-in without ``weights`` gets its shipped weights, or with ``stand_in`` seeded random
    ones (seed ``RANDOM_WEIGHTS_SEED``, as torchvision and timm models without weights): the
    explorer offers that stand-in while no trained weights ship, where the command line refuses
    an unshipped built-in, so nothing is measured on an untrained model by accident.
    Raises ``ModelError`` for an unknown name or a model that does not fit its spec (channels,
    output shape, number of class names) and ``InputError`` for an impossible spec.
    """
    unknown = set(overrides) - set(SpecOverrides.__annotations__)
    if unknown:
        raise InputError(f"Unknown spec setting(s): {', '.join(sorted(unknown))}.")
    kind = _kind(name)
    rest = name.partition(":")[2] if kind in ("torchvision", "timm", "hf") else name
    if stand_in and (kind != "built-in" or weights is not None):
        raise InputError(f"{name}: a stand-in is a built-in model without a weights file.")
    class_names = tuple(overrides.get("class_names", ()))
    if kind == "built-in":
        built = _built_in(rest, weights, class_names, stand_in)
    else:
        built = RESOLVERS[kind](rest, weights, class_names)
    spec = _override(built, name, overrides)
    module = built.module
    if spec.mean is not None and spec.std is not None:
        module = Normalized(module, spec.mean, spec.std)
    target = resolve_device(device)
    module = weights_io.freeze(module).to(target)
    classes = _probe(module, spec, name, target)
    output = overrides.get("output") or built.output
    if output not in OUTPUT_KINDS:
        raise InputError(f"Unknown output '{output}'; use one of {', '.join(OUTPUT_KINDS)}.")
    return LoadedModel(
        module=module,
        spec=spec,
        name=name,
        kind=kind,
        classes=classes,
        weights=built.weights,
        weights_sha256=built.weights_sha256,
        weights_origin=built.weights_origin,
        card=built.card,
        output=output,
    )
