"""Results that show themselves in Jupyter: maps as pictures instead of tensors.

``GradientResult``, ``Attribution`` and ``TrustReport`` have a ``_repr_html_`` that calls the
functions here, so a result left at the end of a notebook cell draws one saliency map per pick
(the largest |value| over the channels, each map its own colour scale, as in the explorer
and the HTML report) with its readouts. The results hold maps but not the images they
explain, so the notebook shows the maps alone; ``gradpick.report.build_report`` draws image,
map and overlay. ``comparison(runs)`` shows ``gradpick.compare``'s rows as a table. A
``Triage``, a two-model ``Pairing`` and its ``MapComparison`` show themselves too, with short
one-line ``repr``s, classes by name and the layer of a layer method.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gradpick import report, units
from gradpick.attribution import LAYER_METHODS, Attribution
from gradpick.compare import StrategyRun
from gradpick.gradients import GradientResult
from gradpick.report import figures, img_tag, key_values, memory_rows
from gradpick.triage import Triage
from gradpick.trust.report import TrustReport
from gradpick.versus import MapComparison, Pairing, flips, model_summaries, per_class

__all__ = [
    "TRIAGE_ROWS",
    "Html",
    "attribution_html",
    "comparison",
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
            f"<figcaption {_CAPTION}>{report.escape(caption)}</figcaption></figure>"
        )
    return f"<div {_ROW}>{''.join(cells)}</div>"


def _block(title: str, rows: list[tuple[str, object]], body: str) -> str:
    return (
        f'<div class="gradpick"><b>{report.escape(title)}</b>{key_values(rows)}{body}'
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


def trust_html(trust: TrustReport) -> str:
    """Each method's maps of the trained model and of the fully randomised one, per pick, and
    the checks' summary tables."""
    sections = []
    for method, curve in trust.randomisation.items():
        last = curve.steps[-1]
        maps = torch.cat([curve.original.cpu(), last.maps.cpu()])
        captions = [f"#{index} trained" for index in trust.indices] + [
            f"#{index} {len(last.randomised)} layers random" for index in trust.indices
        ]
        sections.append(f"<p><b>{report.escape(method)}</b></p>{_maps(maps, captions, method)}")
    names = trust.class_names
    rows: list[tuple[str, object]] = [
        ("picks", f"{len(trust.indices)} at indices {list(trust.indices)}"),
        ("explained classes", ", ".join(_named(names, int(c)) for c in trust.classes.tolist())),
        ("methods", ", ".join(trust.options.methods)),
    ]
    if any(method in LAYER_METHODS for method in trust.options.methods):
        rows.append(("layer", trust.options.settings.layer or "the automatic layer"))
    body = "".join(sections) + report.trust_summary(trust, names)
    return _block("Trust checks", rows, body)


def _named(class_names: Sequence[str], index: int) -> str:
    return class_names[index] if 0 <= index < len(class_names) else f"class {index}"


def triage_html(found: Triage) -> str:
    """The most suspect images as a table: given and suggested class by name, the score."""
    top = [int(row) for row in found.order[:TRIAGE_ROWS]]
    table = report.data_table(
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


def pairing_html(pairing: Pairing) -> str:
    """Both models (first, second) with their accuracies, the flip counts and the per-class
    table, classes by name."""
    models = [
        (
            role,
            f"{model['name']}"
            + ("" if model["accuracy"] is None else f", accuracy {model['accuracy']:.2%}"),
        )
        for role, model in zip(("first", "second"), model_summaries(pairing), strict=True)
    ]
    counts = report.data_table(
        ("cell", "images"),
        ((name.replace("_", " "), f"{count:,}") for name, count in flips(pairing).items()),
        numeric=1,
    )
    classes = per_class(pairing)
    header = tuple(classes[0]) if classes else ("class",)
    table = report.data_table(
        header,
        (tuple(_cell(value) for value in row.values()) for row in classes),
        numeric=len(header) - 1,
    )
    return (
        f'<div class="gradpick"><b>Two models on {len(pairing):,} images</b>'
        f"{key_values(models)}<p>Flips:</p>{counts}<p>Per class:</p>{table}</div>"
    )


def _cell(value: object) -> object:
    return f"{value:.3f}" if isinstance(value, float) else value


def map_comparison_html(compared: MapComparison) -> str:
    """Both models' maps of each pick for the same class, side by side, and how alike."""
    first, second = (compared.names + ("first", "second"))[:2]
    captions = [
        f"#{row} · {_named(compared.class_names, klass)} · {model}"
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
    if compared.method in LAYER_METHODS:
        rows.append(("layers", f"{first}: {layers[0]}; {second}: {layers[1]}"))
    return _block("Both models' maps", rows, _maps(maps, captions, compared.method))


def comparison(runs: Sequence[StrategyRun]) -> Html:
    """``gradpick.compare``'s rows as a table that a notebook displays."""
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
    return Html(report.data_table(header, rows, numeric=4))
