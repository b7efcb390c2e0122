"""The distributed benchmark's table (its Ray run is ``gradpick bench-distributed``; its figures
are never asserted on)."""

from __future__ import annotations

from gradpick.bench.distributed import BenchRow, bench_table


def test_the_bench_table_compares_on_the_same_cores_and_per_core():
    rows = [
        BenchRow("in-process", "1 process, 1 torch thread(s)", 1, 1000, 10.0, 900.0),
        BenchRow("in-process", "1 process, 2 torch thread(s)", 2, 1000, 8.0, 950.0),
        BenchRow("ray", "2 worker(s) x 1 CPU", 2, 1000, 6.0, 800.0, 1200.0, 2000.0, 9),
    ]
    lines = bench_table(rows).splitlines()
    assert lines[2].split("|")[5:8] == [" 100 ", " 0.80x ", " 1.00 "]
    assert lines[4].split("|")[5:8] == [" 167 ", " 1.33x ", " 0.83 "]
    assert "| 1,200 | 2,000 | 9.0 |" in lines[4]
