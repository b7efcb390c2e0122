"""The explorer's start-up work (``gradpick.ui.warmup``): ``app.py`` is an ``st.App`` that
``streamlit run`` serves with the warm-up as its start-up hook; the hook returns once the first
page's part of the work is done, not before, and the rest goes on; the work runs once per
process; a page run waits for the model and the default batch and for nothing after them; a
failed warm-up lets the page do the work; and a page run on a process without the hook
(AppTest here) starts it and finds the batch ready."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from streamlit.testing.v1 import AppTest
from streamlit.web.server.app_discovery import discover_asgi_app

from gradpick.ui import warmup

APP = Path(__file__).resolve().parents[2] / "app.py"


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as if no warm-up had started yet (the real one, if any, is put back)."""
    monkeypatch.setattr(warmup, "_CURRENT", [])
    yield


class Gate:
    """A stand-in for ``warm`` that sets ``page_ready`` when ``page`` opens, then holds the
    rest of the work (the profiler) until ``rest`` opens; counts its calls."""

    def __init__(self) -> None:
        self.page = threading.Event()
        self.rest = threading.Event()
        self.calls: list[list[str]] = []
        self.threads: list[int | None] = []

    def __call__(
        self, app_args: Sequence[str], page_ready: threading.Event | None, threads: int | None
    ) -> float:
        self.calls.append(list(app_args))
        self.threads.append(threads)
        assert self.page.wait(60)
        assert page_ready is not None
        page_ready.set()
        assert self.rest.wait(60)
        return 1.0


def test_streamlit_run_serves_app_py_as_an_st_app_with_the_warm_up_as_its_lifespan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = discover_asgi_app(APP)  # what `streamlit run app.py` consults
    assert found.is_asgi_app and found.import_string == "app:app"
    from streamlit import config as streamlit_config
    from streamlit.web.server.starlette.starlette_app import App

    monkeypatch.setattr(streamlit_config, "_main_script_path", str(APP))
    spec = importlib.util.spec_from_file_location("app", APP)  # as uvicorn imports it
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert isinstance(module.app, App)
    assert module.app._user_lifespan is warmup.lifespan
    assert module.app.script_path == APP


def test_the_lifespan_serves_once_the_page_s_part_is_done_and_the_rest_goes_on(
    fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate()
    monkeypatch.setattr(warmup, "warm", gate)
    monkeypatch.setattr("sys.argv", ["app.py", "--model", "tutorial"])
    entered: list[warmup.Warmup | None] = []
    ticks: list[int] = []

    async def tick() -> None:  # the event loop stays free while the hook waits
        while not entered:
            ticks.append(len(ticks))
            await asyncio.sleep(0.01)

    async def serve() -> None:
        ticking = asyncio.create_task(tick())
        async with warmup.lifespan(object()):
            entered.append(warmup.current())  # the server serves from here on
        await ticking

    async def release_the_page_part() -> None:
        while warmup.current() is None or len(ticks) < 5:
            await asyncio.sleep(0.01)
        assert not entered  # the hook still waits for the model and the batch
        gate.page.set()

    async def both() -> None:
        await asyncio.gather(serve(), release_the_page_part())

    asyncio.run(both())
    begun = entered[0]
    assert begun is not None and begun.origin == warmup.SERVER_START
    assert begun.page_ready.is_set() and not begun.done.is_set()  # the profiler's part goes on
    gate.rest.set()
    assert begun.done.wait(60)
    assert gate.calls == [["--model", "tutorial"]]
    assert gate.threads == [None]  # before the server serves: the process's threads
    assert begun.problem is None


def test_the_work_runs_once_per_process_whoever_asks(
    fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate()
    monkeypatch.setattr(warmup, "warm", gate)
    gate.page.set()
    gate.rest.set()
    first = warmup.start([], origin=warmup.LAUNCHER, background=False)
    assert first.done.is_set() and first.page_ms == 1.0
    again = warmup.start(["--model", "x"], origin=warmup.SERVER_START)
    assert again is first and again.origin == warmup.LAUNCHER
    assert gate.calls == [[]]
    assert gate.threads == [None]  # before serving: the process's threads


def test_a_page_waits_for_the_model_and_batch_and_not_for_the_profiler(
    fresh: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = Gate()
    monkeypatch.setattr(warmup, "warm", gate)
    assert warmup.wait_for_page() == 0.0  # nothing started: nothing to wait for
    begun = warmup.start([], origin=warmup.SERVER_START)
    waiting = threading.Thread(target=warmup.wait_for_page)
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive()  # held while the model and batch are not ready
    gate.page.set()
    waiting.join(60)
    assert not waiting.is_alive()
    assert not begun.done.is_set()  # the profiler's part still holds
    warmup.wait_for_page()  # a later run: no second line in the log
    gate.rest.set()
    assert begun.done.wait(60)
    lines = [line for line in capsys.readouterr().out.splitlines() if "first page run" in line]
    assert len(lines) == 1 and "waited" in lines[0]


def test_a_failed_warm_up_lets_the_page_do_the_work(
    fresh: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(
        app_args: Sequence[str], page_ready: threading.Event | None, threads: int | None
    ) -> float:
        raise OSError("disk gone")

    monkeypatch.setattr(warmup, "warm", broken)
    begun = warmup.start([], origin=warmup.SERVER_START)
    assert begun.done.wait(60)
    assert begun.page_ready.is_set()
    assert begun.problem == "OSError: disk gone"
    assert warmup.wait_for_page() == 0.0
    assert f"{warmup.LOG_PREFIX} failed: OSError: disk gone" in capsys.readouterr().out


def test_a_page_run_without_the_hook_starts_the_warm_up_and_finds_its_batch(
    fresh: None, generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AppTest runs app.py as ``__main__`` without a server: the page's first run begins the
    real warm-up, whose inference of the default batch the page then reads from the cache."""
    from gradpick.outputs import stores
    from gradpick.ui import cache

    cache.inference.clear()
    inferred: list[str] = []
    threads: list[int] = []
    real = stores.infer_and_keep

    def counted(*args: object, **kwargs: object) -> object:
        inferred.append(threading.current_thread().name)
        threads.append(torch.get_num_threads())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(stores, "infer_and_keep", counted)
    zero_passes = _count_zero_passes(monkeypatch)
    app = AppTest.from_file(str(APP), default_timeout=240).run()
    assert not app.exception, [e.value for e in app.exception]
    assert {metric.label: metric.value for metric in app.metric}["Images N"] == "64"
    begun = warmup.current()
    assert begun is not None and begun.origin == "first page run"
    assert begun.page_ready.is_set() and begun.problem is None and begun.page_runs == 1
    assert inferred == ["gradpick-warmup"]  # by the warm-up's thread, not again by the page
    assert threads == [1]  # beside the page's run: one thread
    assert begun.done.wait(120)
    assert zero_passes == []  # the default batch's inference warmed the kernels itself


def _count_zero_passes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The shapes of the warm-up's passes over an all-zero batch (``warm`` imports ``infer``
    when it runs, so it finds this stand-in; the stores call their own)."""
    from gradpick.outputs import inference

    shapes: list[tuple[int, ...]] = []
    real = inference.infer

    def counted(model: object, images: torch.Tensor, *args: object, **kwargs: object) -> object:
        if not images.any():
            shapes.append(tuple(images.shape))
        return real(model, images, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(inference, "infer", counted)
    return shapes


def test_without_a_local_default_batch_the_warm_up_warms_the_kernels_on_zeros(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No local copy to read (a download is the page's to show): one pass over zeros at the
    app's inference batch size stands in for the first page's inference."""
    from gradpick.outputs.stores import INFERENCE_BATCH_SIZE
    from gradpick.runtime import process

    monkeypatch.setattr(warmup, "_infer_default_batch", lambda *args: False)
    monkeypatch.setattr(process, "freeze_loaded_objects", lambda: 0)
    monkeypatch.setattr(process, "release_openmp_threads", lambda: False)
    zero_passes = _count_zero_passes(monkeypatch)
    warmup.warm([], threading.Event())
    assert zero_passes == [(INFERENCE_BATCH_SIZE, 3, 32, 32)]


def test_a_page_run_imports_the_charts_only_once_the_warm_up_has_them_whole() -> None:
    """plotly reads pandas from sys.modules: a page's first chart waits for the import in
    progress in the warm-up's thread instead of meeting a half-made module."""
    held = threading.Event()
    release = threading.Event()

    def warm_up_importing() -> None:
        with warmup._CHARTS:
            held.set()
            release.wait(60)

    holder = threading.Thread(target=warm_up_importing)
    holder.start()
    assert held.wait(60)
    page = threading.Thread(target=warmup.import_charts)
    page.start()
    page.join(0.2)
    assert page.is_alive()  # waits while the warm-up imports
    release.set()
    page.join(60)
    holder.join(60)
    assert not page.is_alive()


def test_the_log_splits_the_wait_into_its_stages() -> None:
    laps = [("imports", 12.11), ("the model", 12.42), ("its batch", 13.9)]
    assert warmup._split(10.0, laps) == "imports 2,110 ms, the model 310 ms, its batch 1,480 ms"


def test_each_log_line_is_written_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up's thread and a page run both log: a line written in pieces (``print`` writes
    its newline apart) could be joined to the other thread's line in the server's log."""
    writes: list[str] = []

    class Recorder:
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    monkeypatch.setattr("sys.stdout", Recorder())
    warmup._say("began (server start)")
    assert writes == [f"{warmup.LOG_PREFIX} began (server start)\n"]


def test_a_store_named_on_the_command_line_is_opened_and_checked_before_the_server_serves(
    generated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--outputs DIR``: the warm-up opens the store into the page's caches and waits for its
    folder's check, even where the page would draw beside it (``CHECK_BESIDE_ABOVE``), so the
    first page neither reads the store nor stats its folder again, nor says "checking"."""
    import shutil
    import sys
    import time

    from gradpick import data
    from gradpick.outputs import store_format
    from gradpick.ui import page, service
    from tests.app.test_app import TUTORIAL, no_errors, open_app, store_of_the_stand_in

    folder, out = tmp_path / "images", tmp_path / "outputs"
    shutil.copytree(generated / "test", folder)
    store_of_the_stand_in(folder, out)
    monkeypatch.setattr(page, "CHECK_BESIDE_ABOVE", 0)
    readings: list[Path] = []
    opened: list[str] = []
    fingerprint, open_store = data.FolderSource.fingerprint, store_format.open_store

    def counted_fingerprint(source: data.FolderSource) -> str:  # a slow disk's, once done
        time.sleep(0.5)
        answer = fingerprint(source)
        readings.append(source.root)
        return answer

    def counted_open(path: str | Path, *args: object, **kwargs: object) -> object:
        opened.append(str(path))
        return open_store(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(data.FolderSource, "fingerprint", counted_fingerprint)
    monkeypatch.setattr(store_format, "open_store", counted_open)
    tutorial, cpu = service.ModelOption("tutorial"), torch.device("cpu")
    arguments = ["--outputs", str(out)]
    assert warmup._open_store(arguments, tutorial, cpu, hosted=False)
    assert readings == [folder] and set(opened) == {str(out)}  # its images and its outputs
    read_by_the_warm_up = len(opened)
    monkeypatch.setattr(sys, "argv", ["app.py", *arguments])
    app = open_app(**TUTORIAL)
    no_errors(app)
    captions = [caption.value for caption in app.caption]
    assert any(caption.endswith("not inferred.") for caption in captions), captions
    assert not any("checking that" in caption for caption in captions)
    assert readings == [folder] and len(opened) == read_by_the_warm_up  # nothing read again


def test_the_warm_up_leaves_a_store_it_cannot_open_to_the_page(
    generated: Path, tmp_path: Path
) -> None:
    """A store of another model, a missing one, none named, or a hosted page: nothing opened
    (the page explains what is wrong with a store; a hosted page opens none)."""
    from gradpick.ui import service
    from tests.app.test_app import store_of_the_stand_in

    out = tmp_path / "outputs"
    store_of_the_stand_in(generated / "test", out)
    cpu = torch.device("cpu")
    resnet, tutorial = service.ModelOption("resnet20"), service.ModelOption("tutorial")
    assert not warmup._open_store(["--outputs", str(out)], resnet, cpu, hosted=False)
    assert not warmup._open_store(["--outputs", str(tmp_path / "gone")], tutorial, cpu, False)
    assert not warmup._open_store([], tutorial, cpu, hosted=False)
    assert not warmup._open_store(["--outputs", str(out)], tutorial, cpu, hosted=True)


def test_the_warm_up_scores_a_stores_triage_only_when_its_neighbours_are_kept(
    image_folder_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store's triage is scored before the server serves (into the cache every session's
    Triage tab reads) when its neighbours are kept beside it, never searching them."""
    from gradpick import data
    from gradpick.cli import main
    from gradpick.outputs import stores
    from gradpick.triage import ranking
    from gradpick.ui import cache

    folder = image_folder_factory(10, per_class=4)
    out = tmp_path / "outputs"
    assert main(["infer", "--model", "tutorial", "--data", str(folder), "--out", str(out),
                 "--embeddings"]) == 0  # fmt: skip
    opened = stores.open_stored(str(out), stores.OUTPUT_COLUMNS)
    result = stores.stored_result(opened, data.load_batch(stores.stored_source(opened)))
    scored: list[str] = []
    monkeypatch.setattr(cache, "stored_triage", lambda key, found: scored.append(key))
    searches: list[int] = []
    search = ranking.nearest_neighbours
    monkeypatch.setattr(
        ranking, "nearest_neighbours", lambda *a, **k: searches.append(1) or search(*a, **k)
    )
    warmup._triage_kept(result)
    assert scored == [] and searches == []  # not kept: left to the Triage tab
    ranking.stored_triage(result)  # the tab's first opening searched and kept them
    assert searches == [1]
    warmup._triage_kept(result)
    assert isinstance(result, stores.StoredResult) and scored == [result.rows_key]
    warmup._triage_kept(object())  # outputs held in memory: nothing
    assert scored == [result.rows_key] and searches == [1]
