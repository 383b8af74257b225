"""No snapshot the types accept makes the CP-SAT model invalid: extreme priorities, weights,
waits, quotas and power figures either are refused where the type is built (ProblemError
naming the field) or reach solver.api.solve, which returns a plan the checker accepts from a
model CP-SAT could solve (never MODEL_INVALID, never the greedy fallback for that reason)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.api import solve
from solver.checker import check
from solver.types import (
    GPU,
    MAX_PRIORITY,
    MAX_QUOTA_MILLI,
    MAX_TENANT_WEIGHT,
    MAX_WAIT_SECONDS,
    MAX_WATTS,
    MAX_WEIGHT,
    Gang,
    GpuShare,
    Node,
    PodRequest,
    ProblemError,
    Running,
    Snapshot,
    SolverPolicy,
    Tenant,
    Weights,
)

WEIGHTS = ("demand", "aging_per_hour", "fragmentation", "topology", "fairness", "energy",
           "interference")


def huge_ints(top: int) -> st.SearchStrategy[int]:
    """The bounds themselves half the time (where overflows live), else anything between."""
    return st.one_of(st.just(top), st.just(-top), st.integers(-10, 100), st.integers(-top, top),
                     st.just(top), st.just(top))


def huge_floats(top: float) -> st.SearchStrategy[float]:
    return st.one_of(st.just(top), st.floats(0, 10), st.floats(0, top), st.just(top))


def _build(draw: st.DrawFn) -> Snapshot:
    nodes = tuple(Node(f"n{i}", 64000, 512000,
                       tuple(GPU(k, "H100", 81920, f"n{i}/nv0") for k in range(8)),
                       topology={"rack": f"r{i // 2}"}) for i in range(3))
    running = (Running("r0", "n0", 1000, 1000, (GpuShare(0, 1000),), tenant="a"),
               Running("r1", "n1", 1000, 1000, (GpuShare(1, 500),), tenant="b"))
    tenants = tuple(
        Tenant(t, quota_milli=draw(st.one_of(st.none(), huge_ints(MAX_QUOTA_MILLI)
                                             .filter(lambda q: q >= 0))),
               weight=draw(huge_floats(MAX_TENANT_WEIGHT).filter(lambda w: w > 0)),
               can_borrow=draw(st.booleans()),
               borrow_limit_milli=draw(st.one_of(st.none(), st.just(MAX_QUOTA_MILLI),
                                                 st.integers(0, MAX_QUOTA_MILLI))))
        for t in ("a", "b"))
    gangs = []
    for g in range(draw(st.integers(1, 8))):
        counts = [draw(st.sampled_from((0, 1, 2, 8, 8))) for _ in range(draw(st.integers(1, 3)))]
        pods = tuple(PodRequest(f"g{g}-{k}", 1000, 1024, n, 1000 if n else 0)
                     for k, n in enumerate(counts))
        gangs.append(Gang(f"g{g}", "ab"[g % 2], pods, priority=draw(huge_ints(MAX_PRIORITY)),
                          wait_seconds=draw(huge_floats(MAX_WAIT_SECONDS))))
    weights = Weights(**{w: draw(huge_floats(MAX_WEIGHT)) for w in WEIGHTS})
    watts = draw(huge_floats(MAX_WATTS))
    policy = SolverPolicy(weights=weights, idle_watts={"H100": watts},
                          active_watts={"H100": watts})
    return Snapshot(nodes, tuple(gangs), running, tenants, policy)


@st.composite
def extreme(draw: st.DrawFn) -> Snapshot:
    return _build(draw)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extreme())
def test_extreme_values_within_the_bounds_are_solved_by_a_valid_model(snap: Snapshot) -> None:
    plan = solve(snap, time_limit=0.5)
    assert plan.stats.status != "MODEL_INVALID", plan.stats
    assert "fallback_no_solution" not in plan.stats.detail or plan.stats.status == "UNKNOWN"
    assert check(snap, plan) == []


@given(st.integers(-(10**40), 10**40), st.floats(allow_nan=True, allow_infinity=True),
       st.integers(-(10**40), 10**40))
def test_any_value_is_accepted_within_the_bounds_or_refused(priority: int, weight: float,
                                                            quota: int) -> None:
    for make, ok in (
        (lambda: Gang("g", "a", (PodRequest("p"),), priority=priority),
         abs(priority) <= MAX_PRIORITY),
        (lambda: Weights(demand=weight), 0 <= weight <= MAX_WEIGHT),
        (lambda: Tenant("a", quota_milli=quota), 0 <= quota <= MAX_QUOTA_MILLI),
    ):
        if ok:
            make()
        else:
            with pytest.raises(ProblemError):
                make()


def test_the_bounds_themselves_are_solved_by_a_valid_model() -> None:
    nodes = tuple(Node(f"n{i}", 64000, 512000, tuple(GPU(k, "H100") for k in range(8)))
                  for i in range(4))
    gangs = tuple(Gang(f"g{i}", "ab"[i % 2], tuple(
        PodRequest(f"g{i}-{k}", 1000, 1024, 8, 1000) for k in range(2)),
        priority=MAX_PRIORITY - i, wait_seconds=MAX_WAIT_SECONDS) for i in range(6))
    tenants = (Tenant("a", MAX_QUOTA_MILLI, MAX_TENANT_WEIGHT, True, MAX_QUOTA_MILLI),
               Tenant("b", MAX_QUOTA_MILLI, 1e-6))
    policy = SolverPolicy(weights=Weights(*(MAX_WEIGHT,) * len(WEIGHTS)),
                          idle_watts={"H100": MAX_WATTS}, active_watts={"H100": MAX_WATTS})
    snap = Snapshot(nodes, gangs, (), tenants, policy)
    plan = solve(snap, time_limit=2.0)
    assert plan.stats.status in ("OPTIMAL", "FEASIBLE"), plan.stats
    assert not plan.stats.fallback
    assert check(snap, plan) == [] and len(plan.admitted) == 2
    # The highest priorities win, as without the scaling.
    assert {g.gang for g in plan.admitted} == {"g0", "g1"}


@pytest.mark.parametrize(("make", "path"), [
    (lambda: Gang("g", "a", (PodRequest("p"),), priority=10**30), "gangs[g].priority"),
    (lambda: Gang("g", "a", (PodRequest("p"),), priority=-(10**30)), "gangs[g].priority"),
    (lambda: Gang("g", "a", (PodRequest("p"),), wait_seconds=math.inf), "gangs[g].wait_seconds"),
    (lambda: Tenant("a", quota_milli=10**30), "tenants[a].quota_milli"),
    (lambda: Tenant("a", borrow_limit_milli=10**30), "tenants[a].borrow_limit_milli"),
    (lambda: Tenant("a", weight=math.inf), "tenants[a].weight"),
    (lambda: Weights(demand=1e30), "solver.weights.demand"),
    (lambda: Weights(fairness=math.nan), "solver.weights.fairness"),
    (lambda: SolverPolicy(active_watts={"H100": 1e30}), "policy.active_watts[H100]"),
    (lambda: PodRequest("p", gpu_count=10**9, gpu_milli=1000), "pods[p].gpu_count"),
    (lambda: Node("n", cpu_milli=10**30, memory_mib=0), "nodes[n].cpu_milli"),
])
def test_values_beyond_the_bounds_are_refused_naming_the_field(make, path: str) -> None:
    with pytest.raises(ProblemError) as err:
        make()
    assert err.value.path == path
