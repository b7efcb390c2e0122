"""Inference past one machine: the image list as a Ray Data pipeline, into the same stored outputs.

The driver turns the list of (position, relative name, label) rows into a dataset;
``map_batches`` hands batches to a fixed pool of stateful actors, each of which rebuilds the
model once from a picklable *recipe* (``model_recipe(name, weights, overrides)`` for any name
``zoo.load_model`` takes, or any zero-argument callable returning an ``nn.Module``), reads
its images from the source root, prepares them with the model's ``InputSpec``, runs
``gradpick.outputs.inference.infer`` on them and returns ``store.output_table`` rows, the function
every
writer uses. An image a worker cannot read has no row: the driver reads each missing one
again to say why, and skips and lists it as in-process inference does. Ray's Parquet writer
puts the parts into the store's hidden partial folder; the driver checks that every other
position arrived exactly once and only then publishes the store (``store.StoreWriter``), so an
interrupted or failed run never leaves a store that looks finished.

Ray is optional (``pip install 'gradpick[distributed]'``): this module imports it only inside
the functions that run a pipeline, and nothing else in gradpick imports this module eagerly.

Example::

    recipe = model_recipe("resnet20")
    rows = [(0, "cat/0001.jpg", 3), (1, "dog/0002.jpg", 5)]
    run = infer_on_ray(recipe, rows, "/data/cifar10-jpg/test", InputSpec(), {"model": {}},
                       "outputs/", ClusterOptions(workers=2))
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from gradpick import data
from gradpick.data.parquet import ShardRows, row_of_name
from gradpick.errors import ClusterError, DataError, GradpickError, InputError
from gradpick.models import shipped as models
from gradpick.models import zoo
from gradpick.models.spec import InputSpec
from gradpick.models.zoo import SpecOverrides
from gradpick.outputs.inference import as_model_input, infer, logits_and_embeddings, source_labels
from gradpick.outputs.store_format import PART_ROWS, StoreWriter, output_schema, output_table
from gradpick.runtime.devices import resolve_device

__all__ = [
    "BatchInference",
    "ClusterOptions",
    "ImageReader",
    "ModelRecipe",
    "RayRun",
    "Row",
    "check_reachable",
    "connect",
    "infer_batch",
    "infer_on_ray",
    "local_object_store_bytes",
    "model_recipe",
    "source_rows",
]

ModelRecipe = Callable[[], nn.Module]
"""A picklable zero-argument callable that builds the model in whichever process calls it."""

Row = tuple[int, str, int | None]
"""(position in the source, name relative to the source root, label or None)."""

CONNECT_TIMEOUT_S = 5.0
"""How long the driver waits for a cluster's address to answer before giving up."""
PREFLIGHT_TIMEOUT_S = 120.0
"""How long the check that the cluster can read the source may take (it starts a worker)."""
OBJECT_STORE_CAP = 2 * 1024**3
OBJECT_STORE_SHARE = 0.2
"""A local Ray instance's object store: the smaller of 2 GiB and 20% of the machine's memory."""
ACTOR_START_TIMEOUT_S = 600
"""How long the pool may take to start (other jobs may hold the cluster) before the run fails."""
ACTOR_RESTARTS = 3
"""A worker that dies (killed, out of memory, node lost) is restarted this often, and its
unfinished batches are retried on the new one; a worker that keeps dying fails the run."""


def _served_module(name: str, weights: str | None, overrides: SpecOverrides) -> nn.Module:
    return zoo.load_model(name, weights, "cpu", **overrides).module


def model_recipe(
    name: str, weights: str | Path | None = None, overrides: SpecOverrides | None = None
) -> ModelRecipe:
    """A recipe for any model ``zoo.load_model`` names, with an absolute weights path.

    The path is resolved here, on the driver; it must be readable on every node (a shared file
    system). Without one, each worker finds the model's own weights as the driver did (the
    shipped ones, or its torch hub cache).
    """
    path = None if weights is None else str(Path(weights).expanduser().resolve())
    chosen: SpecOverrides = {**(overrides or {})}
    return functools.partial(_served_module, name, path, chosen)


def source_rows(
    source: data.ImageSource, positions: Sequence[int], classes: int
) -> tuple[Path, list[Row]]:
    """The source's root and its (position, relative name, label) rows, which Ray workers read
    by themselves: a folder of image files, or of Parquet shards (Hub layout), has them. Labels
    as in-process inference keeps them (``source_labels``: none unless the folder's classes are
    the model's ``classes``)."""
    found = getattr(source, "root", None)
    names = source.names(positions)
    # a save_to_disk folder's rows are named after its Arrow files, which workers do not read
    if found is None or any(".arrow#" in name for name in names[:1]):
        raise InputError(
            f"Ray workers read image files and Parquet shards; {source.description} is "
            "neither. Give --data an ImageFolder tree (root/<class>/<image>) or a Hugging Face "
            "dataset's Parquet shards (datasets' to_parquet, or the Hub's folder)."
        )
    root = Path(found)
    if root.is_file():  # one Parquet file: its rows are named under its folder
        root = root.parent
    labels = source_labels(source, positions, classes)
    label_list = [None] * len(positions) if labels is None else labels.tolist()
    return root, list(zip(positions, names, label_list, strict=True))


def local_object_store_bytes(total_memory: int | None = None) -> int:
    """The object store of a local Ray instance: min(2 GiB, 20% of RAM), so a 24 GB machine
    keeps more than 19 GB for the workers, the driver and everyone else."""
    if total_memory is None:
        total_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(min(OBJECT_STORE_CAP, OBJECT_STORE_SHARE * total_memory))


# ----------------------------------------------------------------------------- reading images


class ImageReader:
    """Reads images by relative name under a root: a local path or a pyarrow file system URI.

    A URI (``s3://bucket/images``, ``gs://...``, ``hdfs://...``) is opened with
    ``pyarrow.fs.FileSystem.from_uri``, so workers on other machines read the same files the
    driver listed; a plain path must be readable on every worker (a shared file system). A
    Parquet source's names (``shard.parquet#row``, Hub layout) are rows of its shards, each
    shard opened once per reader (``gradpick.data.parquet.ShardRows``).
    """

    def __init__(self, root: str) -> None:
        import pyarrow.fs as pafs

        self.root = root
        if "://" in root:
            try:
                self.filesystem, self.base = pafs.FileSystem.from_uri(root)
            except (OSError, ValueError) as error:
                raise DataError(
                    f"{root}: not a file system this worker can open ({error})."
                ) from None
        else:
            self.filesystem, self.base = pafs.LocalFileSystem(), os.path.abspath(root)
        info = self.filesystem.get_file_info(self.base)
        if info.type != pafs.FileType.Directory:
            raise DataError(
                f"{root}: no such folder on worker {socket.gethostname()}. Every worker must "
                "read the source at the same path: a shared file system, or a file system URI "
                "such as s3://bucket/images."
            )
        self._shards: dict[str, ShardRows] = {}
        self._opening = threading.Lock()

    def _shard(self, shard: str) -> ShardRows:
        with self._opening:
            if shard not in self._shards:
                try:
                    handle = self.filesystem.open_input_file(f"{self.base}/{shard}")
                except OSError as error:
                    raise DataError(
                        f"{shard}: cannot read it under {self.root} ({error})."
                    ) from None
                self._shards[shard] = ShardRows(handle, shard)
            return self._shards[shard]

    def read(self, name: str) -> bytes:
        row = row_of_name(name)
        if row is not None:
            return self._shard(row[0]).image_bytes(row[1], name)
        try:
            with self.filesystem.open_input_file(f"{self.base}/{name}") as handle:
                return bytes(handle.readall())
        except OSError as error:
            raise DataError(f"{name}: cannot read it under {self.root} ({error}).") from None

    def prepare(self, name: str, spec: InputSpec) -> torch.Tensor:
        """The image's uint8 pixels [3, H, W] at the spec's size."""
        return data.decode(self.read(name), name, spec).pixels


def _prepared(reader: ImageReader, spec: InputSpec, name: str) -> torch.Tensor | None:
    """The image's pixels, or None when it cannot be read: it is skipped, as in-process
    inference skips it, and the driver finds out why (``_skipped``)."""
    try:
        return reader.prepare(name, spec)
    except DataError:
        return None


def infer_batch(
    model: nn.Module,
    spec: InputSpec,
    reader: ImageReader,
    rows: Any,
    device: torch.device,
    threads: ThreadPoolExecutor | None = None,
    embeddings: bool = False,
    output: str = "softmax",
) -> Any:
    """Store rows (``output_table``) for one pyarrow batch of (position, name, label) rows;
    an image that cannot be read has no row. ``output``: the model's output kind.

    The same function runs in every Ray worker and in the single-process baseline, so the two
    differ only in who schedules the batches.
    """
    prepare = functools.partial(_prepared, reader, spec)
    names = [str(name) for name in rows.column("name").to_pylist()]
    pixels = list(threads.map(prepare, names) if threads is not None else map(prepare, names))
    kept = [row for row, image in enumerate(pixels) if image is not None]
    if not kept:
        return output_schema(embeddings=embeddings, output=output).empty_table()
    rows = rows.take(kept)
    names = [names[row] for row in kept]
    label_values = rows.column("label")
    labels = None
    if label_values.null_count == 0:
        labels = torch.from_numpy(label_values.to_numpy().astype(np.int64))
    images = torch.stack([image for image in pixels if image is not None])
    positions = rows.column("position").to_pylist()
    if not embeddings:
        result = infer(model, images, labels, batch_size=len(names), device=device)
        return output_table(positions, names, labels, result.logits, output=output)
    with torch.inference_mode():
        logits, features = logits_and_embeddings(model, as_model_input(images.to(device)))
    return output_table(positions, names, labels, logits, features, output=output)


class BatchInference:
    """The stateful Ray Data worker: the model is built once per actor, on its GPU if it has one.

    Ray constructs it on each actor with these arguments and calls it once per batch.
    """

    def __init__(
        self,
        recipe: ModelRecipe,
        spec: InputSpec,
        root: str,
        use_gpu: bool,
        cpus: float,
        embeddings: bool = False,
        output: str = "softmax",
    ) -> None:
        self.reader = ImageReader(root)
        self.spec = spec
        self.device = resolve_device("cuda" if use_gpu else "cpu")
        self.model = models.freeze(recipe()).to(self.device)
        self.threads = ThreadPoolExecutor(int(cpus)) if cpus >= 2 else None
        self.embeddings = embeddings
        self.output = output

    def __call__(self, rows: Any) -> Any:
        return infer_batch(
            self.model,
            self.spec,
            self.reader,
            rows,
            self.device,
            self.threads,
            self.embeddings,
            self.output,
        )


# ----------------------------------------------------------------------------- the cluster


def import_ray() -> Any:
    """Ray and Ray Data, or a ClusterError saying how to install them."""
    try:
        import ray
        import ray.data
    except ImportError as error:
        raise ClusterError(
            "--engine ray needs Ray Data, which is not installed here "
            f"({error}). Install it with: pip install 'gradpick[distributed]'"
        ) from None
    return ray


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse an address that does not answer within ``timeout`` seconds.

    ``ray.init`` itself keeps retrying an unreachable address for minutes; one TCP connection
    bounds that. ``auto`` (the cluster started on this machine) is left to Ray, which answers
    at once when there is none.
    """
    if address in ("auto", "local"):
        return
    target = address.split("://", 1)[-1].rstrip("/")
    host, _, port_text = target.rpartition(":")
    if not host or not port_text.isdigit():
        raise InputError(f"--address '{address}' is not of the form host:port or ray://host:port.")
    try:
        with socket.create_connection((host.strip("[]"), int(port_text)), timeout=timeout):
            pass
    except OSError as error:
        raise ClusterError(
            f"No Ray cluster answers at {address} within {timeout:g} s ({error}). Start one "
            "with 'ray start --head' and give its address, or leave out --address to run on "
            "this machine."
        ) from None


@dataclass(frozen=True)
class ClusterOptions:
    """Where and how wide to run: a cluster address (None: a local instance) and the pool."""

    address: str | None = None
    workers: int = 2
    gpus_per_worker: float = 0.0
    cpus_per_worker: float = 1.0
    batch_size: int = 500
    object_store_bytes: int | None = None
    """A local instance's object store (default ``local_object_store_bytes()``)."""


@dataclass(frozen=True)
class Connection:
    """An initialised Ray session: whether this process started it, and what it holds."""

    started_locally: bool
    object_store_bytes: int | None
    resources: dict[str, float]

    def describe(self) -> str:
        cpus = self.resources.get("CPU", 0)
        gpus = self.resources.get("GPU", 0)
        where = "a local Ray instance" if self.started_locally else "the Ray cluster"
        store = (
            f", object store capped at {self.object_store_bytes / 1024**3:.2f} GiB"
            if self.object_store_bytes
            else ""
        )
        return f"{where} ({cpus:g} CPUs, {gpus:g} GPUs{store})"


def connect(options: ClusterOptions) -> Connection:
    """Join the cluster at ``options.address`` or start a local instance sized to this machine."""
    ray = import_ray()
    if options.address is not None:
        check_reachable(options.address)
    if ray.is_initialized():  # a caller's own session (a notebook, the tests): use it as it is
        return Connection(False, None, dict(ray.cluster_resources()))
    settings: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.WARNING,
    }
    if options.address is not None:
        try:
            ray.init(address=options.address, **settings)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise ClusterError(
                f"Cannot join the Ray cluster at {options.address}: {error}"
            ) from None
        return Connection(False, None, dict(ray.cluster_resources()))
    store = options.object_store_bytes or local_object_store_bytes()
    ray.init(num_cpus=os.cpu_count() or 1, object_store_memory=store, **settings)
    return Connection(True, store, dict(ray.cluster_resources()))


def _from_ray(error: BaseException) -> bool:
    return type(error).__module__.startswith("ray")


def _gradpick_cause(error: BaseException) -> GradpickError | None:
    """The gradpick error a worker raised, found through Ray's wrappers, if there is one.

    Ray re-raises a task's exception as a class deriving from both ``RayTaskError`` and the
    original type, its message a remote traceback; the original is its ``cause``.
    """
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, GradpickError) and not _from_ray(current):
            return current
        pending += [current.__cause__, current.__context__, getattr(current, "cause", None)]
    return None


def _clear_error(error: BaseException) -> BaseException:
    """What the driver raises for a failure inside Ray: the worker's own gradpick error, else
    a ClusterError with the first line of Ray's; anything else unchanged."""
    cause = _gradpick_cause(error)
    if cause is not None:
        return type(cause)(str(cause))
    if not _from_ray(error):
        return error
    first = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
    return ClusterError(f"The Ray pipeline failed: {first[:300]}")


def _check_resources(connection: Connection, options: ClusterOptions) -> None:
    """Refuse a pool the cluster cannot hold at all: Ray Data would wait for it forever."""
    for resource, each, flag in (
        ("CPU", options.cpus_per_worker, "--cpus-per-worker"),
        ("GPU", options.gpus_per_worker, "--gpus-per-worker"),
    ):
        wanted = options.workers * each
        held = connection.resources.get(resource, 0.0)
        if wanted > held:
            raise InputError(
                f"{options.workers} worker(s) x {each:g} {resource} ({flag}) need {wanted:g} "
                f"{resource}s; {connection.describe()} has {held:g}. Lower --workers or {flag}."
            )


def _preflight(ray: Any, root: str) -> None:
    """Open the source's root on the cluster, so a source the workers cannot reach fails in
    seconds with the reason, before any worker loads a model (an unreadable image is skipped,
    not fatal)."""

    def check() -> None:
        ImageReader(root)

    task = ray.remote(num_cpus=0, max_retries=0)(check)
    try:
        ray.get(task.remote(), timeout=PREFLIGHT_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise ClusterError(
            f"The cluster did not run a check task within {PREFLIGHT_TIMEOUT_S:g} s; is it "
            "out of workers?"
        ) from None
    except ray.exceptions.RayError as error:
        raise _clear_error(error) from None


def _blocks(rows: Sequence[Row], block_rows: int) -> Iterator[Any]:
    import pyarrow as pa

    for start in range(0, len(rows), block_rows):
        chunk = rows[start : start + block_rows]
        yield pa.table(
            {
                "position": pa.array([row[0] for row in chunk], type=pa.int64()),
                "name": pa.array([row[1] for row in chunk], type=pa.string()),
                "label": pa.array([row[2] for row in chunk], type=pa.int64()),
            }
        )


FAULT_TOLERANCE = {"max_restarts": ACTOR_RESTARTS, "max_task_retries": ACTOR_RESTARTS}
"""Bounded actor restarts and task retries (Ray Data's default retries forever). Ray 2.60 takes
them only through its deprecated ``**ray_remote_args``; that warning is silenced where they are
passed."""


def _check_rows(rows: Sequence[Row]) -> None:
    if not rows:
        raise InputError("There are no images to infer.")
    labelled = {row[2] is not None for row in rows}
    if len(labelled) > 1:
        raise InputError("Either every image has a label or none has; this list mixes both.")
    positions = [row[0] for row in rows]
    if len(set(positions)) != len(positions):
        raise InputError("The image list holds a position more than once.")


def _written_positions(partial: Path) -> np.ndarray:
    import pyarrow.dataset as ds

    if not list(partial.glob("*.parquet")):  # every image unreadable: Ray wrote no part
        return np.empty(0, dtype=np.int64)
    written = ds.dataset(str(partial), format="parquet").to_table(columns=["position"])
    return np.sort(written.column("position").to_numpy())


def _skipped(
    rows: Sequence[Row], written: np.ndarray, root: str, spec: InputSpec, report: data.ReadReport
) -> set[int]:
    """The positions without a row whose image cannot be read here either: skipped, with why
    (in ``report``), as in-process inference skips them. A missing row whose image reads fine
    was lost by the cluster and stays missing."""
    absent = set(np.setdiff1d([row[0] for row in rows], written).tolist())
    reader = ImageReader(root)
    skipped: set[int] = set()
    for position, name, _ in rows:
        if position not in absent:
            continue
        try:
            reader.prepare(name, spec)
        except DataError as error:
            report.skipped.append(str(error))
            skipped.add(position)
    return skipped


def _check_every_row_once(written: np.ndarray, expected: Sequence[int]) -> None:
    """Refuse to publish unless the written parts hold each expected position exactly once."""
    got = written
    want = np.sort(np.asarray(expected, dtype=np.int64))
    if got.shape != want.shape or not np.array_equal(got, want):
        missing = np.setdiff1d(want, got).size
        repeated = got.size - np.unique(got).size
        raise ClusterError(
            f"The cluster wrote {got.size:,} rows for {want.size:,} images ({missing:,} "
            f"missing, {repeated:,} repeated); the store was not published."
        )


@dataclass(frozen=True)
class RayRun:
    """What a distributed run did."""

    rows: int
    parts: int
    seconds: float
    """Wall time of the pipeline: from the first block to the last part written and checked."""
    discarded: int
    """Unfinished earlier runs for the same output whose leftovers were removed."""
    cluster: str
    out: Path
    notes: tuple[str, ...] = ()
    """What was skipped (unreadable files), by name, as in-process inference says it."""

    @property
    def images_per_second(self) -> float:
        return self.rows / max(self.seconds, 1e-9)


def restart_note(discarded: int, out: Path) -> str:
    """Says whether this run found an unfinished earlier one (whose parts it discards)."""
    if discarded:
        return (
            f"found {discarded} unfinished earlier run(s) of {out}; discarded their parts and "
            "started over"
        )
    return "no unfinished earlier run; started from scratch"


def infer_on_ray(
    recipe: ModelRecipe,
    rows: Sequence[Row],
    root: str | Path,
    spec: InputSpec,
    metadata: dict[str, Any],
    out: str | Path,
    options: ClusterOptions | None = None,
    log: Callable[[str], None] | None = None,
    embeddings: bool = False,
) -> RayRun:
    """Infer every row on Ray and publish the store at ``out`` only when it is complete.

    ``rows`` are (position, name relative to ``root``, label or None); ``metadata`` goes into the
    store's ``gradpick`` schema key as the in-process writer puts it. Without
    ``options.address`` a local Ray instance is started and shut down afterwards; with one this
    joins that cluster and leaves it running.
    """
    options = options or ClusterOptions()
    if options.workers < 1 or options.batch_size < 1:
        raise InputError("--workers and the batch size must be at least 1.")
    _check_rows(rows)
    root = str(root)
    say = log or (lambda line: None)
    ray = import_ray()
    connection = connect(options)
    try:
        say(f"running on {connection.describe()}")
        _check_resources(connection, options)
        _preflight(ray, root)
        return _run_pipeline(
            ray, recipe, rows, root, spec, metadata, Path(out), options, connection, say, embeddings
        )
    finally:
        if connection.started_locally:
            ray.shutdown()


def _run_pipeline(
    ray: Any,
    recipe: ModelRecipe,
    rows: Sequence[Row],
    root: str,
    spec: InputSpec,
    metadata: dict[str, Any],
    out: Path,
    options: ClusterOptions,
    connection: Connection,
    say: Callable[[str], None],
    embeddings: bool = False,
) -> RayRun:
    from ray.data import ActorPoolStrategy, DataContext

    context = DataContext.get_current()
    context.enable_progress_bars = sys.stderr.isatty()
    context.wait_for_min_actors_s = ACTOR_START_TIMEOUT_S
    context.raise_original_map_exception = True  # a worker's DataError reaches the driver as one
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    writer = StoreWriter(out, metadata, embeddings=embeddings)
    say(restart_note(writer.discarded, out))
    started = time.perf_counter()
    try:
        with writer:
            dataset = ray.data.from_arrow(list(_blocks(rows, options.batch_size)))
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
                outputs = dataset.map_batches(
                    BatchInference,
                    fn_constructor_kwargs={
                        "recipe": recipe,
                        "spec": spec,
                        "root": root,
                        "use_gpu": options.gpus_per_worker > 0,
                        "cpus": options.cpus_per_worker,
                        "embeddings": embeddings,
                        "output": writer.output,
                    },
                    compute=ActorPoolStrategy(size=options.workers),
                    batch_size=options.batch_size,
                    batch_format="pyarrow",
                    num_cpus=options.cpus_per_worker,
                    num_gpus=options.gpus_per_worker or None,
                    **FAULT_TOLERANCE,
                )
            # Writing a part is light; with no CPU of its own it never waits for the workers,
            # which hold every CPU of a small machine, so parts leave the object store at once.
            outputs.write_parquet(
                str(writer.partial),
                min_rows_per_file=PART_ROWS,
                ray_remote_args={"num_cpus": 0},
            )
            written = _written_positions(writer.partial)
            report = data.ReadReport(spec)
            skipped = _skipped(rows, written, root, spec, report)
            if len(skipped) == len(rows):
                raise InputError("None of the images could be read:\n" + "\n".join(report.skipped))
            _check_every_row_once(written, [row[0] for row in rows if row[0] not in skipped])
            # As the in-process writer records them.
            writer.annotate(
                skipped=report.skipped,
                notes=list(report.notes()),
                inference_seconds=time.perf_counter() - started,
            )
            writer.adopt_parts()
    except Exception as error:  # Ray and Ray Data wrap a worker's exception in their own types
        clear = _clear_error(error)
        if clear is error:
            raise
        raise clear from None
    if writer.replaced:
        say(writer.replaced)
    seconds = time.perf_counter() - started
    parts = len(list(out.glob("*.parquet")))
    return RayRun(
        writer.rows, parts, seconds, writer.discarded, connection.describe(), out, report.notes()
    )
