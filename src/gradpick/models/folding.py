"""A private copy of a served model for many forwards without gradients: BatchNorm folded into
the convolutions before it, ReLUs and residual additions done in place.

Perturbation methods (occlusion, RISE) run hundreds of forwards per pick and read only the
logits. In eval mode a BatchNorm after a convolution is an affine map per channel, so it can
be folded into the convolution's weight and bias (``torch.nn.utils.fusion.fuse_conv_bn_eval``):
W' = W γ / sqrt(σ² + ε), b' = (b - μ) γ / sqrt(σ² + ε) + β. The copy then skips one pass over
every activation per folded layer, and a ReLU or a residual sum that reads a convolution's
fresh output (used nowhere else) overwrites it instead of allocating a new tensor. The logits
are the model's up to rounding (float64: within 1e-12 on the shipped ResNet-20).

The served model is only read: the copy is traced with ``torch.fx`` from a deep copy and cached
weakly on the model, keyed on its parameters' and buffers' storage and versions, so a later
change of the weights builds a new copy. A model that cannot be traced, has hooks (tracing
would skip them), is in training mode, has nothing to fold, or whose copy does not give its
logits on a probe, is used as it is::

    fast = inference_copy(model, images[:2])   # model itself when folding does not apply
    with torch.inference_mode():
        logits = fast(images)

``lowered_copy(model, probe, torch.bfloat16)`` is the same copy in bfloat16 (several times
faster where the CPU has AMX, and on GPUs), its logits rounded: on the CPU each ReLU after a
convolution, and a residual sum before it, also runs inside the convolution (oneDNN's fused
kernel), which bfloat16 needs to pay off, since it speeds the convolutions but not those
memory-bound steps.
"""

from __future__ import annotations

import copy
import operator
import threading
import weakref
from itertools import chain

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.fx.experimental.optimization import fuse

__all__ = ["inference_copy", "lowered_copy"]

_CACHE: weakref.WeakKeyDictionary[
    nn.Module, tuple[tuple, dict[torch.dtype | None, nn.Module | None]]
] = weakref.WeakKeyDictionary()
"""Per model: the state its copies were built from, and its copies by dtype (None: its own)."""
_LOCK = threading.Lock()
"""Guards the cache: several threads may ask for one shared model's copy at once."""


def _state(model: nn.Module) -> tuple:
    """What the copy depends on: every parameter's and buffer's storage, version and dtype."""
    tensors = chain(model.parameters(), model.buffers())
    return (model.training,) + tuple(
        (tensor.data_ptr(), tensor._version, tensor.dtype, tensor.device) for tensor in tensors
    )


def _add_into(first: torch.Tensor, second: torch.Tensor | float) -> torch.Tensor:
    """``first + second``, written into ``first`` (a fresh tensor) when the sum has its shape
    and dtype."""
    if (
        isinstance(second, torch.Tensor)
        and first.shape == torch.broadcast_shapes(first.shape, second.shape)
        and first.dtype == torch.result_type(first, second)
    ):
        return first.add_(second)
    return first + second


def _in_place(module: fx.GraphModule) -> int:
    """Turn ReLUs and sums whose input is a convolution's or a sum's fresh output, read by
    nothing else, into in-place ones; returns how many."""
    modules = dict(module.named_modules())

    def fresh(node: object) -> bool:
        if not isinstance(node, fx.Node) or len(node.users) != 1:
            return False
        if node.op == "call_module":
            return isinstance(modules.get(str(node.target)), nn.Conv2d)
        return node.op == "call_function" and node.target in (operator.add, _add_into)

    changed = 0
    for node in module.graph.nodes:
        if node.op != "call_function" or not node.args or not fresh(node.args[0]):
            continue
        if node.target in (F.relu, torch.relu) and len(node.args) == 1:
            node.target, node.kwargs = torch.relu_, {}
            changed += 1
        elif node.target is operator.add and len(node.args) == 2 and not node.kwargs:
            node.target = _add_into
            changed += 1
    module.recompile()
    return changed


def _hooked(model: nn.Module) -> bool:
    return any(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
        for module in model.modules()
    )


def _close(
    model: nn.Module, copied: nn.Module, probe: torch.Tensor, dtype: torch.dtype, units: float
) -> bool:
    """Whether ``copied`` (taking images in ``dtype``) gives the model's logits on ``probe``
    within ``units`` units of ``dtype``'s last place, relative to the largest logit (at least
    1); False when either fails on it or gives no tensor."""
    try:
        with torch.inference_mode():
            expected = model(probe)
            got = copied(probe.to(dtype))
    except Exception:  # an operation the dtype lacks on this device
        return False
    if not isinstance(expected, torch.Tensor) or not isinstance(got, torch.Tensor):
        return False
    scale = max(1.0, float(expected.abs().max()) if expected.numel() else 0.0)
    tolerance = units * torch.finfo(dtype).eps * scale
    return (
        got.shape == expected.shape
        and float((got.to(expected.dtype) - expected).abs().max()) <= tolerance
    )


def _build(model: nn.Module, probe: torch.Tensor) -> nn.Module | None:
    """The folded copy, or None when folding does not apply or changes the logits."""
    if model.training or _hooked(model):
        return None
    norms = sum(isinstance(module, nn.BatchNorm2d) for module in model.modules())
    if not norms:
        return None
    try:
        folded = fuse(copy.deepcopy(model), inplace=True)
        assert isinstance(folded, fx.GraphModule)
    except Exception:  # any model fx cannot trace (data-dependent control flow, ...)
        return None
    if sum(isinstance(module, nn.BatchNorm2d) for module in folded.modules()) == norms:
        return None  # none of them right after a convolution: nothing folded
    _in_place(folded)
    for parameter in folded.parameters():
        parameter.requires_grad_(False)
    # Folding reorders the arithmetic: the same logits within 1,000 units of the last place.
    return folded if _close(model, folded, probe, probe.dtype, units=1e3) else None


_POINTWISE = getattr(torch.ops.mkldnn, "_convolution_pointwise", None)
"""oneDNN's convolution with a ReLU (and a residual sum before it) in one pass, on the CPU: what
``torch.compile`` calls for the same pattern; None where this build of torch lacks it."""


class _FusedConvolution(nn.Module):
    """A convolution, then (with ``other``) a residual sum, then a ReLU, in one oneDNN call: the
    output written once instead of read and written again by each step."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        self.weight, self.bias = conv.weight, conv.bias
        self.shape = (list(conv.padding), list(conv.stride), list(conv.dilation), conv.groups)

    def forward(self, images: torch.Tensor, other: torch.Tensor | None = None) -> torch.Tensor:
        assert _POINTWISE is not None
        padding, stride, dilation, groups = self.shape
        # oneDNN's fused kernels take channels-last tensors (a no-op for the pixels the
        # perturbation methods pass); the plain fallback lacks the sum and ReLU in bfloat16.
        images = images.contiguous(memory_format=torch.channels_last)
        if other is None:
            return _POINTWISE(
                images, self.weight, self.bias, padding, stride, dilation, groups, "relu", [], ""
            )
        other = other.contiguous(memory_format=torch.channels_last)
        return _POINTWISE.binary(
            images, other, self.weight, self.bias, padding, stride, dilation, groups,
            "add", 1.0, "relu", [], "",
        )  # fmt: skip


def _fused(module: fx.GraphModule) -> int:
    """Turn each in-place ReLU of a convolution's fresh output, or of a fresh sum of one with
    another tensor, into one ``_FusedConvolution``; returns how many."""
    modules = dict(module.named_modules())

    def convolution(node: object) -> nn.Conv2d | None:
        if not isinstance(node, fx.Node) or node.op != "call_module" or len(node.users) != 1:
            return None
        conv = modules.get(str(node.target))
        if not isinstance(conv, nn.Conv2d) or conv.padding_mode != "zeros":
            return None
        return None if isinstance(conv.padding, str) else conv

    changed = 0
    for relu in list(module.graph.nodes):
        if relu.op != "call_function" or relu.target is not torch.relu_ or not relu.args:
            continue
        source, other = relu.args[0], None
        if isinstance(source, fx.Node) and source.target is _add_into and len(source.users) == 1:
            first, other = source.args
            if not isinstance(other, fx.Node):
                continue
            sum_node, source = source, first
        conv = convolution(source)
        if conv is None:
            continue
        name = f"fused_{changed}"
        module.add_submodule(name, _FusedConvolution(conv))
        with module.graph.inserting_before(relu):
            inputs = (source.args[0],) if other is None else (source.args[0], other)
            fused = module.graph.call_module(name, inputs)
        relu.replace_all_uses_with(fused)
        module.graph.erase_node(relu)
        if other is not None:
            module.graph.erase_node(sum_node)
        module.graph.erase_node(source)
        changed += 1
    module.graph.lint()
    module.delete_all_unused_submodules()
    module.recompile()
    return changed


def _lowered(
    model: nn.Module, folded: nn.Module | None, probe: torch.Tensor, dtype: torch.dtype
) -> nn.Module | None:
    """The folded copy (or a copy of the model) in ``dtype``, on the CPU with its convolutions'
    ReLUs and residual sums fused into them where oneDNN can; None when the model cannot be
    copied safely (training, hooks) or no copy gives its logits within ``dtype``'s rounding on
    the probe (``_close``)."""
    if model.training or _hooked(model):
        return None
    lowered = copy.deepcopy(folded if folded is not None else model).to(dtype)
    for parameter in lowered.parameters():
        parameter.requires_grad_(False)
    on_cpu = all(parameter.device.type == "cpu" for parameter in lowered.parameters())
    if isinstance(lowered, fx.GraphModule) and on_cpu and _POINTWISE is not None:
        fused = copy.deepcopy(lowered)
        if _fused(fused) and _close(model, fused, probe, dtype, units=16):
            return fused
    return lowered if _close(model, lowered, probe, dtype, units=16) else None


def _copies(model: nn.Module, probe: torch.Tensor, dtype: torch.dtype | None) -> nn.Module | None:
    """The cached copy of ``model`` in ``dtype`` (None: the folded one), built when missing or
    when the model's weights changed since."""
    state = _state(model)
    probe = probe.detach()
    with _LOCK:
        known = _CACHE.get(model)
        if known is None or known[0] != state:
            known = (state, {None: _build(model, probe)})
            _CACHE[model] = known
        copies = known[1]
        if dtype is not None and dtype not in copies:
            copies[dtype] = _lowered(model, copies[None], probe, dtype)
        return copies[dtype]


def inference_copy(model: nn.Module, probe: torch.Tensor) -> nn.Module:
    """A copy of ``model`` with its BatchNorms folded, for forwards in inference mode only, or
    ``model`` itself where folding does not apply (see the module's docstring). ``probe``
    (a few images the model takes) checks the copy's logits against the model's when it is
    built; the copy is cached until the model's weights change."""
    folded = _copies(model, probe, None)
    return model if folded is None else folded


def lowered_copy(model: nn.Module, probe: torch.Tensor, dtype: torch.dtype) -> nn.Module | None:
    """``inference_copy`` in ``dtype`` (``torch.bfloat16``: several times faster on CPUs with
    AMX and on GPUs), taking images in that dtype; its logits are the model's within 16 units of
    the dtype's last place (relative to the largest) on ``probe``. None when no such copy can be
    made: a model in training mode or with hooks, an operation the dtype lacks on the device, or
    logits off by more. The served model is never converted."""
    return _copies(model, probe, dtype)
