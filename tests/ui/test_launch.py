"""The launcher: its server is healthy, and a session's first run finds torch, the panels, the
default model, (on the CPU) the memory profiler, the loaded objects frozen out of the garbage
collector's passes and, on a local CIFAR-10 copy, the default batch read and inferred, already in
the server's process (``gradpick.ui.warmup``, run before it serves)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradpick import data
from gradpick.bench.serving import free_port, wait_healthy
from gradpick.ui import config

PROBE = """
import json, os, sys
from pathlib import Path

found = {"torch": "torch" in sys.modules, "page": "gradpick.ui.page" in sys.modules}
from gradpick.runtime import devices
from gradpick.runtime import measure

found["profiler"] = measure.profiler_ready()
from gradpick.ui import cache, service

def refuse(*args, **kwargs):
    raise AssertionError("the model was loaded again")

service.load_model = refuse  # a cache hit never calls it
option = service.model_options()[0]
try:
    cache.served(option.identity, str(devices.resolve_device("auto")), option)
    found["model"] = True
except AssertionError:
    found["model"] = False
import gc
from gradpick.outputs import stores as stored
from gradpick.ui import page

found["frozen"] = gc.get_freeze_count() > 100_000
service.read_batch = refuse  # what a cache miss of the batch calls
stored.infer_and_keep = refuse  # and of its outputs
from gradpick.ui import config

hosted = config.hosted_mode(os.environ.get(config.HOSTED_ENV), Path.cwd())
base = service.DataChoice(hosted=hosted)  # as the page opens it: a hosted page's own key
source = cache.source(base.source_key, base)
choice = service.default_batch(base, source, config.HOSTED_MAX_BATCH_SIZE if hosted else None)
try:
    page.infer_choice(choice, source, option, devices.resolve_device("auto"), keep=not hosted)
    found["batch"] = True
except AssertionError:
    found["batch"] = False
Path(os.environ["PROBE_OUT"]).write_text(json.dumps(found))
"""
"""Run as the served script: what the server's process held when a session's run began."""


async def _start_session(port: int) -> None:
    """Open a session over Streamlit's websocket and ask for a run, as a browser does."""
    websockets = pytest.importorskip("websockets")
    from streamlit.proto.BackMsg_pb2 import BackMsg

    message = BackMsg()
    message.rerun_script.query_string = ""
    async with websockets.connect(
        f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"]
    ) as socket:
        await socket.send(message.SerializeToString())
        for _ in range(50):  # until the run's messages stop coming
            try:
                await asyncio.wait_for(socket.recv(), 5)
            except TimeoutError:
                return


@pytest.mark.parametrize("hosted", [False, True])
def test_the_first_run_finds_torch_the_panels_the_model_and_the_batch_loaded(
    tmp_path: Path, generated_folder: Path, hosted: bool
) -> None:
    """A hosted page finds its first batch inferred too, with the hosted memory settings."""
    script, out = tmp_path / "probe.py", tmp_path / "found.json"
    script.write_text(PROBE)
    port = free_port()
    command = [sys.executable, "-m", "gradpick.ui.launch", str(script)]
    command += ["--server.port", str(port), "--server.headless", "true"]
    command += ["--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    env = {**os.environ, "PROBE_OUT": str(out), "OMP_NUM_THREADS": "1"}
    env |= {data.CIFAR10_DIR_ENV: str(generated_folder), "GRADPICK_CACHE_DIR": str(tmp_path)}
    env[config.HOSTED_ENV] = "1" if hosted else "0"
    server = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", server)
        asyncio.run(_start_session(port))
        found = json.loads(out.read_text())
        # A hosted page measures no memory unless asked: its profiler is left cold.
        expected = {"torch": True, "page": True, "model": True, "profiler": not hosted}
        assert found == {**expected, "frozen": True, "batch": True}
    finally:
        server.terminate()
        log = server.communicate(timeout=15)[0].decode()
    assert "imports and the default model ready" in log
    assert "gradpick: warm-up: began (launcher)" in log  # the same work a plain server begins
