"""Results that show themselves in Jupyter: maps as pictures instead of tensors.

``GradientResult``, ``Attribution`` and ``TrustReport`` have a ``_repr_html_`` that calls the
functions here, so a result left at the end of a notebook cell draws one saliency map per pick
(the largest |value| over the channels, each map its own colour scale, as in the explorer
and the HTML report) with its readouts. The results hold maps but not the images they
explain, so the notebook shows the maps alone; the HTML report draws image, map and overlay.
``comparison(runs)`` shows ``gradpick.gradients.timing``'s rows as a table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from gradpick import units
from gradpick.show.html import (
    data_table,
    escape,
    figures,
    img_tag,
    key_values,
    memory_rows,
    trust_summary,
)

if TYPE_CHECKING:
    from gradpick.attribution.base import Attribution
    from gradpick.gradients.engine import GradientResult
    from gradpick.gradients.timing import StrategyRun
    from gradpick.trust.report import TrustReport

__all__ = ["Html", "attribution_html", "comparison", "gradient_html", "trust_html"]

_ROW = 'style="display:flex;flex-wrap:wrap;gap:10px;align-items:flex-start"'
_CAPTION = 'style="font-size:11px;text-align:center;margin:2px 0 0"'
_NOTE = 'style="font-size:11px;margin:4px 0 0"'


class Html(str):
    """HTML text that Jupyter displays as HTML (``_repr_html_``) rather than as a string."""

    def _repr_html_(self) -> str:
        return str(self)


def _maps(maps: torch.Tensor, captions: Sequence[str], what: str) -> str:
    """One saliency picture per row of ``maps``, each captioned, side by side."""
    cells = []
    for caption, figure in zip(captions, figures(maps), strict=True):
        picture = img_tag(figure.panels["saliency"], f"{what}: {caption}")
        cells.append(
            f'<figure style="margin:0">{picture}'
            f"<figcaption {_CAPTION}>{escape(caption)}</figcaption></figure>"
        )
    return f"<div {_ROW}>{''.join(cells)}</div>"


def _block(title: str, rows: list[tuple[str, object]], body: str) -> str:
    return (
        f'<div class="gradpick"><b>{escape(title)}</b>{key_values(rows)}{body}'
        f"<div {_NOTE}>saliency: the largest |value| over the channels, each map its own "
        "scale, dark 0 to bright at its largest</div></div>"
    )


def _captions(result: GradientResult) -> list[str]:
    return [
        f"#{index} · class {int(chosen)} · {result.target} {float(value):.3g}"
        for index, chosen, value in zip(
            result.indices, result.classes.tolist(), result.target_values.tolist(), strict=True
        )
    ]


def _step_rows(result: GradientResult) -> list[tuple[str, object]]:
    return [
        ("picks", f"{len(result.indices)} at indices {list(result.indices)}"),
        ("target", result.target),
        ("strategy", f"{result.strategy}, reduction {result.reduction}"),
        (
            "gradient step",
            f"{result.timing:,.1f} ms on {result.device} in {result.chunks} chunk(s)",
        ),
        *memory_rows(result.memory),
    ]


def gradient_html(result: GradientResult) -> str:
    """The gradients' saliency maps, one per pick, and the step's readouts."""
    body = _maps(result.gradients, _captions(result), "gradient")
    return _block("Input gradients", _step_rows(result), body)


def attribution_html(result: Attribution) -> str:
    """The attribution maps, one per pick, with the method, its settings and the readouts."""
    settings = ", ".join(f"{name} = {value}" for name, value in result.settings.items())
    rows: list[tuple[str, object]] = [
        ("method", result.method),
        ("settings", settings or "none"),
        ("whole method", f"{result.milliseconds:,.1f} ms"),
        *_step_rows(result.gradients),
    ]
    body = _maps(result.maps, _captions(result.gradients), result.method)
    return _block(f"Attribution maps ({result.method})", rows, body)


def trust_html(trust: TrustReport, record: Mapping[str, Any]) -> str:
    """Each method's maps of the trained model and of the fully randomised one, per pick, and
    the checks' summary tables."""
    sections = []
    for method, curve in trust.randomisation.items():
        last = curve.steps[-1]
        maps = torch.cat([curve.original.cpu(), last.maps.cpu()])
        captions = [f"#{index} trained" for index in trust.indices] + [
            f"#{index} {len(last.randomised)} layers random" for index in trust.indices
        ]
        sections.append(f"<p><b>{escape(method)}</b></p>{_maps(maps, captions, method)}")
    rows: list[tuple[str, object]] = [
        ("picks", f"{len(trust.indices)} at indices {list(trust.indices)}"),
        ("explained classes", trust.classes.tolist()),
    ]
    body = "".join(sections) + trust_summary(record)
    return _block("Trust checks", rows, body)


def comparison(runs: Sequence[StrategyRun]) -> Html:
    """``gradpick.gradients.timing``'s rows as a table that a notebook displays."""
    header = ("row", "ms", "saved for backward", "peak", "max |difference|")
    rows = [
        (
            run.name,
            f"{run.milliseconds:,.2f}",
            units.format_bytes(run.saved_bytes),
            units.format_bytes(run.peak_bytes),
            f"{run.max_abs_difference:.2e}",
        )
        for run in runs
    ]
    return Html(data_table(header, rows, numeric=4))
