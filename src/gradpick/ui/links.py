"""A view of the explorer as URL query parameters, and back: what a deep link holds.

Plain Python, no Streamlit, so every refusal is unit-tested. ``View.to_params`` writes what the
page shows (the source, model, batch, picks, method and its settings, target, tab and view,
the triage's suspect and the slice in view);
``from_params`` reads a link someone sent, keeping only what this server allows: a hosted demo
never takes a server folder, a store path or a model it does not ship. Whatever is dropped is
said in a note, and the page keeps its default for it, as for whatever the link leaves out.
``fit_to_source`` then checks the numbers against the source once its size is known (start,
batch size, picks, suspect, target class).

Example::

    view, notes = from_params({"src": "cifar10", "picks": "3,417"}, allowed)
    view.picks  # (3, 417)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

__all__ = [
    "COMPARE_NONE",
    "KNOWN",
    "SCALES",
    "SETTING_PREFIX",
    "Allowed",
    "Range",
    "View",
    "fit_to_source",
    "from_params",
]

SETTING_PREFIX = "m."
"""Before each attribution setting's name: ``m.steps=32``."""
COMPARE_NONE = "none"
"""``compare=none``: compare with nothing (where the page's default compares with a model)."""
SCALES = ("per image", "shared")
"""The colour scales, as the sidebar offers them; ``scale=shared`` in a link."""
SWITCH = ("on", "off")
MAX_LAYER = 200
"""Characters of a layer's name at most: a longer one is a garbled link."""
MAX_PICKS = 1000
"""More picks than any page draws: a longer list is a garbled link, not a selection."""


@dataclass(frozen=True)
class Range:
    """An attribution setting's allowed values, as the page's slider offers them."""

    low: float
    high: float
    whole: bool = False
    switch: bool = False
    """An on/off setting (1 or 0): a toggle on the page."""


@dataclass(frozen=True)
class Allowed:
    """What this server accepts from a link: the page's own choices, narrowed when hosted."""

    kinds: tuple[str, ...]
    """Linkable sources: never uploads (their images are not on the server to reopen)."""
    models: tuple[str, ...]
    strategies: tuple[str, ...]
    methods: Mapping[str, Mapping[str, Range]]
    targets: tuple[str, ...]
    tabs: tuple[str, ...] = ()
    views: tuple[str, ...] = ()
    splits: tuple[str, ...] = ("test", "train")
    page_sizes: tuple[int, ...] = ()
    projections: tuple[str, ...] = ()
    colourings: tuple[str, ...] = ()
    max_batch_size: int | None = None
    hosted: bool = False


@dataclass(frozen=True)
class View:
    """What a link reopens; None (or empty) leaves the page's default."""

    kind: str | None = None
    split: str | None = None
    folder: str = ""
    outputs: str = ""
    start: int | None = None
    size: int | None = None
    seed: int | None = None
    model: str | None = None
    strategy: str | None = None
    picks: tuple[int, ...] = ()
    method: str | None = None
    settings: tuple[tuple[str, float], ...] = ()
    target: str | None = None
    target_class: int | None = None
    tab: str | None = None
    view: str | None = None
    layer: str | None = None
    """A layer method's layer (None: the automatic one); checked against the model's layers
    once the model is loaded."""
    compare: str | None = None
    """The built-in model compared with, or ``COMPARE_NONE``."""
    suspect: int | None = None
    """The Triage queue's position, from 1."""
    slice: int | None = None
    """The slice in view in the Slices tab, by rank from 1 (None: all of them)."""
    scale: str | None = None
    badges: bool | None = None
    occlusion: bool | None = None
    """Whether the shown maps are checked against occlusion (None: off, the default)."""
    memory: bool | None = None
    per_page: int | None = None
    page: int | None = None
    """The thumbnails' page, from 1."""
    projection: str | None = None
    colour: str | None = None
    """What the feature space's points are coloured by."""

    def to_params(self) -> dict[str, str]:
        """The query parameters of this view, in a stable order; a folder or store path only
        for the source kind that reads it."""
        params: dict[str, str] = {}
        if self.kind is not None:
            params["src"] = self.kind
        if self.kind in ("cifar10", "folder", "parquet") and self.split is not None:
            params["split"] = self.split
        if self.kind in ("folder", "parquet") and self.folder:
            params["folder"] = self.folder
        if self.kind == "stored" and self.outputs:
            params["outputs"] = self.outputs
        if self.seed is not None:
            params["seed"] = str(self.seed)
        elif self.start is not None:
            params["start"] = str(self.start)
        _put(params, "n", self.size)
        _put(params, "model", self.model)
        _put(params, "strategy", self.strategy)
        if self.picks:
            params["picks"] = ",".join(str(index) for index in self.picks)
        _put(params, "method", self.method)
        for name, value in self.settings:
            params[SETTING_PREFIX + name] = f"{value:g}"
        _put(params, "target", self.target)
        if self.target == "class":
            _put(params, "class", self.target_class)
        _put(params, "layer", self.layer)
        _put(params, "scale", self.scale)
        switches = (("badges", self.badges), ("occlusion", self.occlusion), ("memory", self.memory))
        for name, switch in switches:
            if switch is not None:
                params[name] = SWITCH[0] if switch else SWITCH[1]
        _put(params, "tab", self.tab)
        _put(params, "view", self.view)
        _put(params, "per_page", self.per_page)
        _put(params, "page", self.page)
        _put(params, "projection", self.projection)
        _put(params, "colour", self.colour)
        _put(params, "compare", self.compare)
        _put(params, "suspect", self.suspect)
        _put(params, "slice", self.slice)
        return params


def _put(params: dict[str, str], name: str, value: object) -> None:
    if value is not None:
        params[name] = str(value)


KNOWN = frozenset(
    (
        "src",
        "split",
        "folder",
        "outputs",
        "start",
        "n",
        "seed",
        "model",
        "strategy",
        "picks",
        "method",
        "target",
        "class",
        "tab",
        "view",
        "layer",
        "compare",
        "suspect",
        "slice",
        "scale",
        "badges",
        "occlusion",
        "memory",
        "per_page",
        "page",
        "projection",
        "colour",
    )
)
"""Every parameter a link may hold, besides the ``m.`` settings."""


def from_params(
    params: Mapping[str, str | Sequence[str]], allowed: Allowed
) -> tuple[View, list[str]]:
    """The view a link names, and a note for each parameter dropped (unknown, malformed or not
    allowed here). Never raises: a garbled link opens the default page with notes."""
    raw = {name: _one(value) for name, value in params.items()}
    notes: list[str] = []
    unknown = sorted(n for n in raw if n not in KNOWN and not n.startswith(SETTING_PREFIX))
    if unknown:
        notes.append(f"The link's {', '.join(unknown)} mean nothing here and were ignored.")
    kind = _choice(raw, "src", allowed.kinds, "source", notes)
    if kind is None and ("folder" in raw or "outputs" in raw) and allowed.hosted:
        notes.append(
            "The link names a folder on the server: a hosted demo never reads one, so it "
            "opens CIFAR-10."
        )
    folder = raw.get("folder", "").strip() if kind in ("folder", "parquet") else ""
    outputs = raw.get("outputs", "").strip() if kind == "stored" else ""
    if kind in ("folder", "parquet") and not folder or kind == "stored" and not outputs:
        notes.append(f"The link's source {kind} names no folder; it was ignored.")
        kind = None
    view = View(
        kind=kind,
        split=_choice(raw, "split", allowed.splits, "split", notes),
        folder=folder,
        outputs=outputs,
        start=_whole(raw, "start", notes),
        size=_batch_size(raw, allowed, notes),
        seed=_whole(raw, "seed", notes),
        model=_choice(raw, "model", allowed.models, "model", notes),
        strategy=_choice(raw, "strategy", allowed.strategies, "gradient strategy", notes),
        picks=_picks(raw.get("picks"), notes),
        target=_choice(raw, "target", allowed.targets, "target", notes),
        target_class=_whole(raw, "class", notes),
        tab=_choice(raw, "tab", allowed.tabs, "tab", notes),
        view=_choice(raw, "view", allowed.views, "view", notes),
        layer=_layer(raw.get("layer"), notes),
        compare=_choice(raw, "compare", (*allowed.models, COMPARE_NONE), "model to compare", notes),
        suspect=_from_one(raw, "suspect", notes),
        slice=_from_one(raw, "slice", notes),
        scale=_choice(raw, "scale", SCALES, "colour scale", notes),
        badges=_switch(raw, "badges", notes),
        occlusion=_switch(raw, "occlusion", notes),
        memory=_switch(raw, "memory", notes),
        per_page=_page_size(raw, allowed.page_sizes, notes),
        page=_from_one(raw, "page", notes),
        projection=_choice(raw, "projection", allowed.projections, "projection", notes),
        colour=_choice(raw, "colour", allowed.colourings, "colouring", notes),
    )
    method = _choice(raw, "method", tuple(allowed.methods), "attribution view", notes)
    ranges = allowed.methods.get(method, {}) if method is not None else {}
    settings = []
    for name, text in raw.items():
        if not name.startswith(SETTING_PREFIX):
            continue
        setting = name[len(SETTING_PREFIX) :]
        value = _setting(text, ranges.get(setting))
        if value is None:
            notes.append(f"The link's setting {setting}={text!r} does not fit {method}; ignored.")
        else:
            settings.append((setting, value))
    return replace(view, method=method, settings=tuple(settings)), notes


def fit_to_source(view: View, total: int, classes: int) -> tuple[View, list[str]]:
    """``view`` with its numbers checked against a source of ``total`` images and ``classes``
    classes: a start, size or pick beyond it is dropped with a note."""
    notes: list[str] = []
    start, size = view.start, view.size
    if start is not None and start >= total:
        notes.append(f"The link starts at image {start:,}, but the source has {total:,} images.")
        start = None
    if size is not None and size > total:
        notes.append(f"The link's batch of {size:,} is more than the source's {total:,} images.")
        size = None
    batch = min(size or total, total - (start or 0) if view.seed is None else total)
    picks = tuple(index for index in view.picks if index < batch)
    if len(picks) < len(view.picks):
        outside = [index for index in view.picks if index >= batch]
        notes.append(
            f"Picks {', '.join(map(str, outside))} are outside this batch of {batch:,} images "
            "and were dropped."
        )
    suspect = view.suspect
    if suspect is not None and suspect > batch:
        notes.append(f"The link's suspect {suspect} is beyond this batch of {batch:,} images.")
        suspect = None
    target_class = view.target_class
    if target_class is not None and target_class >= classes:
        notes.append(f"The link's class {target_class} does not exist here ({classes} classes).")
        target_class = None
    fitted = replace(
        view, start=start, size=size, picks=picks, target_class=target_class, suspect=suspect
    )
    return fitted, notes


def _one(value: str | Sequence[str]) -> str:
    """A parameter given twice counts once (its last value), as Streamlit reads it."""
    if isinstance(value, str):
        return value
    return value[-1] if value else ""


def _choice(
    raw: Mapping[str, str], name: str, options: Sequence[str], what: str, notes: list[str]
) -> str | None:
    text = raw.get(name)
    if text is None:
        return None
    if text in options:
        return text
    notes.append(f"The link's {what} {text!r} is not offered here; the default is used.")
    return None


def _whole(raw: Mapping[str, str], name: str, notes: list[str]) -> int | None:
    text = raw.get(name)
    if text is None:
        return None
    if text.strip().isdigit():
        return int(text)
    notes.append(f"The link's {name}={text!r} is not a whole number ≥ 0; ignored.")
    return None


def _from_one(raw: Mapping[str, str], name: str, notes: list[str]) -> int | None:
    """A whole number counted from 1 (a position in a queue)."""
    number = _whole(raw, name, notes)
    if number == 0:
        notes.append(f"The link's {name}=0 was ignored: it counts from 1.")
        return None
    return number


def _page_size(raw: Mapping[str, str], sizes: Sequence[int], notes: list[str]) -> int | None:
    text = _choice(raw, "per_page", [str(size) for size in sizes], "thumbnails per page", notes)
    return None if text is None else int(text)


def _switch(raw: Mapping[str, str], name: str, notes: list[str]) -> bool | None:
    text = _choice(raw, name, SWITCH, name, notes)
    return None if text is None else text == SWITCH[0]


def _layer(text: str | None, notes: list[str]) -> str | None:
    """A module's name as ``named_modules`` gives it (``layer2.1.conv2``); anything else is a
    garbled link. Whether the model has that layer is checked once it is loaded."""
    if text is None:
        return None
    name = text.strip()
    if name and len(name) <= MAX_LAYER and all(c.isalnum() or c in "._-" for c in name):
        return name
    notes.append(f"The link's layer {text[:40]!r} is not a layer's name; ignored.")
    return None


def _batch_size(raw: Mapping[str, str], allowed: Allowed, notes: list[str]) -> int | None:
    size = _whole(raw, "n", notes)
    if size == 0:
        notes.append("The link's batch size 0 was ignored.")
        return None
    if size is not None and allowed.max_batch_size is not None and size > allowed.max_batch_size:
        notes.append(
            f"The link's batch of {size:,} is over this demo's cap of "
            f"{allowed.max_batch_size:,}; the default is used."
        )
        return None
    return size


def _picks(text: str | None, notes: list[str]) -> tuple[int, ...]:
    if not text:
        return ()
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if len(parts) > MAX_PICKS or not all(part.isdigit() for part in parts):
        notes.append(f"The link's picks {text[:40]!r} are not a list of image indices; ignored.")
        return ()
    return tuple(dict.fromkeys(int(part) for part in parts))


def _setting(text: str, allowed: Range | None) -> float | None:
    if allowed is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    if not allowed.low <= value <= allowed.high or allowed.whole and not value.is_integer():
        return None
    return value
