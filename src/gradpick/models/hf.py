"""Hugging Face image classifiers: ``hf:PATH_OR_NAME`` for ``gradpick.models.zoo.load_model``.

A folder written by ``save_pretrained`` (the model with its image processor), or a Hub name
read from the local Hugging Face cache (downloaded there only when online and allowed:
``HF_HUB_OFFLINE=1`` never downloads). The model is served behind ``HFLogits``, which returns
the output object's ``.logits``; class names come from ``config.id2label``; the input spec
from the image processor (``preprocessor_config.json`` with its class's defaults): the exact
HxW stretch of ViT's processor (``resize_mode="warp"``), or the shorter side then a centre crop
(ConvNeXt's ``crop_pct``: shorter side ``int(shortest_edge / crop_pct)``), the resample filter,
and the rescale and mean/std folded into one standardisation of pixels in [0, 1].

The automatic layer is named per family (``HFLogits.default_layer``): ViT, DeiT, BEiT and
DINOv2 the last block's input norm (prefix tokens dropped), Swin its last norm (tokens on the
patch grid), ConvNeXt, ResNet and RegNet the last stage, EfficientNet its top activation.
Example::

    model.save_pretrained("vit"); processor.save_pretrained("vit")
    loaded = gradpick.models.zoo.load_model("hf:vit")   # spec: 224x224 stretched, bilinear, ...
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gradpick.errors import ModelError
from gradpick.models import weights as weights_io
from gradpick.models.spec import InputSpec

__all__ = [
    "HFLogits",
    "HFModel",
    "automatic_layer",
    "load",
    "locate",
    "output_kind",
    "spec_of",
]

INSTALL_HINT = "pip install 'gradpick[hf]'"
_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}
"""PIL's filter numbers, as processors store them, by the names ``InputSpec`` uses."""
_CONVNEXT_WARP_FROM = 384
"""ConvNeXt's processor stretches to the square from this shortest edge on, instead of crop_pct."""
_HUB_FILES = ["*.json", "*.safetensors", "pytorch_model.bin"]
"""What a download from the Hub fetches: configs and the PyTorch weights, never other formats."""
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def _transformers() -> Any:
    try:
        return importlib.import_module("transformers")
    except ImportError:
        raise ModelError(f"hf: models need the transformers package: {INSTALL_HINT}.") from None


class HFLogits(nn.Module):
    """A transformers classifier taking standardised ``pixel_values``, returning ``.logits``.

    ``default_layer`` names the family's layer for the layer maps (in this module's names),
    ``num_prefix_tokens`` the class/distillation/register tokens before the patch tokens.
    """

    def __init__(self, model: nn.Module, default_layer: str | None, prefix_tokens: int) -> None:
        super().__init__()
        self.model = model
        self.default_layer = None if default_layer is None else f"model.{default_layer}"
        self.num_prefix_tokens = prefix_tokens

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(pixel_values=images).logits
        return logits


@dataclass(frozen=True)
class HFModel:
    """What ``load`` hands the model resolver."""

    module: HFLogits
    spec: InputSpec
    weights: str
    """The folder, or ``NAME@COMMIT`` for a snapshot of the Hub cache."""
    weights_sha256: str | None
    origin: str
    output: str
    """'softmax', or 'sigmoid' for ``problem_type: multi_label_classification``."""


# ----------------------------------------------------------------------------- where it is


def _offline() -> bool:
    values = {"1", "on", "yes", "true"}
    return any(
        os.environ.get(key, "").strip().lower() in values
        for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def locate(name: str) -> tuple[Path, str, str]:
    """(local folder, label, origin) of ``name``: a ``save_pretrained`` folder, or the Hub cache's
    snapshot of the repository ``name`` (downloaded there first when online and allowed)."""
    folder = Path(name).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise ModelError(
                f"{folder} has no config.json; give a folder written by the model's "
                "save_pretrained (with its image processor's), or a Hub model name."
            )
        return folder, str(folder), f"the folder {folder}"
    hub = importlib.import_module("huggingface_hub")
    errors = importlib.import_module("huggingface_hub.errors")
    cache = os.environ.get("HF_HUB_CACHE") or None
    ways = (
        f"'{name}' is neither a folder nor in the Hugging Face cache{' ' + cache if cache else ''}."
        f" Either save the model and its processor with save_pretrained(DIR) and use hf:DIR, "
        f"or download it once online (huggingface-cli download {name}) and use hf:{name}"
    )
    try:
        snapshot = Path(hub.snapshot_download(name, cache_dir=cache, local_files_only=True))
        origin = "the Hugging Face cache"
    except (errors.LocalEntryNotFoundError, errors.HFValidationError, OSError, ValueError):
        if _offline():
            raise ModelError(f"{ways} (HF_HUB_OFFLINE is set, so nothing is downloaded).") from None
        try:
            snapshot = Path(hub.snapshot_download(name, cache_dir=cache, allow_patterns=_HUB_FILES))
        except Exception as error:  # the network's or the Hub's error, in one line
            detail = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            raise ModelError(f"{ways}; the download failed ({detail}).") from None
        origin = "the Hub, into the Hugging Face cache"
    return snapshot, f"{name}@{snapshot.name}", origin


def _weights_sha256(folder: Path) -> str | None:
    """The weights file's SHA-256 (a sharded model's index), so stores name the exact model."""
    for file_name in _WEIGHT_FILES:
        path = folder / file_name
        if path.is_file():
            return weights_io.sha256_file(path)
    return None


# ----------------------------------------------------------------------------- the input spec


def _size(value: Any) -> dict[str, int]:
    """A processor's size (a dict, a ``SizeDict`` or an int) as a plain dict of the keys set."""
    if isinstance(value, int):
        return {"height": value, "width": value}
    items = value.items() if isinstance(value, dict) else vars(value).items()
    return {key: int(number) for key, number in items if number is not None}


def spec_of(processor: Any, class_names: tuple[str, ...]) -> InputSpec:
    """The ``InputSpec`` that prepares images as ``processor`` does, for pixels in [0, 1].

    HF standardises ``(u * rescale_factor - mean) / std`` of 0..255 values u; with pixels
    x = u / 255 that is ``(x - mean / (255 f)) / (std / (255 f))``, one standardisation.
    Raises ``ModelError`` for a processor step gradpick does not reproduce.
    """
    kind = type(processor).__name__
    for flag in ("do_flip_channel_order", "rescale_offset", "do_pad"):
        if getattr(processor, flag, False):
            raise ModelError(f"{kind} sets {flag}, a step gradpick's input spec does not make.")
    resample = getattr(processor, "resample", 2)
    resample = int(getattr(resample, "value", resample))
    if resample not in _RESAMPLE:
        raise ModelError(
            f"{kind} resamples with PIL filter {resample}; gradpick has bilinear, "
            "bicubic and nearest."
        )
    if not getattr(processor, "do_resize", True):
        raise ModelError(f"{kind} does not resize; a served model needs one input size.")
    size = _size(getattr(processor, "size", None) or {})
    crop = _size(getattr(processor, "crop_size", None) or {})
    cropping = bool(getattr(processor, "do_center_crop", False)) and "height" in crop
    crop_pct = getattr(processor, "crop_pct", None)
    options: dict[str, Any] = {}
    if "height" in size and "width" in size:
        options["resize_mode"] = "warp"
        if cropping:
            options["size"] = (crop["height"], crop["width"])
            options["resize"] = size["height"]
            expected = round(crop["width"] * size["height"] / crop["height"])
            if expected != size["width"]:
                raise ModelError(
                    f"{kind} stretches to {size} before a {crop} crop: a stretch "
                    "gradpick's spec cannot express (width not in proportion)."
                )
        else:
            options["size"] = (size["height"], size["width"])
    elif "shortest_edge" in size and crop_pct is not None and kind.startswith("ConvNext"):
        edge = size["shortest_edge"]
        options["size"] = (edge, edge)
        if edge < _CONVNEXT_WARP_FROM:
            options["resize"] = int(edge / float(crop_pct))
        else:
            options["resize_mode"] = "warp"
    elif "shortest_edge" in size and cropping:
        options["size"] = (crop["height"], crop["width"])
        options["resize"] = size["shortest_edge"]
    else:
        raise ModelError(
            f"{kind} resizes to {size} without a fixed crop; gradpick serves one "
            "input size per model."
        )
    factor = float(processor.rescale_factor) if getattr(processor, "do_rescale", True) else 1.0
    scale = 255.0 * factor
    if getattr(processor, "do_normalize", True):
        mean = _channels(processor.image_mean)
        std = _channels(processor.image_std)
    else:
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    if mean != (0.0, 0.0, 0.0) or std != (1.0, 1.0, 1.0) or scale != 1.0:
        options["mean"] = tuple(value / scale for value in mean)
        options["std"] = tuple(value / scale for value in std)
    return InputSpec(interpolation=_RESAMPLE[resample], class_names=class_names, **options)


def _channels(values: Any) -> tuple[float, float, float]:
    numbers = [float(values)] * 3 if isinstance(values, int | float) else [float(v) for v in values]
    if len(numbers) != 3:
        raise ModelError(
            f"The processor standardises {len(numbers)} channels; gradpick serves RGB."
        )
    return numbers[0], numbers[1], numbers[2]


# ----------------------------------------------------------------------------- the family


def _prefix_tokens(base: nn.Module) -> int:
    """Class, distillation and register tokens the embeddings put before the patches."""
    embeddings = getattr(base, "embeddings", None)
    count = 0
    for attribute in ("cls_token", "distillation_token"):
        if isinstance(getattr(embeddings, attribute, None), nn.Parameter):
            count += 1
    registers = getattr(embeddings, "register_tokens", None)
    if isinstance(registers, nn.Parameter):
        count += int(registers.shape[1])
    return count


def _submodule(module: nn.Module, path: str) -> nn.Module | None:
    try:
        return module.get_submodule(path)
    except AttributeError:
        return None


def automatic_layer(model: nn.Module) -> tuple[str | None, int]:
    """(the family's layer for maps, prefix tokens) of a transformers classifier.

    Transformer blocks: the last block's first LayerNorm (the input of its attention: after
    the last attention no patch token reaches the class token). Swin: the final norm, tokens on
    the last patch grid. Convolutional stages: the last stage. None: leave it to the probe.
    """
    prefix_name = getattr(model, "base_model_prefix", "")
    base = getattr(model, prefix_name, None) if prefix_name else None
    if not isinstance(base, nn.Module):
        return None, 0
    encoder = getattr(base, "encoder", None)
    for path in ("layers", "encoder.layer", "encoder.layers"):
        blocks = _submodule(base, path)
        if not isinstance(blocks, nn.ModuleList) or not len(blocks):
            continue
        norm = next(
            (child for child, m in blocks[-1].named_children() if isinstance(m, nn.LayerNorm)),
            None,
        )
        if norm is not None:  # transformer blocks, each with its own input norm
            return f"{prefix_name}.{path}.{len(blocks) - 1}.{norm}", _prefix_tokens(base)
    if isinstance(getattr(encoder, "layers", None), nn.ModuleList) and isinstance(
        getattr(base, "layernorm", None), nn.LayerNorm
    ):
        return f"{prefix_name}.layernorm", 0  # Swin: the final norm over the last grid's tokens
    stages = getattr(encoder, "stages", None)
    if isinstance(stages, nn.ModuleList) and len(stages):
        return f"{prefix_name}.encoder.stages.{len(stages) - 1}", 0
    if isinstance(getattr(encoder, "top_activation", None), nn.Module):
        return f"{prefix_name}.encoder.top_activation", 0
    return None, _prefix_tokens(base)


def output_kind(config: Any) -> str:
    """'sigmoid' for a multi-label classifier (``problem_type``), else 'softmax'."""
    problem = getattr(config, "problem_type", None)
    return "sigmoid" if problem == "multi_label_classification" else "softmax"


# ----------------------------------------------------------------------------- loading


def load(name: str, class_names: tuple[str, ...] = ()) -> HFModel:
    """The classifier ``name`` (folder or Hub name) with its spec, frozen in eval mode on CPU."""
    transformers = _transformers()
    folder, label, origin = locate(name)
    bars = transformers.utils.logging
    shown = bars.is_progress_bar_enabled()
    bars.disable_progress_bar()  # a load bar per call would flood the command line's output
    try:
        model = transformers.AutoModelForImageClassification.from_pretrained(folder)
    except (OSError, ValueError, KeyError) as error:
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ModelError(
            f"hf:{name} is not an image classifier transformers can load: {detail}"
        ) from None
    finally:
        if shown:
            bars.enable_progress_bar()
    try:
        processor = transformers.AutoImageProcessor.from_pretrained(folder)
    except (OSError, ValueError, KeyError) as error:
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ModelError(
            f"hf:{name} has no image processor ({detail}); save it beside the model with "
            "processor.save_pretrained(DIR)."
        ) from None
    id2label = getattr(model.config, "id2label", None) or {}
    own = tuple(str(id2label[key]) for key in sorted(id2label, key=int))
    spec = spec_of(processor, class_names or own)
    layer, prefix = automatic_layer(model)
    module = HFLogits(model.eval(), layer, prefix)
    return HFModel(
        module=module,
        spec=spec,
        weights=label,
        weights_sha256=_weights_sha256(folder),
        origin=origin,
        output=output_kind(model.config),
    )
