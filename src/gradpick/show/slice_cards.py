"""Failure slices as HTML: the ranked table and a card per slice, for the report and notebooks.

Drawn from the plain JSON of a slices run (``gradpick.slices.stored.Found.to_json``, the file
``gradpick slices`` keeps beside a store), so the HTML report (``gradpick.share.report``), a
notebook's ``Found`` and the explorer's Slices tab say the same: each slice's size, errors and
error rate, its description in words, its verification by removing its evidence (the change of
the calls against the same area removed at random, their ratio and the Fisher test's p-value)
and its mean map (each member's map moved so its peak is at the centre).

Example::

    slices_html(found.to_json())  # '<div class="gradpick-slices">...'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gradpick.show.html import data_table, escape, img_tag
from gradpick.show.render import colorize, fit

__all__ = ["CARDS", "MAP_SIDE", "mean_map_picture", "slices_html", "verification"]

CARDS = 12
"""Slices drawn as cards, in rank order (the table lists every slice)."""
MAP_SIDE = 96
"""Pixels of a mean map's picture."""


def verification(row: Mapping[str, Any], strong: str = "{}") -> str:
    """One line saying whether the slice verified and by how much; ``strong`` wraps the verdict
    word (``"**{}**"`` for Markdown)."""
    effect = row.get("effect")
    if effect is None:
        return "No errors to test."
    ratio = "∞" if effect["ratio"] is None else f"{effect['ratio']:.1f}"
    verdict = strong.format("Verified") if row["verified"] else "Not verified"
    line = (
        f"{verdict}: removing the evidence changed {effect['evidence_change']:.0%} of "
        f"{effect['tested']} calls, the same area at random {effect['random_change']:.0%} "
        f"(x{ratio}, p = {effect['p_value']:.2g})."
    )
    colour = row.get("colour_effect")
    if colour is not None:
        statistic = colour.get("statistic", "ratio")
        value = colour.get(statistic)
        times = "∞" if value is None else f"{value:.1f}"
        odds = "odds x" if statistic == "odds_ratio" else "x"
        line += (
            f" Giving {colour['tested']} correctly called images of its label its colour made "
            f"{colour['evidence_change']:.0%} of them its errors' call, other classes "
            f"{colour['random_change']:.0%} ({odds}{times}, p = {colour['p_value']:.2g})."
        )
    return line


def mean_map_picture(mean_map: Sequence[Sequence[float]], side: int = MAP_SIDE) -> np.ndarray:
    """The slice's mean map in the maps' colours, dark 0 to bright at its largest, ``side``
    pixels high (whole-pixel enlargement)."""
    values = np.asarray(mean_map, dtype=np.float64)
    limit = float(values.max()) if values.size and values.max() > 0 else 1.0
    return fit(colorize(values, limit), side)


def _figures(effect: Mapping[str, Any] | None) -> tuple[str, str, str, str]:
    if effect is None:
        return ("", "", "", "")
    ratio = "∞" if effect["ratio"] is None else f"{effect['ratio']:.1f}"
    return (
        f"{effect['evidence_change']:.0%}",
        f"{effect['random_change']:.0%}",
        ratio,
        f"{effect['p_value']:.2g}",
    )


def _card(row: Mapping[str, Any], verdict: str | None) -> str:
    rank = int(row["rank"])
    picture = img_tag(
        mean_map_picture(row["mean_map"]), f"mean map of slice {rank}", slice=rank, panel="mean"
    )
    judged = "" if verdict is None else f"<p>Judged <b>{escape(verdict)}</b>.</p>"
    return (
        f'<section class="pick" data-slice="{rank}" style="display:flex;gap:14px;'
        'align-items:flex-start;margin:0 0 12px">'
        f'<figure style="margin:0">{picture}<figcaption style="font-size:11px">mean map, '
        "peaks at the centre</figcaption></figure>"
        f'<div class="facts"><h3 style="margin:0 0 4px">Slice {rank}: {int(row["size"]):,} '
        f"images, {int(row['errors']):,} errors (error rate {float(row['error_rate']):.0%})</h3>"
        f"<p>{escape(row['description'])}</p>"
        f'<p data-role="verification">{verification(row, "<b>{}</b>")}</p>{judged}</div>'
        "</section>"
    )


def slices_html(kept: Mapping[str, Any], verdicts: Mapping[int, str] | None = None) -> str:
    """The slices of ``kept`` (a slices run's JSON): a table of every slice, ranked, then a
    card for each of the first ``CARDS``; ``verdicts`` (rank -> the verdict in words) are said
    beside the slices judged."""
    verdicts = verdicts or {}
    rows = list(kept.get("slices", []))
    verified = sum(bool(row["verified"]) for row in rows)
    table = data_table(
        (
            "rank",
            "verified",
            "verdict",
            "images",
            "errors",
            "error rate",
            "evidence removed",
            "random area",
            "ratio",
            "p",
        ),
        (
            (
                row["rank"],
                "yes" if row["verified"] else "no",
                verdicts.get(int(row["rank"]), ""),
                f"{int(row['size']):,}",
                f"{int(row['errors']):,}",
                f"{float(row['error_rate']):.0%}",
                *_figures(row.get("effect")),
            )
            for row in rows
        ),
        numeric=7,
    )
    lead = (
        f"{len(rows)} slices of {int(kept.get('errors', 0)):,} errors among "
        f"{int(kept.get('rows', 0)):,} images, {verified} verified by removing their evidence "
        f"({escape(kept.get('method', ''))} maps). A slice is verified when removing its "
        "evidence changes the calls clearly more often than removing the same area at random."
    )
    cards = "".join(_card(row, verdicts.get(int(row["rank"]))) for row in rows[:CARDS])
    return f'<div class="gradpick-slices"><p>{lead}</p>{table}{cards}</div>'
