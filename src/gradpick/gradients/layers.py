"""Layer gradients: a named module's activation and d target / d activation for the picks.

The same request as the input gradients (``gradpick.gradients.engine``): only the k picked images
are
forwarded, chunked under the memory budget, with the served model only ever read. A forward
hook, registered for the call and removed on every path, records the module's output in the
calling thread only, so sessions asking for different layers of one shared model at once each
get their own; the hook hands the model a copy of the output, so an in-place operation after
the layer cannot change the recorded activation.

Layers are named as ``named_modules()`` names them in the user's own model, without the
normalisation wrapper gradpick adds (``zoo.Normalized``). When no layer is given, one forward
of a dummy image (``probe``) chooses it: for a transformer, the input of the last attention
(the norm before it: after the last attention, patch tokens never reach a class token, so
maps there are identically zero); otherwise the last module with a spatial output before the
global pooling. Token outputs ``[N, prefix + h*w, C]`` and channels-last ``[N, h, w, C]``
(Swin) become ``[N, C, h, w]`` from the input size and the patch grid. A model that names its
own layer (a ``default_layer`` attribute, as ``gradpick.models.hf.HFLogits`` does per
family) gets it.

Example::

    request = GradientRequest.build(model, images, [3, 7], target="logit")
    result = layer_gradients(request)            # the automatic layer
    result.layer.name, result.activations.shape  # 'layer3', [2, 64, 8, 8]
"""

from __future__ import annotations

import copy
import difflib
import math
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.gradients.engine import DEFAULT_MEMORY_BUDGET, GradientResult, compute_with
from gradpick.gradients.request import GradientRequest
from gradpick.models.zoo import Normalized
from gradpick.outputs.inference import call_model

__all__ = [
    "ASPECT_TOLERANCE",
    "LAYER_STRATEGIES",
    "LayerGradients",
    "LayerInfo",
    "Layout",
    "Probe",
    "layer_gradients",
    "layout_of",
    "probe",
    "resolve",
    "user_model",
]

LAYER_STRATEGIES = ("recompute",)
"""The strategies layer gradients run: forward only the picks (the others pay for all N)."""
ASPECT_TOLERANCE = 1.25
"""How far a grid's height/width ratio may be from the image's and still be its patch grid."""


def user_model(model: nn.Module) -> tuple[nn.Module, str]:
    """The user's own module inside the served one, and the prefix of its names there."""
    if isinstance(model, Normalized):
        return model.model, "model."
    return model, ""


@dataclass(frozen=True)
class Layout:
    """How a layer's output per image maps to a [C, h, w] map.

    ``nchw``: already [C, h, w]; ``nhwc``: [h, w, C] (Swin); ``tokens``: [prefix + h*w, C],
    the first ``prefix`` tokens (class, distillation, register) dropped.
    """

    kind: Literal["nchw", "nhwc", "tokens"]
    grid: tuple[int, int]
    channels: int
    prefix: int = 0

    def to_nchw(self, output: torch.Tensor) -> torch.Tensor:
        """[N, ...] as the module returns it -> [N, C, h, w]."""
        if self.kind == "nchw":
            return output
        if self.kind == "nhwc":
            return output.permute(0, 3, 1, 2)
        tokens = output[:, self.prefix :, :]
        return tokens.reshape(output.shape[0], *self.grid, self.channels).permute(0, 3, 1, 2)


def _aspect_fits(grid: tuple[int, int], size: tuple[int, int]) -> bool:
    ratio = (grid[0] / grid[1]) / (size[0] / size[1])
    return abs(math.log(ratio)) <= math.log(ASPECT_TOLERANCE)


def _token_grid(tokens: int, size: tuple[int, int], prefix: int | None) -> tuple[int, int] | None:
    """(prefix, h): ``prefix`` tokens dropped, the other patches form a grid of the image's shape.

    With no known prefix the smallest that leaves a grid is taken: for a square image the
    grids are squares, and prefix tokens never outnumber the gap to the next square.
    """
    for first in range(tokens) if prefix is None else (prefix,):
        patches = tokens - first
        height = max(1, round(math.sqrt(patches * size[0] / size[1])))
        if (
            patches > 1
            and patches % height == 0
            and _aspect_fits((height, patches // height), size)
        ):
            return first, height
    return None


def layout_of(
    shape: tuple[int, ...], size: tuple[int, int], prefix: int | None = None
) -> Layout | None:
    """The layout of a per-image output ``shape`` for images of ``size``; None when the output
    is not a spatial map (a vector, a 1x1 map, tokens that form no grid)."""
    if len(shape) == 3:
        channels_first, channels_last = (shape[1], shape[2]), (shape[0], shape[1])
        if shape[1] * shape[2] > 1 and _aspect_fits(channels_first, size):
            return Layout("nchw", channels_first, shape[0])
        if shape[0] * shape[1] > 1 and _aspect_fits(channels_last, size):
            return Layout("nhwc", channels_last, shape[2])
        return Layout("nchw", channels_first, shape[0]) if shape[1] * shape[2] > 1 else None
    if len(shape) == 2:
        found = _token_grid(shape[0], size, prefix)
        if found is None:
            return None
        first, height = found
        return Layout("tokens", (height, (shape[0] - first) // height), shape[1], first)
    return None


# ----------------------------------------------------------------------------- the probe


@dataclass(frozen=True)
class LayerInfo:
    """One module reached by the forward whose output is a spatial map."""

    name: str
    """The dotted name in the user's model (``named_modules()``), no gradpick wrapper."""
    shape: tuple[int, ...]
    """Its output for one image, as the module returns it (batch dimension dropped)."""
    layout: Layout


@dataclass(frozen=True)
class Probe:
    """The candidate layers of a model at one input size, in the order the forward ends them."""

    layers: tuple[LayerInfo, ...]
    automatic: str | None
    """The layer chosen when none is given; None when the model has no spatial layer."""
    reached: frozenset[str]
    """Every module of the user's model the forward reached, spatial or not."""

    def get(self, name: str) -> LayerInfo | None:
        return next((layer for layer in self.layers if layer.name == name), None)


def _is_attention(module: nn.Module) -> bool:
    return isinstance(module, nn.MultiheadAttention) or "attention" in type(module).__name__.lower()


def _key(tensor: torch.Tensor) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """Names a live tensor by its memory, shape and strides (the probe keeps no tensors)."""
    return tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride())


@contextmanager
def _hooked(pairs: list[tuple[str, nn.Module]], forward: Any, pre: Any = None) -> Iterator[None]:
    """Forward hooks (and pre-hooks) on ``pairs`` for the block, removed on every path."""
    handles = []
    try:
        for name, module in pairs:
            handles.append(module.register_forward_hook(forward(name)))
            if pre is not None and _is_attention(module):
                handles.append(module.register_forward_pre_hook(pre(name)))
        yield
    finally:
        for handle in handles:
            handle.remove()


_PROBES: weakref.WeakKeyDictionary[nn.Module, dict[tuple, Probe]] = weakref.WeakKeyDictionary()
_PROBES_LOCK = threading.Lock()


def probe(
    model: nn.Module,
    size: tuple[int, int],
    channels: int = 3,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Probe:
    """The layers of ``model`` with a spatial output, from one forward of one zero image.

    Measured once per model, size, dtype and device, then looked up. The hooks record only
    this thread and are removed afterwards; a model with modules in training mode is probed
    on a copy, so no running statistic moves.
    """
    weights = next(model.parameters(), None)
    dtype = dtype or (weights.dtype if weights is not None else torch.float32)
    device = (
        torch.device(device)
        if device is not None
        else (weights.device if weights is not None else torch.device("cpu"))
    )
    key = (tuple(size), channels, dtype, device)
    with _PROBES_LOCK:
        known = _PROBES.get(model, {}).get(key)
    if known is None:
        known = _run_probe(model, (int(size[0]), int(size[1])), channels, dtype, device)
        with _PROBES_LOCK:
            _PROBES.setdefault(model, {})[key] = known
    return known


def _run_probe(
    model: nn.Module,
    size: tuple[int, int],
    channels: int,
    dtype: torch.dtype,
    device: torch.device,
) -> Probe:
    served = copy.deepcopy(model) if any(m.training for m in model.modules()) else model
    inner, _ = user_model(served)
    hinted = getattr(inner, "num_prefix_tokens", None)
    tokens = hinted if isinstance(hinted, int) else None
    owner = threading.get_ident()
    ended: list[tuple[str, Any, LayerInfo | None]] = []  # (name, key, info) in end order
    reached: set[str] = set()
    automatic: list[str | None] = []  # the producer of each attention's input, in call order

    def forward(name: str) -> Any:
        def record(module: nn.Module, inputs: Any, output: Any) -> None:
            if threading.get_ident() != owner:
                return
            reached.add(name)
            if not isinstance(output, torch.Tensor):
                return
            layout = layout_of(tuple(output.shape[1:]), size, tokens)
            info = None if layout is None else LayerInfo(name, tuple(output.shape[1:]), layout)
            ended.append((name, _key(output), info))

        return record

    def pre(name: str) -> Any:
        def record(module: nn.Module, inputs: Any) -> None:
            if threading.get_ident() != owner or not inputs:
                return
            if not isinstance(inputs[0], torch.Tensor):
                return
            wanted = _key(inputs[0])
            producer = next((e for e in reversed(ended) if e[1] == wanted), None)
            automatic.append(producer[0] if producer and producer[2] else None)

        return record

    pairs = [(name, module) for name, module in inner.named_modules() if name]
    image = torch.zeros(1, channels, *size, dtype=dtype, device=device)
    with _hooked(pairs, forward, pre), torch.no_grad():
        call_model(served, image)
    layers: dict[str, LayerInfo] = {}
    for _, _, info in ended:
        if info is not None:
            layers.pop(info.name, None)
            layers[info.name] = info  # a module called twice keeps its last call
    named = getattr(inner, "default_layer", None)  # a wrapper that knows its family's layer
    chosen = named if isinstance(named, str) and named in layers else None
    chosen = chosen or (automatic[-1] if automatic and automatic[-1] else None)
    if chosen is None and layers:
        chosen = next(reversed(layers))
    return Probe(tuple(layers.values()), chosen, frozenset(reached))


def resolve(model: nn.Module, name: str | None, images: torch.Tensor) -> LayerInfo:
    """The layer ``name`` (None: the automatic one) of ``model`` for images like ``images``.

    Raises ``InputError`` for an unknown name (listing close ones), a layer whose output is
    not a spatial map, one the forward never reaches, or a model with no spatial layer.
    """
    size = (int(images.shape[-2]), int(images.shape[-1]))
    found = probe(model, size, int(images.shape[1]), images.dtype)
    if name is None:
        if found.automatic is None:
            raise InputError(
                "The model has no layer with a spatial output (an [N, C, h, w] map or tokens "
                "on a patch grid), so there is no layer map to draw."
            )
        chosen = found.get(found.automatic)
        assert chosen is not None
        return chosen
    known = found.get(name)
    if known is not None:
        return known  # a spatial layer the forward reaches: no need to list every module
    inner, _ = user_model(model)
    names = [module_name for module_name, _ in inner.named_modules() if module_name]
    if name not in names:
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
        hint = f"close matches: {', '.join(close)}" if close else f"e.g. {found.automatic}"
        raise InputError(f"The model has no layer '{name}'; {hint}.")
    if name not in found.reached:
        raise InputError(
            f"Layer '{name}' is never reached by the model's forward, so it has no activation "
            "for these images; choose a layer the forward runs through."
        )
    chosen = found.get(name)
    if chosen is None:
        spatial = ", ".join(layer.name for layer in found.layers[-3:])
        raise InputError(
            f"Layer '{name}''s output is not a spatial map ([N, C, h, w], [N, h, w, C] or "
            f"tokens on a patch grid), so it has no layer map; spatial layers: {spatial}."
        )
    return chosen


# ----------------------------------------------------------------------------- the gradients


@dataclass(frozen=True)
class LayerGradients:
    """Row i: the activation of ``layer`` for image ``indices[i]`` and d target_i / d it.

    ``activations`` and ``result.gradients`` are [k, C, h, w] (token layouts reshaped), in the
    images' dtype on their device; ``result`` carries targets, classes, timing and memory as
    for input gradients.
    """

    layer: LayerInfo
    activations: torch.Tensor
    result: GradientResult

    @property
    def gradients(self) -> torch.Tensor:
        return self.result.gradients


@contextmanager
def _capture(module: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Outputs of ``module`` in this thread's forwards, the model given a copy to go on with."""
    owner = threading.get_ident()
    captured: list[torch.Tensor] = []

    def record(module: nn.Module, inputs: Any, output: Any) -> torch.Tensor | None:
        if threading.get_ident() != owner or not isinstance(output, torch.Tensor):
            return None
        captured.append(output)
        return output.clone()

    handle = module.register_forward_hook(record)
    try:
        yield captured
    finally:
        handle.remove()


def _step(
    layer: LayerInfo, path: str
) -> Callable[[GradientRequest, slice], tuple[torch.Tensor, ...]]:
    """The engine step of ``layer`` (at ``path`` in the served model): the picks of rows
    ``order`` forwarded with the capture on, differentiated with respect to its output."""

    def step(request: GradientRequest, order: slice) -> tuple[torch.Tensor, ...]:
        module = request.model.get_submodule(path)
        picked = request.images[request.indices[order]].to(request.device).requires_grad_(True)
        with _capture(module) as captured:
            logits = call_model(request.model, picked)
        if not captured or captured[-1].shape[0] != picked.shape[0]:
            raise InputError(
                f"Layer '{layer.name}' did not see one row per image in this forward; choose "
                "another layer."
            )
        values, classes = request.picked_targets(logits, order)
        output = captured[-1]
        (gradient,) = torch.autograd.grad(
            request.scaled_sum(values), output, allow_unused=True, materialize_grads=True
        )
        return (
            layer.layout.to_nchw(gradient),
            values.detach(),
            classes,
            layer.layout.to_nchw(output.detach()),
        )

    return step


def layer_gradients(
    request: GradientRequest,
    layer: str | None = None,
    allow_coupled: bool = False,
    chunk_size: int | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> LayerGradients:
    """The activation of ``layer`` (None: the automatic one) and d target / d activation for
    each picked image, through the request's engine path (see ``gradients.compute``)."""
    if request.strategy not in LAYER_STRATEGIES:
        raise InputError(
            f"Layer gradients run strategy {', '.join(LAYER_STRATEGIES)} (the picks only), "
            f"not '{request.strategy}'."
        )
    chosen = resolve(request.model, layer, request.images)
    _, prefix = user_model(request.model)
    result, (activations,) = compute_with(
        request, _step(chosen, prefix + chosen.name), allow_coupled, chunk_size, memory_budget
    )
    return LayerGradients(chosen, activations, result)
