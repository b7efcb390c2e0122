"""Streamlit caches around the service layer: each heavy step runs once per distinct input.

Models, image sources and batches are shared objects (``st.cache_resource``): models are frozen
and only read, sources and batches only read; so are the hover lines and the confusion-matrix
figure, built once per batch and model and never changed (a copy of a figure is what the page
sends). Inference outputs, thumbnail sheets and gradients are data (``st.cache_data``), keyed
by the string identities ``gradpick.ui.service`` builds, so a click on an already-inferred batch
recomputes nothing but the gradients of the new pick. Arguments with a
leading underscore are not hashed; the key arguments before them identify them.

A progress bar drawn inside a cached function is replayed on every cache hit, so each one is
emptied before the function returns: a hit replays "draw, then remove", which shows nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
import streamlit as st
import torch
from streamlit.delta_generator import DeltaGenerator
from torch import nn

from gradpick import compare as versus
from gradpick.attribution import Attribution, notes
from gradpick.data import ImageBatch, ImageSource
from gradpick.models.zoo import LoadedModel
from gradpick.outputs import stores as stored
from gradpick.outputs.inference import InferenceResult
from gradpick.outputs.store_format import OpenedStore
from gradpick.picking import feature_space as embedding
from gradpick.runtime.measure import MemoryReport
from gradpick.triage import ranking
from gradpick.trust.agreement import PeakAgreement
from gradpick.trust.quick import QuickChecks
from gradpick.ui import figures, heatmaps, service
from gradpick.ui.browser import hover
from gradpick.ui.service import DataChoice, ModelOption
from gradpick.ui.session import Loaded

__all__ = [
    "PROGRESS_INTERVAL",
    "PROGRESS_THRESHOLD",
    "attribution",
    "batch",
    "compared_maps",
    "confusion_figure",
    "embedding_scatter",
    "folder_check",
    "hover_atlas",
    "inference",
    "model",
    "model_note",
    "occlusion_notes",
    "outputs_scatter",
    "pairing",
    "ProgressBar",
    "projection",
    "quick_checks",
    "served",
    "source",
    "step_memory",
    "stored_outputs",
    "stored_result",
    "stored_triage",
    "thumbnail_sheet",
]

PROGRESS_THRESHOLD = 2000
"""Batches at least this large get a progress bar; smaller ones finish before it would draw."""
PROGRESS_INTERVAL = 0.5
"""Seconds between two redraws of a bar: each one is drawn by the browser, on the cores the
work it reports on needs (a redraw per percent cost 10,000 images' inference a fifth)."""


class ProgressBar:
    """A ``progress(done, total)`` callback that draws a bar once the work is large enough."""

    def __init__(
        self, text: str, threshold: int = PROGRESS_THRESHOLD, interval: float = PROGRESS_INTERVAL
    ) -> None:
        self.text = text
        self.threshold = threshold
        self.interval = interval
        self.bar: DeltaGenerator | None = None
        self.shown = -1
        self.drawn_at = -math.inf

    def __call__(self, done: int, total: int) -> None:
        if total and total < self.threshold:
            return
        fraction = min(done / total, 1.0) if total else 0.0
        # Redraw at most once per percent (or per 8 MiB when the total is unknown) and once per
        # ``interval``, the last step always: every update is recorded for cache replay and
        # drawn by the browser, so they must stay few.
        step = int(fraction * 100) if total else done >> 23
        now = time.monotonic()
        if step == self.shown or (now - self.drawn_at < self.interval and fraction < 1.0):
            return
        self.shown, self.drawn_at = step, now
        label = f"{self.text}: {done:,} of {total:,}" if total else f"{self.text}: {done:,}"
        if self.bar is None:
            self.bar = st.progress(fraction, text=label)
        else:
            self.bar.progress(fraction, text=label)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.empty()


@st.cache_resource(max_entries=4, show_spinner="Opening the image source…")
def source(source_key: str, _choice: DataChoice) -> ImageSource:
    """The image source (a CIFAR-10 download shows a progress bar in bytes)."""
    bar = ProgressBar("Downloading CIFAR-10 (bytes)", threshold=1)
    try:
        return service.open_source(_choice, bar)
    finally:
        bar.close()


@st.cache_resource(max_entries=4, show_spinner="Reading images…")
def batch(
    batch_key: str, _source: ImageSource, _choice: DataChoice, _fingerprint: str | None = None
) -> ImageBatch:
    """The batch's pixels, shared by every session and never changed (a frozen batch of
    tensors nobody writes to): a copy per script run, as ``st.cache_data`` returns, unpickles
    the whole batch each time (50,000 CIFAR-10 images: 155 MB, 0.2 s of every run).
    ``_fingerprint``: the source's, when the caller has it (``fingerprint``)."""
    bar = ProgressBar("Reading images")
    try:
        return service.read_batch(_source, _choice, bar, _fingerprint)
    finally:
        bar.close()


@st.cache_resource(max_entries=8, show_spinner=False)
def folder_check(source_key: str, _source: ImageSource) -> stored.FolderCheck:
    """Whether the source still holds its images: one check per source, shared by every
    session, run beside the pages that ask (``stores.FolderCheck``: a folder's takes a listing
    and a ``stat`` per image) and run again once its answer is 30 s old."""
    return stored.FolderCheck(_source)


@st.cache_resource(max_entries=6, show_spinner="Loading the model…")
def served(identity: str, device: str, _option: ModelOption) -> LoadedModel:
    """One frozen model (with its input spec) per (weights, spec, device), shared by every
    session and never mutated."""
    return service.load_model(_option, torch.device(device))


def model(identity: str, device: str, _option: ModelOption) -> nn.Module:
    """The served module alone, for steps that need no spec."""
    return served(identity, device, _option).module


@st.cache_data(max_entries=8, show_spinner="Running inference…")
def inference(
    batch_key: str,
    model_identity: str,
    device: str,
    _served: LoadedModel,
    _batch: ImageBatch,
    _source: ImageSource,
    _keep: bool = True,
) -> InferenceResult:
    """The batch's outputs: from the app's own store of them when it has one, else inferred
    (images per step: ``stored.INFERENCE_BATCH_SIZE``) and, unless hosted, kept there for the
    next visit."""
    bar = ProgressBar("Inference")
    try:
        return stored.infer_and_keep(_served, _source, _batch, bar, _keep)
    finally:
        bar.close()


@st.cache_resource(max_entries=4, show_spinner="Opening the stored outputs…")
def stored_outputs(path: str, stamp: float) -> OpenedStore:
    """A store the user opened; ``stamp`` (the folder's modification time) changes when a new
    run replaces it. Only the columns the page's outputs need are read."""
    return stored.open_stored(path, stored.OUTPUT_COLUMNS)


@st.cache_resource(max_entries=8, show_spinner=False)
def stored_result(
    batch_key: str, stamp: float, model_identity: str, _opened: OpenedStore, _batch: ImageBatch
) -> InferenceResult:
    """A store's outputs of the batch, shared by every session and never changed: a copy per
    script run, as ``st.cache_data`` returns, unpickled a 1,280,000-row store's logits,
    probabilities and embeddings (0.5 GB) on every click."""
    return stored.stored_result(_opened, _batch)


@st.cache_resource(max_entries=4, show_spinner="Triaging the store's labels…")
def stored_triage(rows_key: str, _result: stored.StoredResult) -> ranking.Triage:
    """A store's triage (``ranking.stored_triage``), shared by every session and never
    changed: scored once per store's rows (1.2 s at 1,280,000), its neighbours kept beside the
    store. A server's warm-up scores it before it serves when they are kept already."""
    return ranking.stored_triage(_result)


@st.cache_resource(max_entries=8, show_spinner=False)
def hover_atlas(batch_key: str, _batch: ImageBatch) -> hover.Atlas:
    """The batch's hover thumbnails in one JPEG, made once per batch (10,000 images: a few
    hundred milliseconds) and shared by every session that shows it; of a larger batch, the
    images its scatters draw (``figures.drawn_sample``)."""
    drawn = figures.drawn_sample(len(_batch))
    if drawn is None:
        return hover.atlas(_batch.rows(slice(None)).numpy())
    return hover.atlas(_batch.rows(drawn).numpy(), drawn.tolist())


@st.cache_resource(max_entries=8, show_spinner=False)
def confusion_figure(
    batch_key: str, model_identity: str, _result: InferenceResult, _names: tuple[str, ...]
) -> go.Figure:
    """The confusion matrix, built once per batch and model (it shows no picks); shared and
    never changed: ``st.plotly_chart`` sends a copy."""
    assert _result.labels is not None
    return figures.confusion_matrix(
        _result.labels.numpy(), _result.predictions.numpy(), list(_names)
    )


@st.cache_resource(max_entries=8, show_spinner=False)
def outputs_scatter(
    batch_key: str,
    model_identity: str,
    selection_revision: int,
    _result: InferenceResult,
    _names: tuple[str, ...],
    _hover: Sequence[str],
) -> go.Figure:
    """The confidence/loss scatter (``figures.outputs_scatter``), built once per batch, model
    and selection revision (10,000 points: about 40 ms, on every run that draws it) and shared;
    never changed: ``st.plotly_chart`` sends a copy, and verdict marks go on a copy."""
    values, label = service.scatter_values(_result)
    correct = _result.correct
    return figures.outputs_scatter(
        _result.confidences.numpy(),
        values,
        label,
        _result.predictions.numpy(),
        None if correct is None else correct.numpy(),
        _names,
        _hover,
        selection_revision,
        figures.drawn_sample(len(values)),
    )


@st.cache_resource(max_entries=8, show_spinner=False)
def embedding_scatter(
    batch_key: str,
    model_identity: str,
    method: str,
    colour_by: str,
    selection_revision: int,
    _points: np.ndarray,
    _result: InferenceResult,
    _names: tuple[str, ...],
    _hover: Sequence[str],
) -> go.Figure:
    """The feature-space scatter (``figures.embedding_scatter``) of the projection ``method``,
    coloured by ``colour_by``, built once per batch, model, settings and selection revision and
    shared, as ``outputs_scatter``."""
    groups, names = embedding.colour_groups(_result, colour_by, _names)
    return figures.embedding_scatter(
        _points,
        groups,
        names,
        _hover,
        method,
        selection_revision,
        figures.drawn_sample(len(_points)),
    )


@st.cache_data(max_entries=8, show_spinner=False)
def model_note(
    batch_key: str, model_identity: str, label: str, _logits: torch.Tensor
) -> str | None:
    """``attribution.notes.model_note`` of the batch's logits, once per batch and model (a
    look at every logit: 0.1 s a page run at 1,280,000 images)."""
    return notes.model_note(_logits, label)


@st.cache_data(max_entries=8, show_spinner="Projecting the features…")
def projection(
    batch_key: str, model_identity: str, method: str, _result: InferenceResult
) -> np.ndarray:
    """The batch's penultimate-layer features in 2-D, a store's kept beside it
    (``gradpick.picking.feature_space.projected``)."""
    return embedding.projected(_result, method)


@st.cache_data(max_entries=32, show_spinner=False)
def thumbnail_sheet(
    batch_key: str, first: int, last: int, columns: int, _batch: ImageBatch
) -> bytes:
    return figures.thumbnail_sheet(_batch.rows(slice(first, last)).numpy(), columns)


@st.cache_data(max_entries=32, show_spinner="Computing gradients…")
def attribution(
    batch_key: str,
    model_identity: str,
    device: str,
    indices: tuple[int, ...],
    request: heatmaps.HeatmapRequest,
    _model: nn.Module,
    _batch: ImageBatch,
    contrast: tuple[int, int] | None = None,
) -> Attribution:
    """Gradients (and the chosen view) of the picked images; cached per pick and settings
    (and per contrast, the logit difference the Triage tab explains)."""
    return heatmaps.compute(_model, _batch, indices, request, contrast)


@st.cache_data(max_entries=32, show_spinner="Measuring memory…")
def step_memory(
    batch_key: str,
    model_identity: str,
    device: str,
    picks: int,
    request: heatmaps.HeatmapRequest,
    _indices: tuple[int, ...],
    _model: nn.Module,
    _batch: ImageBatch,
) -> MemoryReport | None:
    """The gradient step's memory, measured once per number of picks and settings: what a step
    saves and allocates follows the tensors' shapes, never the pixels, so any ``picks`` images
    of one batch cost the same (``tests/ui/test_heatmaps.py`` checks it). A click on another
    image then pays no second profiled run (about 80 ms on two cores)."""
    return heatmaps.step_memory(_model, _batch, _indices, request)


@st.cache_data(max_entries=32, show_spinner=False)
def quick_checks(
    batch_key: str,
    model_identity: str,
    device: str,
    indices: tuple[int, ...],
    request: heatmaps.HeatmapRequest,
    unlimited: bool,
    _model: nn.Module,
    _batch: ImageBatch,
    _shown: Attribution,
    _budget_s: float,
    _logits: torch.Tensor,
) -> QuickChecks:
    """The trust badges of the shown maps, cached like the maps: a rerun without a change (or
    a return to earlier picks) costs nothing. The budget is not part of the key, only whether
    there is one (``unlimited``): the first run decides which checks fitted."""
    return heatmaps.quick_checks(_model, _batch, indices, request, _shown, _budget_s, _logits)


@st.cache_data(max_entries=32, show_spinner="Occluding the picks…")
def occlusion_notes(
    batch_key: str,
    model_identity: str,
    device: str,
    indices: tuple[int, ...],
    request: heatmaps.HeatmapRequest,
    _model: nn.Module,
    _batch: ImageBatch,
    _shown: Attribution,
) -> list[PeakAgreement]:
    """The shown maps' peaks against occlusion, cached like the maps: occlusion's forwards run
    once per picks and settings."""
    return heatmaps.occlusion_notes(_model, _batch, indices, request, _shown)


@st.cache_resource(max_entries=8, show_spinner=False)
def pairing(
    batch_key: str,
    first: str,
    second: str,
    _sides: Callable[[], tuple[versus.Side, versus.Side]],
) -> versus.Pairing:
    """Two models' outputs on one batch lined up, once per batch and pair of models: both hold
    every image of the batch, so a row is a batch index. ``_sides`` builds them on a miss."""
    return versus.pair(*_sides())


@st.cache_data(max_entries=16, show_spinner="Mapping the picks with both models…")
def compared_maps(
    batch_key: str,
    first: str,
    second: str,
    picks: tuple[int, ...],
    method: str,
    settings: tuple[tuple[str, Any], ...],
    _loaded: Loaded,
    _served: LoadedModel,
    _source: Any,
    _pairing: versus.Pairing,
) -> versus.MapComparison:
    """Both models' maps of a click's few picks, on one thread like every click's step."""
    with heatmaps.step_threads(_loaded.served.module):
        return versus.compare_maps(
            _loaded.served, _served, _source, _pairing, list(picks), method, dict(settings)
        )
