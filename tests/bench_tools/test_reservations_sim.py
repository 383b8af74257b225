"""bench/reservations_sim.py's tables: every row set renders (the estimates table has rows the
others lack), and the hold lead and learned run times it can set reach the policy the replay
runs with."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest

from solver.simulate.generate import generate


@pytest.fixture(scope="module")
def sim(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("reservations_sim")


def _figures(p99: float) -> dict[str, float]:
    return {"p50": 3.0, "p90": 100.0, "p99": p99, "mean": p99 / 10, "alloc": 70.0,
            "min_fair": 0.8, "min_pooled": 0.85, "reserved": 2, "late": 1, "late_overrun": 0,
            "backfilled": 0,
            "placed": 10, "gangs": 10, "reclaimed": 0}


@pytest.mark.parametrize("rows", ["ROWS", "QUOTA_ROWS", "ESTIMATE_ROWS", "LEARNED_ROWS",
                                  "KEEP_ROWS"])
def test_every_row_set_renders_its_table(sim: ModuleType, rows: str) -> None:
    chosen = getattr(sim, rows)
    runs = [{row.label: _figures(1000.0 + 10 * k + s) for k, row in enumerate(chosen)}
            for s in range(2)]
    lines = sim.table("t", runs, chosen)
    text = "\n".join(lines)
    for row in chosen:
        assert f"| {row.label} |" in text
    assert "| late (overrun) |" in text and "| 2 | 1 (0) | 0 |" in text
    if rows == "ESTIMATE_ROWS":
        assert "Against best-fit (p99 wait, mean wait, GPU allocated): cpsat 0.9" in text
    if rows == "KEEP_ROWS":  # cpsat, cpsat-keep, bestfit: p99 1000 / 1010 / 1020 (seed 0)
        assert ("Against best-fit (p99 wait, mean wait, GPU allocated): cpsat 0.98x, 0.98x, "
                "+0.0; cpsat-keep 0.99x" in text)
    if rows == "LEARNED_ROWS":
        assert ("Against best-fit (p99 wait, mean wait, GPU allocated): cpsat-nodeadlines 0.98x"
                in text)


def test_the_hold_lead_reaches_the_replayed_policy(sim: ModuleType) -> None:
    sc = generate(seed=0)
    assert sim.with_hold_ahead(sc, None) is sc
    assert sim.with_hold_ahead(sc, 1234.0).policy.reservations.hold_ahead_s == 1234.0
    assert sc.policy.reservations.hold_ahead_s == 600.0


def test_learning_reaches_the_replayed_policy(sim: ModuleType) -> None:
    sc = generate(seed=0)
    assert not sc.policy.learned_runtimes.enabled
    on = sim.with_learned(sc, None).policy.learned_runtimes
    assert on.enabled and on.min_samples == 3
    five = sim.with_learned(sc, 5).policy.learned_runtimes
    assert five.enabled and five.min_samples == 5 and five.samples >= 5
    assert sim.with_learned(sc, 500).policy.learned_runtimes.samples == 500


def test_keeping_reaches_the_replayed_policy(sim: ModuleType) -> None:
    sc = generate(seed=0)
    assert not sc.policy.reservations.keep
    assert sim.with_keep(sc).policy.reservations.keep
    assert [r.label for r in sim.KEEP_ROWS if r.keep] == ["cpsat-keep"]


def test_the_exact_starts_experiment_plans_every_start_exactly_and_then_restores(
        sim: ModuleType) -> None:
    from solver import reserve
    from solver.types import GPU, Gang, GpuShare, Node, PodRequest, Running, Snapshot, Tenant

    # 40 one-GPU pods ending 10 s apart; a 3-GPU gang fits after the third end (30 s), which
    # the spread of MAX_STARTS ends skips (it plans 40 s)
    wide = Node(name="n0", cpu_milli=640000, memory_mib=5120000,
                gpus=tuple(GPU(i, "A100", 80000) for i in range(40)))
    snap = Snapshot(nodes=(wide,), tenants=(Tenant("t"),), gangs=(Gang(
        name="g", tenant="t", wait_seconds=1000.0, pods=(PodRequest(
            name="g-0", cpu_milli=1000, memory_mib=1000, gpu_count=3, gpu_milli=1000),)),),
        running=tuple(Running(name=f"r{i}", node="n0", cpu_milli=1000, memory_mib=1000,
                              gpus=(GpuShare(i, 1000),), tenant="t", remaining_s=10.0 * (i + 1))
                      for i in range(40)))

    def start() -> float:
        (held,) = reserve.plan_reservations(snap)
        return held.reservation.start_in_s

    planned = reserve._earliest
    assert start() == 40.0
    with sim.exact_starts(True):
        assert start() == 30.0
    assert start() == 40.0 and reserve._earliest is planned
    with sim.exact_starts(False):
        assert start() == 40.0
    assert [r.label for r in sim.KEEP_ROWS if r.exact] == ["cpsat-exact (experiment)"]
