"""HTML primitives shared by the report and the notebook displays: escaped text, embedded
pictures, tables.

Below every result type (it reads them for typing only), so a result's ``_repr_html_`` and the
self-contained report (``gradpick.share.report``) draw with the same pieces.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
]

DISPLAY_SIDE = 128
"""Panels are drawn this many pixels high (``render.fit``: whole-pixel enlargement, no blur)."""


def class_name(class_names: Sequence[str], index: int, unnamed: str = "{}") -> str:
    """The source's name for a model class, or ``unnamed`` with the number filled in when the
    source has fewer classes."""
    return class_names[index] if 0 <= index < len(class_names) else unnamed.format(index)


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


def memory_rows(memory: MemoryReport | None) -> list[tuple[str, str]]:
    """The memory readout as (label, 'amount: what it counts') rows."""
    if memory is None:
        return [("memory", "not measured")]
    both = (("saved for backward", memory.saved_for_backward), ("peak", memory.peak))
    return [
        (label, f"{units.format_bytes(figure.bytes, missing='n/a')}: {figure.counts}")
        for label, figure in both
    ]
