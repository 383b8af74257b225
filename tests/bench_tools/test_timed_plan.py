"""bench/timed_plan.py (an experiment): its schedule on a case small enough to check by hand,
and what a window does with it (pinned, left out, held)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest

from solver.api import solve
from solver.checker import check
from solver.simulate.generate import generate
from solver.types import Gang, GpuShare, PodRequest, Running, Snapshot, Tenant


@pytest.fixture(scope="module")
def tp(load_bench: Callable[[str], ModuleType]) -> ModuleType:
    return load_bench("timed_plan")


def pods(name: str, *gpus: int) -> tuple[PodRequest, ...]:
    return tuple(PodRequest(name=f"{name}-{i}", cpu_milli=1000, memory_mib=1024, gpu_count=g,
                            gpu_milli=1000, models=frozenset({"A100"}))
                 for i, g in enumerate(gpus))


def snapshot(tp: ModuleType) -> Snapshot:
    """Two A100 nodes of 8 GPUs; node-001 busy for 50 s more. ``big`` (two 8-GPU pods, 100 s)
    has waited 500 s; ``long`` (one 8-GPU pod, 1,000 s) 10 s and fits on node-002 now."""
    base = tp.labelled(generate(seed=0))
    nodes = tuple(n for n in base.nodes if n.name in ("node-001", "node-002"))
    busy = Running(name="old-0", node="node-001", cpu_milli=1000, memory_mib=1024,
                   gpus=tuple(GpuShare(i, 1000) for i in range(8)), tenant="t",
                   remaining_s=50.0)
    big = Gang(name="big", tenant="t", pods=pods("big", 8, 8), wait_seconds=500.0,
               runtime_s=100.0)
    long = Gang(name="long", tenant="t", pods=pods("long", 8), wait_seconds=10.0,
                runtime_s=1000.0)
    return Snapshot(nodes=nodes, gangs=(big, long), running=(busy,),
                    tenants=(Tenant(name="t"),), policy=base.policy)


def test_the_schedule_keeps_the_long_waiter_from_waiting_behind_a_long_run(
        tp: ModuleType) -> None:
    plan = tp.schedule(snapshot(tp), time_limit_s=10.0)
    assert plan is not None
    # long now would hold node-002 for 1,000 s and big would have waited 1,500 s; instead big
    # starts when node-001 frees (50 s), on both nodes, and long after it (150 s)
    assert plan["big"].start_s == 50 and set(plan["big"].nodes.values()) == {"node-001",
                                                                           "node-002"}
    assert plan["long"].start_s == 150


@pytest.mark.parametrize("hold_s", [None, 600.0, 10.0])
def test_a_window_leaves_out_what_starts_later_and_holds_only_what_starts_soon(
        tp: ModuleType, hold_s: float | None) -> None:
    snap = snapshot(tp)
    plan = tp.schedule(snap, time_limit_s=10.0)
    got = tp.apply(snap, plan, hold_s)
    assert [g.name for g in got.gangs] == []  # both start later: neither is offered now
    held = [r for r in got.running if r.name.startswith(tp.HOLD_PREFIX)]
    if hold_s is not None and hold_s >= 50:
        # big's node-002 GPUs are free now and it starts within the lead: held for it
        assert [(r.node, len(r.gpus)) for r in held] == [("node-002", 8)]
    else:
        assert held == []


def test_a_gang_starting_now_is_pinned_to_its_planned_node(tp: ModuleType) -> None:
    snap = snapshot(tp)
    free = Snapshot(nodes=snap.nodes, gangs=(snap.gangs[1],), running=(),
                    tenants=snap.tenants, policy=snap.policy)
    plan = tp.schedule(free, time_limit_s=10.0)
    assert plan is not None and plan["long"].start_s == 0
    got = tp.apply(free, plan, 600.0)
    (pod,) = got.gangs[0].pods
    assert pod.node_selector == {tp.PIN_LABEL: plan["long"].nodes["long-0"]}
    # the label pins it and nothing else: a plan placing it there passes the checker
    placed = solve(got, solver="cpsat", time_limit=2.0, seed=0)
    assert [gp.gang for gp in placed.admitted] == ["long"]
    assert placed.admitted[0].pods[0].node == plan["long"].nodes["long-0"]
    assert not check(free, placed)


def test_nothing_is_planned_without_run_times_or_a_pool(tp: ModuleType) -> None:
    snap = snapshot(tp)
    unknown = Snapshot(nodes=snap.nodes, gangs=tuple(
        Gang(name=g.name, tenant=g.tenant, pods=g.pods, wait_seconds=g.wait_seconds)
        for g in snap.gangs), running=snap.running, tenants=snap.tenants, policy=snap.policy)
    assert tp.schedule(unknown) is None
    assert tp.apply(unknown, None, 600.0) is unknown
