"""How cheap the interference model is: the CP-SAT model and the timed simulator call it for
every pair or small group of QoS classes, so one call must cost microseconds.

Run: python3 bench/interference.py   (results: bench/interference.md)
"""

from __future__ import annotations

import statistics
import timeit

from solver.interference import (
    DEFAULT_PROFILES,
    group_allowed,
    group_excess_slowdown,
    pair_table,
    slowdown,
)

P = {p.name: p for p in DEFAULT_PROFILES}
LI, BI, TR = P["latency-inference"], P["batch-inference"], P["training"]


def _median_us(stmt: object, number: int) -> float:
    runs = timeit.repeat(stmt, number=number, repeat=7)  # type: ignore[arg-type]
    return statistics.median(runs) / number * 1e6


def main() -> None:
    cases = [
        ("slowdown, one neighbour", lambda: slowdown(LI, [BI]), 100_000),
        ("slowdown, three neighbours", lambda: slowdown(LI, [BI, BI, TR]), 100_000),
        ("group_allowed, group of 4", lambda: group_allowed([LI, BI, BI, P["interactive"]]),
         20_000),
        ("group_excess_slowdown, group of 4",
         lambda: group_excess_slowdown([LI, BI, BI, P["interactive"]]), 20_000),
        ("pair_table, 5 shipped classes (25 pairs)", lambda: pair_table(DEFAULT_PROFILES), 2_000),
    ]
    print("| call | median µs per call |")
    print("|---|---|")
    for name, fn, number in cases:
        print(f"| {name} | {_median_us(fn, number):.2f} |")


if __name__ == "__main__":
    main()
