"""``python -m gradpick.ui.launch app.py [streamlit options] [-- app options]``: the explorer's
server, with its heavy imports done and its default model loaded before it serves a page.

``streamlit run app.py`` starts serving at once, and the first session's script then imports
torch, the panels, plotly and pandas and loads the model (3-5 s on two busy cores) while its
visitor waits. This does that work first, in the server's own process, then hands the same
arguments to Streamlit's ``run`` command in that process: the first session's script finds the
modules in ``sys.modules`` and the model in ``st.cache_resource``'s cache. The server answers its
health check only once this is done, so nothing that waits for a healthy server waits longer.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from gradpick.errors import GradpickError, InputError

if TYPE_CHECKING:  # torch and the panels are imported in ``warm``, timed
    import torch

    from gradpick.ui.service import ModelOption

__all__ = ["launch", "warm"]

_QUIET_LOGGERS = (
    "streamlit.runtime.caching.cache_data_api",
    "streamlit.runtime.scriptrunner_utils.script_run_context",
)
"""Outside a running server, Streamlit warns that its caches and elements have no session:
expected here, where no session exists yet."""


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


def warm(app_args: Sequence[str]) -> float:
    """Import torch and every module a page run imports, load the model the page opens on (the
    first built-in one, unless ``app_args`` name the user's own), run it once, read and infer
    the page's default batch where that is local (``_infer_default_batch``), on the CPU set up
    the memory profiler the page measures clicks with, and freeze all that out of the garbage
    collector's passes (``process.freeze_loaded_objects``); then let this thread's OpenMP
    workers go (``process.release_openmp_threads``); returns milliseconds.

    The allocator's policy is set first (``process.apply_memory_policy``): on the user's own
    machine, freed memory is kept for the next batch (half again as fast).
    """
    started = time.perf_counter()
    from gradpick.runtime import process
    from gradpick.ui import config

    process.apply_memory_policy(config.hosted_mode(os.environ.get(config.HOSTED_ENV), Path.cwd()))
    with _quiet_streamlit():
        import torch  # the slowest import of a page run

        import gradpick.ui.page  # noqa: F401 (every panel, plotly, pandas, the caches)
        from gradpick.outputs.inference import infer
        from gradpick.outputs.stores import INFERENCE_BATCH_SIZE
        from gradpick.runtime import devices, measure
        from gradpick.ui import cache, service

        try:
            own = config.parse_user_model(list(app_args), os.environ)
        except InputError:
            own = None  # the page explains the bad option; the built-in model is its fallback
        if own is None:
            option = service.model_options()[0]
            device = str(devices.resolve_device("auto"))
            served = cache.served(option.identity, device, option)
            # One pass at the app's inference batch size: the first pass of a process picks
            # its kernels and grows its allocator, which would slow the first page's inference.
            zeros = torch.zeros(INFERENCE_BATCH_SIZE, 3, *served.spec.size, dtype=torch.uint8)
            infer(served.module, zeros, batch_size=INFERENCE_BATCH_SIZE, features=True)
            _infer_default_batch(app_args, option, torch.device(device))
        if devices.resolve_device("auto").type == "cpu":  # the page measures clicks' memory
            measure.warm_profiler()  # with the profiler, whose first use takes seconds
        process.freeze_loaded_objects()  # out of the full collection after every script run
    process.release_openmp_threads()  # this thread infers no more: page runs have their own
    return (time.perf_counter() - started) * 1000


def _infer_default_batch(
    app_args: Sequence[str], option: ModelOption, device: torch.device
) -> None:
    """Read and infer the batch the page opens on, into the page's own caches, so the first
    session finds it done instead of reading and inferring while its browser loads the page on
    the same cores. Only for a local page on a local CIFAR-10 copy: a hosted page starts with
    the page's own memory settings, a download is the page's to show, and a page opened on a
    store (``--outputs``) infers nothing."""
    from gradpick.data import CIFAR10_DIR_ENV
    from gradpick.ui import cache, config, page, service

    if config.hosted_mode(os.environ.get(config.HOSTED_ENV), Path.cwd()):
        return
    if not os.environ.get(CIFAR10_DIR_ENV):
        return
    try:
        if config.parse_outputs(list(app_args)):
            return
        base = service.DataChoice()  # the sidebar's first source and split
        source = cache.source(base.source_key, base)
        page.infer_choice(service.default_batch(base, source), source, option, device, keep=True)
    except (GradpickError, OSError):
        return  # the page opens the same batch and explains what went wrong


def launch(argv: Sequence[str]) -> None:
    """``warm``, then ``streamlit run`` with ``argv`` (the script, Streamlit's options, and the
    app's own after ``--``) in this process."""
    from streamlit.web import cli

    args = list(argv)
    app_args = args[args.index("--") + 1 :] if "--" in args else []
    took = warm(app_args)
    print(f"gradpick: imports and the default model ready in {took:,.0f} ms", flush=True)
    cli.main(args=["run", *args], prog_name="streamlit")


if __name__ == "__main__":
    launch(sys.argv[1:] or ["app.py"])
