"""The launcher: its server is healthy, and a session's first run finds torch, the panels, the
default model and (on the CPU) the memory profiler already set up in the server's process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradpick.bench.serving import free_port, wait_healthy

PROBE = """
import json, os, sys
from pathlib import Path

found = {"torch": "torch" in sys.modules, "page": "gradpick.ui.page" in sys.modules}
from gradpick import devices, measure

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


def test_the_first_run_finds_torch_the_panels_and_the_model_loaded(tmp_path: Path) -> None:
    script, out = tmp_path / "probe.py", tmp_path / "found.json"
    script.write_text(PROBE)
    port = free_port()
    command = [sys.executable, "-m", "gradpick.ui.launch", str(script)]
    command += ["--server.port", str(port), "--server.headless", "true"]
    command += ["--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    env = {**os.environ, "PROBE_OUT": str(out), "OMP_NUM_THREADS": "1"}
    server = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", server)
        asyncio.run(_start_session(port))
        found = json.loads(out.read_text())
        assert found == {"torch": True, "page": True, "model": True, "profiler": True}
    finally:
        server.terminate()
        log = server.communicate(timeout=15)[0].decode()
    assert "imports and the default model ready" in log
