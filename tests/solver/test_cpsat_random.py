"""Random small instances (hypothesis): every solver's plan passes the one checker, gangs are
whole, and CP-SAT never admits less priority-weighted GPU demand than its greedy hint."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.api import solve
from solver.baselines import place
from solver.checker import check
from solver.cpsat.solve import plan_value
from solver.names import SolverName
from solver.types import (
    GPU,
    Gang,
    GpuShare,
    Node,
    PodRequest,
    QoSProfile,
    Running,
    Snapshot,
    SolverPolicy,
    Tenant,
    TopologyMode,
    TopologyRequirement,
)

MODELS = ("A100", "H100")
CLASSES = (None, "training", "latency-inference", "interactive", "solo")
POLICY = SolverPolicy(qos_classes=(QoSProfile("solo", exclusive=True),))


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    n_nodes = draw(st.integers(1, 5))
    nodes = []
    for i in range(n_nodes):
        g = draw(st.sampled_from((1, 2, 4, 8)))
        model = draw(st.sampled_from(MODELS))
        nodes.append(Node(f"n{i}", draw(st.sampled_from((8000, 32000, 64000))), 256000,
                          tuple(GPU(k, model, 40000, f"n{i}/nv{k // 2}") for k in range(g)),
                          topology={"rack": f"r{i % 2}"},
                          schedulable=draw(st.booleans()) or i == 0))
    running = []
    for i, n in enumerate(nodes):
        for g in n.gpus:
            milli = draw(st.sampled_from((0, 0, 250, 500, 1000)))
            if milli:
                running.append(Running(f"r{i}-{g.index}", n.name, 1000, 1000,
                                       (GpuShare(g.index, milli),),
                                       tenant=draw(st.sampled_from(("a", "b"))),
                                       qos_class=draw(st.sampled_from(CLASSES))))
    gangs = []
    for k in range(draw(st.integers(1, 6))):
        pods = []
        for j in range(draw(st.integers(1, 3))):
            count = draw(st.sampled_from((0, 1, 1, 2, 4)))
            milli = draw(st.sampled_from((200, 500, 1000))) if count == 1 else (
                1000 if count else 0)
            models = draw(st.sampled_from((frozenset(), frozenset({"A100"}))))
            pods.append(PodRequest(f"p{j}", draw(st.sampled_from((500, 4000, 16000))), 1000,
                                   count, milli, models=models if count else frozenset(),
                                   qos_class=draw(st.sampled_from(CLASSES))))
        topo = draw(st.sampled_from((
            None, TopologyRequirement("rack", TopologyMode.REQUIRED),
            TopologyRequirement("node", TopologyMode.PREFERRED),
            TopologyRequirement("nvlink", TopologyMode.REQUIRED))))
        gangs.append(Gang(f"g{k}", draw(st.sampled_from(("a", "b"))), tuple(pods),
                          priority=draw(st.integers(0, 3)),
                          wait_seconds=draw(st.sampled_from((0.0, 3600.0))), topology=topo))
    tenants = (Tenant("a", draw(st.sampled_from((None, 1000, 4000))),
                      can_borrow=draw(st.booleans())),
               Tenant("b", draw(st.sampled_from((None, 2000))), weight=2.0))
    return Snapshot(tuple(nodes), tuple(gangs), tuple(running), tenants, POLICY)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_every_solver_plan_passes_the_checker(s: Snapshot) -> None:
    for name in SolverName:
        plan = solve(s, solver=name, time_limit=2.0)
        assert not check(s, plan), (name, [str(v) for v in check(s, plan)])
        assert plan.admitted_names | {d.gang for d in plan.deferred} == {g.name for g in s.gangs}
        gangs = {g.name: g for g in s.gangs}
        for gp in plan.admitted:  # whole gangs, never split
            assert sorted(p.pod for p in gp.pods) == sorted(p.name for p in gangs[gp.gang].pods)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_cpsat_admits_at_least_its_greedy_hint(s: Snapshot) -> None:
    hint = place(s, "bestfit")
    plan = solve(s, time_limit=2.0)
    assert plan_value(s, plan) >= plan_value(s, hint)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_cpsat_model_agrees_with_the_checker(s: Snapshot) -> None:
    """The model's own plan passes the checker (the greedy fallback is not hiding a bug)."""
    plan = solve(s, time_limit=2.0)
    assert "fallback_checker" not in plan.stats.detail
    assert "fallback_no_solution" not in plan.stats.detail
