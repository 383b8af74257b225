"""e2e/bench_pace.py's figures that need no cluster: the 10 s timelines and the medians."""

from __future__ import annotations

from e2e import bench_pace as bp


def test_timelines_count_what_happened_by_each_ten_seconds() -> None:
    # a boundary counts in its own step; the list runs one step past the end
    assert bp._by_10s([0.5, 9.9, 10.0, 10.1, 25.0, 31.0], 33.0) == [3, 4, 5, 6]
    assert bp._by_10s([], 12.0) == [0, 0]
    assert bp._by_10s([3.0, 1.0, 2.0], 0.0) == [3]  # order does not matter


def test_medians_take_the_burst_measure_per_system() -> None:
    def row(system: str, create: float, burst: float) -> dict[str, object]:
        return {"system": system, "create_per_s": create, "running_p99_s": 1.0,
                "burst_running_p99_s": burst, "running_per_s": 50.0,
                "apiserver_cpu_s_create": 1.0, "webhook_mean_ms": "-"}

    rows = [row("none", 300.0, 150.0), row("berth-serve", 270.0, 170.0),
            row("none", 400.0, 160.0), row("berth-serve", 330.0, 180.0),
            row("berth-serve", 300.0, 190.0)]
    table = bp.medians(rows)
    col = table[0].split(" | ").index("median burst_running_p99_s")
    cells = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in table[2:]}
    assert cells["none"][col] == "155.0"
    assert cells["berth-serve"][col] == "180.0"
    assert cells["berth-serve"][1] == "3"
    assert table[-1].endswith("| 0.86 |")  # 300 against the median of none's 350
