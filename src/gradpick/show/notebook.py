"""Results that show themselves in Jupyter: maps as pictures instead of tensors.

``GradientResult``, ``Attribution`` and ``TrustReport`` have a ``_repr_html_`` that calls the
functions here, so a result left at the end of a notebook cell draws one saliency map per pick
(the largest |value| over the channels, each map its own colour scale, as in the explorer
and the HTML report) with its readouts. The results hold maps but not the images they
explain, so the notebook shows the maps alone; the HTML report draws image, map and overlay.
``comparison(runs)`` shows ``gradpick.gradients.timing``'s rows as a table. A
``Triage``, a two-model ``Pairing`` and its ``MapComparison`` show themselves too, with short
one-line ``repr``s, classes by name and the layer of a layer method; so do the failure slices of
a store (``gradpick.slices.stored.Found``), as the report draws them
(``gradpick.show.slice_cards``). Below every result type,
which it names for typing only: each result hands over what it derives (a pairing's flips, a
trust report's record) when it calls the function that draws it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from gradpick import units
from gradpick.show.html import (
    class_name,
    data_table,
    escape,
    figures,
    img_tag,
    key_values,
    memory_rows,
)
from gradpick.show.slice_cards import slices_html
from gradpick.show.trust_tables import trust_summary

if TYPE_CHECKING:
    from gradpick.attribution.base import Attribution
    from gradpick.compare import MapComparison
    from gradpick.gradients.engine import GradientResult
    from gradpick.gradients.timing import StrategyRun
    from gradpick.triage.ranking import Triage
    from gradpick.trust.report import TrustReport

__all__ = [
    "TRIAGE_ROWS",
    "Html",
    "attribution_html",
    "comparison",
    "found_slices_html",
    "gradient_html",
    "map_comparison_html",
    "pairing_html",
    "triage_html",
    "trust_html",
]

TRIAGE_ROWS = 10
"""How many of the most suspect images a triage shows in a notebook."""

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


def trust_html(trust: TrustReport, record: Mapping[str, Any], layer: str | None) -> str:
    """Each method's maps of the trained model and of the fully randomised one, per pick, and
    the checks' summary tables from ``record`` (``report_dict``); ``layer`` names the layer of
    the layer methods among them (None: none is)."""
    sections = []
    for method, curve in trust.randomisation.items():
        last = curve.steps[-1]
        maps = torch.cat([curve.original.cpu(), last.maps.cpu()])
        captions = [f"#{index} trained" for index in trust.indices] + [
            f"#{index} {len(last.randomised)} layers random" for index in trust.indices
        ]
        sections.append(f"<p><b>{escape(method)}</b></p>{_maps(maps, captions, method)}")
    names = trust.class_names
    rows: list[tuple[str, object]] = [
        ("picks", f"{len(trust.indices)} at indices {list(trust.indices)}"),
        (
            "explained classes",
            ", ".join(class_name(names, int(c), "class {}") for c in trust.classes.tolist()),
        ),
        ("methods", ", ".join(trust.options.methods)),
    ]
    if layer is not None:
        rows.append(("layer", layer))
    body = "".join(sections) + trust_summary(record, names)
    return _block("Trust checks", rows, body)


def triage_html(found: Triage) -> str:
    """The most suspect images as a table: given and suggested class by name, the score."""
    top = [int(row) for row in found.order[:TRIAGE_ROWS]]
    table = data_table(
        ("rank", "row", "given", "suggested", "flagged", "suggested p", "score"),
        (
            (
                rank,
                row,
                found.name(int(found.given[row])),
                found.name(int(found.suggested[row])),
                "yes" if found.flagged[row] else "",
                f"{float(found.suggested_probability[row]):.3f}",
                f"{float(found.score[row]):.3f}",
            )
            for rank, row in enumerate(top, start=1)
        ),
        numeric=2,
    )
    rows: list[tuple[str, object]] = [
        ("images", f"{len(found.given):,}"),
        ("flagged as label issues", f"{int(found.flagged.sum()):,}"),
        ("neighbours", "yes" if found.neighbours is not None else "no (self-confidence only)"),
    ]
    return (
        f'<div class="gradpick"><b>Label triage</b>{key_values(rows)}'
        f"<p>The {len(top)} most suspect:</p>{table}</div>"
    )


def found_slices_html(kept: Mapping[str, Any], store: str) -> str:
    """The slices of a store (a slices run's JSON, ``Found.to_json``): the ranked table and a
    card per slice with its mean map, description and verification."""
    return (
        f'<div class="gradpick"><b>Failure slices of {escape(store)}</b>{slices_html(kept)}</div>'
    )


def pairing_html(
    size: int,
    summaries: Sequence[Mapping[str, Any]],
    flip_counts: Mapping[str, int],
    classes: Sequence[Mapping[str, Any]],
) -> str:
    """Both models (first, second) with their accuracies (``summaries``), the flip counts and
    the per-class table (``classes``, by name) of a pairing of ``size`` images."""
    models = [
        (
            role,
            f"{model['name']}"
            + ("" if model["accuracy"] is None else f", accuracy {model['accuracy']:.2%}"),
        )
        for role, model in zip(("first", "second"), summaries, strict=True)
    ]
    counts = data_table(
        ("cell", "images"),
        ((name.replace("_", " "), f"{count:,}") for name, count in flip_counts.items()),
        numeric=1,
    )
    header = tuple(classes[0]) if classes else ("class",)
    table = data_table(
        header,
        (tuple(_cell(value) for value in row.values()) for row in classes),
        numeric=len(header) - 1,
    )
    return (
        f'<div class="gradpick"><b>Two models on {size:,} images</b>'
        f"{key_values(models)}<p>Flips:</p>{counts}<p>Per class:</p>{table}</div>"
    )


def _cell(value: object) -> object:
    return f"{value:.3f}" if isinstance(value, float) else value


def map_comparison_html(compared: MapComparison, layer_method: bool) -> str:
    """Both models' maps of each pick for the same class, side by side, and how alike; with
    ``layer_method``, the layer each model's maps come from."""
    first, second = (compared.names + ("first", "second"))[:2]
    captions = [
        f"#{row} · {class_name(compared.class_names, klass, 'class {}')} · {model}"
        for model in (first, second)
        for row, klass in zip(compared.rows, compared.classes, strict=True)
    ]
    maps = torch.cat([compared.maps[0].unsqueeze(1), compared.maps[1].unsqueeze(1)])
    layers = [layer or "automatic" for layer in compared.layers]
    rows: list[tuple[str, object]] = [
        ("method", compared.method),
        ("compared at", f"{compared.size[0]}x{compared.size[1]}"),
        ("mean Spearman", f"{float(compared.spearman.mean()):.3f}"),
        ("mean SSIM", f"{float(compared.ssim.mean()):.3f}"),
    ]
    if layer_method:
        rows.append(("layers", f"{first}: {layers[0]}; {second}: {layers[1]}"))
    return _block("Both models' maps", rows, _maps(maps, captions, compared.method))


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
