"""The partitioned CP-SAT path never admits less priority-weighted GPU demand than best-fit on
the whole snapshot (the floor every CP-SAT plan meets, solver.cpsat.solve.plan_value), keeps
every plan feasible, and returns within its time limit."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cpsat_cases import gang, node, pod, running, snap

from solver.api import solve
from solver.baselines import place
from solver.checker import check
from solver.cpsat.solve import plan_value
from solver.partition import _split, hint_parts
from solver.types import (
    Gang,
    Snapshot,
    SolverPolicy,
    Tenant,
    TopologyMode,
    TopologyRequirement,
    Weights,
)

TENANTS = (Tenant("a", 40_000, borrow_limit_milli=8_000), Tenant("b", 30_000, weight=2.0),
           Tenant("c", None))


def _gangs(draw: st.DrawFn, n: int) -> list[Gang]:
    out = []
    for i in range(n):
        size = draw(st.sampled_from([1, 1, 2, 4]))
        milli = draw(st.sampled_from([250, 500, 1000])) if size == 1 else 1000
        count = draw(st.sampled_from([1, 2, 4])) if milli == 1000 else 1
        topo = (TopologyRequirement("rack", TopologyMode.REQUIRED)
                if size > 1 and draw(st.booleans()) else None)
        out.append(gang(f"g{i}", *(pod(f"p{k}", gpus=count, milli=milli) for k in range(size)),
                        tenant=draw(st.sampled_from("abc")), priority=draw(st.integers(0, 2)),
                        wait_seconds=float(draw(st.integers(0, 7200))), topology=topo))
    return out


@st.composite
def windows(draw: st.DrawFn) -> Snapshot:
    racks = draw(st.integers(4, 8))
    nodes = [node(f"n{i}", gpus=4, model="AB"[i % 2], rack=f"r{i // 4}")
             for i in range(racks * 4)]
    busy = tuple(running(f"r{i}", f"n{i}", (0, 1000), (1, draw(st.sampled_from([250, 500]))),
                         tenant=draw(st.sampled_from([None, "a", "b"])))
                 for i in range(0, len(nodes), 3))
    fairness = draw(st.sampled_from([0.0, 0.3]))
    return snap(nodes, _gangs(draw, draw(st.integers(10, 60))), run=busy, tenants=TENANTS,
                policy=SolverPolicy(weights=Weights(fairness=fairness)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(windows(), st.integers(2, 4))
def test_partitioned_plan_never_admits_less_than_whole_cluster_best_fit(
        s: Snapshot, parts: int) -> None:
    plan = solve(s, solver="cpsat", time_limit=0.5, partitions=parts, workers=1)
    greedy = place(s, "bestfit")
    assert not check(s, plan)
    assert plan_value(s, plan) >= plan_value(s, greedy)
    waiting = {d.gang for d in plan.deferred}
    assert waiting | plan.admitted_names == {g.name for g in s.gangs}
    assert all(d.reason for d in plan.deferred)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(windows(), st.integers(2, 4))
def test_each_part_gets_a_feasible_share_of_the_greedy_plan(s: Snapshot, parts: int) -> None:
    greedy = place(s, "bestfit")
    subs, spread, left_out = _split(s, parts, greedy)
    hints = hint_parts(greedy, subs)
    # the parts' hints and the spread gangs are the whole greedy plan, each feasible in its part
    names = [gp.gang for h in hints for gp in h.admitted] + [gp.gang for gp in spread]
    assert sorted(names) == sorted(greedy.admitted_names)
    for sub, h in zip(subs, hints, strict=True):
        assert not check(sub, h), check(sub, h)
    placed = {g.name for sub in subs for g in sub.gangs} | {gp.gang for gp in spread}
    assert placed | {g.name for g in left_out} == {g.name for g in s.gangs}


def test_an_oversubscribed_window_is_dealt_to_every_part() -> None:
    nodes = [node(f"n{i}", gpus=8, rack=f"r{i // 4}") for i in range(32)]
    gangs = [gang(f"g{i}", *(pod(f"p{k}", gpus=8) for k in range(4)), tenant="c")
             for i in range(40)]  # 1,280 GPUs wanted, 256 exist
    s = snap(nodes, gangs, tenants=TENANTS)
    subs, _, _ = _split(s, 4, None)
    assert max(len(x.gangs) for x in subs) - min(len(x.gangs) for x in subs) <= 1


def test_a_large_window_returns_within_its_time_limit() -> None:
    nodes = [node(f"n{i}", gpus=8, model="AB"[i % 2], rack=f"r{i // 8}") for i in range(400)]
    gangs = [gang(f"g{i}", *(pod(f"p{k}", gpus=(1, 2, 4)[i % 3]) for k in range(1 + i % 4)),
                  tenant="abc"[i % 3], priority=i % 3) for i in range(1500)]
    s = snap(nodes, gangs, tenants=TENANTS)
    limit = 3.0
    t0 = time.perf_counter()
    plan = solve(s, solver="cpsat", time_limit=limit, partitions=4)
    wall = time.perf_counter() - t0
    assert plan.stats.detail["partitions"] == 4
    assert wall < limit * 1.25 + 0.5, f"{wall:.2f}s for a {limit}s limit"
    assert plan_value(s, plan) >= plan_value(s, place(s, "bestfit"))
    assert not check(s, plan)


def test_past_the_size_limit_each_part_hints_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    import solver.partition as partition

    monkeypatch.setattr(partition, "WHOLE_GREEDY_MAX_NODES", 10)
    nodes = [node(f"n{i}", gpus=4, rack=f"r{i // 4}") for i in range(32)]
    gangs = [gang(f"g{i}", pod(gpus=1 + i % 4), tenant="abc"[i % 3]) for i in range(80)]
    s = snap(nodes, gangs, tenants=TENANTS)
    plan = solve(s, solver="cpsat", time_limit=1.0, partitions=4)
    d = plan.stats.detail
    assert d["spread_gangs"] == 0 and d["left_out_gangs"] == 0  # no whole-cluster plan used
    assert not check(s, plan)
    assert {x.gang for x in plan.deferred} | plan.admitted_names == {g.name for g in s.gangs}
