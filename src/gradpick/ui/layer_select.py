"""The layer of a layer method (Grad-CAM and its family): a select box over the model's layers.

The candidates come from ``layers.probe``, one forward of a zero image measured once per model,
input size, dtype and device and then looked up, so a rerun costs nothing. The automatic layer
(the one gradpick picks when none is named) is marked and chosen to begin with; the choice is
kept per model, so switching models never offers a layer the new one lacks. A layer the model
lacks (a link's, say) is said and the automatic one used.
"""

from __future__ import annotations

import dataclasses

import streamlit as st

from gradpick import attribution
from gradpick.gradients import layers
from gradpick.ui import keys, state
from gradpick.ui.heatmaps import HeatmapRequest
from gradpick.ui.session import Loaded

__all__ = ["AUTOMATIC", "candidates", "chosen", "label", "with_layer"]

AUTOMATIC = " (automatic)"
"""Appended to the automatic layer's entry in the select box."""


def candidates(loaded: Loaded) -> layers.Probe:
    """The model's layers with a spatial output at the batch's image size."""
    return layers.probe(loaded.model, loaded.batch.image_size, 3)  # a batch is [N, 3, H, W]


def _key(loaded: Loaded) -> str:
    return keys.per_source(keys.LAYER, loaded.option.identity)


def label(layer: layers.LayerInfo, automatic: str | None) -> str:
    """A layer as the select box lists it: its name, its output shape, and the automatic mark."""
    shape = " × ".join(str(side) for side in layer.shape)
    return f"{layer.name} · {shape}" + (AUTOMATIC if layer.name == automatic else "")


def chosen(loaded: Loaded) -> str | None:
    """The layer chosen for this model in the session (None: the automatic one)."""
    value = st.session_state.get(_key(loaded))
    return value if isinstance(value, str) else None


def with_layer(loaded: Loaded, request: HeatmapRequest) -> HeatmapRequest:
    """``request`` at the layer the select box shows, for a layer method; else as it is.

    A model without a spatial layer shows no box: the method's own error says why.
    """
    if request.method not in attribution.LAYER_METHODS:
        return request
    found = candidates(loaded)
    if not found.layers:
        return request
    names = [layer.name for layer in found.layers]
    key = _key(loaded)
    session = st.session_state
    asked = session.get(key)
    if asked is not None and asked not in names:
        session.pop(key)
        st.warning(
            f"{loaded.option.label} has no spatial layer {asked}: the automatic one is used."
        )
    by_name = {layer.name: layer for layer in found.layers}
    state.start_at(session, key, found.automatic if found.automatic in names else names[-1])
    name = st.selectbox(
        "Layer",
        names,
        format_func=lambda option: label(by_name[option], found.automatic),
        key=key,
        help=f"Where {attribution.get(request.method).label} reads the activation and its "
        "gradient: the modules whose output is a spatial map, in the order the forward ends "
        "them, with their output shape for one image. The automatic one is the last spatial "
        "map before global pooling (for a transformer, the input of the last attention).",
    )
    return dataclasses.replace(request, layer=name)
