"""The page: sidebar, then the batch's outputs, the picked images' gradients, the strategies.

``main`` is what ``app.py`` runs, after ``gradpick.ui.start`` sent the page's frame. Each
section is guarded, so a failure in one shows a message and leaves the others working.

Everything below the readouts is one fragment (``_explorer``): a click, a picker or a tab switch
reruns only it, not the sidebar, the loading and the readouts; a change in the sidebar reruns
the whole page.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
import torch

from gradpick.data import ImageBatch, ImageSource
from gradpick.models.zoo import LoadedModel
from gradpick.outputs import store_format as store
from gradpick.outputs.inference import InferenceResult
from gradpick.outputs.stores import FolderCheck
from gradpick.runtime import devices, process
from gradpick.ui import cache, judged, keys, linking, service, state, tabs
from gradpick.ui.config import (
    HOSTED_MAX_BATCH_SIZE,
    HOSTED_MAX_IMAGE_BYTES,
    HOSTED_MAX_UPLOAD_FILES,
    app_config,
)
from gradpick.ui.guard import guarded
from gradpick.ui.panels import compare as compare_panel
from gradpick.ui.panels import explore as gradients_panel
from gradpick.ui.panels import outputs, sidebar
from gradpick.ui.panels import selections as selections_panel
from gradpick.ui.panels import slices as slices_panel
from gradpick.ui.panels import strategies as strategies_panel
from gradpick.ui.panels import triage as triage_panel
from gradpick.ui.panels import trust as checks_panel
from gradpick.ui.service import DataChoice, ModelOption
from gradpick.ui.session import Loaded, Settings
from gradpick.units import format_bytes

__all__ = [
    "CHECK_BESIDE_ABOVE",
    "CHECK_POLL_S",
    "HOSTED_NOTE",
    "StoredOpening",
    "infer_choice",
    "main",
    "open_stored",
]

CHECK_BESIDE_ABOVE = 100_000
"""A store's page waits for its folder's check (``stores.FolderCheck``) up to this many
images and is drawn beside the check of a larger folder: listing and a ``stat`` per image took
0.3 s at 50,000 images on this project's 2-core machine, 10 s at 1,280,000."""
CHECK_POLL_S = 1.0
"""How often a page drawn without that answer asks for it again."""

HOSTED_NOTE = (
    f"Hosted demo: local folders and your own model code are off; uploads take at most "
    f"{HOSTED_MAX_UPLOAD_FILES} images of {format_bytes(HOSTED_MAX_IMAGE_BYTES, 0)} each, and "
    f"batches at most {HOSTED_MAX_BATCH_SIZE:,} images. Run gradpick locally to lift these limits."
)


def _load(settings: Settings) -> Loaded | None:
    """The batch, the model and their inference outputs, each from its cache."""
    choice, source = settings.data, settings.source
    if choice is None or source is None:
        st.info("Choose a data source in the sidebar to begin.")
        return None
    loaded: Loaded | None = None
    with guarded("Loading the batch and the model"):
        option, device = settings.model, settings.device
        if choice.kind != "stored":
            keep = not app_config().hosted  # a hosted demo keeps no stores on its disk
            loaded, note = infer_choice(choice, source, option, device, keep)
            if note:
                st.warning(note)
            return loaded
        # A store's images keep the size they were inferred at: a model of another spec is
        # refused with the store.
        again = bool(st.session_state.get(keys.per_source(keys.REINFER, choice.source_key)))
        with st.spinner("Reading the images as they are now…") if again else nullcontext():
            opening = open_stored(choice, source, option, device, again)
        if opening.note:
            st.warning(opening.note)
        if again:
            st.caption(f"Inferred again with this model; {opening.opened.path} is left as it was.")
        else:
            _store_status(opening, source.description, settings)
        batch, result = opening.batch, opening.result
        hover = service.HoverLines(batch, result)
        loaded = Loaded(choice, batch, option, opening.served, device, result, hover, opening.known)
    return loaded


def _read_batch(
    batch_key: str,
    choice: DataChoice,
    source: ImageSource,
    served: LoadedModel,
    option: ModelOption,
    known: str | None = None,
) -> tuple[ImageBatch, str | None]:
    """The batch (from its cache, per batch and input spec; ``known``: the source's
    fingerprint, when the caller has it) with its classes fitted to the model's; the note says
    how, when they differ."""
    pixels_key = f"{batch_key}|{served.spec.describe()}"
    return service.fit_classes(
        cache.batch(pixels_key, source, choice, known), served.classes, option.class_names
    )


def infer_choice(
    choice: DataChoice, source: ImageSource, option: ModelOption, device: torch.device, keep: bool
) -> tuple[Loaded, str | None]:
    """The batch a (not stored) choice names, read at the model's own input size, with its
    outputs and hover lines, each from its cache (``keep``: write the app's own store of the
    outputs); the note says how the batch's classes were fitted to the model's. The launcher
    calls this for the page's default batch before it serves, so the first page finds it done."""
    served = cache.served(option.identity, str(device), option)
    source = source.at_spec(served.spec)  # every model reads the images at its own input size
    batch, note = _read_batch(choice.batch_key, choice, source, served, option)
    result = cache.inference(
        choice.batch_key, option.identity, str(device), served, batch, source, keep
    )
    hover = service.HoverLines(batch, result)
    return Loaded(choice, batch, option, served, device, result, hover), note


@dataclass(frozen=True)
class StoredOpening:
    """A store's batch as the page opens it, each part from its cache."""

    served: LoadedModel
    opened: store.OpenedStore
    check: FolderCheck
    answer: str | None
    """The images' fingerprint as the folder's check found it; None while it runs."""
    known: str | None
    """The fingerprint the batch was read by: the check's answer, else the one recorded when
    the store was written."""
    batch: ImageBatch
    note: str | None
    """How the batch's classes were fitted to the model's, when they differ."""
    result: InferenceResult


def open_stored(
    choice: DataChoice,
    source: ImageSource,
    option: ModelOption,
    device: torch.device,
    again: bool = False,
) -> StoredOpening:
    """The batch of the store ``choice`` names, with its outputs, each from its cache: the
    store's own outputs, which this model must have written (else ``DataError``), or, with
    ``again`` (the user asked to infer its images again), this model's inference of the
    images as they are now, cached under a key naming them, the folder's check awaited.

    A folder of up to ``CHECK_BESIDE_ABOVE`` images is checked first; a larger one is checked
    beside the page (``_store_status``), its images meanwhile taken to be the ones the store
    was written from. The launcher calls this for a store named on the command line before
    it serves, so the first page finds it done."""
    served = cache.served(option.identity, str(device), option)
    path = choice.outputs.strip()
    stamp = Path(path).expanduser().stat().st_mtime
    opened = cache.stored_outputs(path, stamp)
    store.check_store(opened, served.store_identity)
    check = cache.folder_check(choice.source_key, source)
    batch_key = choice.batch_key
    if again:  # read as they are now, not as the batch cache holds them from before the change
        batch_key += f"|{check.fingerprint()}"
    answer = check.fingerprint(None if len(source) <= CHECK_BESIDE_ABOVE else 0)
    known = answer or store.recorded_fingerprint(opened)
    batch, note = _read_batch(batch_key, choice, source, served, option, known)
    if again:
        result = cache.inference(batch_key, option.identity, str(device), served, batch, source)
    else:
        result = cache.stored_result(choice.batch_key, stamp, option.identity, opened, batch)
    return StoredOpening(served, opened, check, answer, known, batch, note, result)


def _store_status(opening: StoredOpening, description: str, settings: Settings) -> None:
    """Whether the store still describes its folder's images (as its check found them), with a
    button to infer them again when it does not. While the check runs, a caption says so and
    asks again every ``CHECK_POLL_S``; the answer reruns the page, which then reads the images
    by it."""
    assert settings.data is not None
    again = keys.per_source(keys.REINFER, settings.data.source_key)
    opened, answer = opening.opened, opening.answer
    stored_here = f"Outputs of {len(opened):,} images stored in {opened.path}: not inferred"
    if answer is None:
        st.fragment(_awaited_check, run_every=CHECK_POLL_S)(opening.check, stored_here, description)
    elif store.store_is_current(opened, answer):
        st.caption(f"{stored_here}.")
    else:
        st.warning(
            f"The images in {description} changed since {opened.path} was written: its "
            "outputs may not describe them any more."
        )
        st.button(
            "Infer these images again",
            key=keys.REINFER,
            on_click=lambda: st.session_state.__setitem__(again, True),
        )


def _awaited_check(check: FolderCheck, stored_here: str, description: str) -> None:
    """The caption of a check still running; once it has answered (or failed: the page's run
    says why, in its guarded section), the page runs again."""
    if not check.checking:
        st.rerun()
    st.caption(f"{stored_here}; checking that {description} still holds their images…")


def main(after_inference: Callable[[], None] | None = None) -> None:
    """The page; ``after_inference`` is called once its batch's outputs are at hand (inferred,
    from a cache or a store), before anything of them is drawn."""
    started = time.perf_counter()
    devices.settle_cpu_threads()  # each run is a new thread (``_explorer`` for its own runs)
    config = app_config()
    process.apply_memory_policy(config.hosted)  # once per process: the launcher's, if it ran
    gradients_panel.absorb_target_click()
    if config.problem is not None:
        st.error(config.problem)
    linking.open_link(config)
    settings = sidebar.render(config)
    st.title("gradpick")
    st.caption(
        "Exact input gradients d target_j / d image_j for the images you pick out of an "
        "already-inferred batch."
    )
    if config.hosted:
        st.caption(HOSTED_NOTE)
    loaded = _load(settings)
    if loaded is None:
        return
    if after_inference is not None:
        after_inference()
    outputs.readouts(loaded)
    flat = cache.model_note(
        loaded.key, loaded.option.identity, loaded.option.label, loaded.result.logits
    )
    if flat is not None:  # said once, above every map it explains
        st.warning(flat)
    st.session_state[keys.RUN_STARTED] = started
    _explorer(loaded, settings)


@st.fragment
def _explorer(loaded: Loaded, settings: Settings) -> None:
    """The outputs, the picked images' gradients and the strategies: what a click changes.

    Only the open tab is drawn (switching tabs reruns this part), so a click in one does not
    rebuild and send the other four; the closed tabs' widgets keep their values
    (``state.keep_closed_tabs``)."""
    session = st.session_state
    started = session.pop(keys.RUN_STARTED, None) or time.perf_counter()
    devices.settle_cpu_threads()
    if state.pending_selection(session, keys.PROBABILITY_CHART):
        st.rerun()  # a bar click sets the target class, which the sidebar shows: a page run
    outputs.absorb_selections(loaded)
    compare_panel.absorb_flips(loaded, settings)
    params = linking.follow(loaded, settings)
    tab, shown = tabs.open_tab(linking.TABS, keys.EXPLORER_TAB, keys.TAB_WIDGETS)
    if shown == "Explore":
        with tab:
            _explore(loaded, settings, params, started)
        return
    panel, what = _PANELS[shown]
    with tab, guarded(what):
        panel(loaded, settings)


def _explore(loaded: Loaded, settings: Settings, params: dict[str, str], started: float) -> None:
    """The Explore tab: the link, the outputs and the picked images' gradients."""
    with guarded("The link and the named selections"):
        selections_panel.render(loaded, settings, params)
    # The outputs sit above the gradients but are drawn after them: a click's heatmaps
    # reach the browser first, the charts' picked highlights follow.
    outputs_area = st.container()
    with guarded("The gradients"):
        gradients_panel.render_panel(loaded, settings, started)
    with outputs_area, guarded("The outputs"):
        outputs.render(loaded, judged.by_index(loaded, settings))


_PANELS: dict[str, tuple[Callable[[Loaded, Settings], None], str]] = {
    "Strategies": (strategies_panel.render, "The strategies"),
    "Trust": (checks_panel.render, "The trust checks"),
    "Compare": (compare_panel.render, "The comparison"),
    "Triage": (triage_panel.render, "The triage"),
    "Slices": (slices_panel.render, "The slices"),
}
"""The other tabs' panels and what their guard calls them."""
