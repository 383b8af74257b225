"""Greedy baselines: every plan passes the checker; gangs are transactions; each policy's rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.baselines import NAMES, ClusterArrays, GangPlacer, place
from solver.baselines.cluster import BoolArray, IntArray
from solver.checker import check
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
    TypicalPod,
)


def node(name: str, gpus: int = 4, model: str = "A100", cpu: int = 32000, rack: str = "r1",
         nvlink: int = 2) -> Node:
    return Node(name=name, cpu_milli=cpu, memory_mib=256000, topology={"rack": rack},
                gpus=tuple(GPU(i, model, 40000, nvlink_domain=f"{name}-nv{i // nvlink}")
                           for i in range(gpus)))


def pod(name: str = "p", cpu: int = 1000, count: int = 1, milli: int = 1000,
        **kw: object) -> PodRequest:
    return PodRequest(name=name, cpu_milli=cpu, memory_mib=1000, gpu_count=count,
                      gpu_milli=milli if count else 0, **kw)  # type: ignore[arg-type]


def one(name: str, p: PodRequest, tenant: str = "t", **kw: object) -> Gang:
    return Gang(name=name, tenant=tenant, pods=(p,), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NAMES)
def test_plans_pass_the_checker_on_a_mixed_batch(name: str) -> None:
    snap = Snapshot(
        nodes=(node("a"), node("b", model="T4", rack="r2"), node("c", gpus=8)),
        gangs=(
            Gang("train", "t", tuple(pod(f"w{i}", count=2) for i in range(3)),
                 topology=TopologyRequirement("rack", TopologyMode.REQUIRED)),
            one("inf", pod(milli=300, models=frozenset({"T4"}))),
            one("cpu", pod(count=0, cpu=4000)),
            one("big", pod(count=8)),
        ),
        running=(Running("r", "c", gpus=(GpuShare(0, 500),)),),
    )
    plan = place(snap, name, seed=1)
    assert check(snap, plan) == []
    assert {g.gang for g in plan.admitted} | {d.gang for d in plan.deferred} == {
        "train", "inf", "cpu", "big"}


@pytest.mark.parametrize("name", NAMES)
def test_a_gang_that_does_not_fit_leaves_nothing_behind(name: str) -> None:
    snap = Snapshot(nodes=(node("a", gpus=2),),
                    gangs=(Gang("g", "t", (pod("x"), pod("y"), pod("z"))), one("h", pod("q"))))
    plan = place(snap, name)
    assert [g.gang for g in plan.admitted] == ["h"]
    assert plan.deferred[0].gang == "g" and "room" in plan.deferred[0].reason
    assert check(snap, plan) == []


@pytest.mark.parametrize("name", NAMES)
def test_required_nvlink_domain(name: str) -> None:
    # four GPUs in NVLink pairs; GPU 1 busy, so only the pair (2, 3) can hold a 2-GPU gang
    snap = Snapshot(nodes=(node("a"),),
                    gangs=(Gang("g", "t", (pod("x"), pod("y")),
                                topology=TopologyRequirement("nvlink", TopologyMode.REQUIRED)),),
                    running=(Running("r", "a", gpus=(GpuShare(1, 1000),)),))
    plan = place(snap, name)
    assert check(snap, plan) == []
    used = sorted(s.index for pp in plan.admitted[0].pods for s in pp.gpus)
    assert used == [2, 3]


@pytest.mark.parametrize("name", NAMES)
def test_quota_and_borrowing(name: str) -> None:
    snap = Snapshot(
        nodes=(node("a", gpus=8),),
        gangs=(one("g1", pod(count=2), tenant="x"), one("g2", pod(count=2), tenant="x"),
               one("g3", pod(count=4), tenant="y")),
        tenants=(Tenant("x", quota_milli=2000, borrow_limit_milli=1000), Tenant("y")),
    )
    plan = place(snap, name)
    assert check(snap, plan) == []
    assert plan.admitted_names == {"g1", "g3"}
    assert any("quota" in d.reason for d in plan.deferred)


@pytest.mark.parametrize("name", NAMES)
def test_interference_ban_is_respected(name: str) -> None:
    policy = SolverPolicy(qos_classes=(QoSProfile("solo", exclusive=True),))
    snap = Snapshot(nodes=(node("a", gpus=1),),
                    gangs=(one("g", pod(milli=200)),),
                    running=(Running("r", "a", gpus=(GpuShare(0, 200),), qos_class="solo"),),
                    policy=policy)
    plan = place(snap, name)
    assert plan.admitted == () and check(snap, plan) == []


def test_priority_and_aging_order() -> None:
    snap = Snapshot(nodes=(node("a", gpus=1),),
                    gangs=(one("low", pod()), one("high", pod(), priority=5),
                           one("old", pod(), wait_seconds=36000.0 * 4)))
    assert place(snap, "firstfit").admitted_names == {"old"}


def test_best_fit_packs_the_fullest_node_and_gpu() -> None:
    snap = Snapshot(nodes=(node("a"), node("b")), gangs=(one("g", pod(milli=300)),),
                    running=(Running("r", "b", gpus=(GpuShare(2, 600),)),))
    placed = place(snap, "bestfit").admitted[0].pods[0]
    assert (placed.node, placed.gpus[0].index) == ("b", 2)


def test_first_fit_takes_the_first_node() -> None:
    snap = Snapshot(nodes=(node("a"), node("b")), gangs=(one("g", pod(milli=300)),),
                    running=(Running("r", "b", gpus=(GpuShare(2, 600),)),))
    placed = place(snap, "firstfit").admitted[0].pods[0]
    assert (placed.node, placed.gpus[0].index) == ("a", 0)


def test_random_depends_on_the_seed_only() -> None:
    snap = Snapshot(nodes=tuple(node(f"n{i}") for i in range(20)),
                    gangs=tuple(one(f"g{i}", pod(milli=100)) for i in range(5)))
    a, b = place(snap, "random", seed=3), place(snap, "random", seed=3)
    assert a.admitted == b.admitted
    others = {place(snap, "random", seed=s).admitted for s in range(6)}
    assert len(others) > 1


def test_fgd_keeps_whole_gpus_for_the_typical_whole_gpu_pod() -> None:
    # Node a has one GPU with 500 free and three whole ones; the typical pods want whole GPUs
    # or 500. A 500 pod on the half GPU removes a fragment; on a whole GPU it would make one.
    typical = (TypicalPod(cpu_milli=1000, gpu_count=1, gpu_milli=1000, weight=0.5),
               TypicalPod(cpu_milli=1000, gpu_count=1, gpu_milli=700, weight=0.5))
    snap = Snapshot(nodes=(node("a"), node("b")), gangs=(one("g", pod(milli=500)),),
                    running=(Running("r", "b", gpus=(GpuShare(3, 500),)),),
                    policy=SolverPolicy(typical_pods=typical))
    placed = place(snap, "fgd").admitted[0].pods[0]
    assert (placed.node, placed.gpus[0].index) == ("b", 3)


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        place(Snapshot(nodes=(node("a"),)), "worst-fit")


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    models = ["A100", "T4"]
    nodes = tuple(
        node(f"n{i}", gpus=draw(st.sampled_from([0, 1, 2, 4, 8])),
             model=draw(st.sampled_from(models)), cpu=draw(st.integers(2000, 64000)),
             rack=draw(st.sampled_from(["r1", "r2"])))
        for i in range(draw(st.integers(1, 6)))
    )
    running = []
    for i, nd in enumerate(nodes):
        if nd.gpus and draw(st.booleans()):
            running.append(Running(f"r{i}", nd.name, cpu_milli=draw(st.integers(0, 4000)),
                                   gpus=(GpuShare(0, draw(st.integers(1, 1000))),),
                                   tenant=draw(st.sampled_from(["x", "y"])),
                                   qos_class=draw(st.sampled_from([None, "training",
                                                                   "latency-inference"]))))
    gangs = []
    for i in range(draw(st.integers(1, 8))):
        size = draw(st.integers(1, 3))
        count = draw(st.sampled_from([0, 1, 1, 2, 4]))
        milli = draw(st.integers(50, 1000)) if count == 1 else 1000
        topo = draw(st.sampled_from([None, "node", "rack", "nvlink"]))
        gangs.append(Gang(
            f"g{i}", draw(st.sampled_from(["x", "y"])),
            tuple(pod(f"p{j}", cpu=draw(st.integers(0, 16000)), count=count, milli=milli,
                      models=draw(st.sampled_from([frozenset(), frozenset({"T4"})])),
                      qos_class=draw(st.sampled_from([None, "training", "latency-inference"])))
                  for j in range(size)),
            priority=draw(st.integers(0, 3)),
            topology=None if topo is None else TopologyRequirement(topo, TopologyMode.REQUIRED),
        ))
    tenants = (Tenant("x", quota_milli=draw(st.integers(0, 6000)),
                      can_borrow=draw(st.booleans())),
               Tenant("y", quota_milli=draw(st.integers(0, 6000))))
    return Snapshot(nodes=nodes, gangs=tuple(gangs), running=tuple(running), tenants=tenants)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=snapshots(), seed=st.integers(0, 5))
def test_every_policy_plan_passes_the_checker(snap: Snapshot, seed: int) -> None:
    for name in NAMES:
        plan = place(snap, name, seed=seed)
        assert check(snap, plan) == [], name
        assert len(plan.admitted) + len(plan.deferred) == len(snap.gangs)


class _WholeScan(GangPlacer):
    """A placer that scans the whole cluster for every domain a gang is tried in (as before
    domains were scanned alone)."""

    def _try(self, pods: list[PodRequest], nodes: BoolArray | None, slots: BoolArray | None,
             rows: IntArray | None = None) -> list[tuple[PodRequest, int, list[int]]] | str:
        return super()._try(pods, nodes, slots, None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=snapshots(), seed=st.integers(0, 5))
def test_a_domain_scanned_alone_gets_the_whole_scans_choices(snap: Snapshot, seed: int) -> None:
    for name in NAMES:
        plans = []
        for cls in (GangPlacer, _WholeScan):
            placer = cls(ClusterArrays(snap), name, np.random.default_rng(seed))
            plans.append([placer.place(g) for g in snap.gangs])
        assert plans[0] == plans[1], name


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=snapshots())
def test_the_target_workload_is_counted_as_from_pod_objects(snap: Snapshot) -> None:
    from solver.baselines.cluster import _workload_of
    from solver.fragmentation import typical_pods
    from solver.types import MILLI

    pods = [p for g in snap.gangs for p in g.pods]
    for r in snap.running:
        milli = max((s.milli for s in r.gpus), default=0)
        pods.append(PodRequest(name=r.name, cpu_milli=r.cpu_milli, gpu_count=len(r.gpus),
                               gpu_milli=milli if len(r.gpus) <= 1 else MILLI))
    assert _workload_of(snap) == typical_pods(pods)
