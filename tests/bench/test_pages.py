"""The browser benchmarks' shared phase runner: a failing phase is named and the run goes on."""

from __future__ import annotations

import asyncio

import pytest

from gradpick.bench.pages import isolated_points, run_phase


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


def _points(*places: tuple[float, float]) -> dict[str, list[dict[str, float]]]:
    return {"points": [{"x": x, "y": y, "index": i} for i, (x, y) in enumerate(places)]}


def test_isolated_points_are_the_markers_with_none_within_the_distance_left_to_right() -> None:
    # 0 and 1 are 9 px apart, 1 and 2 exactly 10 (not within), 3 alone; 4 and 5 are 2 px apart
    # across a bucket edge
    layout = _points((100, 100), (109, 100), (119, 100), (40, 300), (300, 39), (300, 41))
    assert [p["index"] for p in isolated_points(layout, distance=10)] == [3, 2]


def test_a_scatter_where_every_marker_is_crowded_gives_the_least_crowded_first() -> None:
    # three in a clump (2 neighbours each), a pair (1 each): the pair first
    layout = _points((0, 0), (1, 1), (2, 2), (50, 50), (55, 55))
    assert [p["index"] for p in isolated_points(layout, distance=10)] == [3, 4, 0, 1, 2]
