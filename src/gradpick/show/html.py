"""HTML primitives shared by the report and the notebook displays: escaped text, embedded
pictures, tables.

Below every result type (it reads them for typing only), so a result's ``_repr_html_`` and the
self-contained report (``gradpick.share.report``) draw with the same pieces.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from PIL import Image

from gradpick import units
from gradpick.show import render

if TYPE_CHECKING:
    from gradpick.runtime.measure import MemoryReport

__all__ = [
    "DISPLAY_SIDE",
    "Figure",
    "class_name",
    "data_table",
    "data_uri",
    "escape",
    "figures",
    "img_tag",
    "key_values",
    "memory_rows",
    "png_bytes",
    "trust_summary",
]

DISPLAY_SIDE = 128
"""Panels are drawn this many pixels high (``render.fit``: whole-pixel enlargement, no blur)."""


def class_name(class_names: Sequence[str], index: int) -> str:
    """The source's name for a model class, or the number when the source has fewer classes."""
    return class_names[index] if 0 <= index < len(class_names) else str(index)


def escape(value: object) -> str:
    """Any value as HTML text, escaped (names, paths and descriptions come from users)."""
    return html.escape(str(value), quote=True)


def png_bytes(array: np.ndarray) -> bytes:
    """A uint8 [H, W] or [H, W, 3|4] picture as PNG bytes."""
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array)).save(buffer, format="PNG")
    return buffer.getvalue()


def data_uri(png: bytes) -> str:
    """PNG bytes as a ``data:`` URI, so the page carries its pictures itself."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def img_tag(array: np.ndarray, alt: str, **data: object) -> str:
    """An <img> of ``array`` embedded as a data URI; ``data`` become ``data-*`` attributes."""
    height, width = array.shape[:2]
    extra = "".join(f' data-{escape(name)}="{escape(value)}"' for name, value in data.items())
    return (
        f'<img src="{data_uri(png_bytes(array))}" width="{width}" height="{height}" '
        f'alt="{escape(alt)}"{extra}>'
    )


@dataclass(frozen=True)
class Figure:
    """One pick's pictures at ``DISPLAY_SIDE`` pixels, by panel name, and the heat scale."""

    panels: dict[str, np.ndarray]
    """'image', 'saliency' and 'overlay' with images; 'saliency' alone without."""
    limit: float
    """The saliency colour scale runs from 0 to ``limit``."""


def figures(
    maps: torch.Tensor,
    images: torch.Tensor | None = None,
    shared_scale: bool = False,
    side: int = DISPLAY_SIDE,
) -> list[Figure]:
    """Pictures of k maps [k, C, H, W] (largest |value| over channels, ``render.saliency``),
    with the picked images uint8 [k, 3, H, W] and the overlay when ``images`` are given.

    Each map gets its own colour scale (its structure shows, as in the explorer's default),
    or with ``shared_scale`` all k one upper limit (magnitudes comparable).
    """
    heat = render.saliency(maps.detach().cpu())
    limits = render.scale_limits(heat, shared=shared_scale)
    pictures = []
    for row, (values, limit) in enumerate(zip(heat, limits, strict=True)):
        heat_rgb = render.colorize(values, float(limit))
        panels = {"saliency": render.fit(heat_rgb, side)}
        if images is not None:
            original = render.as_hwc(images[row])
            panels = {
                "image": render.fit(original, side),
                **panels,
                "overlay": render.fit(render.overlay(original, heat_rgb), side),
            }
        pictures.append(Figure(panels, float(limit)))
    return pictures


def _is_hash(label: str) -> bool:
    return label.endswith("sha256") or label == "identity"


def key_values(rows: Iterable[tuple[str, object]]) -> str:
    """A two-column table of (label, value), both escaped; None values are left out."""
    hash_cell = '<td class="hash">'
    cells = "".join(
        f"<tr><th>{escape(label)}</th>{hash_cell if _is_hash(label) else '<td>'}"
        f"{escape(value)}</td></tr>"
        for label, value in rows
        if value is not None
    )
    return f'<table class="kv">{cells}</table>'


def data_table(header: Sequence[str], rows: Iterable[Sequence[object]], numeric: int = 0) -> str:
    """A table whose last ``numeric`` columns are right-aligned numbers; every cell escaped."""
    first = len(header) - numeric

    def cell(tag: str, column: int, value: object) -> str:
        kind = ' class="num"' if column >= first else ""
        return f"<{tag}{kind}>{escape(value)}</{tag}>"

    head = "".join(cell("th", column, name) for column, name in enumerate(header))
    body = "".join(
        "<tr>" + "".join(cell("td", column, value) for column, value in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f'<table class="data"><tr>{head}</tr>{body}</table>'


def _number(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}g}"


def _spread(values: Mapping[str, float | None]) -> str:
    mean, std = values["mean"], values["std"]
    return "n/a" if mean is None else f"{mean:.3f} ± {std or 0.0:.3f}"


def trust_summary(record: Mapping[str, Any], class_names: Sequence[str] = ()) -> str:
    """The trust checks as HTML tables, from the record ``gradpick check`` writes
    (``gradpick.trust.report.report_dict``)."""
    parts = ["<h3>Randomisation test</h3>"]
    parts.append(
        '<p class="lead">Similarity of each map to the map of the model with its layers '
        "randomised (mean ± std over the picks). A map that stays similar does not depend on "
        "what the model learned.</p>"
    )
    rows = []
    for method, curve in record["randomisation"].items():
        first, last = curve["steps"][0], curve["steps"][-1]
        rows.append(
            (
                method,
                curve["mode"],
                f"{first['layer']}",
                _spread(first["spearman"]),
                f"{last['randomised_layers']} layers",
                _spread(last["spearman"]),
                _spread(last["ssim"]),
            )
        )
    parts.append(
        data_table(
            (
                "method",
                "mode",
                "first randomised",
                "its Spearman",
                "then randomised",
                "Spearman",
                "SSIM",
            ),
            rows,
            numeric=4,
        )
    )
    parts.append("<h3>Completeness (Integrated Gradients)</h3>")
    parts.append(
        data_table(
            ("index", "class", "baseline", "steps", "sum", "F(x) − F(baseline)", "error"),
            (
                (
                    row["index"],
                    class_name(class_names, row["class"]),
                    row["baseline"],
                    row["steps"],
                    _number(row["attribution_sum"], 4),
                    _number(row["difference"], 4),
                    "n/a" if row["relative_error"] is None else f"{row['relative_error']:.2%}",
                )
                for row in record["completeness"]
            ),
            numeric=4,
        )
    )
    faithful = record["faithfulness"]
    parts.append("<h3>Faithfulness (deletion lower, insertion higher is better)</h3>")
    parts.append(
        data_table(
            ("method", "deletion AUC", "random order", "insertion AUC", "random order"),
            (
                (
                    method,
                    _spread(row["deletion_auc"]),
                    _spread(row["random_deletion_auc"]),
                    _spread(row["insertion_auc"]),
                    _spread(row["random_insertion_auc"]),
                )
                for method, row in faithful["methods"].items()
            ),
            numeric=4,
        )
    )
    maps = record["class_maps"]
    parts.append("<h3>Top classes</h3>")
    parts.append(
        data_table(
            ("index", "top classes (probability)"),
            (
                (
                    index,
                    ", ".join(
                        f"{class_name(class_names, c)} {p:.1%}"
                        for c, p in zip(classes, probabilities, strict=True)
                    ),
                )
                for index, classes, probabilities in zip(
                    record["indices"], maps["top_classes"], maps["top_probabilities"], strict=True
                )
            ),
        )
    )
    times = ", ".join(f"{name} {ms:,.0f} ms" for name, ms in record["milliseconds"].items())
    parts.append(f'<p class="lead">Time per check: {escape(times)}.</p>')
    return "".join(parts)


def memory_rows(memory: MemoryReport | None) -> list[tuple[str, str]]:
    """The memory readout as (label, 'amount: what it counts') rows."""
    if memory is None:
        return [("memory", "not measured")]
    both = (("saved for backward", memory.saved_for_backward), ("peak", memory.peak))
    return [
        (label, f"{units.format_bytes(figure.bytes, missing='n/a')}: {figure.counts}")
        for label, figure in both
    ]
