"""The sidebar: which images, which model on which device, and which gradients to show."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import streamlit as st
import torch
from streamlit.delta_generator import DeltaGenerator

from gradpick import attribution
from gradpick.data import IMAGE_SUFFIXES, ImageSource
from gradpick.errors import GradpickError, InputError
from gradpick.gradients import strategies
from gradpick.outputs import store_format as store
from gradpick.runtime import devices
from gradpick.ui import cache, keys, service, state
from gradpick.ui.config import AppConfig
from gradpick.ui.guard import guarded
from gradpick.ui.heatmaps import TARGET_LABELS, TARGET_MODES, HeatmapRequest, resolved_mode
from gradpick.ui.service import (
    LOCAL_KINDS,
    SOURCE_KINDS,
    SOURCE_LABELS,
    DataChoice,
)
from gradpick.ui.session import Settings

__all__ = [
    "compare_default",
    "render",
    "stored_batch",
]


def render(config: AppConfig) -> Settings:
    with st.sidebar:
        st.header("Data")
        choice, source = _data(config)
        st.header("Model")
        option, fallback, about = _model(config)
        device = _device()
        option = _usable(option, fallback, device)
        with about:
            _describe(option)
        _compare_with(config, option)
        st.header("Gradients")
        labelled = source is None or _labels_reach_model(source, option, device)
        names = source.class_names if source is not None else ()
        request, shared, measure = _gradients(
            labelled, names, measure_by_default=not config.hosted, output=_output(option, device)
        )
    return Settings(choice, source, option, device, request, shared, measure)


def _labels_reach_model(
    source: ImageSource, option: service.ModelOption, device: torch.device
) -> bool:
    """Whether the images' labels survive into the batch: a folder of other classes than the
    model predicts loses them, so the loss target is not offered."""
    if source.labels() is None:
        return False
    try:
        classes = cache.served(option.identity, str(device), option).classes
    except Exception:  # the page says why the model cannot load
        return True
    return service.labels_fit(source.class_names, classes)


def _output(option: service.ModelOption, device: torch.device) -> str:
    """The model's output kind: 'sigmoid' for a multi-label model, else 'softmax'."""
    try:
        return cache.served(option.identity, str(device), option).output
    except Exception:  # the page says why the model cannot load
        return "softmax"


def _data(config: AppConfig) -> tuple[DataChoice | None, ImageSource | None]:
    kinds = [kind for kind in SOURCE_KINDS if kind not in LOCAL_KINDS or config.allow_local_folder]
    first = kinds.index("stored") if config.outputs and "stored" in kinds else 0
    kind = st.radio(
        "Source", kinds, index=first, format_func=SOURCE_LABELS.__getitem__, key=keys.SOURCE_KIND
    )
    if kind == "upload":
        files = st.file_uploader(
            "Images (several at once)",
            accept_multiple_files=True,
            type=[suffix.lstrip(".") for suffix in IMAGE_SUFFIXES],
            key=keys.UPLOADS,
        )
        uploads, problems = service.screen_uploads(
            [service.Upload.of(f.name, f.getvalue()) for f in files or []],
            config.max_upload_files,
            config.max_image_bytes,
        )
        for problem in problems:
            st.error(problem)
        if not uploads:
            st.info(
                "Upload one or more images; each is resized and centre-cropped to the model's "
                "input size."
            )
            return None, None
        base = DataChoice(kind="upload", size=None, uploads=uploads)
    elif kind == "stored":
        outputs = st.text_input(
            "Outputs folder",
            value=config.outputs or "",
            key=keys.OUTPUTS_PATH,
            placeholder="a folder written by gradpick infer --out",
            help="Outputs stored by gradpick infer --model MODEL --data FOLDER --out DIR: the "
            "batch is shown from them, without inferring again.",
        )
        base = DataChoice(kind="stored", outputs=outputs)
    else:
        split = st.selectbox("Split", ("test", "train"), key=keys.SPLIT)
        folder = ""
        if kind == "folder":
            folder = st.text_input(
                "Folder", key=keys.FOLDER_PATH, placeholder="/path/to/cifar10-jpg or a class tree"
            )
        elif kind == "parquet":
            folder = st.text_input(
                "Dataset folder",
                key=keys.FOLDER_PATH,
                placeholder="a Hub dataset's folder of .parquet shards, or one .parquet file",
            )
        base = DataChoice(kind=kind, split=split, folder=folder, hosted=config.hosted)
    source: ImageSource | None = None
    with guarded("Opening the images"):
        source = cache.source(base.source_key, base)
    if source is None:
        return None, None
    total = len(source)
    st.caption(f"{source.description}, {total:,} images")
    if kind == "upload":
        return base, source
    key = base.source_key
    # A store opens on the batch it holds; any other source on the page's default batch.
    held = stored_batch(base) if kind == "stored" else None
    opening = service.default_batch(base, source, config.max_batch_size, held)
    size = _batch_size(key, total, config.max_batch_size, opening.size or total)
    if held is None and opening.seed is not None:
        st.caption("These images are stored class by class, so the batch is a seeded sample.")
    session = st.session_state
    toggle, seed_key, start_key = (
        keys.per_source(name, key) for name in (keys.RANDOM_SAMPLE, keys.SAMPLE_SEED, keys.START)
    )
    state.start_at(session, toggle, opening.seed is not None)
    if st.toggle("Seeded random sample", key=toggle):
        state.start_at(session, seed_key, opening.seed or 0)
        seed = int(st.number_input("Seed", min_value=0, key=seed_key))
        return replace(base, size=size, seed=seed), source
    state.start_at(session, start_key, opening.start)
    start = int(st.number_input("Start", min_value=0, max_value=total - 1, key=start_key))
    return replace(base, start=start, size=size), source


def stored_batch(choice: DataChoice) -> dict[str, int | None]:
    """The batch (start, size, seed) held by the store the choice names."""
    path = choice.outputs.strip()
    opened = cache.stored_outputs(path, Path(path).expanduser().stat().st_mtime)
    return store.stored_batch(opened)


def _batch_size(source_key: str, total: int, cap: int | None, default: int) -> int:
    """The batch size typed for this source (``default`` until one is: the size of the batch
    the source opens on); an impossible one is explained and the last good one kept, so the
    batch, its results and the picks stay as they were."""
    good_key = keys.per_source(keys.GOOD_BATCH_SIZE, source_key)
    limit = min(total, cap or total)
    state.start_at(st.session_state, keys.per_source(keys.BATCH_SIZE, source_key), default)
    requested = int(
        st.number_input(
            "Batch size N",
            step=100,
            key=keys.per_source(keys.BATCH_SIZE, source_key),
            help=f"1 to {limit:,} images" + (" (this demo's cap)." if limit < total else "."),
        )
    )
    try:
        size = service.check_batch_size(requested, total, cap)
    except InputError as error:
        size = int(st.session_state.get(good_key, default))
        st.error(f"{error} Keeping {size:,}.")
    st.session_state[good_key] = size
    return size


def _model(
    config: AppConfig,
) -> tuple[service.ModelOption, service.ModelOption, DeltaGenerator]:
    """The chosen model, the built-in one to fall back to if it cannot be loaded, and the place
    under the selector for a word on the weights (known once loading was tried)."""
    built_in = service.model_options()
    options = {option.identity: option for option in built_in}
    user = _user_model(config)
    if user is not None:
        options = {user.identity: user, **options}
    identity = st.selectbox(
        "Model", list(options), format_func=lambda name: options[name].label, key=keys.MODEL
    )
    option = options.get(identity, next(iter(options.values())))
    about = st.container()
    if option.factory:
        return _spec_fields(option), built_in[0], about
    fallback = option
    upload = st.file_uploader(
        f"Your weights for {option.name} (.pt, .pth, .safetensors)",
        type=["pt", "pth", "safetensors"],
        key=keys.WEIGHTS_UPLOAD,
        help="A state_dict saved with torch.save (read with weights_only=True: a file that "
        "holds anything but tensors is refused without running it) or with safetensors.",
    )
    if upload is not None:
        with guarded("Reading the uploaded weights"):
            upload_data = service.Upload.of(upload.name, upload.getvalue())
            option = service.uploaded_weights_option(option, upload_data)
    return option, fallback, about


def _spec_fields(option: service.ModelOption) -> service.ModelOption:
    """Your model's input spec, prefilled from the command line; empty fields keep what the
    model's metadata says. Unreadable text is explained and the command line's spec kept."""
    with st.expander("Input spec", expanded=False):
        size = st.text_input("Input size (S or HxW)", option.input_size, key=keys.SPEC_SIZE)
        resize = st.text_input(
            "Resize shorter side to",
            "" if option.resize is None else str(option.resize),
            key=keys.SPEC_RESIZE,
            help="Then the centre crop to the input size; empty: the input height.",
        )
        mean = st.text_input("Mean (3 values)", _values_text(option.mean), key=keys.SPEC_MEAN)
        std = st.text_input("Std (3 values)", _values_text(option.std), key=keys.SPEC_STD)
    typed = option
    with guarded("The input spec"):
        typed = service.with_spec_text(option, size, resize, mean, std)
    return typed


def _values_text(values: tuple[float, ...] | None) -> str:
    return "" if values is None else ", ".join(f"{value:g}" for value in values)


def _describe(option: service.ModelOption) -> None:
    """Whose weights these are: the user's, a warning for the random stand-in, or the card."""
    if option.factory:
        st.caption(f"Your model: {option.factory}")
    elif option.upload is not None:
        st.caption(f"Weights: your upload {option.upload.name} (read with weights_only).")
    elif not option.shipped:
        st.warning(
            "No trained weights ship for this model yet: it has random weights, so its "
            "gradients show an untrained network (or upload weights below)."
        )
    elif option.card is not None:
        card = option.card
        st.caption(
            f"{card.get('architecture', option.name)}, {card.get('parameters', 0):,} parameters; "
            f"test accuracy {option.accuracy or 0:.2%} on {card.get('evaluated_images', '?')} "
            "images."
        )


def _user_model(config: AppConfig) -> service.ModelOption | None:
    """The model named by ``--model`` (or $GRADPICK_MODEL), unless hosted or unusable."""
    args = config.user_model
    if args is None:
        return None
    if not config.allow_user_model:
        st.error(
            f"Your own model ({args.factory}) is turned off in hosted mode: importing it would "
            "run its code on the shared server. Run the app locally to use it."
        )
        return None
    option: service.ModelOption | None = None
    with guarded(f"Your model {args.factory}"):
        option = service.user_model_option(args)
    return option


def _usable(
    option: service.ModelOption, fallback: service.ModelOption, device: torch.device
) -> service.ModelOption:
    """``option`` if it loads on ``device``; else why not, and ``fallback`` (a built-in model
    or the weights used before the upload), so the batch, results and picks stay intact."""
    if option == fallback:
        return option
    try:
        loaded = cache.served(option.identity, str(device), option)
    except Exception as error:  # a user's factory or file: whatever it raises, said in a line
        reason = str(error) if isinstance(error, GradpickError) else f"{option.label}: {error!r}"
        st.error(f"{reason} Using {fallback.label} instead.")
        return fallback
    return service.named_outputs(option, loaded)


def _device() -> torch.device:
    options = {option.kind: option for option in service.device_options()}
    kind = st.selectbox(
        "Device", list(options), format_func=lambda name: options[name].label, key=keys.DEVICE
    )
    reason = options[kind].reason
    if reason is not None:
        st.error(f"{kind} cannot be used here: {reason}. Using the best available device.")
        kind = "auto"
    device = devices.resolve_device(kind)
    st.caption(f"Running on {device}.")
    return device


SIGMOID_TARGET_LABELS = {
    **TARGET_LABELS,
    "loss": "Loss on the true label (its binary cross-entropy)",
    "predicted": "Logit of the top label",
    "class": "Logit of a chosen label",
}
"""The targets in a sigmoid (multi-label) model's words: one map per label."""


def _gradients(
    labelled: bool, class_names: tuple[str, ...], measure_by_default: bool, output: str
) -> tuple[HeatmapRequest, bool, bool]:
    sigmoid = output == "sigmoid"
    labels = SIGMOID_TARGET_LABELS if sigmoid else TARGET_LABELS
    strategy = st.selectbox(
        "Gradient strategy", strategies.NAMES, key=keys.STRATEGY, help=strategies.help_text()
    )
    # Without labels the method's default is always the predicted class: 'auto' would be a
    # second name for it.
    modes = [mode for mode in TARGET_MODES if labelled or mode not in ("auto", "loss")]
    mode = st.radio(
        "Target",
        modes,
        format_func=labels.__getitem__,
        key=keys.TARGET_MODE,
        help="The method's default: the logit of the predicted class for the layer maps "
        "(Grad-CAM and kin, which keep only what raises their target), the loss on the true "
        "label for the pixel maps.",
    )
    target_class = int(st.session_state.get(keys.TARGET_CLASS, 0))
    if mode == "class" and class_names:
        if target_class >= len(class_names):
            st.session_state[keys.TARGET_CLASS] = target_class = 0
        target_class = int(
            st.selectbox(
                "Label" if sigmoid else "Class",
                range(len(class_names)),
                format_func=class_names.__getitem__,
                key=keys.TARGET_CLASS,
                help=(
                    "The maps show what raises this label's own logit (independent labels: "
                    "one image may have several). "
                    if sigmoid
                    else ""
                )
                + "Or click a bar of the probabilities below the heatmaps.",
            )
        )
    method = st.selectbox(
        "Attribution view",
        attribution.METHOD_NAMES,
        format_func=lambda name: attribution.get(name).label,
        key=keys.METHOD,
    )
    settings = {
        parameter.name: _setting(parameter)
        for parameter in attribution.get(method).parameters
        if parameter.shown is not None
    }
    scale = st.radio(
        "Colour scale",
        ("per image", "shared"),
        key=keys.COLOUR_SCALE,
        horizontal=True,
        help="Shared: one scale for all picked images, so magnitudes compare. Per image: "
        "each image's own range, so its structure shows.",
    )
    # Off by default on a hosted demo: each new number of picks runs the step once more, with
    # the profiler on, on a small shared host.
    state.start_at(st.session_state, keys.MEASURE_MEMORY, measure_by_default)
    measure = st.checkbox(
        "Measure memory",
        key=keys.MEASURE_MEMORY,
        help="Saved-for-backward bytes and the peak of the gradient step, from one more run "
        "of it with measurement on (the profiler's overhead never reaches the timings).",
    )
    request = HeatmapRequest(
        target_mode=resolved_mode(mode, method, labelled),
        target_class=target_class,
        method=method,
        strategy=strategy,
        settings=tuple(settings.items()),
        output=output,
    )
    return request, scale == "shared", measure


def _setting(parameter: attribution.Parameter) -> float | int:
    """A slider over the parameter's range in the explorer (a toggle for an on/off one), at its
    default to begin with."""
    assert parameter.shown is not None
    low, high = parameter.shown
    kind = int if parameter.whole else float
    key = keys.setting_key(parameter.name)
    if parameter.switch:
        state.start_at(st.session_state, key, bool(parameter.default))
        return int(st.toggle(parameter.label, key=key, help=parameter.help))
    state.start_at(st.session_state, key, kind(parameter.default))
    value = st.slider(
        parameter.label,
        kind(low),
        kind(high),
        key=key,
        help=parameter.help,
    )
    return kind(value)


def compare_default(config: AppConfig, first: service.ModelOption | None = None) -> str:
    """What the page compares with until told otherwise: nothing, or on a hosted demo the
    shipped model that is not the first (the best shipped one when ``first`` is not known)."""
    options = service.model_options()
    first_identity = first.identity if first is not None else options[0].identity
    others = [option.identity for option in options if option.identity != first_identity]
    return others[0] if config.hosted and others else keys.COMPARE_NOTHING


def _compare_with(config: AppConfig, first: service.ModelOption) -> None:
    """A second model for the Compare view: a built-in, any model name (local runs) or a
    stored-outputs folder (local runs). A hosted demo compares its two shipped models."""
    built_in = {option.identity: option.label for option in service.model_options()}
    choices = {keys.COMPARE_NOTHING: "nothing", **built_in}
    if config.allow_user_model:
        choices[keys.COMPARE_BY_NAME] = "a model by name…"
    if config.allow_local_folder:
        choices[keys.COMPARE_STORED] = "a stored-outputs folder…"
    if st.session_state.get(keys.COMPARE_WITH) not in choices:
        st.session_state.pop(keys.COMPARE_WITH, None)  # a link's model this page does not offer
    state.start_at(st.session_state, keys.COMPARE_WITH, compare_default(config, first))
    chosen = st.selectbox(
        "Compare with",
        list(choices),
        format_func=choices.__getitem__,
        key=keys.COMPARE_WITH,
        help="A second model on the same images: the Compare tab shows where they flip and "
        "how their maps differ.",
    )
    if chosen == keys.COMPARE_BY_NAME:
        st.text_input(
            "Second model", key=keys.COMPARE_NAME, placeholder="torchvision:resnet18, pkg.mod:fn"
        )
    elif chosen == keys.COMPARE_STORED:
        st.text_input(
            "Second model's outputs",
            key=keys.COMPARE_OUTPUTS,
            placeholder="a gradpick infer --out folder",
        )
