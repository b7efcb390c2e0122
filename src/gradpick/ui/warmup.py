"""The explorer server's start-up work, once per process, off the first visitor's path.

A page run needs torch, every panel, plotly and pandas imported, the default model loaded and
the default batch read and inferred (or the store named by ``--outputs`` opened and its folder
checked): 3-5 s on two busy cores, 10-15 s for a store of a million images. Whoever serves the
explorer pays that here, once per server process, through one code path:

* ``streamlit run app.py`` (what Streamlit Community Cloud runs): ``app.py`` defines an
  ``st.App`` whose ``lifespan`` starts ``warm`` in a background thread when the server starts
  and returns once the first page's needs are met, so the server serves (and answers its
  health check) only then, and its first visitor waits for none of that work: beside a
  visitor's browser loading Streamlit's page on the same cores, the same work had kept the
  first page 1.7-2.0 s later than the launcher's;
* ``make run`` (``gradpick.ui.launch``): ``warm`` in the launcher's thread before it serves;
* a server that never ran the hook (a Streamlit without ``st.App``, ``AppTest``): the first
  page run starts it in the background (``start``).

A page run waits only for what it shows first (``wait_for_page``: the imports, the model and
the default batch); the CPU profiler, which only a click's memory readout needs, warms after,
and a click meanwhile does not wait for it (``measure.profiler_warming``: the page measures
memory from a later click). A hosted server leaves the profiler cold: its page measures no
memory unless a visitor turns it on. Beside a server that serves already (a first page run's
warm-up), the default batch is inferred on one thread (``warm``'s ``threads``).
Each stage prints one line (``gradpick: warm-up: ...``) to the server's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gradpick.errors import GradpickError, InputError

if TYPE_CHECKING:  # torch and the panels are imported in ``warm``, timed
    import torch

    from gradpick.ui.service import ModelOption

__all__ = [
    "FIRST_PAGE_RUN",
    "LAUNCHER",
    "LOG_PREFIX",
    "SERVER_START",
    "STORE_CHECK_WAIT_S",
    "Warmup",
    "current",
    "import_charts",
    "lifespan",
    "start",
    "wait_for_page",
    "warm",
]

LAUNCHER = "launcher"
"""The origin of a warm-up that runs before the server serves (``gradpick.ui.launch``)."""
SERVER_START = "server start"
"""The origin of a warm-up that the st.App's start-up hook began (``lifespan``): the server
serves once its page's part is done."""
FIRST_PAGE_RUN = "first page run"
"""The origin of a warm-up that a page run began (a server without the hook): it serves."""
LOG_PREFIX = "gradpick: warm-up:"
"""Every line this module prints to the server's log starts with it."""

_QUIET_LOGGERS = (
    "streamlit.runtime.caching.cache_data_api",
    "streamlit.runtime.scriptrunner_utils.script_run_context",
)
"""Outside a session, Streamlit warns that its caches and elements have no session: expected
here, where none is running the work."""


@dataclass
class Warmup:
    """One process's warm-up: where it was started from and how far it got."""

    origin: str
    """``SERVER_START``, ``LAUNCHER`` or ``FIRST_PAGE_RUN``."""
    page_ready: threading.Event = field(default_factory=threading.Event)
    """Set once the first page's needs are met (or the work failed: the page then does it)."""
    done: threading.Event = field(default_factory=threading.Event)
    page_ms: float | None = None
    total_ms: float | None = None
    problem: str | None = None
    page_runs: int = 0
    """Page runs that asked for it (``wait_for_page``)."""


_LOCK = threading.Lock()
_CURRENT: list[Warmup] = []
_CHARTS = threading.Lock()


def import_charts() -> None:
    """Import pandas and plotly whole in one thread while any other caller waits. plotly looks
    pandas up in ``sys.modules`` without importing it, so a page run drawing its first chart
    while the warm-up imported pandas met a half-made module (``partially initialized module
    'pandas' has no attribute 'Series'``)."""
    with _CHARTS:
        import pandas  # noqa: F401
        import plotly.graph_objects  # noqa: F401


def _say(text: str) -> None:
    # One write per line: print writes the text and its newline apart, so two threads' lines
    # (the warm-up's and a page run's) could end up on one line of the log.
    sys.stdout.write(f"{LOG_PREFIX} {text}\n")
    sys.stdout.flush()


def current() -> Warmup | None:
    """This process's warm-up, or None when none was started."""
    with _LOCK:
        return _CURRENT[0] if _CURRENT else None


def start(app_args: Sequence[str], origin: str, background: bool = True) -> Warmup:
    """Start this process's warm-up (``warm`` with the app's own arguments ``app_args``) unless
    one was started already, which is returned instead; ``background``: in a daemon thread,
    else in this one (returning when it is done)."""
    with _LOCK:
        if _CURRENT:
            return _CURRENT[0]
        warmup = Warmup(origin)
        _CURRENT.append(warmup)
    _say(f"began ({origin})")
    if background:
        thread = threading.Thread(
            target=_run, args=(warmup, list(app_args)), name="gradpick-warmup", daemon=True
        )
        thread.start()
    else:
        _run(warmup, list(app_args))
    return warmup


def wait_for_page(timeout: float | None = None) -> float:
    """Block until this process's warm-up has what a first page shows (returns at once when
    none was started); returns the milliseconds waited. The process's first page run says in
    the log whether it found that ready or waited for it."""
    warmup = current()
    if warmup is None:
        return 0.0
    started = time.perf_counter()
    ready = warmup.page_ready.is_set()
    if not ready:
        warmup.page_ready.wait(timeout)
    waited = 0.0 if ready else (time.perf_counter() - started) * 1000
    with _LOCK:
        first, warmup.page_runs = warmup.page_runs == 0, warmup.page_runs + 1
    if first:
        found = "found the model and batch ready" if ready else f"waited {waited:,.0f} ms for them"
        if warmup.problem is not None:
            found = "does the work itself (the warm-up failed)"
        _say(f"the first page run {found}")
    return waited


@asynccontextmanager
async def lifespan(app: object) -> AsyncIterator[None]:
    """``st.App``'s lifespan hook: starts the warm-up in the background when the server starts
    (the app's own arguments are the script's ``sys.argv``, which ``streamlit run`` set) and
    yields once the first page's needs are met (or the work failed, which the page then does
    and explains), so the server serves from then on; the profiler's part goes on beside it.
    The wait runs in a worker thread: the event loop stays free meanwhile."""
    warmup = start(sys.argv[1:], origin=SERVER_START)
    await asyncio.to_thread(warmup.page_ready.wait)
    yield


def _run(warmup: Warmup, app_args: list[str]) -> None:
    started = time.perf_counter()
    try:
        # Beside a server that serves already, the visitor's browser and the server's own
        # event loop need cores too: the default batch is inferred on one thread.
        threads = 1 if warmup.origin == FIRST_PAGE_RUN else None
        warmup.page_ms = warm(app_args, warmup.page_ready, threads)
        warmup.total_ms = (time.perf_counter() - started) * 1000
        _say(f"done in {warmup.total_ms:,.0f} ms (the profiler included)")
    except Exception as error:  # the page does the work itself, and explains what fails
        warmup.problem = f"{type(error).__name__}: {error}"
        _say(f"failed: {warmup.problem}")
    finally:
        warmup.page_ready.set()
        warmup.done.set()


@contextmanager
def _quiet_streamlit() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in _QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def warm(
    app_args: Sequence[str],
    page_ready: threading.Event | None = None,
    threads: int | None = None,
) -> float:
    """Import torch and every module a page run imports, load the model the page opens on (the
    first built-in one, unless ``app_args`` name the user's own), read and infer the page's
    default batch where that is local (``_infer_default_batch``; else open the store that
    ``--outputs`` names, ``_open_store``, and run the model once on zeros, which picks its
    kernels and grows its allocator as that inference would), then set ``page_ready``; on the
    CPU, unless hosted, set up the memory profiler the page measures clicks with, and freeze
    all that out of the garbage collector's passes (``process.freeze_loaded_objects``); then
    let this thread's OpenMP workers go
    (``process.release_openmp_threads``). Returns the milliseconds until ``page_ready``.

    ``threads``: torch's intra-op threads for the default batch's inference (None: the
    process's count). Two threads spin at every barrier while one waits for a core: beside a
    browser loading the page and other jobs (load 7.5 on two cores), 1,000 images took
    9.7-13.6 s on two threads against 2.2-2.7 s on one.

    The allocator's policy is set first (``process.apply_memory_policy``): on the user's own
    machine, freed memory is kept for the next batch (half again as fast); in hosted mode it is
    returned promptly.
    """
    started = time.perf_counter()
    from gradpick.runtime import process
    from gradpick.ui import config

    hosted = config.hosted_mode(os.environ.get(config.HOSTED_ENV), Path.cwd())
    process.apply_memory_policy(hosted)
    with _quiet_streamlit():
        import_charts()  # first: a page run's preload chart waits for them
        import torch  # the slowest import of a page run

        import gradpick.ui.page  # noqa: F401 (every panel, plotly, pandas, the caches)
        from gradpick.outputs.inference import infer
        from gradpick.outputs.stores import INFERENCE_BATCH_SIZE
        from gradpick.runtime import devices, measure
        from gradpick.ui import cache, service

        laps = [("imports", time.perf_counter())]
        try:  # a hosted page serves only the built-in models
            own = None if hosted else config.parse_user_model(list(app_args), os.environ)
        except InputError:
            own = None  # the page explains the bad option; the built-in model is its fallback
        if own is None:
            option = service.model_options()[0]
            device = str(devices.resolve_device("auto"))
            served = cache.served(option.identity, device, option)
            laps.append(("the model", time.perf_counter()))
            with devices.cpu_threads(threads):
                inferred = _infer_default_batch(app_args, option, torch.device(device), hosted)
            if inferred:
                laps.append(("its batch", time.perf_counter()))
            else:
                if _open_store(app_args, option, torch.device(device), hosted):
                    laps.append(
                        ("the store, its folder's check, its kept triage", time.perf_counter())
                    )
                # One pass at the app's inference batch size instead: the first pass of a
                # process picks its kernels and grows its allocator, which would slow the
                # first page's inference (and a store page's first gradients). The default
                # batch's own inference did that already.
                zeros = torch.zeros(INFERENCE_BATCH_SIZE, 3, *served.spec.size, dtype=torch.uint8)
                infer(served.module, zeros, batch_size=INFERENCE_BATCH_SIZE, features=True)
                laps.append(("a pass over zeros", time.perf_counter()))
        page_ms = (time.perf_counter() - started) * 1000
        split = _split(started, laps)
        _say(f"imports, the default model and batch ready in {page_ms:,.0f} ms ({split})")
        if page_ready is not None:
            page_ready.set()
        if devices.resolve_device("auto").type == "cpu" and not hosted:
            measure.warm_profiler()  # the page measures clicks' memory with it
        process.freeze_loaded_objects()  # out of the full collection after every script run
    process.release_openmp_threads()  # this thread infers no more: page runs have their own
    return page_ms


def _split(started: float, laps: Sequence[tuple[str, float]]) -> str:
    """Each stage's milliseconds, from when the one before it ended (``laps``: its name and
    ``time.perf_counter`` at its end), e.g. ``imports 2,110 ms, the model 310 ms``."""
    ends = [started, *(end for _, end in laps)]
    return ", ".join(
        f"{name} {(end - before) * 1000:,.0f} ms"
        for (name, end), before in zip(laps, ends, strict=False)
    )


def _infer_default_batch(
    app_args: Sequence[str], option: ModelOption, device: torch.device, hosted: bool
) -> bool:
    """Read and infer the batch the page opens on, into the page's own caches, so the first
    session finds it done instead of reading and inferring while its browser loads the page on
    the same cores (a hosted page keeps no store of it, as the page itself). Only from a copy
    already on disk (``$GRADPICK_CIFAR10_DIR``, or a finished download in the cache folder): a
    download is the page's to show, with its progress; and a page opened on a store
    (``--outputs``) infers nothing. Returns whether it inferred the batch."""
    from gradpick.data import CIFAR10_DIR_ENV
    from gradpick.data.cifar10_download import CIFAR10_FILES, CIFAR10_FOLDER
    from gradpick.data.sources import cache_dir
    from gradpick.ui import cache, config, page, service

    downloaded = cache_dir() / "cifar10" / CIFAR10_FOLDER
    if not os.environ.get(CIFAR10_DIR_ENV) and not all(
        (downloaded / name).is_file() for name in CIFAR10_FILES
    ):
        return False
    try:
        if config.parse_outputs(list(app_args)):
            return False
        base = service.DataChoice(hosted=hosted)  # the sidebar's first source and split
        source = cache.source(base.source_key, base)
        cap = config.HOSTED_MAX_BATCH_SIZE if hosted else None
        choice = service.default_batch(base, source, cap)
        page.infer_choice(choice, source, option, device, keep=not hosted)
    except (GradpickError, OSError):
        return False  # the page opens the same batch and explains what went wrong
    return True


STORE_CHECK_WAIT_S = 30.0
"""How long the warm-up waits for the folder check of a store named on the command line
before it lets the server serve; a longer check (a network disk) goes on beside the page,
which says so."""


def _open_store(
    app_args: Sequence[str], option: ModelOption, device: torch.device, hosted: bool
) -> bool:
    """Open the store the page opens on (``--outputs DIR``) into the page's caches as its
    first page run would (``page.open_stored``: the store, its batch's images and outputs, its
    folder's check), wait up to ``STORE_CHECK_WAIT_S`` for the check's answer, and score its
    triage where its neighbours are kept (``_triage_kept``). At a million images the check is
    a ``stat`` per file, 6-10 s on two cores, and the first page would otherwise show
    "checking" and run again when it answers, beside its visitor's browser. A hosted page
    opens no store. Returns whether it opened one; a store the page
    cannot open is left to the page, which explains why."""
    from gradpick.ui import cache, config, page, service
    from gradpick.ui.panels import sidebar

    if hosted:
        return False
    try:
        outputs = config.parse_outputs(list(app_args))
        if not outputs:
            return False
        base = service.DataChoice(kind="stored", outputs=outputs)
        source = cache.source(base.source_key, base)
        choice = service.default_batch(base, source, held=sidebar.stored_batch(base))
        opening = page.open_stored(choice, source, option, device)
        opening.check.fingerprint(STORE_CHECK_WAIT_S)
    except (GradpickError, OSError):
        return False
    _triage_kept(opening.result)
    return True


def _triage_kept(result: object) -> None:
    """Score the triage of a store's rows (``cache.stored_triage``, shared by every session)
    when their neighbours are kept beside it: 1.2 s at 1,280,000 rows, which a visitor's first
    Triage tab would otherwise wait for. Never a neighbour search (minutes at a million rows),
    and nothing for a store the Triage tab does not triage (unlabelled, or a sigmoid model's):
    the tab says why."""
    from gradpick.outputs.stores import StoredResult
    from gradpick.triage import ranking
    from gradpick.ui import cache

    if not isinstance(result, StoredResult) or result.labels is None or result.output != "softmax":
        return
    with contextlib.suppress(GradpickError, OSError, ValueError):
        if ranking.neighbours_kept(result):
            cache.stored_triage(result.rows_key, result)
