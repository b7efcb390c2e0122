"""One export schema for picked gradients: the same arrays and JSON fields from every front end.

``gradpick grads --out x.npz`` (or ``.pt``) and the explorer's downloads write the arrays of
``ARRAYS`` and the JSON fields of ``FIELDS``, built here from one ``Export`` (``of_picks``
makes it from the batch the picks come from, for both); the README's table is this module's
documentation for users.

* ``.npz``: the arrays, ``numpy.load(path, allow_pickle=False)``.
* ``.pt``: the same arrays as tensors (``names`` a list of str, ``layer`` a str) plus
  ``method`` and ``target``, for ``torch.load(path, weights_only=True)``.

Every method's ``maps`` are one map per image at the input size, as the explorer draws them
(``render.saliency``: the largest |value| over channels, which for a layer method is its
upsampled map); a layer method adds its maps at the layer's grid and the layer's name
(``LAYER_ARRAYS``).
* JSON (the CLI's sidecar ``x.json``, the explorer's report): the fields of ``FIELDS``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gradpick import attribution
from gradpick.attribution import Attribution
from gradpick.attribution.notes import note_texts
from gradpick.data import ImageBatch
from gradpick.errors import InputError
from gradpick.outputs.inference import as_model_input
from gradpick.runtime.measure import MemoryReport
from gradpick.runtime.versions import installed_version, library_versions
from gradpick.show import render
from gradpick.show.html import class_name

__all__ = [
    "ARRAYS",
    "FIELDS",
    "LAYER_ARRAYS",
    "SCHEMA",
    "stamp",
    "SUFFIXES",
    "Export",
    "arrays",
    "class_name",
    "metadata",
    "metadata_json",
    "quantity",
    "source_record",
    "npz_bytes",
    "of_picks",
    "pt_bytes",
    "write",
]

SCHEMA = "gradpick-gradients/2"
SUFFIXES = (".pt", ".npz")

ARRAYS: dict[str, str] = {
    "indices": "int64 [k]: batch index of each picked image; row i is image indices[i]",
    "positions": "int64 [k]: each picked image's position in its source",
    "names": "str [k]: each picked image's name in its source",
    "images": "float [k, C, H, W]: the pixels, in [0, 1], the gradients are taken with respect to",
    "gradients": "float [k, C, H, W]: d target_i / d images[i] (times 1/k for reduction mean); "
    "for a layer method d target_i / d the layer's activation [k, C', h, w]",
    "channel_maps": "float [k, C, H, W]: the attribution method's maps per channel (the "
    "gradients for 'gradient'; a layer method's upsampled map in every channel)",
    "maps": "float32 [k, H, W]: one map per image at the input size, as the explorer draws it: "
    "the largest |value| of channel_maps over channels (a layer method's upsampled map)",
    "classes": "int64 [k]: the class whose loss or logit each target is",
    "target_values": "float [k]: each target's value",
}
"""Name and meaning of every array, in the order they are written."""

LAYER_ARRAYS: dict[str, str] = {
    "layer_maps": "float [k, h, w]: a layer method's ReLU'd maps at the layer's grid, before "
    "upsampling",
    "layer": "str: the layer's dotted name in the model, as model.named_modules() names it",
}
"""The arrays a layer method (Grad-CAM, ...) adds after ``ARRAYS``, in the order written."""

FIELDS: dict[str, str] = {
    "schema": f"'{SCHEMA}'",
    "gradients_file": "the arrays' file name (None for a report downloaded on its own)",
    "arrays": "the names of the arrays in the file",
    "shape": "[k, C, H, W] of images and channel_maps (and gradients, but a layer method's)",
    "dtype": "their dtype, e.g. 'float32'",
    "rows": "what row i means",
    "k": "the number of picked images (repeats included)",
    "indices": "as the array",
    "source_positions": "as the array positions",
    "image_names": "as the array names",
    "labels": "the picked images' true labels, or None for unlabelled images",
    "target": "'loss' (cross-entropy with the label) or 'logit'",
    "quantity": "the differentiated quantity in words, e.g. 'loss' or 'logit[cat]'",
    "target_values": "as the array",
    "classes": "as the array",
    "class_names": "the names of those classes",
    "method": "{name, label, settings} of the attribution method",
    "layer": "{name, grid: [h, w]} of a layer method's layer, or None for an input-gradient one",
    "notes": "one entry per map: None, or why the map is all zero or constant, in words",
    "strategy": "the gradient strategy",
    "reduction": "'sum' or 'mean'",
    "device": "where the gradients were computed",
    "timing_ms": "wall time of the gradient step, device synchronised",
    "method_ms": "wall time of the whole attribution method",
    "chunks": "how many chunks the step ran in",
    "memory": "saved-for-backward and peak bytes, each with what it counts, or None",
    "model": "{name, weights, weights_sha256, card_sha256, card_test_accuracy}",
    "source": "{description, split, start, size, seed, N}: the batch the picks come from",
    "versions": "library versions",
    "created": "UTC time of writing, ISO 8601",
}
"""Name and meaning of every JSON field, in the order they are written."""


@dataclass(frozen=True)
class Export:
    """Everything one export holds: the result and where its picked images came from."""

    result: Attribution
    indices: Sequence[int]
    """Each picked image's index in the batch (the engine may have run on the picks alone)."""
    images: torch.Tensor
    """The picked images' pixels [k, C, H, W] in [0, 1], as the engine took them."""
    positions: Sequence[int]
    names: Sequence[str]
    labels: Sequence[int] | None
    class_names: Sequence[str]
    quantity: str
    model: Mapping[str, Any]
    source: Mapping[str, Any]
    memory: MemoryReport | None = None
    libraries: tuple[str, ...] = ()
    """Packages whose versions ``versions`` records beside gradpick's own (the app's)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Fields a front end adds after the schema's own (the explorer's settings)."""


def of_picks(
    result: Attribution,
    batch: ImageBatch,
    rows: Sequence[int],
    chosen: int | None,
    model: Mapping[str, Any],
    source: Mapping[str, Any],
    indices: Sequence[int] | None = None,
    memory: MemoryReport | None = None,
    libraries: tuple[str, ...] = (),
    extra: Mapping[str, Any] | None = None,
) -> Export:
    """The export of the picked ``rows`` of ``batch`` (the explorer's whole batch, or the CLI's
    picked images alone), numbered by their batch ``indices`` (default ``rows``).

    ``chosen`` is the class asked for (None: each image's predicted one, or the loss); the
    positions and names say where each picked image came from, so anyone can recompute its
    gradient from the source itself.
    """
    picked = list(rows)
    return Export(
        result,
        indices=picked if indices is None else list(indices),
        images=as_model_input(batch.rows(picked)),
        positions=[batch.positions[row] for row in picked],
        names=[batch.names[row] for row in picked],
        labels=None if batch.labels is None else batch.labels[picked].tolist(),
        class_names=batch.class_names,
        quantity=quantity(result.gradients.target, chosen, batch.class_names),
        model=model,
        source=source,
        memory=memory,
        libraries=libraries,
        extra=extra or {},
    )


def quantity(target: str, chosen: int | None, class_names: Sequence[str]) -> str:
    """The differentiated quantity in words: 'loss', 'logit[predicted]', e.g. 'logit[cat]', or
    a label's binary cross-entropy, 'bce[true label]' or e.g. 'bce[cat]'."""
    if target == "loss":
        return "loss"
    if target == "bce":
        return f"bce[{'true label' if chosen is None else class_name(class_names, chosen)}]"
    return f"logit[{'predicted' if chosen is None else class_name(class_names, chosen)}]"


def source_record(
    description: str,
    size: int,
    split: str | None = None,
    start: int | None = None,
    requested: int | None = None,
    seed: int | None = None,
) -> dict[str, Any]:
    """The ``source`` field: the batch of ``size`` images the picks index, and how it was cut
    from the source (``requested``: the batch size asked for, None for all of it)."""
    return {
        "description": description,
        "split": split,
        "start": start,
        "size": requested,
        "seed": seed,
        "N": size,
    }


def arrays(export: Export) -> dict[str, np.ndarray]:
    """The arrays of ``ARRAYS`` (then ``LAYER_ARRAYS`` for a layer method), on the CPU."""
    result = export.result
    step = result.gradients
    values = {
        "indices": np.asarray(export.indices, dtype=np.int64),
        "positions": np.asarray(export.positions, dtype=np.int64),
        "names": np.asarray(list(export.names), dtype=np.str_),
        "images": export.images.detach().cpu().numpy(),
        "gradients": step.gradients.detach().cpu().numpy(),
        "channel_maps": result.maps.detach().cpu().numpy(),
        "maps": render.saliency(result.maps),
        "classes": step.classes.numpy().astype(np.int64),
        "target_values": step.target_values.numpy(),
    }
    assert list(values) == list(ARRAYS)
    if result.layer_maps is not None:
        values["layer_maps"] = result.layer_maps.detach().cpu().numpy()
        values["layer"] = np.asarray(result.layer, dtype=np.str_)
    return values


def npz_bytes(export: Export) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, allow_pickle=False, **arrays(export))
    return buffer.getvalue()


def pt_bytes(export: Export) -> bytes:
    """The same content as the .npz, as a dict for ``torch.load(..., weights_only=True)``."""
    buffer = io.BytesIO()
    values = arrays(export)
    names = [str(name) for name in values.pop("names")]
    layer = values.pop("layer", None)
    tensors = {name: torch.from_numpy(array) for name, array in values.items()}
    extras = {
        "names": names,
        **({} if layer is None else {"layer": str(layer)}),
        "method": export.result.method,
        "target": export.result.gradients.target,
    }
    torch.save({**tensors, **extras}, buffer)
    return buffer.getvalue()


def metadata(export: Export, gradients_file: str | None = None) -> dict[str, Any]:
    """The JSON fields of ``FIELDS`` (then ``export.extra``), ready for ``json.dumps``."""
    result = export.result
    step = result.gradients
    method = attribution.get(result.method)
    classes = [int(c) for c in step.classes.tolist()]
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "gradients_file": gradients_file,
        "arrays": list(ARRAYS) + (list(LAYER_ARRAYS) if result.layer_maps is not None else []),
        "shape": list(result.maps.shape),
        "dtype": str(result.maps.dtype).removeprefix("torch."),
        "rows": "row i is d target_i / d image[indices[i]], pixels in [0, 1]",
        "k": len(step.indices),
        "indices": [int(index) for index in export.indices],
        "source_positions": [int(p) for p in export.positions],
        "image_names": list(export.names),
        "labels": None if export.labels is None else [int(label) for label in export.labels],
        "target": step.target,
        "quantity": export.quantity,
        "target_values": step.target_values.tolist(),
        "classes": classes,
        "class_names": [class_name(export.class_names, c) for c in classes],
        "method": {"name": method.name, "label": method.label, "settings": dict(result.settings)},
        "layer": None
        if result.layer_maps is None
        else {"name": result.layer, "grid": list(result.layer_maps.shape[1:])},
        "notes": note_texts(result, export.quantity),
        "strategy": step.strategy,
        "reduction": step.reduction,
        "device": step.device,
        "timing_ms": step.timing,
        "method_ms": result.milliseconds,
        "chunks": step.chunks,
        "memory": None if export.memory is None else export.memory.as_dict(),
        "model": dict(export.model),
        "source": dict(export.source),
        **stamp(export.libraries),
    }
    assert list(record) == list(FIELDS)
    return {**record, **export.extra}


def stamp(libraries: Sequence[str] = ()) -> dict[str, Any]:
    """The ``versions`` and ``created`` fields every report gradpick writes ends with."""
    return {
        "versions": {
            **library_versions(),
            **{name: installed_version(name) for name in libraries},
        },
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def metadata_json(export: Export, gradients_file: str | None = None) -> bytes:
    return (json.dumps(metadata(export, gradients_file), indent=2, default=str) + "\n").encode()


def write(path: Path, export: Export) -> Path:
    """Write the arrays to ``path`` (.npz or .pt) and the JSON beside it; returns the JSON's path.

    Both files are written under temporary names first and renamed once both are complete, so
    an interrupted export never leaves a file that looks whole.
    """
    if path.suffix not in SUFFIXES:
        raise InputError(f"An export ends in {' or '.join(SUFFIXES)}, not '{path.suffix}'.")
    content = npz_bytes(export) if path.suffix == ".npz" else pt_bytes(export)
    sidecar = path.with_suffix(".json")
    files = {path: content, sidecar: metadata_json(export, path.name)}
    partials = {target: target.with_name(target.name + ".partial") for target in files}
    for target, data in files.items():
        partials[target].write_bytes(data)
    for target, partial in partials.items():
        partial.replace(target)
    return sidecar
