"""The progress bar of the cached steps: few redraws, the last one always."""

from __future__ import annotations

from typing import Any

import pytest

from gradpick.ui import cache


class _Bar:
    def __init__(self, drawn: list[float]) -> None:
        self.drawn = drawn

    def progress(self, fraction: float, text: str = "") -> None:
        self.drawn.append(fraction)

    def empty(self) -> None:
        pass


def test_a_bar_redraws_at_most_once_per_interval_and_always_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drawn: list[float] = []
    clock = iter(step * 0.1 for step in range(1000))  # each update 0.1 s after the last
    monkeypatch.setattr(cache.time, "monotonic", lambda: next(clock))

    def first(fraction: float, text: str = "") -> Any:
        drawn.append(fraction)
        return _Bar(drawn)

    monkeypatch.setattr(cache.st, "progress", first)
    bar = cache.ProgressBar("Inference", threshold=10, interval=0.5)
    for done in range(0, 10_001, 100):  # 101 updates over 10 s
        bar(done, 10_000)
    # 10 s at one redraw per 0.5 s, plus the last update
    assert len(drawn) == 21
    assert drawn[0] == 0.0 and drawn[-1] == 1.0
    assert drawn == sorted(drawn)


def test_a_batch_is_read_once_and_shared_not_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every session and run gets the one batch read (a copy per run would unpickle all its
    pixels each time)."""
    reads: list[int] = []

    def read(source: Any, choice: Any, progress: Any = None, fingerprint: Any = None) -> Any:
        reads.append(1)
        return object()

    monkeypatch.setattr(cache.service, "read_batch", read)
    cache.batch.clear()
    first = cache.batch("shared-batch-key", None, None)
    assert cache.batch("shared-batch-key", None, None) is first and reads == [1]
    cache.batch.clear()
