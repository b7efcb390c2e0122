"""The browser benchmarks' shared phase runner: a failing phase is named and the run goes on."""

from __future__ import annotations

import asyncio

import pytest

from gradpick.bench.pages import run_phase


def test_a_failing_phase_is_recorded_by_name_and_the_next_one_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    failures: list[str] = []
    ran: list[str] = []

    async def times_out() -> None:
        raise TimeoutError("Timeout 30000ms exceeded.\n=== logs ===")

    async def clicks() -> None:
        ran.append("clicks")

    async def both() -> None:
        await run_phase("explorer bench", "views", times_out(), failures)
        await run_phase("explorer bench", "clicks", clicks(), failures)

    asyncio.run(both())
    assert failures == ["views: TimeoutError: Timeout 30000ms exceeded."]
    assert ran == ["clicks"]
    assert capsys.readouterr().err == "explorer bench: views\nexplorer bench: clicks\n"
