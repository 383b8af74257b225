"""A window larger than the model's bound: the model holds the head of the queue, the rest is
placed after it by best-fit, and the whole plan is still one the checker takes and never worth
less than the search plan it started from."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

import solver.cpsat.solve as solve_mod
from solver.api import solve
from solver.baselines import ClusterArrays
from solver.checker import check
from solver.cpsat.search import passes_for, search
from solver.cpsat.solve import bounded, plan_value
from solver.queue import queue_order
from solver.types import GPU, Gang, Node, PodRequest, Snapshot
from tests.solver.test_cpsat_random import snapshots


def _ones(n_nodes: int, n_gangs: int, pods: int = 1) -> Snapshot:
    nodes = tuple(Node(name=f"n{i}", cpu_milli=64000, memory_mib=512000,
                       gpus=tuple(GPU(index=j, model="A100") for j in range(8)))
                  for i in range(n_nodes))
    gangs = tuple(Gang(name=f"g{i}", tenant="t", priority=i % 3, pods=tuple(
        PodRequest(name=f"p{j}", gpu_count=1, gpu_milli=1000) for j in range(pods)))
        for i in range(n_gangs))
    return Snapshot(nodes=nodes, gangs=gangs)


def test_the_head_is_the_front_of_the_queue_within_the_bound() -> None:
    s = _ones(4, 40, pods=3)
    head, tail = bounded(s, max_pods=20)
    queue = queue_order(s)
    assert sum(len(g.pods) for g in head.gangs) <= 20
    assert {g.name for g in head.gangs} == {g.name for g in queue[:len(head.gangs)]}
    assert tail == queue[len(head.gangs):]
    assert bounded(s, max_pods=120) == (s, [])  # within the bound: the window whole


def test_one_gang_larger_than_the_bound_is_still_modelled() -> None:
    s = _ones(4, 3, pods=8)
    head, tail = bounded(s, max_pods=5)
    assert len(head.gangs) == 1 and len(tail) == 2


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_bounded_plan_is_feasible_and_keeps_the_floor(s: Snapshot) -> None:
    old = solve_mod.MODEL_MAX_PODS
    solve_mod.MODEL_MAX_PODS = 2  # every window of more than two pods is bounded
    try:
        plan = solve(s, time_limit=0.5, partitions=1)
    finally:
        solve_mod.MODEL_MAX_PODS = old
    assert not check(s, plan)
    floor = search(s, ClusterArrays(s), seed=0, passes=passes_for(s, 0.5))
    assert plan_value(s, plan) >= plan_value(s, floor)
    assert {a.gang for a in plan.admitted} | {d.gang for d in plan.deferred} == {
        g.name for g in s.gangs}


@pytest.mark.parametrize("cap", [16, 10**6])
def test_a_backlog_above_the_bound_admits_what_fits(monkeypatch: pytest.MonkeyPatch,
                                                    cap: int) -> None:
    """40 two-GPU gangs on 8 GPUs of room: 4 fit, bounded or not; the bounded model holds 16
    pods and says so."""
    monkeypatch.setattr(solve_mod, "MODEL_MAX_PODS", cap)
    s = _ones(1, 40, pods=2)
    plan = solve(s, time_limit=1.0, partitions=1)
    assert not check(s, plan)
    assert len(plan.admitted) == 4 and len(plan.deferred) == 36
    if plan.stats.status != "NOT_STARTED":
        assert plan.stats.detail["model_gangs"] == (8 if cap == 16 else 40)
        assert plan.stats.detail["after_model_gangs"] == (32 if cap == 16 else 0)
