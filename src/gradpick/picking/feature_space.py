"""Picking in feature space: the batch's penultimate-layer features seen in two dimensions.

The features are what the model's last linear layer reads (``gradpick.outputs.inference`` captures
them
during the one inference pass). ``project`` maps them to 2-D: PCA by default (torch only, exact:
the top two eigenvectors of the features' covariance), UMAP when the optional ``umap-learn`` is
installed (``pip install gradpick[umap]``); ``projected`` projects a result's features, and keeps
a store's projection beside it. ``colour_groups`` names the colouring by true class,
predicted class or correctness, and ``nearest_neighbours`` finds the images closest to one image
by cosine similarity, the ``nearest_neighbours`` selection rule.

Example::

    result = infer(model, images, labels, features=True)
    points = project(result.features)                 # [N, 2] float32, PCA
    groups, names = colour_groups(result, "correct")  # [N] group per image, group names
    close = nearest_neighbours(result.features, 12, k=8)
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from gradpick.errors import InputError, SelectionError
from gradpick.outputs.inference import InferenceResult
from gradpick.outputs.sidecar import kept_arrays, sibling
from gradpick.outputs.stores import StoredResult
from gradpick.runtime.devices import cpu_threads

__all__ = [
    "COLOURINGS",
    "PROJECTIONS",
    "PROJECTION_SUFFIX",
    "available_projections",
    "colour_groups",
    "nearest_neighbours",
    "project",
    "projected",
]

PROJECTIONS = ("pca", "umap")
COLOURINGS = ("true", "predicted", "correct")
UMAP_NEIGHBOURS = 15
PCA_CHUNK_ROWS = 65_536
"""Rows of features ``pca`` centres and multiplies at a time."""
PROJECTION_SUFFIX = ".projection-{method}.npz"
"""The file beside a store that keeps its feature space's projection (``projected``)."""


def available_projections() -> tuple[str, ...]:
    """The projections this installation can run: PCA always, UMAP with ``umap-learn``."""
    if importlib.util.find_spec("umap") is None:
        return ("pca",)
    return PROJECTIONS


def _shaped(features: torch.Tensor) -> torch.Tensor:
    """The features, detached on the CPU in their own dtype; InputError for a shape no
    projection can take."""
    if not isinstance(features, torch.Tensor) or features.dim() != 2:
        shape = tuple(features.shape) if isinstance(features, torch.Tensor) else type(features)
        raise InputError(f"Features must be a [N, D] tensor; got {shape}.")
    if features.shape[0] < 1:
        raise InputError("There are no features to project: the batch is empty.")
    return features.detach().cpu()


def _refuse_non_finite(finite: bool) -> None:
    if not finite:
        raise InputError("The features contain NaN or infinite values.")


def _checked(features: torch.Tensor) -> torch.Tensor:
    values = _shaped(features)
    _refuse_non_finite(bool(torch.isfinite(values).all()))
    return values.double()


def _chunks(values: torch.Tensor) -> Iterator[torch.Tensor]:
    """``values``, ``PCA_CHUNK_ROWS`` rows at a time."""
    for start in range(0, len(values), PCA_CHUNK_ROWS):
        yield values[start : start + PCA_CHUNK_ROWS]


def pca(features: torch.Tensor) -> np.ndarray:
    """The features' coordinates [N, 2] on their two principal axes.

    With centred features X (N x D) and covariance C = XᵀX / N, the axes are the eigenvectors
    of C with the two largest eigenvalues; each axis' sign is fixed so that its largest-magnitude
    loading is positive, so the same features always give the same picture. The mean is summed
    in float64; X is centred and multiplied in the features' own floating dtype,
    ``PCA_CHUNK_ROWS`` rows at a time, the chunks' products summed in float64, and C's
    eigenvectors found in float64 (1,280,000 features of 64 values: 0.6 s on this project's
    2-core machine, where all of them in float64 at once took 0.7 GB, twice over, and 1.3 s).
    Returned in float32. A batch with fewer than two independent directions gets zeros there.
    """
    values = _shaped(features)
    if values.dtype not in (torch.float32, torch.float64):
        values = values.float()
    total = values.sum(dim=0, dtype=torch.float64)
    # A NaN or an infinity among the features is one in their float64 sum.
    _refuse_non_finite(bool(torch.isfinite(total).all()))
    centre = (total / len(values)).to(values.dtype)
    covariance = torch.zeros(values.shape[1], values.shape[1], dtype=torch.float64)
    for chunk in _chunks(values):
        centred = chunk - centre
        covariance += (centred.T @ centred).double()
    covariance /= len(values)
    _, vectors = torch.linalg.eigh(covariance)  # ascending eigenvalues
    axes = vectors[:, -2:].flip(1) if vectors.shape[1] >= 2 else vectors
    largest = axes.abs().argmax(dim=0)
    signs = torch.sign(axes[largest, torch.arange(axes.shape[1])])
    axes = (axes * torch.where(signs == 0, torch.ones_like(signs), signs)).to(values.dtype)
    points = torch.cat([((chunk - centre) @ axes).float() for chunk in _chunks(values)])
    if points.shape[1] < 2:
        points = torch.cat([points, torch.zeros(len(points), 2 - points.shape[1])], dim=1)
    return points.numpy()


def umap(features: torch.Tensor, seed: int = 0) -> np.ndarray:
    """UMAP of the features [N, 2] with cosine distances, seeded (``umap-learn`` required)."""
    values = _checked(features)
    if importlib.util.find_spec("umap") is None:
        raise InputError("UMAP needs the optional umap-learn package: pip install gradpick[umap].")
    if len(values) <= 2:
        return pca(features)
    import umap as umap_learn

    reducer = umap_learn.UMAP(
        n_components=2,
        n_neighbors=min(UMAP_NEIGHBOURS, len(values) - 1),
        metric="cosine",
        random_state=seed,
        n_jobs=1,  # what a seed implies anyway; said here, umap-learn does not warn about it
    )
    # umap-learn's parallel steps reset the OpenMP thread count that torch reads, for the
    # calling thread: keep the count torch had, so later tensor work does not oversubscribe.
    with cpu_threads(torch.get_num_threads()):
        points = reducer.fit_transform(values.float().numpy())
    return np.asarray(points, dtype=np.float32)


def project(features: torch.Tensor, method: str = "pca", seed: int = 0) -> np.ndarray:
    """The features [N, D] as [N, 2] points by ``method`` (one of ``PROJECTIONS``)."""
    if method == "pca":
        return pca(features)
    if method == "umap":
        return umap(features, seed)
    raise InputError(f"Unknown projection '{method}'; use one of {', '.join(PROJECTIONS)}.")


def projected(result: InferenceResult, method: str = "pca") -> np.ndarray:
    """``project`` of the result's features. A store's outputs (``StoredResult``) keep their
    projection in a file beside the store (``STORE.projection-pca.npz``), keyed by the store's
    files as opened and the rows taken, so a second session or server reads two numbers per
    image instead of the embeddings (1,280,000 rows: 3.4 s to read them on this project's
    2-core machine, 0.6 s to project them, against 10 MB of points)."""
    if method not in PROJECTIONS:
        raise InputError(f"Unknown projection '{method}'; use one of {', '.join(PROJECTIONS)}.")
    if not isinstance(result, StoredResult):
        if result.features is None:
            raise InputError("These outputs have no features to project.")
        return project(result.features, method)
    path = sibling(result.store, PROJECTION_SUFFIX.format(method=method))
    kept = kept_arrays(
        path, f"{result.rows_key}|{method}", lambda: {"points": project(result.features, method)}
    )
    return kept["points"]


def colour_groups(
    result: InferenceResult, by: str, class_names: Sequence[str] = ()
) -> tuple[np.ndarray, tuple[str, ...]]:
    """A group number per image [N] and the groups' names, for colouring the points.

    ``true`` and ``predicted`` group by class (named by ``class_names``, else "class i");
    ``correct`` splits right from wrong predictions. Without labels, ``true`` and ``correct``
    have nothing to go by and raise ``InputError``.
    """
    classes = int(result.logits.shape[1])
    names = tuple(class_names) or tuple(f"class {index}" for index in range(classes))
    if by == "predicted":
        return result.predictions.numpy().astype(np.int64), names
    if by not in COLOURINGS:
        raise InputError(f"Unknown colouring '{by}'; use one of {', '.join(COLOURINGS)}.")
    if result.labels is None:
        raise InputError(
            f"Colouring by '{by}' needs the true labels, and these images have none; colour by "
            "the predicted class instead."
        )
    if by == "true":
        return result.labels.numpy().astype(np.int64), names
    correct = result.predictions == result.labels
    return (~correct).numpy().astype(np.int64), ("right", "wrong")


def nearest_neighbours(features: torch.Tensor, anchor: int, k: int) -> list[int]:
    """The ``k`` images closest to image ``anchor`` by cosine similarity of their features,
    the anchor itself first (it is its own closest), then by falling similarity, ties by index.

    A zero feature vector has no direction: its similarity to everything is taken as 0.
    """
    values = _checked(features)
    if isinstance(anchor, bool) or not 0 <= int(anchor) < len(values):
        raise SelectionError(
            f"Image {anchor} is not in the batch: valid indices are 0 to {len(values) - 1}."
        )
    if isinstance(k, bool) or int(k) < 1:
        raise SelectionError(f"k must be a whole number of at least 1; got {k!r}.")
    unit = torch.nn.functional.normalize(values, dim=1)
    similarity = unit @ unit[int(anchor)]
    similarity[int(anchor)] = float("inf")
    order = torch.sort(similarity, descending=True, stable=True).indices
    return [int(index) for index in order[: int(k)].tolist()]
