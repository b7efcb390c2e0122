"""Device choice: cuda, then mps, then cpu, a reason for each missing one; models never moved."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from gradpick.errors import DeviceUnavailableError
from gradpick.runtime import devices
from gradpick.runtime.devices import (
    device_availability,
    device_for,
    model_device,
    resolve_device,
    synchronize,
)


def test_availability_gives_a_reason_for_each_missing_device() -> None:
    availability = device_availability()
    assert set(availability) == {"cuda", "mps", "cpu"}
    assert availability["cpu"] is None
    assert (availability["cuda"] is None) == torch.cuda.is_available()
    for reason in availability.values():
        assert reason is None or len(reason) > 10


@pytest.mark.parametrize(
    ("available", "expected"),
    [({"cuda", "mps"}, "cuda"), ({"mps"}, "mps"), (set(), "cpu")],
)
def test_auto_prefers_cuda_then_mps_then_cpu(
    monkeypatch: pytest.MonkeyPatch, available: set[str], expected: str
) -> None:
    monkeypatch.setattr(
        devices,
        "device_availability",
        lambda: {k: None if k in available | {"cpu"} else "absent" for k in ("cuda", "mps", "cpu")},
    )
    assert resolve_device("auto") == torch.device(expected)
    assert resolve_device(None) == torch.device(expected)


def test_cpu_is_always_available() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_a_missing_cuda_device_is_explained() -> None:
    with pytest.raises(DeviceUnavailableError, match="'cuda' is not available: no CUDA.*'cpu'"):
        resolve_device("cuda")


def test_a_cuda_index_beyond_the_visible_devices_is_explained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(devices, "device_availability", lambda: {"cuda": None, "cpu": None})
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(DeviceUnavailableError, match="only 1 CUDA device"):
        resolve_device("cuda:3")


def test_a_misspelt_device_lists_the_choices() -> None:
    with pytest.raises(DeviceUnavailableError, match="'gpu' is not a device name.*auto, cuda"):
        resolve_device("gpu")


def test_synchronize_waits_on_the_devices_own_backend_and_not_for_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CPU runs eagerly, so there is nothing to wait for; CUDA and MPS queue kernels."""
    waited: list[object] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: waited.append("mps"))
    synchronize(torch.device("cpu"))
    assert waited == []
    synchronize(torch.device("cuda", 1))
    assert waited == [torch.device("cuda", 1)]
    synchronize(torch.device("mps"))
    assert waited == [torch.device("cuda", 1), "mps"]


def test_model_device_and_device_for() -> None:
    model = nn.Linear(2, 2)
    assert model_device(model) == torch.device("cpu")
    assert model_device(nn.ReLU()) == torch.device("cpu")  # stateless
    assert device_for(model, None) == torch.device("cpu")
    assert device_for(model, "cpu") == torch.device("cpu")


def test_device_for_refuses_to_move_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "device_availability", lambda: {"cuda": None, "cpu": None})
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    model = nn.Linear(2, 2)
    with pytest.raises(DeviceUnavailableError, match="lives on cpu.*device='cuda'"):
        device_for(model, "cuda")
    assert model_device(model) == torch.device("cpu")
    # a stateless model can run anywhere
    assert device_for(nn.ReLU(), "cuda") == torch.device("cuda")


def test_cpu_threads_sets_the_count_for_the_block_and_restores_it() -> None:
    before = torch.get_num_threads()
    with devices.cpu_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with devices.cpu_threads(None):
        assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="inside"), devices.cpu_threads(1):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before


def test_a_run_started_during_another_threads_block_keeps_the_process_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch hands a new thread the count last set anywhere: one started inside another
    thread's block took that block's count, and its own block then left the process at it for
    every later thread. Settled first, as each page run is, it cannot."""
    suite = torch.get_num_threads()
    monkeypatch.setattr(devices, "PROCESS_CPU_THREADS", 2)  # as a server on two cores
    torch.set_num_threads(2)
    try:
        counts = _run_during_another_block()
    finally:
        torch.set_num_threads(suite)
    assert counts == {"run": 2, "later": 2}


def _run_during_another_block() -> dict[str, int]:
    """A page run's thread started inside another thread's one-thread block, and ending after
    it; then its count, and a later new thread's."""
    holding, run_inside, holder_done = threading.Event(), threading.Event(), threading.Event()
    counts: dict[str, int] = {}

    def hold() -> None:  # another session's gradient step
        with devices.cpu_threads(1):
            holding.set()
            run_inside.wait(10)
        holder_done.set()

    def run() -> None:  # a page run, on its new thread
        holding.wait(10)
        devices.settle_cpu_threads()
        with devices.cpu_threads(1):
            run_inside.set()
            holder_done.wait(10)
        counts["run"] = torch.get_num_threads()

    threads = [threading.Thread(target=hold), threading.Thread(target=run)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    later = threading.Thread(target=lambda: counts.setdefault("later", torch.get_num_threads()))
    later.start()
    later.join(20)
    return counts
