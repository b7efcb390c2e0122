"""The Strategies tab: every way to get these gradients, measured on the current selection.

Experiments run only when asked (they take seconds) and their results stay in the session,
tagged with the selection they were run on.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pandas as pd
import streamlit as st
from torch import nn

from gradpick import attribution, units
from gradpick.gradients import layers
from gradpick.gradients.timing import FLOOR, StrategyRun
from gradpick.ui import cache, experiments, figures, keys, service, state
from gradpick.ui.guard import guarded
from gradpick.ui.session import Loaded, Settings

__all__ = [
    "render",
]


def render(loaded: Loaded, settings: Settings) -> None:
    picked = state.picked(st.session_state)
    st.subheader("Every strategy on the picked images")
    if not picked:
        st.info("Pick some images in the Explore tab first; the comparisons run on them.")
        return
    if settings.request.method in attribution.LAYER_METHODS:
        st.info(
            f"{attribution.get(settings.request.method).label}'s layer gradients run strategy "
            f"{', '.join(layers.LAYER_STRATEGIES)} only (the picked images alone); the "
            "strategies below are compared on the input-gradient step."
        )
    compared = picked[: experiments.MAX_COMPARED]
    shown = f"the first {len(compared)} of {len(picked)}" if len(picked) > len(compared) else ""
    st.caption(
        f"Runs on {shown or len(compared)} picked image(s) of the batch of N = {len(loaded):,} "
        f"on {loaded.device}, target '{settings.request.target_mode}'. Times are medians of 3 "
        "runs; memory comes from one more run with measurement on."
    )
    context = (
        loaded.key,
        loaded.option.identity,
        str(loaded.device),
        settings.request.engine_target(),
    )
    session = st.session_state
    forward_ms = loaded.result.milliseconds / len(loaded)
    if st.button("Run every strategy", type="primary", key=keys.RUN_COMPARISON):
        with guarded("The comparison"), st.spinner("Running every strategy…"):
            setup = experiments.Setup.of(loaded.batch, compared, settings.request, forward_ms)
            session[keys.COMPARISON] = experiments.run_comparison(
                loaded.model,
                setup,
                (*context, tuple(compared)),
                functools.partial(_leakage_model, loaded),
            )
    stored: experiments.Comparison | None = session.get(keys.COMPARISON)
    if stored is not None and stored.key == (*context, tuple(compared)):
        _show_comparison(stored)
    elif stored is not None:
        st.info("The selection or settings changed since the last run: run it again.")

    st.subheader("Cost against k and against N")
    if st.button("Run the sweep", key=keys.RUN_SWEEP):
        with guarded("The sweep"):
            bar = st.progress(0.0, text="Sweeping k and N…")

            def advance(done: int, total: int) -> None:
                bar.progress(done / total, text=f"Sweeping k and N: {done} of {total} points")

            setup = experiments.Setup.of(loaded.batch, compared, settings.request, forward_ms)
            points = experiments.sweep(loaded.model, setup, progress=advance)
            bar.empty()
            session[keys.SWEEP] = (context, points)
    stored_sweep = session.get(keys.SWEEP)
    if stored_sweep is not None and stored_sweep[0] == context:
        _show_sweep(stored_sweep[1])
    else:
        st.caption(
            f"Times every strategy for k in {experiments.SWEEP_K} images at the largest N, and "
            f"for N in {experiments.SWEEP_N} at the largest k (capped at this batch's N). A "
            f"strategy estimated to take over {experiments.SWEEP_BUDGET_SECONDS:.0f} s at a "
            "point is left out there."
        )


def _leakage_model(loaded: Loaded) -> nn.Module:
    """The served model when it is the leakage model, else that one from the model cache."""
    option = service.option_named(experiments.LEAKAGE_MODEL, loaded.option)
    if option == loaded.option:
        return loaded.model
    return cache.model(option.identity, str(loaded.device), option)


def _show_comparison(stored: experiments.Comparison) -> None:
    runs: list[StrategyRun] = stored.runs
    st.plotly_chart(
        figures.strategy_bars(
            [run.name for run in runs],
            [run.milliseconds for run in runs],
            [run.saved_bytes for run in runs],
            [run.peak_bytes for run in runs],
        ),
        config=figures.CHART_CONFIG,
        key=keys.STRATEGY_BARS,
    )
    st.dataframe(pd.DataFrame(experiments.run_table(runs)), hide_index=True)
    st.caption(
        "floor: one plain forward and backward of the picked images alone, by hand. "
        f"Peak memory counts: {runs[0].peak_counts}. Saved for backward counts the tensors "
        "autograd keeps for the backward pass (vmap's are not observable)."
    )
    for name, reason in stored.skipped.items():
        st.warning(f"{name} skipped: it {reason}.")
    verdict = stored.agreement
    if verdict.agrees:
        st.success(
            f"Every strategy gives the same gradients: the largest |difference| from the floor "
            f"is {verdict.worst:.2e}, float32 rounding (whole-batch strategies sum in another "
            "order)."
        )
    else:
        st.warning(f"The strategies disagree: the largest |difference| is {verdict.worst:.2e}.")
    _show_naive(stored)
    mean = stored.mean
    st.markdown(
        f"**reduction='mean'** scales every gradient by 1/k: measured ratio mean/sum = "
        f"{mean.ratio:.6f}, 1/k = {1 / mean.k:.6f} (k = {mean.k}); largest |mean − sum/k| = "
        f"{mean.max_deviation:.2e}."
    )
    if stored.leakage is not None:
        served, training = stored.leakage
        st.markdown(
            f"**Cross-sample leakage** ({experiments.LEAKAGE_MODEL}, the picked images as one "
            "batch): "
            f"in eval mode, as gradpick serves models, the largest gradient reaching another "
            f"image is {served.relative:.2e} of the image's own. In training mode (a deep copy; "
            f"the served model is never switched) it is {training.relative:.2%}, because "
            f"BatchNorm normalises with the batch's statistics "
            f"({len(training.coupled_modules)} coupled modules, e.g. "
            f"{', '.join(training.coupled_modules[:3])})."
        )


def _show_naive(stored: experiments.Comparison) -> None:
    naive = stored.naive
    runs = {run.name: run for run in stored.runs}
    st.markdown("**The naive loop** (one forward of all N, a backward per index):")
    if naive.error is None:
        st.info("With a single picked image the loop has only one backward, so it succeeds.")
        return
    st.code(f"RuntimeError: {naive.error}", language="text", wrap_lines=True)

    def cost(name: str) -> str:
        run = runs.get(name)
        if run is None:
            return "skipped here (too much memory)"
        peak = "" if run.peak_bytes is None else f", peak {units.format_bytes(run.peak_bytes, 1)}"
        return f"{run.milliseconds:,.1f} ms{peak}"

    st.markdown(
        "The first `backward` frees the tensors the graph saved for it (to release memory "
        "early); the second index's backward runs through the same graph and finds them gone. "
        "The fixes, measured just now on these images:\n"
        f"- keep the graph with `retain_graph=True` (`retain_graph`): {cost('retain_graph')}: "
        "k backward passes through all N and the whole graph held meanwhile;\n"
        f"- one backward of the summed targets (`summed`): {cost('summed')}: still a forward "
        "and backward of all N;\n"
        f"- recompute only the picked images (`recompute`): {cost('recompute')}, against a "
        f"floor of {cost(FLOOR)}: the cost no longer depends on N."
    )


def _show_sweep(points: Sequence[experiments.SweepPoint]) -> None:
    against_k, against_n = experiments.sweep_series(points)
    st.caption(f"Against k, at N = {against_k.fixed:,}:")
    st.plotly_chart(
        figures.sweep_lines(against_k.lines, "k"), config=figures.CHART_CONFIG, key=keys.SWEEP_K
    )
    st.caption(f"Against N, at k = {against_n.fixed}:")
    st.plotly_chart(
        figures.sweep_lines(against_n.lines, "N"), config=figures.CHART_CONFIG, key=keys.SWEEP_N
    )
