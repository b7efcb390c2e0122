"""Is it the label or the model? Ranking the images whose given label is suspect.

Two signals, both read from stored outputs (or the explorer's batch), no gradient needed:

- **Confident learning** (Northcutt, Jiang and Chuang, "Confident Learning: Estimating
  Uncertainty in Dataset Labels", JAIR 2021). Each class j gets a threshold
  ``t_j = mean(p[i, j] for i labelled j)``; an image's *confident label* is the class with the
  highest probability among those at or above their threshold. Images whose confident label is
  not their given label are the off-diagonal of the confident joint; their number is confident
  learning's estimate of how many labels are wrong. The ranking score is the self-confidence
  ``p[i, given_i]`` (lower is more suspect), the ranking cleanlab uses by default.
- **Neighbour label agreement**: the share of an image's k nearest neighbours in embedding space
  (cosine similarity, the image itself left out) that carry its given label. A mislabelled image
  sits among images of its true class. Exact up to ``EXACT_ROWS`` rows; above, an inverted file
  of k-means cells keeps 50,000 rows to seconds (see ``nearest_neighbours``).

The two are combined in log space, ``score = -log p[given] - w * log(agreement + 1/k)`` with a
small weight ``w`` (k and w chosen on a noise seed the benchmark does not report): the
model's probability leads, and neighbour agreement reorders images the model finds about
equally unlikely. A plain average of the two did worse than either alone on CIFAR-10 (the
neighbour signal is the weaker one; see the triage benchmark in the docs). The *flagged* set
is the ``n`` most suspect images by that score, ``n`` being confident learning's estimate of
the number of label issues. The suggested label is the most probable class other
than the given one under the mean of the model's and the neighbours' class distributions.

Probabilities must be out of sample for any of this to mean much: a model scores its own
training images overconfidently, so their wrong labels look right. ``sample_warning`` says when
a store was read from the split the model was trained on.

Example::

    opened = gradpick.outputs.store_format.open_store("outputs/")
    found = gradpick.triage.ranking.triage_store(opened)
    found.table().head()
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gradpick.errors import InputError
from gradpick.multilabel import refuse_sigmoid
from gradpick.outputs.sidecar import holds, kept_arrays, sibling
from gradpick.outputs.store_format import list_matrix, store_output
from gradpick.outputs.stores import StoredResult
from gradpick.runtime.devices import cpu_threads
from gradpick.show.notebook import triage_html

__all__ = [
    "EXACT_ROWS",
    "NEIGHBOURS",
    "NEIGHBOURS_SUFFIX",
    "NEIGHBOUR_WEIGHT",
    "PROBES",
    "ConfidentLearning",
    "Neighbours",
    "Triage",
    "confident_learning",
    "explained_by_slices",
    "kept_neighbours",
    "nearest_neighbours",
    "neighbours_kept",
    "sample_warning",
    "stored_triage",
    "triage",
    "triage_store",
]

NEIGHBOURS = 40
"""k of the neighbour agreement: enough neighbours to vote, few enough to stay local."""
NEIGHBOURS_SUFFIX = ".neighbours.npz"
"""The file beside a store that keeps its rows' neighbours (``stored_triage``)."""
NEIGHBOUR_WEIGHT = 0.3
"""w of the combined score: the neighbours reorder, the model's probability leads."""
EXACT_ROWS = 20_000
"""Up to this many rows the neighbours are exact; above, an inverted file finds them."""
PROBES = 8
"""Cells searched per row by the inverted file: its own and the seven nearest."""
KMEANS_ROUNDS = 8
"""Rounds of spherical k-means that place the inverted file's cells."""
TRAINED_PER_CELL = 64
"""Rows per cell that k-means places the cells with (a sample: all rows are then assigned)."""
CHUNK_ROWS = 4096
"""Rows of the similarity matrix held at once: 4096 x 50,000 float32 is 0.8 GB at most."""
GROUP = 32
"""Columns per group in ``_top_k``'s first pass."""
CELL_ROWS = 256
"""Rows per cell the inverted file keeps to past sqrt(N) cells (``_cell_count``)."""
FLAT_CELLS = 256
"""Up to this many cells one k-means places them; past it, two levels (``_cells``)."""
NEAREST_CELLS = 64
"""Cells ranked by closeness for each cell's search (PROBES of them are searched)."""
ASSIGNED_ROWS = 65_536
"""Rows handled at a time where all N at once take gigabytes: compared with the centroids,
and their neighbours' labels counted."""
CANDIDATE_GROUP = 8
"""``_top_k``'s group for a cell's candidates (about 2,000 columns: 1.8 times ``topk``'s
speed, where 32 is no faster)."""


@dataclass(frozen=True)
class ConfidentLearning:
    """Confident learning's reading of one set of probabilities and labels."""

    thresholds: np.ndarray
    """[C] per-class thresholds: the mean probability of class j over images labelled j."""
    confident_label: np.ndarray
    """[N] the class the image confidently belongs to, -1 where no class reaches its threshold."""
    off_diagonal: np.ndarray
    """[N] bool: a confident label that is not the given one."""

    @property
    def issue_count(self) -> int:
        """Confident learning's estimate of the number of wrong labels."""
        return int(self.off_diagonal.sum())


def confident_learning(probabilities: np.ndarray, labels: np.ndarray) -> ConfidentLearning:
    """Per-class thresholds and confident labels (Northcutt et al. 2021, section 3.1).

    A class that no image is labelled with gets threshold 1 + 1 (never reached), so it cannot
    become anyone's confident label without evidence of what its images look like."""
    probabilities, labels = _checked(probabilities, labels)
    classes = probabilities.shape[1]
    sums = np.bincount(labels, probabilities[np.arange(len(labels)), labels], minlength=classes)
    counts = np.bincount(labels, minlength=classes)
    thresholds = np.where(counts > 0, sums / np.maximum(counts, 1), 2.0)
    above = probabilities >= thresholds
    candidate = np.where(above, probabilities, -np.inf).argmax(axis=1)
    confident = np.where(above.any(axis=1), candidate, -1)
    return ConfidentLearning(
        thresholds=thresholds,
        confident_label=confident,
        off_diagonal=(confident >= 0) & (confident != labels),
    )


@dataclass(frozen=True)
class Neighbours:
    """Each image's k nearest neighbours in embedding space and what their labels say."""

    indices: np.ndarray
    """[N, k] rows of the neighbours, nearest first."""
    similarities: np.ndarray
    """[N, k] their cosine similarities."""
    label_shares: np.ndarray
    """[N, C] share of the neighbours carrying each class."""
    exact: bool = True
    """False when an inverted file found them (approximate; see ``nearest_neighbours``)."""

    def agreement(self, labels: np.ndarray) -> np.ndarray:
        """[N] share of the neighbours that carry the image's own given label."""
        return self.label_shares[np.arange(len(labels)), labels]


def nearest_neighbours(
    embeddings: np.ndarray | torch.Tensor,
    labels: np.ndarray,
    classes: int,
    k: int = NEIGHBOURS,
    chunk_rows: int = CHUNK_ROWS,
    exact: bool | None = None,
    seed: int = 0,
) -> Neighbours:
    """The k most cosine-similar other rows of each row.

    Exact (``exact=True``, the default up to ``EXACT_ROWS`` rows): a chunk of rows at a time
    against all rows, so memory grows with N, not N squared; ties go to the lower row. Above
    that, approximate (``exact=False``): an inverted file of spherical k-means cells (seeded by
    ``seed``; sqrt(N) of them, or one per ``CELL_ROWS`` rows past N = 65,536, placed in two
    levels past ``FLAT_CELLS``), each row compared with the rows of its own cell and the
    ``PROBES`` - 1 cells nearest to it: about ``PROBES / sqrt(N)`` of the exact search's
    products, and at most ``PROBES * CELL_ROWS`` per row past 65,536 rows, so the search
    grows as N, not N ** 1.5."""
    matrix = torch.as_tensor(np.asarray(embeddings), dtype=torch.float32)
    count = int(matrix.shape[0])
    if matrix.ndim != 2 or count < 2:
        raise InputError("Neighbours need a [N, D] embedding matrix of at least two rows.")
    k = min(k, count - 1)
    unit = torch.nn.functional.normalize(matrix, dim=1)
    if exact is None:
        exact = count <= EXACT_ROWS
    if exact:
        indices, similarities = _exact(unit, k, chunk_rows)
    else:
        # Hundreds of small products: a second thread gains little, and on busy cores it
        # spins at each barrier (two shared cores at load 8: 3.3 s with one, 20.2 s with two).
        with cpu_threads(1):
            indices, similarities = _inverted_file(unit, k, seed)
    label_shares = np.empty((count, classes))
    for start in range(0, count, ASSIGNED_ROWS):  # a chunk at a time: N x k cells are 0.4 GB
        given = labels[indices[start : start + ASSIGNED_ROWS]]
        rows = len(given)
        cells = (np.arange(rows)[:, None] * classes + given).ravel()
        counts = np.bincount(cells, minlength=rows * classes).reshape(rows, classes)
        label_shares[start : start + rows] = counts / k
    return Neighbours(
        indices=indices, similarities=similarities, label_shares=label_shares, exact=exact
    )


def kept_neighbours(
    path: Path,
    embeddings: np.ndarray | torch.Tensor | Callable[[], np.ndarray | torch.Tensor],
    labels: np.ndarray,
    classes: int,
    k: int = NEIGHBOURS,
    identity: str | None = None,
) -> Neighbours:
    """``nearest_neighbours`` kept in the file ``path`` (beside a store: 50,000 rows take a
    second or more, each session and server would pay it again), under a digest of what they
    were found from (the embeddings, or ``identity`` when given, with the labels, classes, k and
    the search's settings), so any other input finds the file stale and replaces it
    (``sidecar.kept_arrays``). ``identity`` names the embeddings without reading them (a
    store's rows: ``StoredResult.rows_key``); ``embeddings`` may then be a function that reads
    them, called only when the file is stale (1,280,000 rows: 3 s to read, 0.7 s to digest)."""
    given = np.ascontiguousarray(labels, dtype=np.int64)

    def matrix() -> np.ndarray:
        values = embeddings() if callable(embeddings) else embeddings
        return np.ascontiguousarray(np.asarray(values, dtype=np.float32))

    named = identity.encode() if identity is not None else matrix().tobytes()
    key = _neighbours_key(named, given, classes, k)

    def found() -> dict[str, np.ndarray]:
        neighbours = nearest_neighbours(matrix(), given, classes, k)
        return {
            "indices": neighbours.indices,
            "similarities": neighbours.similarities,
            "label_shares": neighbours.label_shares,
            "exact": np.asarray(neighbours.exact),
        }

    kept = kept_arrays(path, key, found)
    return Neighbours(
        indices=kept["indices"],
        similarities=kept["similarities"],
        label_shares=kept["label_shares"],
        exact=bool(kept["exact"]),
    )


def _neighbours_key(named: bytes, labels: np.ndarray, classes: int, k: int) -> str:
    """The key kept neighbours are named by: what they were found from (``named``: the
    embeddings, or what identifies them), the labels, classes, k and the search's settings (a
    file of another search's neighbours is found again)."""
    digest = hashlib.sha256(named)
    digest.update(np.ascontiguousarray(labels, dtype=np.int64).tobytes())
    search = f"{EXACT_ROWS}|{CELL_ROWS}|{FLAT_CELLS}|{PROBES}|{TRAINED_PER_CELL}|{KMEANS_ROUNDS}"
    digest.update(f"{classes}|{k}|{search}".encode())
    return digest.hexdigest()


def stored_triage(result: StoredResult) -> Triage:
    """The triage of a store's rows (``StoredResult``: labelled, softmax) with their neighbours
    kept beside the store (``NEIGHBOURS_SUFFIX``, named by the rows: a second session or server
    reads them without reading the embeddings; searched and kept when they are not)."""
    assert result.labels is not None
    probabilities, labels = result.probabilities.double().numpy(), result.labels.numpy()
    path = sibling(result.store, NEIGHBOURS_SUFFIX)
    neighbours = kept_neighbours(
        path, lambda: result.features, labels, probabilities.shape[1], identity=result.rows_key
    )
    return triage(probabilities, labels, neighbours=neighbours)


def neighbours_kept(result: StoredResult) -> bool:
    """Whether ``stored_triage`` would read the rows' neighbours kept beside the store rather
    than search them (minutes at a million rows)."""
    assert result.labels is not None
    named, classes = result.rows_key.encode(), int(result.probabilities.shape[1])
    key = _neighbours_key(named, result.labels.numpy(), classes, NEIGHBOURS)
    return holds(sibling(result.store, NEIGHBOURS_SUFFIX), key)


def _exact(unit: torch.Tensor, k: int, chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
    count = int(unit.shape[0])
    indices = np.empty((count, k), dtype=np.int64)
    similarities = np.empty((count, k), dtype=np.float32)
    for start in range(0, count, chunk_rows):
        block = unit[start : start + chunk_rows] @ unit.T
        rows = torch.arange(block.shape[0])
        block[rows, rows + start] = -math.inf
        values, found = _top_k(block, k)
        indices[start : start + len(rows)] = found.numpy()
        similarities[start : start + len(rows)] = values.numpy()
    return indices, similarities


def _cell_count(count: int) -> int:
    """Cells of the inverted file: sqrt(N), or more past N = CELL_ROWS ** 2 so that a cell
    holds about CELL_ROWS rows and a row's candidates stay about PROBES * CELL_ROWS at any N
    (with sqrt(N) cells they grow as 8 sqrt(N): 9,000 at 1,280,000 rows, and the search as
    N ** 1.5)."""
    return max(1, round(math.sqrt(count)), round(count / CELL_ROWS))


def _kmeans(rows: torch.Tensor, cells: int, generator: torch.Generator) -> torch.Tensor:
    """Spherical k-means of unit ``rows`` into ``cells`` centroids, placed on a seeded sample
    of ``TRAINED_PER_CELL`` rows per cell in ``KMEANS_ROUNDS`` rounds."""
    shuffled = rows[torch.randperm(len(rows), generator=generator)]
    centroids, trained = shuffled[:cells], shuffled[: TRAINED_PER_CELL * cells]
    for _ in range(KMEANS_ROUNDS):
        cell = (trained @ centroids.T).argmax(dim=1)
        sums = torch.zeros_like(centroids).index_add_(0, cell, trained)
        filled = sums.norm(dim=1) > 0  # an empty cell keeps its centroid
        centroids = torch.where(
            filled[:, None], torch.nn.functional.normalize(sums, dim=1), centroids
        )
    return centroids


def _nearest_centroid(rows: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """[N] each unit row's most similar centroid, ``ASSIGNED_ROWS`` rows at a time (all at once,
    1,280,000 rows against 1,131 cells made 5.8 GB of similarities)."""
    return torch.cat(
        [
            (rows[start : start + ASSIGNED_ROWS] @ centroids.T).argmax(dim=1)
            for start in range(0, len(rows), ASSIGNED_ROWS)
        ]
    )


def _cells(
    unit: torch.Tensor, cells: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverted file's [C, D] centroids and each row's cell [N]. Up to FLAT_CELLS cells one
    k-means places them; past that, a k-means of sqrt(cells) coarse cells, then one inside each
    coarse cell with fine cells in proportion to its rows, so a row is compared with about
    2 sqrt(cells) centroids instead of every one (1,280,000 rows against 5,000 cells would take
    longer than the search)."""
    if cells <= FLAT_CELLS:
        centroids = _kmeans(unit, cells, generator)
        return centroids, _nearest_centroid(unit, centroids)
    coarse = _kmeans(unit, round(math.sqrt(cells)), generator)
    owner = _nearest_centroid(unit, coarse)
    cell = torch.empty(len(unit), dtype=torch.long)
    fine: list[torch.Tensor] = []
    placed = 0
    for index in range(len(coarse)):
        rows = torch.nonzero(owner == index).flatten()
        if not len(rows):
            continue
        members = unit[rows]
        share = max(1, round(len(rows) / len(unit) * cells))
        centroids = _kmeans(members, min(len(rows), share), generator)
        cell[rows] = _nearest_centroid(members, centroids) + placed
        fine.append(centroids)
        placed += len(centroids)
    return torch.cat(fine), cell


def _inverted_file(unit: torch.Tensor, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Approximate neighbours through k-means cells (see ``nearest_neighbours``)."""
    count = int(unit.shape[0])
    generator = torch.Generator().manual_seed(seed)
    centroids, cell = _cells(unit, _cell_count(count), generator)
    cells = len(centroids)
    by_cell = torch.argsort(cell, stable=True)
    ends = torch.bincount(cell, minlength=cells).cumsum(0).tolist()
    members = [by_cell[start:end] for start, end in zip([0, *ends[:-1]], ends, strict=True)]
    closeness = centroids @ centroids.T
    closeness.fill_diagonal_(math.inf)  # a row's own cell is searched first
    nearest_cells = closeness.topk(min(cells, NEAREST_CELLS), dim=1).indices.tolist()
    indices = torch.empty((count, k), dtype=torch.long)
    similarities = torch.empty((count, k), dtype=torch.float32)
    for own, rows in enumerate(members):
        if not len(rows):
            continue
        searched = []
        size = 0
        for other in nearest_cells[own]:
            searched.append(members[other])
            size += len(members[other])
            if len(searched) >= PROBES and size > k:
                break
        if len(searched) < PROBES or size <= k:  # too few near cells: every cell, its own first
            searched = [rows, *(m for other, m in enumerate(members) if other != own)]
        candidates = torch.cat(searched)
        block = unit[rows] @ unit[candidates].T
        itself = torch.arange(len(rows))
        block[itself, itself] = -math.inf  # the own cell's rows come first, in order
        values, found = _top_k(block, k, group=CANDIDATE_GROUP)
        indices[rows] = candidates[found]
        similarities[rows] = values
    return indices.numpy(), similarities.numpy()


def _top_k(block: torch.Tensor, k: int, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's k largest values and their columns, largest first (``topk``, but about ten
    times faster on wide rows): the columns in groups of ``group``, a row's k largest values lie
    in its k groups with the largest maxima (a value among the k largest has fewer than k larger
    ones, so fewer than k groups beat its own), so only those k * ``group`` values are ranked.
    Group g holds the columns g, g + G, g + 2G, ... (G groups): its maximum is then taken
    across contiguous rows of memory, twice as fast as within runs of ``group`` columns."""
    rows, width = block.shape
    whole = width // group * group
    if whole < k * group:
        return block.topk(k, dim=1, sorted=True)
    count = whole // group
    grouped = block[:, :whole].reshape(rows, group, count)
    groups = grouped.amax(dim=1).topk(k, dim=1, sorted=False).indices
    columns = (groups[:, :, None] + torch.arange(group) * count).reshape(rows, -1)
    tail = torch.arange(whole, width).expand(rows, -1)
    columns = torch.cat([columns, tail], dim=1)
    values, where = block.gather(1, columns).topk(k, dim=1, sorted=True)
    return values, columns.gather(1, where)


@dataclass(frozen=True)
class Triage:
    """Every image's suspicion, most suspect first, with the signals behind it."""

    order: np.ndarray
    """[N] rows, most suspect first."""
    given: np.ndarray
    suggested: np.ndarray
    """[N] the most likely class other than the given one."""
    suggested_probability: np.ndarray
    score: np.ndarray
    """[N] higher is more suspect."""
    flagged: np.ndarray
    """[N] bool: the images the tool calls label issues."""
    self_confidence: np.ndarray
    confident: ConfidentLearning
    neighbours: Neighbours | None
    """None without embeddings: the score is then the self-confidence alone."""
    class_names: tuple[str, ...] = ()
    """The classes' names, for the displays (empty: classes by number)."""
    explained_by_slice: np.ndarray | None = None
    """[N] the rank of the verified slice (``gradpick.slices``) whose error the image is, 0 for
    none; None when no slices were read. An explained image is never flagged: its error is
    likely the model's, not its label's."""
    slices_file: str | None = None
    """The slices file this triage read, or None."""

    def name(self, index: int) -> str:
        """Class ``index`` by its name when known."""
        names = self.class_names
        return names[index] if 0 <= index < len(names) else f"class {index}"

    def __repr__(self) -> str:
        """One line, not the arrays: a notebook cell ending in a triage stays short."""
        top = int(self.order[0]) if len(self.order) else None
        first = (
            ""
            if top is None
            else f"; most suspect: row {top}, given {self.name(int(self.given[top]))}, "
            f"suggested {self.name(int(self.suggested[top]))}"
        )
        return (
            f"Triage({len(self.given):,} images, {int(self.flagged.sum()):,} flagged as label "
            f"issues{first})"
        )

    def _repr_html_(self) -> str:
        """Jupyter shows the most suspect images as a table (``gradpick.show.notebook``)."""
        return triage_html(self)

    def table(
        self,
        positions: Sequence[int] | None = None,
        names: Sequence[str] | None = None,
        class_names: Sequence[str] | None = None,
    ) -> Any:
        """A pandas DataFrame, one row per image, most suspect first."""
        import pandas as pd

        count = len(self.given)
        columns: dict[str, Any] = {
            "position": np.asarray(positions if positions is not None else range(count)),
            "name": list(names) if names is not None else [str(i) for i in range(count)],
            "given_label": self.given,
            "suggested_label": self.suggested,
            "suggested_probability": self.suggested_probability,
            "score": self.score,
            "flagged": self.flagged,
            "self_confidence": self.self_confidence,
            "confident_label": self.confident.confident_label,
        }
        if self.neighbours is not None:
            columns["neighbour_agreement"] = self.neighbours.agreement(self.given)
        if self.explained_by_slice is not None:
            explained = self.explained_by_slice
            columns["explained_by_slice"] = pd.array(
                [int(r) if r > 0 else None for r in explained], dtype="Int64"
            )
        if class_names is not None:
            named = np.asarray(list(class_names), dtype=object)
            columns["given_class"] = named[self.given]
            columns["suggested_class"] = named[self.suggested]
        frame = pd.DataFrame(columns).iloc[self.order].reset_index(drop=True)
        frame.insert(0, "rank", np.arange(1, count + 1))
        return frame


def triage(
    probabilities: np.ndarray,
    labels: np.ndarray,
    embeddings: np.ndarray | torch.Tensor | None = None,
    k: int = NEIGHBOURS,
    weight: float = NEIGHBOUR_WEIGHT,
    neighbours: Neighbours | None = None,
) -> Triage:
    """Rank images by how likely their given label is wrong (see the module's docstring);
    ``neighbours``: found already, the costly part (``kept_neighbours``: kept beside a store),
    instead of searched in ``embeddings``."""
    probabilities, labels = _checked(probabilities, labels)
    count, classes = probabilities.shape
    confident = confident_learning(probabilities, labels)
    rows = np.arange(count)
    self_confidence = probabilities[rows, labels]
    with np.errstate(divide="ignore"):  # a probability of exactly 0 is infinitely suspect
        score = -np.log(self_confidence)
    evidence = probabilities
    if neighbours is None and embeddings is not None:
        neighbours = nearest_neighbours(embeddings, labels, classes, k)
    if neighbours is not None:
        votes = neighbours.indices.shape[1]
        score = score - weight * np.log(neighbours.agreement(labels) + 1.0 / votes)
        evidence = (probabilities + neighbours.label_shares) / 2
    others = evidence.copy()
    others[rows, labels] = -np.inf
    suggested = others.argmax(axis=1)
    order = np.lexsort((rows, -score))
    flagged = np.zeros(count, dtype=bool)
    flagged[order[: confident.issue_count]] = True
    return Triage(
        order=order,
        given=labels,
        suggested=suggested,
        suggested_probability=evidence[rows, suggested],
        score=score,
        flagged=flagged,
        self_confidence=self_confidence,
        confident=confident,
        neighbours=neighbours,
    )


def triage_store(opened: Any, k: int = NEIGHBOURS, slices: bool = True) -> tuple[Triage, Any]:
    """Triage a store's rows (``gradpick.outputs.store_format.open_store``): the result and the
    DataFrame of its rows, most suspect first, with class names from the store.

    Rows without a label are left out, since there is no given label to doubt. With ``slices``
    (the default), the verified slices kept beside the store explain their errors
    (``explained_by_slices``). A sigmoid model's store is refused: its labels are not exclusive
    classes, so no softmax says which label an image should have."""
    whose = f"the store {opened.path} holds a sigmoid model's outputs: it"
    refuse_sigmoid(store_output(opened.metadata), "Label triage", whose)
    table = opened.table
    labels_column = table.column("label")
    if labels_column.null_count == len(table):
        raise InputError(
            f"{opened.path}: these images have no labels, so there is no given label to doubt; "
            "store a labelled folder (one subfolder per class)."
        )
    if labels_column.null_count:  # a copy of every column, embeddings included
        table = table.take(np.flatnonzero(~np.asarray(labels_column.is_null())))
    logits = list_matrix(table.column("logits"))
    probabilities = torch.from_numpy(logits).double().softmax(dim=1).numpy()
    labels = np.asarray(table.column("label").to_numpy(), dtype=np.int64)
    embeddings = (
        list_matrix(table.column("embedding")) if "embedding" in table.column_names else None
    )
    names = opened.metadata.get("class_names")
    found = triage(probabilities, labels, embeddings, k=k)
    if names:
        found = replace(found, class_names=tuple(names))
    positions = table.column("position").to_numpy()
    if slices:
        found = explained_by_slices(found, opened, positions, probabilities.argmax(axis=1))
    frame = found.table(
        positions=positions,
        names=table.column("name").to_pylist(),
        class_names=opened.metadata.get("class_names"),
    )
    return found, frame


def explained_by_slices(
    found: Triage, opened: Any, positions: np.ndarray, predictions: np.ndarray
) -> Triage:
    """``found`` with the slices kept beside the store applied (``gradpick slices``): an image
    whose error (prediction not its given label) belongs to a verified slice is explained by
    that slice and not flagged. Unchanged when there is no current slices file."""
    from gradpick.slices.stored import read_beside

    kept, path = read_beside(opened)
    if kept is None:
        return found
    rank_of: dict[int, int] = {}
    for row in kept.get("slices", []):
        if row.get("verified"):
            for position in row.get("positions", []):
                rank_of.setdefault(int(position), int(row["rank"]))
    wrong = predictions != found.given
    explained = np.array(
        [rank_of.get(int(p), 0) if w else 0 for p, w in zip(positions, wrong, strict=True)],
        dtype=np.int64,
    )
    return replace(
        found,
        flagged=found.flagged & (explained == 0),
        explained_by_slice=explained,
        slices_file=str(path),
    )


def sample_warning(metadata: dict[str, Any]) -> str | None:
    """A sentence saying the probabilities are probably not out of sample, or None.

    The card of a shipped model names the split it was trained on (``trained_on``); a store of a
    folder with that split's name under a CIFAR-10 copy (``.../train``) is that split."""
    model = metadata.get("model") or {}
    trained_on = model.get("trained_on")
    source = metadata.get("source") or {}
    root = str(source.get("root") or source.get("description") or "")
    if not trained_on or not root:
        return None
    split = str(trained_on.get("split", ""))
    if split and root.rstrip("/").rsplit("/", 1)[-1] == split:
        return (
            f"These outputs were read from the {split} split that {model.get('name', 'the model')} "
            "was trained on, so its probabilities are in sample: a wrong label it learned looks "
            "right, and label issues are under-counted. Triage a held-out split for honest scores."
        )
    return None


def _checked(probabilities: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    probabilities = np.asarray(probabilities, dtype=np.float64)
    labels = np.asarray(labels)
    if probabilities.ndim != 2 or labels.shape != (probabilities.shape[0],):
        raise InputError(
            f"Triage needs [N, C] probabilities and [N] labels; got {probabilities.shape} and "
            f"{labels.shape}."
        )
    if not np.issubdtype(labels.dtype, np.integer):
        raise InputError("Labels must be whole class numbers.")
    labels = labels.astype(np.int64)
    if len(labels) and (labels.min() < 0 or labels.max() >= probabilities.shape[1]):
        raise InputError(
            f"Labels must lie in 0..{probabilities.shape[1] - 1}, the model's classes."
        )
    return probabilities, labels
