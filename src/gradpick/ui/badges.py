"""Trust badges beside the explorer's maps: a verdict per pick from ``gradpick.trust.quick``.

Each map gets one coloured label per check (passes / weak / fails) with its figure; hovering a
label shows what was measured and what it means (a ``title`` tooltip). A failing map is drawn
dimmed, its reason in its caption. The checks run with the click once its maps are sent, within
half of the click's server time up to then (``quick.BUDGET_SHARE``): a check that does not fit
shows "not run", and a button runs it (with no budget) for those picks; the badges are cached
like the maps; the switch turns them off, and then nothing runs.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import streamlit as st

from gradpick.attribution import Attribution
from gradpick.trust.quick import BUDGET_SHARE, FAILS, NOT_RUN, PASSES, WEAK, QuickChecks
from gradpick.ui import cache, keys, state
from gradpick.ui.guard import guarded
from gradpick.ui.heatmaps import HeatmapRequest
from gradpick.ui.session import Loaded

__all__ = [
    "COLOURS",
    "DIMMED",
    "any_fails",
    "applied",
    "budget_s",
    "caption",
    "checks",
    "dim",
    "draw",
    "pick_html",
    "switch",
]

COLOURS = {PASSES: "#1a7f37", WEAK: "#9a6700", FAILS: "#cf222e", NOT_RUN: "#6e7781"}
DIMMED = 0.35
"""Opacity of a failing map's pictures."""


def switch() -> bool:
    """The badges' on/off switch (on by default, from the session: a link may turn it off)."""
    state.start_at(st.session_state, keys.TRUST_BADGES, True)
    return st.toggle(
        "Trust badges",
        key=keys.TRUST_BADGES,
        help="A verdict per map from cheap checks run with each click: does the map change "
        "for the runner-up class, and when the weights that feed it (from the output down to "
        "its layer) are random (Spearman of |map|, with thresholds per method family "
        "calibrated on known-good and known-bad maps: gradpick bench-badges), IG's "
        "completeness, ROAD when time allows. Off: no check runs.",
    )


def budget_s(server_s: float) -> float:
    """Seconds the checks may take: ``BUDGET_SHARE`` of the click's server time before them."""
    return BUDGET_SHARE * server_s


def checks(
    loaded: Loaded,
    request: HeatmapRequest,
    shown: Attribution,
    picked: Sequence[int],
    server_s: float,
) -> QuickChecks | None:
    """The checks of the shown maps, ``server_s`` being the click's server time before them
    (None when they failed, with the reason on the page); in full, with no budget, once the
    run button was pressed for these picks and settings."""
    wanted = (tuple(picked), request)
    full: list[tuple[tuple[int, ...], HeatmapRequest]] = st.session_state.setdefault(
        keys.TRUST_BADGES_FULL, []
    )
    if st.session_state.get(keys.TRUST_BADGES_RUN) and wanted not in full:
        full.append(wanted)
    unlimited = wanted in full
    with guarded("The trust badges"):
        return cache.quick_checks(
            loaded.key,
            loaded.option.identity,
            str(loaded.device),
            tuple(picked),
            request,
            unlimited,
            loaded.model,
            loaded.batch,
            shown,
            math.inf if unlimited else budget_s(server_s),
            loaded.result.logits,
        )
    return None


def dim(picture: np.ndarray) -> np.ndarray:
    """``picture`` (uint8 RGBA, as ``heatmaps.strip`` draws it) at opacity ``DIMMED``; an RGB
    one faded towards white."""
    if picture.shape[-1] == 4:
        faded = picture.copy()
        faded[..., 3] = (picture[..., 3].astype(np.float32) * DIMMED).round().astype(np.uint8)
        return faded
    blended = picture.astype(np.float32) * DIMMED + 255.0 * (1 - DIMMED)
    return blended.round().astype(np.uint8)


def any_fails(found: QuickChecks | None) -> bool:
    """Whether a map failed a check (its pictures are then drawn again, dimmed)."""
    return found is not None and any(pick.verdict == FAILS for pick in found.picks)


def applied(
    found: QuickChecks | None, strips: list[np.ndarray], captions: list[str]
) -> tuple[list[np.ndarray], list[str]]:
    """The maps' pictures and captions with the verdicts: a failing map dimmed, its verdict and
    reason in its caption (unchanged when the badges are off)."""
    if found is None:
        return strips, captions
    failing = [pick.verdict == FAILS for pick in found.picks]
    return (
        [dim(strip) if fails else strip for strip, fails in zip(strips, failing, strict=True)],
        [
            f"{caption} · fails: {pick.reason}" if fails else caption
            for caption, pick, fails in zip(captions, found.picks, failing, strict=True)
        ],
    )


def pick_html(title: str, found: QuickChecks, position: int) -> str:
    """One line of labels for one pick; the meaning of each is its hover text."""
    pick = found.picks[position]
    labels = [
        f'<span title="{html.escape(badge.meaning)}" style="color:white;'
        f"background:{COLOURS[badge.verdict]};border-radius:4px;padding:0 5px;"
        f'margin-right:4px;font-size:0.8em">{html.escape(badge.label)} · {badge.verdict}</span>'
        for badge in pick.badges
    ]
    return (
        f'<div class="trust-badge" data-verdict="{pick.verdict}">'
        f"<b>{html.escape(title)}</b> {''.join(labels)}</div>"
    )


def draw(found: QuickChecks | None, titles: Sequence[str]) -> None:
    """The badge lines of every pick, in the order of the maps above them."""
    if found is None:
        return
    with st.container(key=keys.TRUST_BADGES_CONTAINER):
        st.markdown(
            "".join(pick_html(title, found, i) for i, title in enumerate(titles)),
            unsafe_allow_html=True,
        )
        st.caption(caption(found))
        if found.skipped:
            st.button(
                "Run the checks that did not fit",
                key=keys.TRUST_BADGES_RUN,
                help="Runs " + ", ".join(found.skipped) + " for these maps with no time budget "
                "(this click may then take a while); the result is kept like the maps'.",
            )


def caption(found: QuickChecks) -> str:
    """The line under the badges: their time, with each check's own when any ran."""
    each = "".join(f", {check} {ms:,.0f} ms" for check, ms in found.check_ms)
    timing = f"{found.milliseconds:,.0f} ms" + (f"; {each[2:]}" if each else "")
    return (
        f"Trust badges ({timing}): hover a label for what was measured and what it means; a "
        "failing map is dimmed. Thresholds and error rates: docs, Trust checks. The full checks "
        "are in the Trust tab."
    )
