"""The server process's settings: the allocator's, applied once and only where glibc has it,
and the loaded objects frozen out of the garbage collector's passes."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from gradpick.runtime import process

ALLOCATE = """
import ctypes
libc = ctypes.CDLL("libc.so.6")
def allocate(size):  # as torch's CPU allocator takes a tensor's storage, written through
    pointer = ctypes.c_void_p()
    assert libc.posix_memalign(ctypes.byref(pointer), 64, ctypes.c_size_t(size)) == 0
    ctypes.memset(pointer, 1, size)
    return pointer
"""
"""The scripts' blocks: glibc's ``posix_memalign`` with torch's 64-byte alignment, the call
torch's CPU allocator makes for each tensor, so the scripts measure the allocator the app's
tensors meet without each paying torch's import (about 3 s on two busy cores)."""

GROWTH_SCRIPT = (
    ALLOCATE
    + """
import sys
from gradpick.runtime import process
def rss():
    with open('/proc/self/status') as status:
        return next(int(l.split()[1]) for l in status if l.startswith('VmRSS')) // 1024
applied = process.return_freed_memory_promptly() if sys.argv[1] == "apply" else None
kept, before = [], rss()
for _ in range(16):
    block = allocate(8 * 1024 * 1024)  # like a batch's float copy
    kept.append(allocate(4000))  # a small block that outlives it, as a cache entry does
    libc.free(block)
print(applied, rss() - before)
"""
)


def _resident_growth_mb(apply: bool) -> tuple[str, int]:
    command = [sys.executable, "-c", GROWTH_SCRIPT, "apply" if apply else "default"]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    applied, growth = output.split()
    return applied, int(growth)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")
def test_freed_large_blocks_leave_resident_memory() -> None:
    """Sixteen freed 8 MB blocks with small survivors after them: glibc's default keeps most of them
    resident (its raised threshold puts them in the heap, where the survivors pin them); with
    the setting each goes back to the system."""
    # glibc's default does not pin the blocks every time (its heap layout varies from run to
    # run), so the default's effect is the most of three runs.
    default_growth = max(_resident_growth_mb(apply=False)[1] for _ in range(3))
    applied, growth = _resident_growth_mb(apply=True)
    assert applied == "True"
    assert default_growth >= 24, f"the default kept only {default_growth} MB: nothing to show"
    assert growth < 8 and growth * 3 < default_growth, (
        f"{growth} MB stayed resident after freeing (without the setting: {default_growth} MB)"
    )


@pytest.mark.parametrize("took_effect", [True, False])
def test_it_is_applied_once_even_from_several_threads(
    took_effect: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every page run asks for the setting; glibc is told once, and every caller then gets
    that first answer, also when it said the setting did not take effect."""
    applied: list[tuple[int, int]] = []

    def mallopt(option: int, value: int) -> bool:
        applied.append((option, value))
        return took_effect

    monkeypatch.setattr(process, "_APPLIED", [])
    monkeypatch.setattr(process, "_mallopt", mallopt)
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda _: process.return_freed_memory_promptly(), range(16)))
    assert applied == [(process._M_MMAP_THRESHOLD, process.MMAP_THRESHOLD)]
    assert answers == [took_effect] * 16


@pytest.mark.parametrize("hosted", [True, False])
def test_the_first_policy_asked_for_is_the_process_s(
    hosted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hosted server returns freed memory, a local one keeps it for reuse (both thresholds);
    a later call for the other policy changes nothing and says it is not in effect."""
    applied: list[tuple[int, int]] = []
    monkeypatch.setattr(process, "_APPLIED", [])
    monkeypatch.setattr(process, "_mallopt", lambda *setting: applied.append(setting) or True)
    assert process.apply_memory_policy(hosted)
    prompt = [(process._M_MMAP_THRESHOLD, process.MMAP_THRESHOLD)]
    reuse = [
        (process._M_MMAP_THRESHOLD, process.REUSE_MMAP_THRESHOLD),
        (process._M_TRIM_THRESHOLD, process.REUSE_TRIM_THRESHOLD),
        (process._M_ARENA_MAX, 1),
    ]
    assert applied == (prompt if hosted else reuse)
    assert process.apply_memory_policy(not hosted) is False
    assert process.apply_memory_policy(hosted) is True
    assert len(applied) == len(prompt if hosted else reuse)


FAULTS_SCRIPT = (
    ALLOCATE
    + """
import resource, sys, threading
from gradpick.runtime import process
policies = {"reuse": process.keep_freed_memory_for_reuse,
            "prompt": process.return_freed_memory_promptly}
assert policies[sys.argv[1]]()
def forward():  # several 8 MB activations alive at once, all freed at its end
    blocks = [allocate(8 * 1024 * 1024) for _ in range(6)]
    for block in blocks:
        libc.free(block)
def batch():  # on the main thread, or in a thread of its own as each page run is
    if sys.argv[2] == "main":
        return forward()
    thread = threading.Thread(target=forward)
    thread.start()
    thread.join()
batch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(8):
    batch()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")
@pytest.mark.parametrize("thread", ["main", "own"])
def test_kept_for_reuse_the_next_batch_takes_the_freed_memory_back(thread: str) -> None:
    """Eight batches of six 8 MB activations after a first, on the main thread or each in a
    thread of its own: returned promptly, every block faults in all of its pages again; kept
    for reuse, the next batch mostly takes the freed memory back without a fault, also from
    another thread (a heap per thread faulted in about half of them again). (glibc's default
    lies anywhere between, 26,000 to 96,000 faults here, as the heap's layout has it: not
    asserted on.)"""
    faults = {}
    for policy in ("reuse", "prompt"):
        command = [sys.executable, "-c", FAULTS_SCRIPT, policy, thread]
        run = subprocess.run(command, capture_output=True, text=True, check=True)
        faults[policy] = int(run.stdout)
    assert faults["prompt"] >= 8 * 6 * 2048 * 0.9, faults  # every page of every block
    # kept: 10,240-20,480 faults on the main thread (once 34,817 in a full run of the suite;
    # torch's own tensors: 12,288-24,576), 6,155-8,204 in a thread of its own; promptly: 98,352
    assert faults["reuse"] * 2 < faults["prompt"], faults


FREEZE_SCRIPT = """
import gc, json, weakref
import gradpick.ui.page  # torch, plotly, pandas, streamlit: what the explorer's server holds
from gradpick.runtime import process
first = process.freeze_loaded_objects()
frozen = gc.get_freeze_count()
class Node:
    pass
made = [object() for _ in range(1000)]  # alive after the freeze: left to the collector
again = process.freeze_loaded_objects()
tracked_before_leftovers = len(gc.get_objects())
# What a first page run leaves alive (60,000 objects) and its garbage (a cycle), then the
# leftovers' freeze as that run ends.
kept = [[index] for index in range(60_000)]
garbage = Node(); garbage.me = garbage; dropped = weakref.ref(garbage); del garbage
leftovers = process.freeze_first_run_leftovers()
frozen_with_leftovers = gc.get_freeze_count()
leftovers_again = process.freeze_first_run_leftovers()
cycle = Node(); cycle.me = cycle; alive = weakref.ref(cycle); del cycle
print(json.dumps({"first": first, "frozen": frozen, "again": again,
                  "tracked_before_leftovers": tracked_before_leftovers,
                  "leftovers": leftovers, "leftovers_again": leftovers_again,
                  "garbage_freed": dropped() is None,
                  "frozen_with_leftovers": frozen_with_leftovers,
                  "collected": gc.collect(2), "cycle_freed": alive() is None,
                  "tracked": len(gc.get_objects())}))
"""


def test_the_loaded_objects_are_frozen_once_and_later_garbage_is_still_collected() -> None:
    """What the server imported leaves the collector's passes (Streamlit runs a full one after
    every script run), and so does what the first page run leaves alive, each once; the first
    run's garbage is collected rather than frozen, and a cycle made later is collected too."""
    run = subprocess.run(
        [sys.executable, "-c", FREEZE_SCRIPT], capture_output=True, text=True, check=True
    )
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["first"] > 100_000  # the explorer's modules alone hold this many objects
    assert found["frozen"] >= found["first"] - 100  # the collection before freezing may free a few
    assert found["again"] == found["first"]
    assert found["garbage_freed"]  # the first run's garbage, collected before the freeze
    # Everything tracked before, the 60,000 kept lists among it, joins the frozen objects.
    assert found["leftovers"] >= found["tracked_before_leftovers"] + 60_000 - 100
    assert found["frozen_with_leftovers"] >= found["frozen"] + found["leftovers"] - 100
    assert found["leftovers_again"] == found["leftovers"]  # once per process
    assert found["cycle_freed"] and found["collected"] >= 1
    assert found["tracked"] < 1_000  # a full pass now walks only what came after both freezes


RELEASE_SCRIPT = """
import json, os, torch
from gradpick.runtime import process
torch.set_num_threads(2)
def threads():
    return len(os.listdir("/proc/self/task"))
def parallel_step():  # large enough for torch to split it over its OpenMP team
    return float(torch.ones(1 << 22).exp_().sum())
before = threads()
parallel_step()
with_team = threads()
released = process.release_openmp_threads()
after = threads()
value = parallel_step()
print(json.dumps({"before": before, "with_team": with_team, "released": released,
                  "after": after, "again": threads(), "value": value}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
def test_the_calling_thread_s_openmp_workers_are_let_go_and_come_back_when_needed() -> None:
    """A team of two is one worker beside the calling thread; released, it is gone, and the
    next parallel step starts it again with the same result."""
    run = subprocess.run(
        [sys.executable, "-c", RELEASE_SCRIPT], capture_output=True, text=True, check=True
    )
    found = json.loads(run.stdout)
    assert found["released"] is True
    assert found["with_team"] == found["before"] + 1, found
    assert found["after"] == found["before"], found
    assert found["again"] == found["with_team"], found
    assert found["value"] == pytest.approx(float(1 << 22) * 2.718281828459045, rel=1e-5)


def test_without_openmp_5_nothing_is_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime without ``omp_pause_resource_all`` (or none loaded) is left as it is."""
    monkeypatch.setattr(process.ctypes, "CDLL", lambda name: object())
    assert process.release_openmp_threads() is False
