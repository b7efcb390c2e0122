"""Perturbation methods: occlusion and RISE, maps from forwards of altered images alone.

Neither method reads a gradient: each scores the picked image with parts of it hidden, for the
class held at the original image (the label for target 'loss', the given or predicted class for
'logit', a logit difference with ``versus``), so the map says what the model's output actually
does when a region goes, not what a local slope suggests. Forwards run in batches of at most
``batch_size`` altered images over every (pick, position or mask) row, fewer where the memory
budget says so, so memory is bounded whatever k and the number of positions; they go through
a private copy of the model with its BatchNorms folded (``gradpick.models.folding``: the same
logits up to rounding, the served model only read). ``forwards(request)`` gives the cost
before anything runs. The plain gradient of the picks is still computed once (the
``gradients`` of the result: classes, targets and memory for every front end)::

    method = Occlusion(window=6, stride=2)
    method.forwards(request)                 # k x (positions + 1) forwards
    maps = method.attribute(request).maps    # [k, C, H, W], the same in every channel
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable

import torch
import torch.nn.functional as F

from gradpick.attribution.base import Attribution, AttributionMethod, Parameter
from gradpick.errors import InputError
from gradpick.gradients.engine import (
    DEFAULT_MEMORY_BUDGET,
    GradientResult,
    compute,
    saved_bytes_per_image,
)
from gradpick.gradients.request import GradientRequest
from gradpick.models.folding import inference_copy, lowered_copy
from gradpick.outputs.inference import call_model
from gradpick.runtime.measure import Stopwatch

__all__ = [
    "BFLOAT16",
    "Fill",
    "Occlusion",
    "PerturbationMethod",
    "Progress",
    "Rise",
    "window_starts",
]

Fill = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""What replaces hidden pixels: (images [n, C, H, W], hidden [n, H, W] bool) -> images. E.g.
``impute`` of ``gradpick.trust.road`` (ROAD's neighbour imputation) or a blurred copy's pixels."""

BFLOAT16 = Parameter(
    "bfloat16",
    "bfloat16 forwards",
    0,
    "the altered images' forwards in bfloat16 through a private copy of the model: 2-3x "
    "faster on CPUs with AMX and on GPUs; each logit rounded, by a few percent of the largest "
    "at worst",
    True,
    0,
    (0, 1),
    switch=True,
)
"""Off by default: the maps are then their definition in the images' dtype (captum's up to
rounding). On, each forward rounds to bfloat16's 8 bits of mantissa; the pointing game on the
planted marks and the time are measured both ways in ``gradpick bench-planted``."""

BATCH = Parameter(
    "batch_size", "Altered images per forward", 512, "most altered images per forward", True, 1
)
"""At most this many altered images per forward, and fewer where that many would pass the
gradient engine's memory budget (counted as autograd would save them, more than a forward
in inference mode holds): 412 for ResNet-20 at 32 px, 5 for a ResNet-50 at 224 px. On a busy
2-core CPU fewer, larger forwards wait less for the cores (docs/methods.md, occlusion's time)."""


def window_starts(size: int, window: int, stride: int) -> list[int]:
    """Where the windows along one side begin: 0, stride, ... for 1 + ceil((size - window) /
    stride) windows, the last one cut at the border (as captum's ``Occlusion`` places them)."""
    if window > size:
        raise InputError(
            f"The occlusion window ({window} px) is larger than the image ({size} px)."
        )
    return [i * stride for i in range(1 + math.ceil((size - window) / stride))]


def _hidden(
    height: int,
    width: int,
    rows: list[int],
    columns: list[int],
    window: int,
    device: torch.device,
) -> torch.Tensor:
    """Every place's hidden pixels [1 + places, H, W] (bool), place 0 (the image) none: built
    once per call, each batch then indexes its rows."""
    inside_y = torch.zeros(len(rows), height, dtype=torch.bool, device=device)
    inside_x = torch.zeros(len(columns), width, dtype=torch.bool, device=device)
    for number, y in enumerate(rows):
        inside_y[number, y : y + window] = True
    for number, x in enumerate(columns):
        inside_x[number, x : x + window] = True
    places = (inside_y[:, None, :, None] & inside_x[None, :, None, :]).flatten(0, 1)
    return torch.cat([torch.zeros_like(places[:1]), places])


Progress = Callable[[int, int], None]
"""Called after each batch of forwards with (forwards done, forwards in all)."""


class PerturbationMethod(AttributionMethod):
    """A method made of forwards of altered copies of the picks, scored for the held class.

    ``progress`` (optional) hears after each batch how many of the forwards are done.
    """

    def __init__(self, progress: Progress | None = None, **settings: object) -> None:
        super().__init__(**settings)
        self.progress = progress

    def _advance(self, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(done, total)

    @abstractmethod
    def forwards(self, request: GradientRequest) -> int:
        """Single-image forward passes the method runs for ``request`` (besides the plain
        gradient's one forward and backward per pick)."""

    def attribute(self, request: GradientRequest) -> Attribution:
        with Stopwatch(request.device) as watch:
            plain = compute(request)
            with torch.no_grad():
                single = self._maps(request, plain)
        if not bool(torch.isfinite(single).all()):
            raise InputError(f"{self.label}'s altered images gave non-finite targets.")
        channels = int(request.images.shape[1])
        return Attribution(
            maps=single.unsqueeze(1).expand(-1, channels, -1, -1).contiguous(),
            method=self.name,
            gradients=plain,
            milliseconds=watch.milliseconds,
            settings=dict(self.settings),
        )

    @abstractmethod
    def _maps(self, request: GradientRequest, plain: GradientResult) -> torch.Tensor:
        """One map per pick [k, H, W] in the images' dtype."""

    def _scorer(
        self, request: GradientRequest, plain: GradientResult, per_pick: int
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """score(images [b, C, H, W], rows [b]) -> targets [b]: row r is pick r // per_pick,
        scored for the class held at its original image."""
        held = plain.classes.cpu().repeat_interleave(per_pick)
        versus = None if request.versus is None else request.versus.repeat_interleave(per_pick)
        scored = request.but(
            indices=torch.arange(held.numel()), labels=held, classes=held, versus=versus
        )

        channels_last = [request.images.dim() == 4]
        probe = request.picked_images[:2].to(request.device)
        # A private copy with BatchNorm folded into the convolutions (the served model is only
        # read; the logits are the same up to rounding), or the model itself; in bfloat16 when
        # asked.
        lowered = self._lowered(request, probe)
        model = lowered or inference_copy(request.model, probe)

        def score(images: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
            # Channels-last pixels take the CPU's faster convolutions (about a third less time
            # for ResNet-20 at 32 px; the weights stay as they are), equal up to rounding. A
            # model that cannot take them (a .view of its features) gets the usual layout.
            logits = None
            with torch.inference_mode():
                if lowered is not None:
                    images = images.to(torch.bfloat16)
                if channels_last[0]:
                    try:
                        logits = model(images.contiguous(memory_format=torch.channels_last))
                    except RuntimeError:
                        channels_last[0] = False
                if logits is None:
                    logits = call_model(model, images.contiguous())
                if lowered is not None:  # scored in the images' dtype from rounded logits
                    logits = logits.to(request.images.dtype)
            # picked_targets reads rows start..end of the request; rows are consecutive.
            order = slice(int(rows[0]), int(rows[-1]) + 1)
            return scored.picked_targets(logits, order)[0]

        return score

    def _lowered(self, request: GradientRequest, probe: torch.Tensor) -> torch.nn.Module | None:
        """The model's bfloat16 copy when the ``bfloat16`` setting is on, else None; an
        InputError when it is on for images that are not float32 or a model that has no such
        copy."""
        if not self.settings["bfloat16"]:
            return None
        if request.images.dtype != torch.float32:
            raise InputError(
                f"{self.label}'s bfloat16 forwards round float32 images; these are "
                f"{str(request.images.dtype).removeprefix('torch.')}: turn bfloat16 off."
            )
        lowered = lowered_copy(request.model, probe, torch.bfloat16)
        if lowered is None:
            raise InputError(
                f"This model gives no bfloat16 copy for {self.label} on {request.device} (an "
                "operation without bfloat16 there, hooks, training mode, or logits further "
                "than bfloat16's rounding from its own): turn bfloat16 off."
            )
        return lowered

    def batch_for(self, request: GradientRequest) -> int:
        """Altered images per forward: ``batch_size``, capped by the memory budget."""
        per_image = saved_bytes_per_image(request.model, request.images, request.device)
        return max(1, min(int(self.settings["batch_size"]), DEFAULT_MEMORY_BUDGET // per_image))


class Occlusion(PerturbationMethod):
    """A(p) = mean over the windows W ∋ p of  y(x) - y(x with W filled): what hiding a patch costs.

    Zeiler and Fergus, "Visualizing and Understanding Convolutional Networks" (ECCV 2014). A
    ``window`` x ``window`` square (all channels) slides by ``stride`` from the top-left corner,
    1 + ceil((H - window) / stride) places per side, the last cut at the border; each pixel's
    value is the mean drop of the target y over the windows that cover it, as captum's
    ``Occlusion`` with sliding window (C, window, window) and strides (C, stride, stride)
    computes it. The hidden pixels take the constant ``grey``, or what ``fill`` puts there
    (``impute`` of ``gradpick.trust.road`` for ROAD's imputation, a blurred copy's pixels). Costs
    k x (positions + 1) forwards, ``batch_size`` at a time.

    Example: ``Occlusion(window=6, stride=2).forwards(request)``, then ``.attribute(request)``.
    """

    name = "occlusion"
    label = "Occlusion"
    unit = "drop of the {quantity} when hidden"
    parameters = (
        Parameter("window", "Window (px)", 6, "side of the hidden square", True, 1, (2, 16)),
        Parameter("stride", "Stride (px)", 2, "step between windows", True, 1, (1, 8)),
        Parameter("grey", "Fill value", 0.5, "the hidden pixels' value", shown=(0.0, 1.0)),
        BFLOAT16,
        BATCH,
    )

    def __init__(
        self, fill: Fill | None = None, progress: Progress | None = None, **settings: object
    ) -> None:
        super().__init__(progress, **settings)
        self.fill = fill

    def _starts(self, request: GradientRequest) -> tuple[list[int], list[int]]:
        window, stride = int(self.settings["window"]), int(self.settings["stride"])
        if stride > window:
            raise InputError(
                f"The occlusion stride ({stride} px) is larger than the window ({window} px): "
                "pixels between windows would never be hidden."
            )
        height, width = (int(side) for side in request.images.shape[-2:])
        return window_starts(height, window, stride), window_starts(width, window, stride)

    def forwards(self, request: GradientRequest) -> int:
        rows, columns = self._starts(request)
        return request.count * (len(rows) * len(columns) + 1)

    def _maps(self, request: GradientRequest, plain: GradientResult) -> torch.Tensor:
        rows, columns = self._starts(request)
        window, stride = int(self.settings["window"]), int(self.settings["stride"])
        picked = request.picked_images.to(request.device)
        k, _, height, width = picked.shape
        places = len(rows) * len(columns)
        score = self._scorer(request, plain, places + 1)
        # Row r is pick r // (places + 1) at place r % (places + 1); place 0 is the image itself.
        total = k * (places + 1)
        hidden_at = _hidden(height, width, rows, columns, window, picked.device)
        grey = torch.tensor(float(self.settings["grey"]), dtype=picked.dtype, device=picked.device)
        targets = []
        batch = self.batch_for(request)
        for start in range(0, total, batch):
            chunk = torch.arange(start, min(start + batch, total), device=picked.device)
            images = picked[chunk // (places + 1)]
            hidden = hidden_at[chunk % (places + 1)]
            if self.fill is None:
                altered = torch.where(hidden.unsqueeze(1), grey, images)
            else:
                altered = self.fill(images, hidden)
            targets.append(score(altered, chunk.cpu()))
            self._advance(int(chunk[-1]) + 1, total)
        values = torch.cat(targets).reshape(k, places + 1).to(picked.dtype)
        drops = (values[:, :1] - values[:, 1:]).reshape(k, 1, len(rows), len(columns))
        # Each drop spreads over its window: a transposed convolution with a square of ones,
        # cut to the image (the last windows stop at the border); then the mean per pixel.
        square = torch.ones(1, 1, window, window, dtype=picked.dtype, device=picked.device)
        summed = F.conv_transpose2d(drops, square, stride=stride)[..., :height, :width]
        ones = torch.ones_like(drops[:1])
        counts = F.conv_transpose2d(ones, square, stride=stride)[..., :height, :width]
        return (summed / counts).squeeze(1)


class Rise(PerturbationMethod):
    """A(p) = 1 / (N p_keep) Σ_i y(x ⊙ M_i) M_i(p): the target under random masks, weighed.

    Petsiuk et al., "RISE: Randomized Input Sampling for Explanation of Black-box Models"
    (BMVC 2018). Mask i is a grid of cells of ``cell`` pixels (ceil(H / cell) + 1 per side),
    each kept with probability ``keep``, upsampled bilinearly (``align_corners=False``) and
    shifted by a random offset within one cell, as in the paper's code. The grids and offsets
    come from one CPU generator seeded by ``seed``, so every pick gets the same masks and a
    map does not depend on which other images were picked. Costs k x masks forwards.

    Example: ``Rise(masks=1000, cell=4).attribute(request).maps``; ``.masks(32, 32)`` are its
    masks.
    """

    name = "rise"
    label = "RISE"
    unit = "{quantity} under random masks, weighed"
    parameters = (
        Parameter("masks", "Masks", 500, "number of random masks", True, 1, (100, 4000)),
        Parameter("cell", "Cell (px)", 4, "side of a mask cell", True, 1, (2, 16)),
        Parameter("keep", "Kept share", 0.5, "probability a cell is kept", least=0.0),
        Parameter("seed", "Seed", 0, "seed of the masks", True),
        BFLOAT16,
        BATCH,
    )

    def __init__(self, progress: Progress | None = None, **settings: object) -> None:
        super().__init__(progress, **settings)
        if not 0 < float(self.settings["keep"]) <= 1:
            raise InputError(f"keep must be in (0, 1]; got {self.settings['keep']!r}.")

    def _draws(self, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(grids [N, g, g] of 0/1, offsets [N, 2], cell) for images of height x width."""
        cell = int(self.settings["cell"])
        if cell > max(height, width):
            raise InputError(f"The RISE cell ({cell} px) is larger than the image.")
        cells = math.ceil(max(height, width) / cell)
        generator = torch.Generator().manual_seed(int(self.settings["seed"]))
        count = int(self.settings["masks"])
        grids = torch.rand(count, cells, cells, generator=generator, dtype=torch.float64)
        grids = (grids < float(self.settings["keep"])).to(torch.float64)
        offsets = torch.randint(0, cell, (count, 2), generator=generator)
        return grids, offsets, cell

    def masks(
        self,
        height: int,
        width: int,
        which: torch.Tensor | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """Masks ``which`` (None: all) [n, H, W] in [0, 1]: each grid upsampled to
        (cells + 1) x cell pixels, then cut at its offset."""
        grids, offsets, cell = self._draws(height, width)
        chosen = torch.arange(grids.shape[0]) if which is None else which.cpu()
        side = (grids.shape[1] + 1) * cell
        up = F.interpolate(
            grids[chosen].unsqueeze(1), size=(side, side), mode="bilinear", align_corners=False
        ).squeeze(1)
        rows = offsets[chosen, 0, None] + torch.arange(height)
        columns = offsets[chosen, 1, None] + torch.arange(width)
        picks = torch.arange(len(chosen))[:, None, None]
        return up[picks, rows[:, :, None], columns[:, None, :]].to(dtype)

    def forwards(self, request: GradientRequest) -> int:
        return request.count * int(self.settings["masks"])

    def _maps(self, request: GradientRequest, plain: GradientResult) -> torch.Tensor:
        picked = request.picked_images.to(request.device)
        k, _, height, width = picked.shape
        count = int(self.settings["masks"])
        score = self._scorer(request, plain, count)
        saliency = torch.zeros(k, height, width, dtype=picked.dtype, device=picked.device)
        batch = self.batch_for(request)
        for start in range(0, k * count, batch):
            chunk = torch.arange(start, min(start + batch, k * count))
            masks = self.masks(height, width, chunk % count, picked.dtype).to(picked.device)
            owners = (chunk // count).to(picked.device)
            targets = score(picked[owners] * masks.unsqueeze(1), chunk).to(picked.dtype)
            saliency.index_add_(0, owners, targets[:, None, None] * masks)
            self._advance(int(chunk[-1]) + 1, k * count)
        return saliency / (count * float(self.settings["keep"]))
