"""The server process's settings: the allocator's, applied once and only where glibc has it,
and the loaded objects frozen out of the garbage collector's passes."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from gradpick import process

GROWTH_SCRIPT = """
import sys, torch
from gradpick import process
def rss():
    with open('/proc/self/status') as status:
        return next(int(l.split()[1]) for l in status if l.startswith('VmRSS')) // 1024
applied = process.return_freed_memory_promptly() if sys.argv[1] == "apply" else None
torch.ones(1000).add_(1)  # page in the code a first tensor op runs, before the baseline
kept, before = [], rss()
for _ in range(16):
    block = torch.ones(2 * 1024 * 1024)  # 8 MB, like a batch's float copy, written
    kept.append(torch.ones(1000))  # a small object that outlives it, as a cache entry does
    del block
print(applied, rss() - before)
"""


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
    applied: list[int] = []

    def set_threshold(size: int) -> bool:
        applied.append(size)
        return took_effect

    monkeypatch.setattr(process, "_APPLIED", [])
    monkeypatch.setattr(process, "_set_mmap_threshold", set_threshold)
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda _: process.return_freed_memory_promptly(), range(16)))
    assert applied == [process.MMAP_THRESHOLD]
    assert answers == [took_effect] * 16


FREEZE_SCRIPT = """
import gc, json, weakref
import gradpick.ui.page  # torch, plotly, pandas, streamlit: what the explorer's server holds
from gradpick import process
first = process.freeze_loaded_objects()
frozen = gc.get_freeze_count()
class Node:
    pass
made = [object() for _ in range(1000)]  # alive after the freeze: left to the collector
again = process.freeze_loaded_objects()
cycle = Node(); cycle.me = cycle; alive = weakref.ref(cycle); del cycle
print(json.dumps({"first": first, "frozen": frozen, "again": again,
                  "frozen_after": gc.get_freeze_count(), "collected": gc.collect(2),
                  "cycle_freed": alive() is None, "tracked": len(gc.get_objects())}))
"""


def test_the_loaded_objects_are_frozen_once_and_later_garbage_is_still_collected() -> None:
    """What the server imported leaves the collector's passes (Streamlit runs a full one after
    every script run); objects made later, a cycle among them, are collected as before."""
    run = subprocess.run(
        [sys.executable, "-c", FREEZE_SCRIPT], capture_output=True, text=True, check=True
    )
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["first"] > 100_000  # the explorer's modules alone hold this many objects
    assert found["frozen"] >= found["first"] - 100  # the collection before freezing may free a few
    assert found["again"] == found["first"] and found["frozen_after"] == found["frozen"]
    assert found["cycle_freed"] and found["collected"] >= 1
    assert found["tracked"] < 20_000  # a full pass now walks only what came after the freeze
