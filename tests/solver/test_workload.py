"""The learned target workload (solver/workload.py): gangs counted once, counts decayed,
tenants mixed by weight so a flood moves only its own part, and what it changes in FGD's
choice."""

from __future__ import annotations

import pytest

from solver.api import solve
from solver.types import (
    GPU,
    Gang,
    Node,
    PodRequest,
    Snapshot,
    SolverPolicy,
    Tenant,
    TypicalPod,
)
from solver.workload import WorkloadRecord, with_workload

H = 3600.0


def gang(name: str, tenant: str, gpus: int = 1, milli: int = 1000, pods: int = 1) -> Gang:
    return Gang(name=name, tenant=tenant, pods=tuple(
        PodRequest(name=f"{name}-{i}", cpu_milli=1000, memory_mib=1000, gpu_count=gpus,
                   gpu_milli=milli) for i in range(pods)))


def node(name: str, gpus: int) -> Node:
    return Node(name=name, cpu_milli=256_000, memory_mib=1_000_000,
                gpus=tuple(GPU(index=i, model="A100", memory_mib=81_920) for i in range(gpus)))


TENANTS = (Tenant("a"), Tenant("b"))


def snap(*gangs: Gang, nodes: tuple[Node, ...] = (node("n0", 8),)) -> Snapshot:
    return Snapshot(nodes=nodes, gangs=gangs, tenants=TENANTS)


def weights_of(record: WorkloadRecord) -> dict[tuple[int, int], float]:
    return {(t.gpu_count, t.gpu_milli): t.weight for t in record.typical({"a": 1, "b": 1})}


def test_a_gang_is_counted_once_while_it_waits() -> None:
    r = WorkloadRecord(H)
    big, small = gang("big", "a", gpus=8), gang("small", "a", milli=500)
    r.observe(0.0, snap(big))
    r.observe(10.0, snap(big, small))  # big again: not counted twice
    assert weights_of(r) == pytest.approx({(8, 1000): 0.5, (1, 500): 0.5}, rel=1e-2)


def test_counts_decay_with_the_half_life() -> None:
    r = WorkloadRecord(H)
    r.observe(0.0, snap(gang("old", "a", gpus=8)))
    r.observe(H, snap(gang("new", "a", milli=500)))
    # the old shape counts half after one half-life: 0.5 against 1
    assert weights_of(r) == pytest.approx({(8, 1000): 1 / 3, (1, 500): 2 / 3}, rel=1e-6)
    r.observe(40 * H, snap())
    assert r.typical({}) == ()  # everything decayed away


def test_a_flood_of_one_tenant_moves_only_its_own_part() -> None:
    """Abuse: tenant b submits a thousand tiny pods; tenant a's training shape stays half of
    the target workload, so FGD keeps protecting the nodes a's gangs need."""
    r = WorkloadRecord(H)
    flood = tuple(gang(f"f{i}", "b", milli=100) for i in range(1000))
    r.observe(0.0, snap(gang("train", "a", gpus=8), *flood))
    assert weights_of(r)[(8, 1000)] == pytest.approx(0.5)


def test_the_policys_own_target_workload_wins_and_an_empty_record_changes_nothing() -> None:
    r = WorkloadRecord(H)
    s = snap(gang("x", "a"))
    assert with_workload(s, r) is s  # nothing counted yet
    r.observe(0.0, s)
    assert with_workload(s, r).policy.typical_pods
    own = Snapshot(nodes=s.nodes, gangs=s.gangs, tenants=TENANTS,
                   policy=SolverPolicy(typical_pods=(TypicalPod(cpu_milli=0, gpu_count=2,
                                                               gpu_milli=1000),)))
    assert with_workload(own, r) is own


def test_half_life_must_be_positive() -> None:
    with pytest.raises(ValueError, match="half_life_s"):
        WorkloadRecord(0.0)


def test_knowing_the_training_shapes_keeps_a_small_pod_off_the_empty_big_node() -> None:
    """A window of one 1-GPU pod: judged against itself, every node is as good as another;
    judged against a workload that also brings 8-GPU gangs, the pod goes where it leaves an
    8-GPU hole intact."""
    nodes = (node("big", 8), node("small", 2))
    window = snap(gang("one", "b"), nodes=nodes)
    blind = solve(window, solver="fgd", time_limit=2.0)
    assert blind.admitted[0].pods[0].node == "big"  # what FGD did with the window alone
    r = WorkloadRecord(H)
    r.observe(0.0, snap(gang("train", "a", gpus=8), gang("one", "b"), nodes=nodes))
    for solver in ("fgd", "cpsat"):
        plan = solve(with_workload(window, r), solver=solver, time_limit=2.0)  # type: ignore[arg-type]
        (placed,) = plan.admitted
        assert placed.pods[0].node == "small", (solver, plan)


def test_a_saved_count_past_any_cluster_s_is_refused_not_overflowed() -> None:
    # two counts near the float maximum once summed to inf and gave a NaN weight (found by
    # tests/solver/test_records.py's mutation property)
    rec = WorkloadRecord(H)
    rec.observe(0.0, snap(gang("one", "a"), gang("two", "a", gpus=2)))
    state = rec.state()
    rows = state["counts"]["a"]  # type: ignore[index]
    for row in rows:
        row[4] = 9.1e307
    with pytest.raises(ValueError, match=r"workload\.counts\.a\[0\]: must be at most"):
        WorkloadRecord.from_state(state)
    for row in rows:
        row[4] = 1e12  # the most a count may be: read, and typical weights stay finite
    typical = WorkloadRecord.from_state(state).typical({"a": 1.0})
    assert typical and all(0 < t.weight < float("inf") for t in typical)
