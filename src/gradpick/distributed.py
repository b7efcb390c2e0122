"""Inference past one machine: the image list as a Ray Data pipeline, into the same stored outputs.

The driver turns the list of (position, relative name, label) rows into a dataset;
``map_batches`` hands batches to a fixed pool of stateful actors, each of which rebuilds the
model once from a picklable *recipe* (``model_recipe(name, weights, overrides)`` for any name
``models.load_model`` takes, or any zero-argument callable returning an ``nn.Module``), reads
its images from the source root, prepares them with the model's ``InputSpec``, runs
``gradpick.infer.infer`` on them and returns ``store.output_table`` rows, the function every
writer uses. Ray's Parquet writer puts the parts into the store's hidden partial folder; the
driver checks that every position arrived exactly once and only then publishes the store
(``store.StoreWriter``), so an interrupted or failed run never leaves a store that looks
finished.

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

from gradpick import data, models
from gradpick.devices import resolve_device
from gradpick.errors import ClusterError, DataError, GradpickError, InputError
from gradpick.infer import as_model_input, infer, logits_and_embeddings
from gradpick.spec import InputSpec
from gradpick.store import PART_ROWS, StoreWriter, output_table
from gradpick.zoo import SpecOverrides

__all__ = [
    "BatchInference",
    "BenchRow",
    "ClusterOptions",
    "ImageReader",
    "ModelRecipe",
    "RayRun",
    "Row",
    "bench_table",
    "benchmark",
    "check_reachable",
    "connect",
    "infer_batch",
    "infer_on_ray",
    "local_object_store_bytes",
    "model_recipe",
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
    return models.load_model(name, weights, "cpu", **overrides).module


def model_recipe(
    name: str, weights: str | Path | None = None, overrides: SpecOverrides | None = None
) -> ModelRecipe:
    """A recipe for any model ``models.load_model`` names, with an absolute weights path.

    The path is resolved here, on the driver; it must be readable on every node (a shared file
    system). Without one, each worker finds the model's own weights as the driver did (the
    shipped ones, or its torch hub cache).
    """
    path = None if weights is None else str(Path(weights).expanduser().resolve())
    chosen: SpecOverrides = {**(overrides or {})}
    return functools.partial(_served_module, name, path, chosen)


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
    driver listed; a plain path must be readable on every worker (a shared file system).
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

    def read(self, name: str) -> bytes:
        try:
            with self.filesystem.open_input_file(f"{self.base}/{name}") as handle:
                return bytes(handle.readall())
        except OSError as error:
            raise DataError(f"{name}: cannot read it under {self.root} ({error}).") from None

    def prepare(self, name: str, spec: InputSpec) -> torch.Tensor:
        """The image's uint8 pixels [3, H, W] at the spec's size."""
        return data.decode(self.read(name), name, spec).pixels


def infer_batch(
    model: nn.Module,
    spec: InputSpec,
    reader: ImageReader,
    rows: Any,
    device: torch.device,
    threads: ThreadPoolExecutor | None = None,
    embeddings: bool = False,
) -> Any:
    """Store rows (``output_table``) for one pyarrow batch of (position, name, label) rows.

    The same function runs in every Ray worker and in the single-process baseline, so the two
    differ only in who schedules the batches.
    """
    names = [str(name) for name in rows.column("name").to_pylist()]
    prepare = functools.partial(reader.prepare, spec=spec)
    pixels = list(threads.map(prepare, names) if threads is not None else map(prepare, names))
    label_values = rows.column("label")
    labels = None
    if label_values.null_count == 0:
        labels = torch.from_numpy(label_values.to_numpy().astype(np.int64))
    images = torch.stack(pixels)
    positions = rows.column("position").to_pylist()
    if not embeddings:
        result = infer(model, images, labels, batch_size=len(names), device=device)
        return output_table(positions, names, labels, result.logits)
    with torch.inference_mode():
        logits, features = logits_and_embeddings(model, as_model_input(images.to(device)))
    return output_table(positions, names, labels, logits, features)


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
    ) -> None:
        self.reader = ImageReader(root)
        self.spec = spec
        self.device = resolve_device("cuda" if use_gpu else "cpu")
        self.model = models.freeze(recipe()).to(self.device)
        self.threads = ThreadPoolExecutor(int(cpus)) if cpus >= 2 else None
        self.embeddings = embeddings

    def __call__(self, rows: Any) -> Any:
        return infer_batch(
            self.model, self.spec, self.reader, rows, self.device, self.threads, self.embeddings
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


def _preflight(ray: Any, root: str, first_name: str, spec: InputSpec) -> None:
    """Read and prepare one image on the cluster, so a source the workers cannot read fails in
    seconds with the reason, before any worker loads a model."""

    def check() -> None:
        ImageReader(root).prepare(first_name, spec)

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


def _check_every_row_once(partial: Path, expected: Sequence[int]) -> None:
    """Refuse to publish unless the written parts hold each expected position exactly once."""
    import pyarrow.dataset as ds

    written = ds.dataset(str(partial), format="parquet").to_table(columns=["position"])
    got = np.sort(written.column("position").to_numpy())
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
        _preflight(ray, root, rows[0][1], spec)
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
            _check_every_row_once(writer.partial, [row[0] for row in rows])
            # As the in-process writer records them: an unreadable image fails a Ray run
            # instead of being skipped, so none were.
            writer.annotate(skipped=[], notes=[], inference_seconds=time.perf_counter() - started)
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
    return RayRun(writer.rows, parts, seconds, writer.discarded, connection.describe(), out)


# ----------------------------------------------------------------------------- benchmark


def _proc_kilobytes(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` figure in kB (VmHWM: peak resident set; VmRSS: current), or 0."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _descendants(root: int) -> dict[int, str]:
    """Every live process below ``root``, with its command line (Linux ``/proc``)."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            commands[int(entry.name)] = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            )
        except (OSError, ValueError, IndexError):
            continue
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = commands.get(pid, "")
                frontier.append(pid)
    return found


class _MemorySampler:
    """Samples the Ray processes below this one every ``interval`` s while a run goes on.

    Workers (``ray::MapWorker`` actors) are reported by their own peak resident set (VmHWM,
    read at each sample, so growth in a worker's last interval before it exits is missed);
    Ray's own processes (GCS, raylet with the object store, idle workers) by the peak of their
    summed current resident sets (VmRSS), since they are not the model's cost.
    """

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.worker_peaks: dict[int, int] = {}
        self.system_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            system = 0
            for pid, command in _descendants(os.getpid()).items():
                if "MapWorker" in command:
                    peak = _proc_kilobytes(pid, "VmHWM")
                    self.worker_peaks[pid] = max(self.worker_peaks.get(pid, 0), peak)
                else:
                    system += _proc_kilobytes(pid, "VmRSS")
            self.system_peak = max(self.system_peak, system)


@dataclass(frozen=True)
class BenchRow:
    """One engine's run over the same images."""

    engine: str
    layout: str
    """Which cores did the work, e.g. '1 process, 2 torch threads'."""
    cores: int
    images: int
    seconds: float
    driver_peak_mb: float
    worker_peak_mb: float | None = None
    system_peak_mb: float | None = None
    startup_seconds: float | None = None

    @property
    def images_per_second(self) -> float:
        return self.images / max(self.seconds, 1e-9)


def _bench_in_process(
    recipe: ModelRecipe,
    rows: Sequence[Row],
    root: str,
    spec: InputSpec,
    out: Path,
    threads: int,
    batch_size: int,
) -> BenchRow:
    """The single-process baseline: the same ``infer_batch`` over the same batches, no Ray."""
    torch.set_num_threads(threads)
    started = time.perf_counter()
    model = models.freeze(recipe())
    reader = ImageReader(root)
    device = torch.device("cpu")
    with StoreWriter(out, {}) as writer:
        for block in _blocks(rows, batch_size):
            writer.write(infer_batch(model, spec, reader, block, device))
    seconds = time.perf_counter() - started
    return BenchRow(
        "in-process",
        f"1 process, {threads} torch thread(s)",
        threads,
        len(rows),
        seconds,
        _proc_kilobytes(os.getpid(), "VmHWM") / 1e3,
    )


def _bench_ray(
    recipe: ModelRecipe,
    rows: Sequence[Row],
    root: str,
    spec: InputSpec,
    out: Path,
    workers: int,
    batch_size: int,
) -> BenchRow:
    started = time.perf_counter()
    options = ClusterOptions(workers=workers, batch_size=batch_size)
    with _MemorySampler() as sampler:
        run = infer_on_ray(recipe, rows, root, spec, {}, out, options)
    total = time.perf_counter() - started
    return BenchRow(
        "ray",
        f"{workers} worker(s) x 1 CPU on {run.cluster}",
        workers,
        run.rows,
        run.seconds,
        _proc_kilobytes(os.getpid(), "VmHWM") / 1e3,
        max(sampler.worker_peaks.values(), default=0) / 1e3,
        sampler.system_peak / 1e3,
        total - run.seconds,
    )


def _in_child(function: Callable[..., BenchRow], *args: Any) -> BenchRow:
    """Run one benchmark phase in a fresh process, so each peak resident set is its own."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(function, args)


def benchmark(
    recipe: ModelRecipe,
    rows: Sequence[Row],
    root: str | Path,
    spec: InputSpec,
    scratch: Path,
    workers: int = 2,
    batch_size: int = 500,
) -> list[BenchRow]:
    """The same images through one process and through Ray on a local instance, each phase in
    its own process.

    Rows: one process with one torch thread (what each Ray worker has), one process with
    ``workers`` threads (the same cores as Ray's ``workers`` single-CPU workers), then Ray.
    """
    _check_rows(rows)
    import_ray()
    results = [
        _in_child(
            _bench_in_process,
            recipe,
            rows,
            str(root),
            spec,
            scratch / f"in-process-{threads}",
            threads,
            batch_size,
        )
        for threads in sorted({1, workers})
    ]
    results.append(
        _in_child(_bench_ray, recipe, rows, str(root), spec, scratch / "ray", workers, batch_size)
    )
    return results


def bench_table(rows: Sequence[BenchRow]) -> str:
    """The benchmark as a markdown table, with what each memory figure counts.

    Throughput is compared with the in-process row on the same cores (the last in-process row)
    and, per worker, with one process on one core: Ray's efficiency is its throughput over
    ``workers`` times that of one single-threaded process.
    """
    local = [row for row in rows if row.engine == "in-process"]
    same_cores, one_core = local[-1].images_per_second, local[0].images_per_second
    lines = [
        "| engine | cores | images | wall s | images/s | vs in-process, same cores | "
        "per core vs 1 thread | driver peak MB | worker peak MB | Ray processes MB | "
        "Ray start, check, stop s |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def figure(value: float | None, digits: int = 0) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    for row in rows:
        per_core = row.images_per_second / row.cores / one_core
        lines.append(
            f"| {row.engine} | {row.layout} | {row.images:,} | {row.seconds:,.1f} | "
            f"{row.images_per_second:,.0f} | {row.images_per_second / same_cores:.2f}x | "
            f"{per_core:.2f} | {row.driver_peak_mb:,.0f} | {figure(row.worker_peak_mb)} | "
            f"{figure(row.system_peak_mb)} | {figure(row.startup_seconds, 1)} |"
        )
    lines += [
        "",
        "wall s: model load(s), reading and preparing every image, inference and the "
        "published store (Ray: from the first block to the checked store, actors' start "
        "included; the last column: ray.init, the check that the cluster reads the source, "
        "and shutdown). per core: images/s per core used, over the one-thread process's. "
        "driver peak: VmHWM of the process that ran the engine. worker peak: the largest VmHWM "
        "of a Ray model worker. Ray processes: peak of the summed VmRSS of Ray's other "
        "processes (GCS, raylet with the object store, idle workers).",
    ]
    return "\n".join(lines)
