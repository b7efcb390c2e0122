"""``gradpick bench-triage``: label triage on a noisy copy of a labelled folder, against cleanlab.

For each noise share, a seeded script (``noisy_copy``) builds a temporary folder of symbolic
links to the folder's files (CIFAR-10's test split by default), a share of them placed under a
wrong class; every link is named ``<true class>-<file>`` whether moved or not, so names collide
nowhere and say nothing. The shipped model infers that folder into a store with embeddings
(``gradpick.outputs.stores.infer_to_store``), exactly as ``gradpick infer --out --embeddings``
would, and
``gradpick.triage.ranking.triage_store`` ranks its rows. Against the moved files:

* precision of the first M rows, M the number moved, for gradpick's ranking and for cleanlab's
  self-confidence ranking (``cleanlab.rank.get_label_quality_scores``) on the same stored
  probabilities;
* F1 of the flagged set, gradpick's against cleanlab's ``find_label_issues``;
* the share of flagged moved files whose suggested label is their true class.

Targets: at least cleanlab's figure on both, and suggested labels right for at least 80%. Last,
the time to score 50,000 rows: the first store's probabilities and embeddings stacked five times
(the cost depends on the row count, not on what the rows hold). cleanlab is a test dependency;
this benchmark needs it.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from gradpick import data
from gradpick.bench.rows import markdown_table
from gradpick.errors import InputError
from gradpick.models import zoo
from gradpick.outputs import store_format as store
from gradpick.outputs.stores import infer_to_store
from gradpick.triage.ranking import (
    confident_learning,
    nearest_neighbours,
    triage,
    triage_store,
)

__all__ = [
    "NOISE_SHARES",
    "SUGGESTION_TARGET",
    "TIMED_ROWS",
    "TIME_TARGET_SECONDS",
    "NoiseRow",
    "Timing",
    "noisy_copy",
    "neighbour_recall",
    "noise_row",
    "report_text",
    "run",
    "scoring_seconds",
]

NOISE_SHARES = (0.02, 0.05, 0.10)
SUGGESTION_TARGET = 0.8
TIMED_ROWS = 50_000
TIME_TARGET_SECONDS = 2.0


def noisy_copy(root: Path, out: Path, share: float, seed: int = 0) -> dict[str, tuple[int, int]]:
    """Link every file of the ImageFolder ``root`` into ``out``, ``share`` of them (seeded) under
    a wrong class drawn uniformly from the others. Returns {link name: (true class, given class)}
    of the moved ones; the user's files are only linked to, never touched."""
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    files = [(c, f) for c, name in enumerate(classes) for f in sorted((root / name).iterdir())]
    generator = np.random.default_rng(seed)
    moved_rows = generator.choice(len(files), size=round(share * len(files)), replace=False)
    shifts = generator.integers(1, len(classes), size=len(moved_rows))
    given = np.array([c for c, _ in files])
    given[moved_rows] = (given[moved_rows] + shifts) % len(classes)
    for name in classes:
        (out / name).mkdir(parents=True)
    moved: dict[str, tuple[int, int]] = {}
    for (true, file), label in zip(files, given, strict=True):
        link = f"{classes[label]}/{classes[true]}-{file.name}"
        (out / link).symlink_to(file.resolve())
        if label != true:
            moved[link] = (true, int(label))
    return moved


@dataclass(frozen=True)
class NoiseRow:
    """One noise share's figures."""

    share: float
    moved: int
    precision: float
    """gradpick: share of the first M rows that were moved."""
    cleanlab_precision: float
    """cleanlab's self-confidence ranking, same measure."""
    flagged: int
    f1: float
    cleanlab_flagged: int
    cleanlab_f1: float
    suggestion_right: float
    """Share of flagged moved files whose suggested label is their true class."""
    infer_seconds: float


def _f1(flagged: np.ndarray, truth: np.ndarray) -> float:
    hits = float((flagged & truth).sum())
    return 2 * hits / max(float(flagged.sum() + truth.sum()), 1.0)


def noise_row(
    opened: store.OpenedStore, moved: dict[str, tuple[int, int]], share: float, seconds: float
) -> NoiseRow:
    """Score one store of a noisy copy against its moved files, with cleanlab beside."""
    from cleanlab.filter import find_label_issues
    from cleanlab.rank import get_label_quality_scores

    found, frame = triage_store(opened)
    names = frame["name"].to_numpy()
    truth = np.array([name in moved for name in names])
    count = len(moved)
    precision = float(truth[:count].mean())
    flagged = frame["flagged"].to_numpy()
    right = np.array(
        [
            moved[name][0] == label
            for name, label in zip(names, frame["suggested_label"], strict=True)
            if name in moved
        ],
    )
    flagged_moved = flagged[truth]
    suggestion_right = float(right[flagged_moved].mean()) if flagged_moved.any() else 0.0

    table = opened.table
    logits = store.list_matrix(table.column("logits"))
    probabilities = torch.from_numpy(logits).double().softmax(dim=1).numpy()
    labels = np.asarray(table.column("label").to_numpy(), dtype=np.int64)
    stored_truth = np.array([name in moved for name in table.column("name").to_pylist()])
    quality = get_label_quality_scores(labels, probabilities, method="self_confidence")
    first = np.argsort(quality, kind="stable")[:count]
    issues = find_label_issues(labels, probabilities)
    return NoiseRow(
        share=share,
        moved=count,
        precision=precision,
        cleanlab_precision=float(stored_truth[first].mean()),
        flagged=int(flagged.sum()),
        f1=_f1(flagged, truth),
        cleanlab_flagged=int(issues.sum()),
        cleanlab_f1=_f1(issues, stored_truth),
        suggestion_right=suggestion_right,
        infer_seconds=seconds,
    )


@dataclass(frozen=True)
class Timing:
    """Seconds to score ``rows`` rows, stage by stage (medians of the repeats), and how close
    the neighbours are to a brute-force search."""

    rows: int
    source: str
    confident_seconds: float
    neighbour_seconds: float
    total_seconds: float
    cpu_seconds: float
    """Process CPU time of one whole triage (both cores count)."""
    recall: float
    """Share of the brute-force k nearest found, over a sample of rows."""
    exact: bool
    load: str
    """/proc/loadavg while timing: the machine is shared."""


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def scoring_seconds(
    opened: store.OpenedStore, rows: int = TIMED_ROWS, repeats: int = 3, sample: int = 1000
) -> Timing:
    """Time to triage ``rows`` rows, neighbours included. A store of at least that many rows is
    timed on its own first ``rows``; a smaller one is stacked (with a little noise on the
    embeddings, or copies would be each other's exact neighbours)."""
    table = opened.table
    labels = np.asarray(table.column("label").to_numpy(), dtype=np.int64)
    logits = store.list_matrix(table.column("logits"))
    embeddings = store.list_matrix(table.column("embedding"))
    source = f"{opened.path} ({len(labels):,} rows)"
    if len(labels) < rows:
        copies = -(-rows // len(labels))
        logits, embeddings = np.tile(logits, (copies, 1)), np.tile(embeddings, (copies, 1))
        labels = np.tile(labels, copies)
        embeddings = embeddings + np.random.default_rng(0).normal(0, 1e-3, embeddings.shape).astype(
            np.float32
        )
        source += f" stacked {copies} times"
    probabilities = torch.from_numpy(logits[:rows]).softmax(dim=1).numpy()
    labels, embeddings = labels[:rows], embeddings[:rows]
    stages: dict[str, list[float]] = {"confident": [], "neighbours": [], "total": [], "cpu": []}
    load = _load()
    for _ in range(repeats):
        started = time.perf_counter()
        confident_learning(probabilities, labels)
        stages["confident"].append(time.perf_counter() - started)
        started = time.perf_counter()
        found = nearest_neighbours(embeddings, labels, probabilities.shape[1])
        stages["neighbours"].append(time.perf_counter() - started)
        started, cpu = time.perf_counter(), time.process_time()
        triage(probabilities, labels, embeddings)
        stages["total"].append(time.perf_counter() - started)
        stages["cpu"].append(time.process_time() - cpu)
    median = {name: float(np.median(values)) for name, values in stages.items()}
    return Timing(
        rows=rows,
        source=source,
        confident_seconds=median["confident"],
        neighbour_seconds=median["neighbours"],
        total_seconds=median["total"],
        cpu_seconds=median["cpu"],
        recall=neighbour_recall(embeddings, found.indices, sample),
        exact=found.exact,
        load=f"{load} before, {_load()} after",
    )


def neighbour_recall(embeddings: np.ndarray, indices: np.ndarray, sample: int = 1000) -> float:
    """Share of each sampled row's brute-force k nearest (float64 cosine) found in ``indices``."""
    count, k = indices.shape
    rows = np.random.default_rng(0).choice(count, size=min(sample, count), replace=False)
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similarity = unit[rows].astype(np.float64) @ unit.T.astype(np.float64)
    similarity[np.arange(len(rows)), rows] = -np.inf
    exact = np.argpartition(-similarity, k, axis=1)[:, :k]
    found = sum(len(np.intersect1d(a, b)) for a, b in zip(exact, indices[rows], strict=True))
    return found / (len(rows) * k)


def run(
    root: str | Path,
    shares: Sequence[float] = NOISE_SHARES,
    model: str = "resnet20",
    seed: int = 0,
    progress: Callable[[str], None] = lambda line: None,
    timing_store: str | Path | None = None,
) -> tuple[list[NoiseRow], Timing | None]:
    """Every noise share's row, and the time to score ``TIMED_ROWS`` rows: those of
    ``timing_store`` (a store with embeddings) if given, else the first noisy store's stacked."""
    rows: list[NoiseRow] = []
    timed = None
    if timing_store is not None:
        progress(f"timing {TIMED_ROWS:,} rows of {timing_store}")
        timed = scoring_seconds(store.open_store(Path(timing_store).expanduser()))
    elif not shares:
        raise InputError("Give at least one noise share, or a --timing-store to time alone.")
    if not shares:
        return rows, timed
    root = Path(root).expanduser()
    if not root.is_dir():
        raise InputError(f"{root}: no such folder (an ImageFolder tree, one folder per class).")
    loaded = zoo.load_model(model)
    with tempfile.TemporaryDirectory(prefix="gradpick-triage-") as scratch:
        for share in shares:
            folder = Path(scratch) / f"noisy-{share:g}"
            moved = noisy_copy(root, folder, share, seed)
            source = data.image_folder(folder, loaded.spec)
            out = Path(scratch) / f"outputs-{share:g}"
            progress(f"{share:.0%} noise: inferring {len(source):,} images ({len(moved)} moved)")
            done = infer_to_store(
                loaded, source, range(len(source)), out, embeddings=True, batch_size=500
            )
            opened = store.open_store(out)
            rows.append(noise_row(opened, moved, share, done.seconds))
            progress(json.dumps(asdict(rows[-1])))
            if timed is None:
                timed = scoring_seconds(opened)
    return rows, timed


def report_text(rows: Sequence[NoiseRow], timed: Timing | None) -> str:
    """The markdown tables with each figure's target."""
    columns = [
        "noise",
        "moved",
        "precision@M gradpick",
        "cleanlab self-confidence",
        "flagged F1 gradpick",
        "cleanlab find_label_issues",
        "suggested label right",
    ]
    lines = markdown_table(
        columns,
        (
            (
                f"{row.share:.0%}",
                row.moved,
                f"{row.precision:.3f}" + ("" if row.precision >= row.cleanlab_precision else " ✗"),
                f"{row.cleanlab_precision:.3f}",
                f"{row.f1:.3f} ({row.flagged} flagged)"
                + ("" if row.f1 >= row.cleanlab_f1 else " ✗"),
                f"{row.cleanlab_f1:.3f} ({row.cleanlab_flagged} flagged)",
                f"{row.suggestion_right:.1%}"
                + ("" if row.suggestion_right >= SUGGESTION_TARGET else " ✗"),
            )
            for row in rows
        ),
        right=columns[1:],
    )
    lines += [
        "",
        "Targets: precision and F1 at least cleanlab's on the same stored probabilities (✗ "
        f"marks a miss); suggested label right for at least {SUGGESTION_TARGET:.0%} of the "
        "flagged moved files.",
    ]
    if timed is not None:
        verdict = "met" if timed.total_seconds < TIME_TARGET_SECONDS else "missed"
        lines += [
            "",
            f"Scoring {timed.rows:,} rows of {timed.source}, load average {timed.load}:",
            "",
            *markdown_table(
                ["stage", "seconds"],
                (
                    ("confident learning", f"{timed.confident_seconds:.3f}"),
                    (
                        "neighbours (" + ("exact" if timed.exact else "inverted file") + ")",
                        f"{timed.neighbour_seconds:.3f}",
                    ),
                    ("whole triage", f"{timed.total_seconds:.3f}"),
                    ("whole triage, CPU time", f"{timed.cpu_seconds:.3f}"),
                ),
                right=["seconds"],
            ),
            "",
            f"Neighbour recall against brute force: {timed.recall:.3f}. Target under "
            f"{TIME_TARGET_SECONDS:g} s for the whole triage: {verdict}.",
        ]
    return "\n".join(lines)
