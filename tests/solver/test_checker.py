"""The checker: a feasible plan passes, and a plan breaking each rule is caught by that rule."""

from __future__ import annotations

import pytest

from solver.checker import InfeasiblePlan, Kind, assert_feasible, check
from solver.plan import Deferred, GangPlacement, Plan, PodPlacement, SolveStats
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
    Taint,
    Tenant,
    TopologyMode,
    TopologyRequirement,
)

STATS = SolveStats(solver="test", status="TEST", wall_seconds=0.0)


def node(name: str, gpus: int = 4, model: str = "A100", rack: str = "r1", **kw: object) -> Node:
    return Node(
        name=name,
        cpu_milli=32000,
        memory_mib=128000,
        gpus=tuple(
            GPU(index=i, model=model, memory_mib=40000, nvlink_domain=f"{name}-nv{i // 2}")
            for i in range(gpus)
        ),
        topology={"rack": rack},
        **kw,  # type: ignore[arg-type]
    )


def pod(name: str = "p0", **kw: object) -> PodRequest:
    base: dict[str, object] = {"cpu_milli": 1000, "memory_mib": 1000, "gpu_count": 1,
                               "gpu_milli": 1000}
    base.update(kw)
    return PodRequest(name=name, **base)  # type: ignore[arg-type]


def gang(name: str, *pods: PodRequest, tenant: str = "t1", **kw: object) -> Gang:
    return Gang(name=name, tenant=tenant, pods=pods or (pod(),), **kw)  # type: ignore[arg-type]


def place(gang_name: str, *pods: tuple[str, str, tuple[tuple[int, int], ...]]) -> GangPlacement:
    return GangPlacement(
        gang=gang_name,
        pods=tuple(
            PodPlacement(pod=p, node=n, gpus=tuple(GpuShare(index=i, milli=m) for i, m in g))
            for p, n, g in pods
        ),
    )


def plan(*admitted: GangPlacement, deferred: tuple[Deferred, ...] = ()) -> Plan:
    return Plan(admitted=admitted, deferred=deferred, stats=STATS)


def kinds(snapshot: Snapshot, p: Plan) -> set[Kind]:
    return {v.kind for v in check(snapshot, p)}


def test_feasible_plan_passes() -> None:
    snap = Snapshot(
        nodes=(node("n1"), node("n2")),
        gangs=(gang("g", pod("a", gpu_count=2), pod("b", gpu_milli=500)),),
    )
    p = plan(place("g", ("a", "n1", ((0, 1000), (1, 1000))), ("b", "n1", ((2, 500),))))
    assert check(snap, p) == []
    assert_feasible(snap, p)


def test_assert_feasible_lists_every_violation() -> None:
    snap = Snapshot(nodes=(node("n1"),), gangs=(gang("g"),))
    p = plan(place("g", ("p0", "n9", ())), place("ghost", ("x", "n1", ())))
    with pytest.raises(InfeasiblePlan) as err:
        assert_feasible(snap, p)
    assert len(err.value.violations) >= 2
    assert "n9" in str(err.value) and "ghost" in str(err.value)


def test_gpu_capacity_counts_running_pods() -> None:
    running = Running(name="r", node="n1", gpus=(GpuShare(0, 600),))
    snap = Snapshot(nodes=(node("n1"),), gangs=(gang("g", pod(gpu_milli=500)),),
                    running=(running,))
    assert Kind.CAPACITY in kinds(snap, plan(place("g", ("p0", "n1", ((0, 500),)))))
    assert check(snap, plan(place("g", ("p0", "n1", ((1, 500),))))) == []


def test_gpu_capacity_across_gangs() -> None:
    snap = Snapshot(nodes=(node("n1"),), gangs=(gang("a", pod(gpu_milli=600)),
                                                 gang("b", pod(gpu_milli=600))))
    p = plan(place("a", ("p0", "n1", ((0, 600),))), place("b", ("p0", "n1", ((0, 600),))))
    assert kinds(snap, p) == {Kind.CAPACITY}


def test_node_cpu_and_memory_capacity() -> None:
    snap = Snapshot(nodes=(node("n1"),), gangs=(gang("g", pod(cpu_milli=40000)),))
    assert kinds(snap, plan(place("g", ("p0", "n1", ((0, 1000),))))) == {Kind.CAPACITY}
    snap = Snapshot(nodes=(node("n1"),), gangs=(gang("g", pod(memory_mib=200000)),))
    assert kinds(snap, plan(place("g", ("p0", "n1", ((0, 1000),))))) == {Kind.CAPACITY}


def test_gpu_memory_capacity() -> None:
    snap = Snapshot(nodes=(node("n1"),), gangs=(gang("a", pod(gpu_milli=100,
                                                              gpu_memory_mib=30000)),
                                                 gang("b", pod(gpu_milli=100,
                                                              gpu_memory_mib=30000))))
    p = plan(place("a", ("p0", "n1", ((0, 100),))), place("b", ("p0", "n1", ((0, 100),))))
    assert kinds(snap, p) == {Kind.CAPACITY}


def test_overcommitted_node_left_alone_is_not_the_plans_fault() -> None:
    running = Running(name="r", node="n1", cpu_milli=99999)
    snap = Snapshot(nodes=(node("n1"), node("n2")), gangs=(gang("g"),), running=(running,))
    assert check(snap, plan(place("g", ("p0", "n2", ((0, 1000),))))) == []


def test_partial_gang_is_caught() -> None:
    snap = Snapshot(nodes=(node("n1"),), gangs=(gang("g", pod("a"), pod("b")),))
    assert kinds(snap, plan(place("g", ("a", "n1", ((0, 1000),))))) == {Kind.GANG}


def test_gang_admitted_twice_or_also_deferred() -> None:
    snap = Snapshot(nodes=(node("n1"),), gangs=(gang("g"),))
    twice = plan(place("g", ("p0", "n1", ((0, 1000),))), place("g", ("p0", "n1", ((1, 1000),))))
    assert Kind.GANG in kinds(snap, twice)
    both = plan(place("g", ("p0", "n1", ((0, 1000),))), deferred=(Deferred("g", "x"),))
    assert kinds(snap, both) == {Kind.GANG}


def test_pod_placed_twice() -> None:
    snap = Snapshot(nodes=(node("n1"),), gangs=(gang("g"),))
    p = plan(place("g", ("p0", "n1", ((0, 1000),)), ("p0", "n1", ((1, 1000),))))
    assert Kind.POD in kinds(snap, p)


def test_unknown_pod_node_and_gang() -> None:
    snap = Snapshot(nodes=(node("n1"),), gangs=(gang("g"),))
    assert Kind.UNKNOWN in kinds(snap, plan(place("g", ("p0", "nx", ((0, 1000),)))))
    assert Kind.UNKNOWN in kinds(snap, plan(place("g", ("p0", "n1", ((0, 1000),)),
                                                  ("zz", "n1", ((1, 1000),)))))
    assert Kind.UNKNOWN in kinds(snap, plan(place("nope", ("p0", "n1", ()))))


@pytest.mark.parametrize(
    "request_kw, shares",
    [
        ({"gpu_count": 2}, ((0, 1000), (0, 1000))),  # same GPU twice
        ({"gpu_count": 2}, ((0, 1000),)),  # too few
        ({"gpu_count": 1, "gpu_milli": 500}, ((0, 400),)),  # wrong share
        ({"gpu_count": 0, "gpu_milli": 0}, ((0, 1000),)),  # CPU pod holding a GPU
        ({"gpu_count": 1}, ((7, 1000),)),  # GPU the node lacks
    ],
)
def test_gpu_shares_must_match_the_request(request_kw: dict[str, int],
                                           shares: tuple[tuple[int, int], ...]) -> None:
    snap = Snapshot(nodes=(node("n1"),), gangs=(gang("g", pod(**request_kw)),))
    assert Kind.GPUS in kinds(snap, plan(place("g", ("p0", "n1", shares))))


def test_multi_gpu_pod_on_one_node_only() -> None:
    # a placement names one node; its GPUs must be that node's, so a second node's index fails
    snap = Snapshot(nodes=(node("n1", gpus=1), node("n2", gpus=1)),
                    gangs=(gang("g", pod(gpu_count=2)),))
    assert Kind.GPUS in kinds(snap, plan(place("g", ("p0", "n1", ((0, 1000), (1, 1000))))))


def test_allowed_models() -> None:
    snap = Snapshot(nodes=(node("n1", model="T4"), node("n2", model="A100")),
                    gangs=(gang("g", pod(models=frozenset({"A100"}))),))
    assert kinds(snap, plan(place("g", ("p0", "n1", ((0, 1000),))))) >= {Kind.NODE}
    assert check(snap, plan(place("g", ("p0", "n2", ((0, 1000),))))) == []


def test_model_of_the_gpu_held_on_a_mixed_node() -> None:
    mixed = Node(name="m", cpu_milli=8000, memory_mib=8000,
                 gpus=(GPU(0, "T4"), GPU(1, "A100")))
    snap = Snapshot(nodes=(mixed,), gangs=(gang("g", pod(models=frozenset({"A100"}))),))
    assert kinds(snap, plan(place("g", ("p0", "m", ((0, 1000),))))) == {Kind.MODEL}
    assert check(snap, plan(place("g", ("p0", "m", ((1, 1000),))))) == []


@pytest.mark.parametrize(
    "node_kw, pod_kw",
    [
        ({"schedulable": False}, {}),
        ({"ready": False}, {}),
        ({"taints": (Taint("dedicated", "x"),)}, {}),
        ({"labels": {"zone": "a"}}, {"node_selector": {"zone": "b"}}),
    ],
)
def test_allowed_nodes(node_kw: dict[str, object], pod_kw: dict[str, object]) -> None:
    snap = Snapshot(nodes=(node("n1", **node_kw),), gangs=(gang("g", pod(**pod_kw)),))
    assert Kind.NODE in kinds(snap, plan(place("g", ("p0", "n1", ((0, 1000),)))))


@pytest.mark.parametrize(
    "level, good, bad",
    [
        ("node", [("n1", 0), ("n1", 1)], [("n1", 0), ("n2", 0)]),
        ("rack", [("n1", 0), ("n2", 0)], [("n1", 0), ("n3", 0)]),
        ("nvlink", [("n1", 0), ("n1", 1)], [("n1", 1), ("n1", 2)]),
    ],
)
def test_required_topology(level: str, good: list[tuple[str, int]],
                           bad: list[tuple[str, int]]) -> None:
    snap = Snapshot(
        nodes=(node("n1"), node("n2"), node("n3", rack="r2")),
        gangs=(gang("g", pod("a"), pod("b"),
                    topology=TopologyRequirement(level, TopologyMode.REQUIRED)),),
    )
    def mk(where: list[tuple[str, int]]) -> Plan:
        return plan(place("g", ("a", where[0][0], ((where[0][1], 1000),)),
                          ("b", where[1][0], ((where[1][1], 1000),))))
    assert check(snap, mk(good)) == []
    assert kinds(snap, mk(bad)) == {Kind.TOPOLOGY}


def test_preferred_topology_is_not_a_hard_rule() -> None:
    snap = Snapshot(nodes=(node("n1"), node("n2")),
                    gangs=(gang("g", pod("a"), pod("b"), topology=TopologyRequirement("node")),))
    p = plan(place("g", ("a", "n1", ((0, 1000),)), ("b", "n2", ((0, 1000),))))
    assert check(snap, p) == []


def test_required_level_missing_from_the_node() -> None:
    bare = Node(name="b", cpu_milli=8000, memory_mib=8000, gpus=(GPU(0, "A100"),))
    snap = Snapshot(nodes=(bare,), gangs=(gang("g", topology=TopologyRequirement(
        "block", TopologyMode.REQUIRED)),))
    assert kinds(snap, plan(place("g", ("p0", "b", ((0, 1000),))))) == {Kind.TOPOLOGY}


def quota_snapshot(*tenants: Tenant, running: int = 0) -> Snapshot:
    run = tuple(Running(name=f"r{i}", node="n1", gpus=(GpuShare(i, 1000),), tenant="a")
                for i in range(running))
    return Snapshot(nodes=(node("n1", gpus=8),),
                    gangs=(gang("g", pod(gpu_count=2), tenant="a"),),
                    tenants=tenants, running=run)


TWO_GPUS = place("g", ("p0", "n1", ((6, 1000), (7, 1000))))


def test_quota_within_own_quota() -> None:
    snap = quota_snapshot(Tenant("a", quota_milli=3000), running=1)
    assert check(snap, plan(TWO_GPUS)) == []


def test_quota_exceeded_without_borrowing() -> None:
    snap = quota_snapshot(Tenant("a", quota_milli=2000, can_borrow=False),
                          Tenant("b", quota_milli=8000), running=1)
    assert kinds(snap, plan(TWO_GPUS)) == {Kind.QUOTA}


def test_quota_borrowing_from_idle_quota() -> None:
    snap = quota_snapshot(Tenant("a", quota_milli=2000), Tenant("b", quota_milli=1000),
                          running=1)
    assert check(snap, plan(TWO_GPUS)) == []


def test_quota_borrow_limit() -> None:
    snap = quota_snapshot(Tenant("a", quota_milli=1000, borrow_limit_milli=1000),
                          Tenant("b", quota_milli=8000), running=1)
    assert kinds(snap, plan(TWO_GPUS)) == {Kind.QUOTA}


def test_quota_borrowing_beyond_idle_quota() -> None:
    snap = quota_snapshot(Tenant("a", quota_milli=2000), Tenant("b", quota_milli=500),
                          running=1)
    assert kinds(snap, plan(TWO_GPUS)) == {Kind.QUOTA}


def test_tenant_already_over_quota_does_not_block_other_tenants() -> None:
    snap = Snapshot(
        nodes=(node("n1", gpus=8),),
        gangs=(gang("g", tenant="b"),),
        tenants=(Tenant("a", quota_milli=0, can_borrow=False), Tenant("b", quota_milli=1000)),
        running=(Running("r", "n1", gpus=(GpuShare(0, 1000),), tenant="a"),),
    )
    assert check(snap, plan(place("g", ("p0", "n1", ((1, 1000),))))) == []


def interference_snapshot(running_class: str) -> Snapshot:
    policy = SolverPolicy(qos_classes=(
        QoSProfile("inf", exclusive=True),
        QoSProfile("ls", no_share_with=frozenset({"batch"})),
        QoSProfile("batch"),
    ))
    return Snapshot(
        nodes=(node("n1"),),
        gangs=(gang("g", pod(gpu_milli=300, qos_class="batch")),),
        running=(Running("r", "n1", gpus=(GpuShare(0, 300),), qos_class=running_class),),
        policy=policy,
    )


@pytest.mark.parametrize("running_class", ["inf", "ls"])
def test_interference_bans(running_class: str) -> None:
    snap = interference_snapshot(running_class)
    assert kinds(snap, plan(place("g", ("p0", "n1", ((0, 300),))))) == {Kind.INTERFERENCE}
    assert check(snap, plan(place("g", ("p0", "n1", ((1, 300),))))) == []


def test_compatible_classes_may_share() -> None:
    snap = interference_snapshot("batch")
    assert check(snap, plan(place("g", ("p0", "n1", ((0, 300),))))) == []


def test_latency_sensitive_pod_kept_within_its_slo() -> None:
    # default classes: latency-inference (SLO 2x solo) next to six busy best-effort pods
    snap = Snapshot(
        nodes=(node("n1"),),
        gangs=(gang("g", pod(gpu_milli=100, qos_class="latency-inference")),),
        running=tuple(Running(f"r{i}", "n1", gpus=(GpuShare(0, 100),), qos_class="best-effort")
                      for i in range(6)),
    )
    violations = check(snap, plan(place("g", ("p0", "n1", ((0, 100),)))))
    assert [v.kind for v in violations] == [Kind.INTERFERENCE]
    assert "SLO" in violations[0].message
    assert check(snap, plan(place("g", ("p0", "n1", ((1, 100),))))) == []
