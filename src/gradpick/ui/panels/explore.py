"""Heatmaps of the picked images next to the readouts of the gradient step that made them."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable

import streamlit as st

from gradpick import attribution
from gradpick.attribution import Attribution
from gradpick.attribution.notes import MapNote, grouped_notes, map_notes
from gradpick.picking import rules as selection
from gradpick.runtime.measure import MemoryReport, profiler_warming
from gradpick.share import export, report
from gradpick.show import render
from gradpick.triage.verdicts import VERDICTS
from gradpick.trust.agreement import TOP_SHARE
from gradpick.ui import (
    badges,
    cache,
    figures,
    heatmaps,
    judged,
    keys,
    layer_select,
    media,
    service,
    state,
)
from gradpick.ui.browser import pixels
from gradpick.ui.guard import guarded
from gradpick.ui.heatmaps import HeatmapRequest
from gradpick.ui.session import Loaded, Settings
from gradpick.units import UNIT_NOTE, format_bytes

__all__ = [
    "DETAILED_ROWS",
    "MAP_GAP",
    "PANELS_COMPACT",
    "PANELS_FULL",
    "PANELS_LAYER",
    "PROFILER_WARMING",
    "absorb_target_click",
    "render_panel",
]

DETAILED_ROWS = 12
"""Up to this many picks get a full row each (with channel maps); more get a compact grid."""
PANELS_FULL = "image · saliency |gradient| · overlay · red · green · blue (signed)"
PANELS_COMPACT = "image · saliency |gradient| · overlay"
PANELS_LAYER = "image · layer map · overlay"
MAP_GAP = 6
"""Transparent picture pixels between the detailed view's maps."""
MEMORY_NOTE = (
    "Measured once for each number of picks with these settings: a step's memory follows "
    "the tensors' shapes, not the pixels, so another image of the batch costs the same."
)
PROFILER_WARMING = (
    "Memory measured from a later click: the server is still setting up its memory profiler "
    "(its first use takes a moment), and this click did not wait for it."
)
DETAIL_LABEL = "Detailed view: one pick's maps large, each pixel's value on hover, its classes"
DOWNLOADS_LABEL = "Downloads: the gradients (.pt, .npz), the heatmap grid (.png), reports"


def absorb_target_click() -> None:
    """A click on a probability bar makes its class the target; runs before the sidebar."""
    session = st.session_state
    event = state.fresh_selection(session, keys.PROBABILITY_CHART)
    classes = selection.indices_from_plotly_selection(event)
    if classes:
        session[keys.TARGET_MODE] = "class"
        session[keys.TARGET_CLASS] = classes[-1]


def render_panel(loaded: Loaded, settings: Settings, started: float) -> None:
    """The heatmaps of the picked images; ``started`` is when this rerun began (perf_counter)."""
    st.subheader("Gradients of the picked images")
    picked = state.picked(st.session_state)
    if not picked:
        st.info(
            "No images picked yet: click or box-select thumbnails or points above, select "
            "table rows, type indices, or use a rule."
        )
        return
    request = layer_select.with_layer(loaded, settings.request)
    settings = dataclasses.replace(settings, request=request)
    cached_by = (loaded.key, loaded.option.identity, str(loaded.device), tuple(picked))
    # Said before the forwards run (and kept while their maps show); a setting that does not
    # fit the images fails here with the same message the method would give.
    cost = heatmaps.cost(loaded.model, loaded.batch, picked, request)
    if cost is not None:
        st.caption(f"{cost}, batched; the same picks and settings later reuse the maps.")
    result = cache.attribution(*cached_by, request, loaded.model, loaded.batch)
    titles = service.describe_indices(loaded.batch, loaded.result, picked)
    tiles = heatmaps.tiles(loaded.batch.rows(picked), result.maps, settings.shared_scale)
    unit = heatmaps.unit(request, loaded.batch.class_names)

    main, side = st.columns([3, 1], gap="medium")
    with side:
        _step_readouts(loaded, result, request)
        server_time = st.empty()
        memory_slot = st.container()
    with main:
        _legend(tiles, unit, settings.shared_scale, channels=result.layer_maps is None)
        # A layer method's map is the same in every channel: its image, map and overlay only.
        few = len(picked) <= DETAILED_ROWS
        detailed = few and result.layer_maps is None
        if result.layer_maps is None:
            st.caption(PANELS_FULL if detailed else PANELS_COMPACT)
        else:
            grid = " × ".join(str(side) for side in result.layer_maps.shape[1:])
            st.caption(
                f"{PANELS_LAYER}: {attribution.get(request.method).label} at layer "
                f"{result.layer} ({grid} grid, upsampled bilinearly to the image)"
            )
        switched_on = badges.switch()
        with st.container(key=keys.HEATMAPS_CONTAINER):
            said = map_notes(result, heatmaps.quantity(request, loaded.batch.class_names))
            captions = [
                _caption(title, tile, note, settings.shared_scale)
                for title, tile, note in zip(titles, tiles, said, strict=True)
            ]
            strips = [
                heatmaps.strip(tile, compact=not few, channels=result.layer_maps is None)
                for tile in tiles
            ]
            pictures = st.empty()
            pictures.image(strips, captions)
        for line in grouped_notes(said, titles):
            st.info(line)
        elapsed = time.perf_counter() - started
        # After the maps: the badges' budget is a share of the click's whole server time
        # before them, and they never hold the maps back.
        verdicts = badges.checks(loaded, request, result, picked, elapsed) if switched_on else None
        if badges.any_fails(verdicts):
            pictures.image(*badges.applied(verdicts, strips, captions))
        badges.draw(verdicts, titles)
        if request.method != attribution.Occlusion.name:
            with guarded("The occlusion check"):
                _occlusion_check(loaded, request, result, picked, titles)
    server_time.metric(
        "Server time for this update",
        f"{elapsed * 1000:,.0f} ms",
        help="From the start of this rerun (the click reaching the server) to the heatmaps "
        "being sent, measured with time.perf_counter on the server. The trust badges that "
        "follow give their own time.",
    )
    memory = None
    with memory_slot:
        if settings.measure_memory and loaded.device.type == "cpu" and profiler_warming():
            st.caption(PROFILER_WARMING)
        elif settings.measure_memory:
            with guarded("Measuring memory"):
                memory = cache.step_memory(
                    loaded.key,
                    loaded.option.identity,
                    str(loaded.device),
                    len(picked),
                    request,
                    tuple(picked),
                    loaded.model,
                    loaded.batch,
                )
                _memory_readouts(memory)
        else:
            st.caption("Memory not measured (turn on 'Measure memory' in the sidebar).")
    # Drawn only while open: a click's rerun sends neither when they are closed.
    detail = st.expander(DETAIL_LABEL, key=keys.DETAIL_OPEN, on_change="rerun")
    if detail.open:
        with detail:
            _detail(loaded, result, tiles, titles, unit, said)
    else:
        state.keep(st.session_state, keys.DETAIL)
    downloads = st.expander(DOWNLOADS_LABEL, key=keys.DOWNLOADS_OPEN, on_change="rerun")
    if downloads.open:
        with downloads:
            _downloads(loaded, settings, result, titles, memory)


def _occlusion_check(
    loaded: Loaded,
    request: HeatmapRequest,
    result: Attribution,
    picked: list[int],
    titles: list[str],
) -> None:
    """When asked (it costs occlusion's forwards): per pick, whether the shown map's peak lies
    where occlusion finds the evidence."""
    cost = heatmaps.occlusion_cost(loaded.model, loaded.batch, picked, request)
    label = attribution.get(request.method).label
    switched_on = st.toggle(
        "Check the peaks against occlusion",
        key=keys.OCCLUSION_CHECK,
        help=f"Occlusion hides each 6 × 6 patch in turn and measures the drop of the same "
        f"target: on planted causes it finds the cause far more often than gradient maps (the "
        f"guide's Attribution methods page has the rule's false-alarm and miss rates). A note "
        f"per pick says whether the {label} map's peak lies within 2 px of occlusion's "
        f"strongest {TOP_SHARE:.0%} of the pixels. Costs: {cost}.",
    )
    if not switched_on:
        st.caption(f"Occlusion check off ({cost} when on).")
        return
    notes = cache.occlusion_notes(
        loaded.key,
        loaded.option.identity,
        str(loaded.device),
        tuple(picked),
        request,
        loaded.model,
        loaded.batch,
        result,
    )
    for title, note in zip(titles, notes, strict=True):
        line = f"{title}: {note.line(label)}."
        if note.agree:
            st.caption(line)
        else:
            st.warning(line)


def _step_readouts(loaded: Loaded, result: Attribution, request: HeatmapRequest) -> None:
    step = result.gradients
    st.metric("Device", step.device)
    st.metric("Picked k / batch N", f"{len(step.indices)} / {len(loaded):,}")
    st.metric("Strategy", step.strategy + (f" · {step.chunks} chunks" if step.chunks > 1 else ""))
    st.metric(
        "Gradient step",
        f"{step.timing:,.1f} ms",
        help="Wall time of input_gradients' forward and backward of the picked images alone "
        "(on a CPU with one torch thread), the device synchronised before and after, when "
        "these gradients were computed. The same pick and settings later reuse them.",
    )
    if request.method != "gradient":
        st.metric(attribution.get(request.method).label, f"{result.milliseconds:,.1f} ms")
    if request.method == "smoothgrad":
        st.caption(
            f"SmoothGrad: {result.settings['samples']} noisy copies per image, noise standard "
            f"deviation {result.settings['noise']:g} × each image's range (max − min)."
        )


def _memory_readouts(memory: MemoryReport | None) -> None:
    if memory is None:
        st.caption("Memory could not be measured.")
        return
    for label, figure in (
        ("Saved for backward", memory.saved_for_backward),
        ("Peak memory", memory.peak),
    ):
        st.metric(
            label, format_bytes(figure.bytes), help=f"{figure.counts} ({UNIT_NOTE}). {MEMORY_NOTE}"
        )
        st.caption(figure.counts)


def _caption(title: str, tile: heatmaps.Tiles, note: MapNote | None, shared: bool) -> str:
    """A map's caption: what is wrong with it when it shows nothing (not a scale of 0 to
    1e-38), else its own scale unless one scale is shared."""
    if note is not None:
        return f"{title} · {note.short}"
    return title if shared else f"{title} · saliency 0 to {tile.limit:.3g}"


def _legend(tiles: list[heatmaps.Tiles], unit: str, shared: bool, channels: bool = True) -> None:
    columns = st.columns(2)
    saliency_range = f"0 to {tiles[0].limit:.3g}" if shared else "0 to each image's limit"
    channel_range = (
        f"−{tiles[0].channel_limit:.3g} to +{tiles[0].channel_limit:.3g}"
        if shared
        else "± each image's limit"
    )
    columns[0].image(heatmaps.colourbar(), caption=f"saliency |{unit}|: {saliency_range}")
    if channels:  # a layer map has no signed channel maps to explain
        columns[1].image(
            heatmaps.colourbar(signed=True), caption=f"channels, {unit}: {channel_range}"
        )


def _detail(
    loaded: Loaded,
    result: Attribution,
    tiles: list[heatmaps.Tiles],
    titles: list[str],
    unit: str,
    said: list[MapNote | None],
) -> None:
    picked = state.picked(st.session_state)
    session = st.session_state
    if session.get(keys.DETAIL) not in picked:
        session[keys.DETAIL] = picked[0]
    index = st.selectbox(
        "Detailed view of",
        picked,
        format_func=lambda i: titles[picked.index(i)],
        key=keys.DETAIL,
    )
    position = picked.index(index)
    tile = tiles[position]
    note = said[position]
    left, right = st.columns([1, 3])
    left.image(tile.overlay, caption=f"{titles[position]} · overlay")
    with right:
        # One picture, not a plotly chart: a click redraws an image; the values come on hover.
        with st.container(key=keys.DETAIL_HEATMAPS):
            st.image(
                heatmaps.map_strip(tile, MAP_GAP),
                caption=f"{' · '.join(pixels.PANELS)}: {note.text}"
                if note is not None
                else f"{' · '.join(pixels.PANELS)}: saliency |{unit}| 0 to {tile.limit:.3g}, "
                f"channels {unit} ±{tile.channel_limit:.3g}; hover for each pixel's value",
                width="stretch",
            )
        values = pixels.values_bytes(tile.saliency, result.maps[position].detach().cpu().numpy())
        url = media.image_url(values, keys.DETAIL_VALUES, "application/octet-stream")
        with st.container(key=keys.DETAIL_SCRIPT):
            shape = (int(tile.saliency.shape[0]), int(tile.saliency.shape[1]))
            script = pixels.script(keys.selector(keys.DETAIL_HEATMAPS), url, shape, MAP_GAP)
            st.iframe(script, height=1)
    probabilities = loaded.result.probabilities[index].numpy()
    labels = loaded.result.labels
    if loaded.result.output == "sigmoid":
        st.caption(
            "Label probabilities, each label's own sigmoid (independent labels: they need not "
            "sum to 1): click a bar to explain that label (target: chosen label)."
        )
    else:
        st.caption("Class probabilities: click a bar to explain that class (target: chosen class).")
    st.plotly_chart(
        figures.probability_bars(
            probabilities,
            loaded.batch.class_names,
            None if labels is None else int(labels[index]),
            int(result.gradients.classes[position]),
        ),
        key=keys.PROBABILITY_CHART,
        on_select="rerun",
        selection_mode="points",
        config=figures.CHART_CONFIG,
    )


def _report_html(
    loaded: Loaded, exported: export.Export, picked: list[int], shared_scale: bool
) -> bytes:
    """The picks as one self-contained HTML page (``gradpick.share.report``), with the Trust tab's
    checks when they last ran on exactly these picks of this batch, and the slices kept beside
    the opened store with their verdicts."""
    stored = st.session_state.get(keys.TRUST_CHECKS)
    trust = None
    if stored is not None and stored.key[0] == loaded.key:  # the checks' key starts with the batch
        trust = stored.report if list(stored.report.indices) == picked else None
    slices, _ = judged.slices_of(loaded)
    said: dict[int, str] = {}
    if slices is not None:
        _, verdicts, _ = judged.slice_verdicts(loaded, slices)
        said = {rank: VERDICTS[v.verdict] for rank, v in verdicts.items()}
    document = report.build_report(
        exported,
        loaded.result.probabilities[picked],
        loaded.served.card,
        trust,
        shared_scale=shared_scale,
        slices=slices,
        slice_verdicts=said,
    )
    return document.encode()


def _downloads(
    loaded: Loaded,
    settings: Settings,
    result: Attribution,
    titles: list[str],
    memory: MemoryReport | None,
) -> None:
    picked = state.picked(st.session_state)
    exported = heatmaps.export_of(
        result,
        loaded.batch,
        picked,
        settings.request,
        memory,
        model=loaded.served.identity(),
        source=service.source_record(loaded.choice, loaded.batch),
        explorer={
            "batch": loaded.key,
            "inference_ms": loaded.result.milliseconds,
            "colour_scale": "shared" if settings.shared_scale else "per image",
        },
    )

    grid = functools.partial(
        render.grid_png,
        loaded.batch.rows(picked),
        result.maps,
        titles,
        shared_scale=settings.shared_scale,
    )
    columns = st.columns(5)
    downloads: tuple[tuple[str, Callable[[], bytes], str], ...] = (
        (
            "Gradients (.pt)",
            functools.partial(export.pt_bytes, exported),
            "pt",
        ),
        (
            "Gradients (.npz)",
            functools.partial(export.npz_bytes, exported),
            "npz",
        ),
        ("Heatmap grid (.png)", grid, "png"),
        ("Report (.json)", functools.partial(export.metadata_json, exported), "json"),
        (
            "Report (.html)",
            functools.partial(_report_html, loaded, exported, picked, settings.shared_scale),
            "html",
        ),
    )
    for column, (label, data, suffix) in zip(columns, downloads, strict=True):
        column.download_button(
            label,
            data=data,
            file_name=f"gradpick-{result.method}.{suffix}",
            on_click="ignore",
            key=keys.download_key(suffix),
        )
