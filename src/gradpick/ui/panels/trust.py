"""The Trust tab: sanity checks of the maps of the picked images, run when asked.

The checks cost many gradient passes (every randomised layer recomputes every chosen method),
so they run on a button press, on every pick in chunks of ``chunks.CHUNK`` (a progress bar
moves with each chunk's randomised layers; the result is that of one run over all picks), and
their result stays in the session tagged with the selection and options it was run on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st
import torch

from gradpick import attribution
from gradpick.show.html import class_name
from gradpick.trust.baselines import BASELINES
from gradpick.trust.chunks import CHUNK, run_checks_in_chunks
from gradpick.trust.engine import CHECKABLE, METHODS, MethodSettings
from gradpick.trust.faithfulness import INSERTION_START, RANDOM, REMOVED
from gradpick.trust.report import CheckOptions, TrustReport, mean_and_std
from gradpick.ui import figures, heatmaps, keys, layer_select, service, state
from gradpick.ui.guard import guarded
from gradpick.ui.session import Loaded, Settings

__all__ = [
    "render",
    "StoredChecks",
]


def _method_label(name: str) -> str:
    """A registered method's label; other curve names (the random order) stand as they are."""
    method = attribution.METHODS.get(name)
    return name if method is None else method.label


@dataclass(frozen=True)
class StoredChecks:
    key: tuple[Any, ...]
    report: TrustReport


def _options(loaded: Loaded, settings: Settings) -> CheckOptions:
    """The check options from the tab's widgets; SmoothGrad and IG follow the sidebar, a layer
    method's layer the Explore tab's layer box."""
    request = settings.request
    chosen = request.method if request.method in CHECKABLE else METHODS[0]
    # First values through the session state (``state.start_at``): a closed tab's values are
    # kept there, and a widget given a default too logs a warning.
    session = st.session_state
    for key, first in (
        (keys.TRUST_METHODS, [chosen]),
        (keys.TRUST_LAYERS, 0),
        (keys.TRUST_BASELINES, ["black"]),
        (keys.TRUST_TOLERANCE, 0.05),
        (keys.TRUST_MAX_STEPS, 512),
    ):
        state.start_at(session, key, first)
    columns = st.columns(3)
    methods = columns[0].multiselect(
        "Methods", CHECKABLE, format_func=_method_label, key=keys.TRUST_METHODS
    )
    mode = columns[0].radio(
        "Randomise layers",
        ("cascade", "independent"),
        format_func={
            "cascade": "cumulatively, from the output",
            "independent": "one at a time",
        }.__getitem__,
        key=keys.TRUST_MODE,
    )
    layers = columns[1].number_input(
        "Layers to randomise (0: all)", min_value=0, step=1, key=keys.TRUST_LAYERS
    )
    baselines = columns[1].multiselect("IG baselines", BASELINES, key=keys.TRUST_BASELINES)
    tolerance = columns[2].number_input(
        "IG tolerance (relative error)",
        min_value=0.001,
        max_value=0.5,
        step=0.01,
        format="%.3f",
        key=keys.TRUST_TOLERANCE,
    )
    max_steps = columns[2].number_input(
        "IG step cap", min_value=2, max_value=4096, step=16, key=keys.TRUST_MAX_STEPS
    )
    return CheckOptions(
        methods=tuple(methods),
        settings=replace(
            MethodSettings.from_chosen(dict(request.settings)), layer=layer_select.chosen(loaded)
        ),
        randomisation=mode,
        layers=int(layers) or None,
        baselines=tuple(baselines),
        tolerance=float(tolerance),
        max_steps=int(max_steps),
        output=loaded.served.output,
    )


def render(loaded: Loaded, settings: Settings) -> None:
    st.subheader("Can these maps be trusted?")
    picked = state.picked(st.session_state)
    if not picked:
        st.info("Pick some images in the Explore tab first; the checks run on them.")
        return
    checked = list(picked)
    request = settings.request
    classes = request.target_class if request.target_mode == "class" else None
    explained = (
        f"the logit of {class_name(loaded.batch.class_names, classes)}"
        if classes is not None
        else "each image's predicted logit"
    )
    st.caption(
        f"Runs on all {len(checked)} picked image(s), {CHUNK} at a time, explaining "
        f"{explained} (a loss has no class to hold fixed). SmoothGrad and Integrated "
        "Gradients use the sidebar's samples, noise and steps."
    )
    st.caption(
        "These checks ask whether a map depends on the model; whether it finds what the model "
        "used is measured on planted causes (`gradpick bench-planted`, the guide's Attribution "
        "methods page): occlusion points at a planted mark far more often than the plain "
        "gradient, and stays off it through a clean model. Choose *Occlusion* in the sidebar "
        "when looking for a shortcut."
    )
    options = _options(loaded, settings)
    key = (loaded.key, loaded.option.identity, str(loaded.device), tuple(checked), classes, options)
    session = st.session_state
    if st.button("Run the trust checks", type="primary", key=keys.TRUST_RUN):
        with guarded("The trust checks"):
            bar = st.progress(0.0, text="Randomising layers…")
            chunks = -(-len(checked) // CHUNK)

            def advance(done: int, total: int) -> None:
                bar.progress(
                    done / total,
                    text=f"Randomised {done} of {total} layers, over {chunks} chunk(s) of up "
                    f"to {CHUNK} images",
                )

            try:
                report = run_checks_in_chunks(
                    loaded.model,
                    loaded.batch.float_images(),
                    checked,
                    classes,
                    options,
                    advance,
                    chunk=CHUNK,
                )
            finally:
                bar.empty()
            session[keys.TRUST_CHECKS] = StoredChecks(key, report)
    stored: StoredChecks | None = session.get(keys.TRUST_CHECKS)
    if stored is None:
        return
    if stored.key != key:
        st.info("The selection or options changed since the last run: run the checks again.")
        return
    titles = service.describe_indices(loaded.batch, loaded.result, checked)
    with guarded("The randomisation test"):
        _randomisation(loaded, stored.report, titles)
    with guarded("The completeness table"):
        _completeness(stored.report, loaded.batch.class_names)
    with guarded("The deletion and insertion curves"):
        _faithfulness(stored.report)
    with guarded("The class maps"):
        _class_maps(loaded, stored.report, titles)


def _heat(images: torch.Tensor, maps: torch.Tensor) -> list[np.ndarray]:
    """Saliency pictures of maps [n, C, H, W] of uint8 images [n, 3, H, W], each its own scale."""
    return [tile.heat for tile in heatmaps.tiles(images, maps, shared_scale=False)]


def _smoothgrad_note(report: TrustReport) -> None:
    if "smoothgrad" not in report.options.methods:
        return
    settings = report.options.settings
    spread = ", ".join(f"{value:.3g}" for value in report.noise_std.tolist())
    st.caption(
        f"SmoothGrad: {settings.samples} noisy copies per image; noise standard deviation "
        f"{settings.noise:g} of each image's range (max − min), i.e. {spread}."
    )


def _randomisation(loaded: Loaded, report: TrustReport, titles: list[str]) -> None:
    st.markdown("**Model-parameter randomisation** (a map that survives it ignores the weights)")
    curves = report.randomisation
    first = next(iter(curves.values()))
    labels = ["trained", *(step.layer for step in first.steps)]

    def series(part: int, trained: float) -> dict[str, tuple[list[Any], list[Any]]]:
        """Per method, (Spearman, SSIM) means (part 0) or spreads (part 1) at each step."""
        return {
            _method_label(method): (
                [trained, *(mean_and_std(step.spearman)[part] for step in curve.steps)],
                [trained, *(mean_and_std(step.ssim)[part] for step in curve.steps)],
            )
            for method, curve in curves.items()
        }

    st.plotly_chart(
        figures.randomisation_lines(labels, series(0, 1.0), series(1, 0.0)),
        config=figures.CHART_CONFIG,
        key=keys.TRUST_RANDOMISATION,
    )
    st.caption(
        f"Mean over the picks, ± one standard deviation; {first.mode} randomisation. Each "
        "randomised layer's parameters are redrawn from a Gaussian of their trained "
        "root-mean-square, on a copy of the model."
    )
    _smoothgrad_note(report)
    left, right = st.columns(2)
    method = left.selectbox(
        "Randomised maps of",
        list(curves),
        format_func=_method_label,
        key=keys.TRUST_MAP_METHOD,
    )
    position = right.selectbox(
        "for image", range(len(titles)), format_func=titles.__getitem__, key=keys.TRUST_MAP_IMAGE
    )
    curve = curves[method]
    maps = torch.stack([curve.original[position], *(s.maps[position] for s in curve.steps)])
    image = loaded.batch.rows(report.indices[position])
    pictures = _heat(image.expand(len(maps), *image.shape), maps)
    st.image(pictures, caption=labels, width=96)


def _completeness(report: TrustReport, class_names: tuple[str, ...]) -> None:
    st.markdown("**Integrated Gradients completeness** (sum of attributions = F(x) − F(baseline))")
    rows = report.completeness
    if not rows:
        st.caption("Not run: it checks Integrated Gradients, which is not among the methods.")
        return
    st.dataframe(
        pd.DataFrame(
            {
                "image": [f"#{row.index}" for row in rows],
                "class": [class_name(class_names, row.target_class) for row in rows],
                "baseline": [row.baseline for row in rows],
                "steps": [row.steps for row in rows],
                "Σ attributions": [row.attribution_sum for row in rows],
                "F(x) − F(baseline)": [row.difference for row in rows],
                "relative error (%)": [100 * row.relative_error for row in rows],
                "verdict": [row.verdict for row in rows],
            }
        ),
        hide_index=True,
        key=keys.TRUST_COMPLETENESS,
    )
    automatic = report.options.ig_steps == "auto"
    st.caption(
        f"Steps chosen automatically: the fewest of 16, 32, 64, … (at most "
        f"{report.options.max_steps}) within {report.options.tolerance:.1%} relative error."
        if automatic
        else f"{report.options.ig_steps} steps (midpoint rule)."
    )


def _faithfulness(report: TrustReport) -> None:
    st.markdown("**Deletion and insertion** (most important pixels first, against random order)")
    curves = report.faithfulness
    names = {name: _method_label(name) for name in curves}
    series = {
        names[name]: (curve.deletion.mean(dim=0).tolist(), curve.insertion.mean(dim=0).tolist())
        for name, curve in curves.items()
    }
    fractions = next(iter(curves.values())).fractions.tolist()
    st.plotly_chart(
        figures.faithfulness_lines(fractions, series),
        config=figures.CHART_CONFIG,
        key=keys.TRUST_CURVES,
    )
    st.dataframe(
        pd.DataFrame(
            {
                "order": list(names.values()),
                "deletion AUC (lower is better)": [
                    float(curve.deletion_auc.mean()) for curve in curves.values()
                ],
                "insertion AUC (higher is better)": [
                    float(curve.insertion_auc.mean()) for curve in curves.values()
                ],
            }
        ),
        hide_index=True,
        key=keys.TRUST_AUCS,
    )
    st.caption(
        f"Probability of the explained class, mean over the picks; deleted pixels become "
        f"{REMOVED}, insertion starts from a {INSERTION_START}. '{RANDOM}': a seeded random "
        "order per image."
    )


def _class_maps(loaded: Loaded, report: TrustReport, titles: list[str]) -> None:
    st.markdown("**Top classes and a contrast** (gradients, one forward for all of them)")
    maps = report.class_maps
    names = loaded.batch.class_names
    for position, title in enumerate(titles):
        image = loaded.batch.rows(report.indices[position])
        stacked = torch.cat([maps.top_maps[position], maps.contrast_maps[position : position + 1]])
        pictures = [heatmaps.tiles(image[None], stacked[:1], False)[0].image]
        pictures += _heat(image.expand(len(stacked), *image.shape), stacked)
        a, b = maps.contrast[position].tolist()
        captions = [title]
        captions += [
            f"{class_name(names, c)} ({p:.0%})"
            for c, p in zip(
                maps.top_classes[position].tolist(),
                maps.top_probabilities[position].tolist(),
                strict=True,
            )
        ]
        captions.append(f"{class_name(names, a)} − {class_name(names, b)}")
        st.image(pictures, caption=captions, width=96)
