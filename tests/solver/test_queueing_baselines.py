"""The Kueue-like and Volcano-like baselines (solver/baselines/kueue.py, volcano.py): each
one's defining behaviour on small hand-made snapshots, and the checker's verdict on every plan
they return for random ones."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.api import solve
from solver.baselines import place
from solver.baselines.volcano import deserved
from solver.checker import check
from solver.plan import Plan
from solver.rules import quota_usage_milli
from solver.types import (
    GPU,
    Gang,
    GpuShare,
    Node,
    PodRequest,
    Reclaim,
    Running,
    Snapshot,
    SolverPolicy,
    Tenant,
)

HOUR = 3600.0


def node(name: str, gpus: int = 8, cpu: int = 64000) -> Node:
    return Node(name=name, cpu_milli=cpu, memory_mib=512000,
                gpus=tuple(GPU(i, "A100", 80000) for i in range(gpus)))


def gang(name: str, gpus: int, *, tenant: str, pods: int = 1, priority: int = 0,
         wait: float = 600.0) -> Gang:
    return Gang(name=name, tenant=tenant, priority=priority, wait_seconds=wait,
                pods=tuple(PodRequest(name=f"{name}-{i}", cpu_milli=1000, memory_mib=1000,
                                      gpu_count=gpus, gpu_milli=1000) for i in range(pods)))


def running(name: str, node_name: str, gpus: range, *, tenant: str,
            run_s: float = HOUR, priority: int = 0) -> Running:
    return Running(name=f"{name}-0", node=node_name, cpu_milli=1000, memory_mib=1000,
                   gpus=tuple(GpuShare(k, 1000) for k in gpus), tenant=tenant, gang=name,
                   priority=priority, run_s=run_s)


def decide(s: Snapshot, name: str) -> Plan:
    plan = solve(s, solver=name)
    assert check(s, plan) == [], [str(v) for v in check(s, plan)]
    return plan


# ------------------------------------------------------------------------------------------
# Kueue-like
# ------------------------------------------------------------------------------------------


def test_kueue_best_effort_fifo_lets_a_later_smaller_workload_past_a_head_that_does_not_fit(
) -> None:
    # 8 GPUs, 6 busy; tenant a's head asks for 4 (no room), then a 2-GPU gang arrived later
    s = Snapshot(nodes=(node("n0"),),
                 gangs=(gang("big", 4, tenant="a", wait=900.0),
                        gang("small", 2, tenant="a", wait=60.0)),
                 running=(running("r", "n0", range(0, 6), tenant="b"),))
    plan = decide(s, "kueue")
    assert plan.admitted_names == {"small"}


def test_kueue_serves_each_queue_in_priority_then_fifo_order() -> None:
    # room for one 4-GPU gang: the older of two equal-priority gangs goes, and a higher
    # priority one goes before both
    s = Snapshot(nodes=(node("n0", gpus=4),),
                 gangs=(gang("new", 4, tenant="a", wait=10.0),
                        gang("old", 4, tenant="a", wait=500.0)))
    assert decide(s, "kueue").admitted_names == {"old"}
    s2 = Snapshot(nodes=(node("n0", gpus=4),),
                  gangs=(*s.gangs, gang("urgent", 4, tenant="a", wait=1.0, priority=5)))
    assert decide(s2, "kueue").admitted_names == {"urgent"}


def test_kueue_heads_within_nominal_quota_go_before_borrowing_heads() -> None:
    # a is at its quota (4 of 4): its head would borrow; b's head is within its quota, though
    # it arrived later. Room for one of them.
    s = Snapshot(nodes=(node("n0"),),
                 gangs=(gang("a2", 2, tenant="a", wait=900.0),
                        gang("b1", 2, tenant="b", wait=10.0)),
                 running=(running("a1", "n0", range(0, 4), tenant="a"),
                          running("x", "n0", range(4, 6), tenant="c")),
                 tenants=(Tenant("a", quota_milli=4000), Tenant("b", quota_milli=4000),
                          Tenant("c", quota_milli=0)))
    assert decide(s, "kueue").admitted_names == {"b1"}
    # a FIFO over both tenants would have served a2, as Berth's best-fit order does
    assert solve(s, solver="bestfit").admitted_names == {"a2"}


def test_kueue_never_admits_past_nominal_plus_borrowing_limit() -> None:
    s = Snapshot(nodes=(node("n0"),),
                 gangs=tuple(gang(f"a{i}", 2, tenant="a", wait=100.0 - i) for i in range(4)),
                 tenants=(Tenant("a", quota_milli=2000, borrow_limit_milli=2000),
                          Tenant("b", quota_milli=6000)))
    plan = decide(s, "kueue")
    assert plan.admitted_names == {"a0", "a1"}
    s_no = Snapshot(nodes=s.nodes, gangs=s.gangs,
                    tenants=(Tenant("a", quota_milli=2000, can_borrow=False),
                             Tenant("b", quota_milli=6000)))
    assert decide(s_no, "kueue").admitted_names == {"a0"}


def _reclaim_snapshot(enabled: bool = True) -> Snapshot:
    # a borrows: 6 GPUs on its quota of 4 in two gangs (a-old ran long, a-new briefly);
    # c runs 2 within its quota; b waits for 2, within its quota of 2
    return Snapshot(
        nodes=(node("n0"),),
        gangs=(gang("b1", 2, tenant="b"),),
        running=(running("a-old", "n0", range(0, 4), tenant="a", run_s=4 * HOUR),
                 running("a-new", "n0", range(4, 6), tenant="a", run_s=HOUR),
                 running("c1", "n0", range(6, 8), tenant="c", run_s=600.0)),
        tenants=(Tenant("a", quota_milli=4000), Tenant("b", quota_milli=2000),
                 Tenant("c", quota_milli=2000)),
        policy=SolverPolicy(reclaim=Reclaim(enabled=enabled, min_run_s=0.0)))


def test_kueue_reclaim_within_cohort_evicts_only_a_borrowers_whole_gang() -> None:
    plan = decide(_reclaim_snapshot(), "kueue")
    # the most recently admitted of the borrower's gangs (least run lost); never c's, which
    # runs within its quota
    assert [(e.gang, e.tenant, e.pods) for e in plan.evictions] == [("a-new", "a",
                                                                     ("a-new-0",))]
    assert plan.admitted_names == {"b1"}


def test_kueue_does_not_reclaim_when_reclaim_is_never() -> None:
    plan = decide(_reclaim_snapshot(enabled=False), "kueue")
    assert plan.evictions == () and plan.admitted_names == frozenset()


def test_kueue_does_not_reclaim_for_a_gang_that_would_borrow() -> None:
    s = _reclaim_snapshot()
    s = Snapshot(nodes=s.nodes, gangs=(gang("b1", 4, tenant="b"),), running=s.running,
                 tenants=s.tenants, policy=s.policy)  # 4 > b's quota of 2
    assert decide(s, "kueue").evictions == ()


# ------------------------------------------------------------------------------------------
# Volcano-like
# ------------------------------------------------------------------------------------------


def test_proportion_water_fills_by_weight_capped_by_request_and_capability() -> None:
    w = {"a": 2.0, "b": 1.0, "c": 1.0}
    # everyone asks for more than the cluster: 2:1:1
    got = deserved(8000.0, w, {"a": 1e9, "b": 1e9, "c": 1e9}, {})
    assert got == pytest.approx({"a": 4000.0, "b": 2000.0, "c": 2000.0})
    # c asks for 1000 only: what it leaves goes to a and b by weight
    got = deserved(8000.0, w, {"a": 1e9, "b": 1e9, "c": 1000.0}, {})
    assert got == pytest.approx({"a": 14000 / 3, "b": 7000 / 3, "c": 1000.0})
    # a's capability caps it; the rest goes to b and c
    got = deserved(8000.0, w, {"a": 1e9, "b": 1e9, "c": 1e9}, {"a": 1000.0, "b": math.inf})
    assert got == pytest.approx({"a": 1000.0, "b": 3500.0, "c": 3500.0})


def test_volcano_serves_the_queue_of_lowest_share_first() -> None:
    # 4 free GPUs (2 run for a, 2 for c); a and b each wait with a 4-GPU gang, a's older and
    # of higher priority: b's share (0) is lower than a's (2 of its deserved 3), so b goes
    s = Snapshot(nodes=(node("n0"),),
                 gangs=(gang("a2", 4, tenant="a", wait=900.0, priority=3),
                        gang("b1", 4, tenant="b", wait=10.0)),
                 running=(running("a1", "n0", range(0, 2), tenant="a"),
                          running("c1", "n0", range(2, 4), tenant="c")),
                 tenants=(Tenant("a"), Tenant("b"), Tenant("c")))
    assert decide(s, "volcano").admitted_names == {"b1"}


def test_volcano_share_is_updated_after_each_job() -> None:
    # 4 free GPUs, c holds 4; a and b each wait with two 2-GPU gangs. a goes first (equal
    # shares, by name), then b's share (0) is below a's: one gang each
    s = Snapshot(nodes=(node("n0"),),
                 gangs=(gang("a1", 2, tenant="a", wait=900.0), gang("a2", 2, tenant="a",
                                                                    wait=800.0),
                        gang("b1", 2, tenant="b", wait=10.0), gang("b2", 2, tenant="b",
                                                                   wait=5.0)),
                 running=(running("c1", "n0", range(4, 8), tenant="c"),),
                 tenants=(Tenant("a"), Tenant("b"), Tenant("c")))
    assert decide(s, "volcano").admitted_names == {"a1", "b1"}


def test_volcano_gives_an_overused_queue_nothing_more() -> None:
    # a (weight 1) holds 4 and asks for 2 more; b (weight 3) asks for 8 + 12 (the 12-GPU pod
    # fits no node): a deserves 4 of 16 and holds it, so a2 waits though 4 GPUs stay free
    s = Snapshot(nodes=(node("n0"), node("n1")),
                 gangs=(gang("a2", 2, tenant="a", wait=900.0),
                        gang("b1", 8, tenant="b"), gang("b2", 12, tenant="b")),
                 running=(running("a1", "n0", range(0, 4), tenant="a"),),
                 tenants=(Tenant("a", weight=1.0), Tenant("b", weight=3.0)))
    plan = decide(s, "volcano")
    assert plan.admitted_names == {"b1"}
    # a placement-only baseline in Berth's order gives a2 its GPUs
    assert "a2" in solve(s, solver="bestfit").admitted_names


def test_volcano_queue_at_its_capability_gets_nothing_more() -> None:
    # capability of a: quota 2 + borrow limit 2 = 4 GPUs; it holds 3 and asks for 2 more
    s = Snapshot(nodes=(node("n0"),),
                 gangs=(gang("a2", 2, tenant="a"),),
                 running=(running("a1", "n0", range(0, 3), tenant="a"),),
                 tenants=(Tenant("a", quota_milli=2000, borrow_limit_milli=2000),
                          Tenant("b", quota_milli=6000)))
    plan = place(s, "volcano")
    assert plan.admitted == ()
    (d,) = plan.deferred
    assert "capability of 4000" in d.reason
    assert decide(s, "volcano").admitted == ()


def test_volcano_never_half_places_a_gang() -> None:
    # a 3-pod gang of 4 GPUs each on two 8-GPU nodes with 6 GPUs busy: two pods would fit;
    # what they would have taken is free again for the next gang (5 GPUs on one node)
    s = Snapshot(nodes=(node("n0"), node("n1")),
                 gangs=(gang("g", 4, tenant="a", pods=3, wait=900.0),
                        gang("h", 5, tenant="a", wait=10.0)),
                 running=(running("r0", "n0", range(0, 3), tenant="b"),
                          running("r1", "n1", range(0, 3), tenant="b")),
                 tenants=(Tenant("a"), Tenant("b")))
    plan = decide(s, "volcano")
    assert plan.admitted_names == {"h"}


# ------------------------------------------------------------------------------------------
# Every plan passes the checker
# ------------------------------------------------------------------------------------------


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    nodes = tuple(node(f"n{i}", gpus=draw(st.sampled_from([1, 2, 4, 8])),
                       cpu=draw(st.integers(4000, 64000)))
                  for i in range(draw(st.integers(1, 4))))
    tenants = ("a", "b", "c")
    run: list[Running] = []
    for nd in nodes:
        taken = 0
        for k in range(draw(st.integers(0, 2))):
            size = draw(st.integers(1, 4))
            if taken + size > len(nd.gpus):
                break
            run.append(running(f"{nd.name}-r{k}", nd.name, range(taken, taken + size),
                               tenant=draw(st.sampled_from(tenants)),
                               run_s=draw(st.sampled_from([60.0, HOUR])),
                               priority=draw(st.integers(0, 2))))
            taken += size
    gangs = tuple(gang(f"g{i}", draw(st.sampled_from([1, 2, 4])),
                       tenant=draw(st.sampled_from(tenants)), pods=draw(st.integers(1, 3)),
                       priority=draw(st.integers(0, 2)), wait=draw(st.floats(0, 3600)))
                  for i in range(draw(st.integers(1, 8))))
    quotas = st.one_of(st.none(), st.integers(0, 12).map(lambda g: g * 1000))
    ts = tuple(Tenant(t, quota_milli=draw(quotas), weight=draw(st.sampled_from([1.0, 2.0])),
                      can_borrow=draw(st.booleans()),
                      borrow_limit_milli=draw(st.one_of(st.none(),
                                                        st.integers(0, 8000))))
               for t in tenants)
    policy = SolverPolicy(reclaim=Reclaim(enabled=draw(st.booleans()),
                                          min_run_s=draw(st.sampled_from([0.0, 300.0]))))
    return Snapshot(nodes=nodes, gangs=gangs, running=tuple(run), tenants=ts, policy=policy)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=snapshots())
@pytest.mark.parametrize("name", ["kueue", "volcano"])
def test_every_plan_passes_the_checker(name: str, s: Snapshot) -> None:
    plan = solve(s, solver=name)
    assert check(s, plan) == [], [str(v) for v in check(s, plan)]
    assert plan.admitted_names | {d.gang for d in plan.deferred} == {g.name for g in s.gangs}
    gangs = {g.name: g for g in s.gangs}
    for gp in plan.admitted:  # whole gangs
        assert sorted(p.pod for p in gp.pods) == sorted(p.name for p in gangs[gp.gang].pods)
    if name == "volcano":
        assert plan.evictions == ()  # the reclaim action is not modelled


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=snapshots())
def test_kueue_admits_within_nominal_plus_borrowing_limit(s: Snapshot) -> None:
    plan = place(s, "kueue")
    used = quota_usage_milli(s, plan)
    admitting = {g.tenant for g in s.gangs if g.name in plan.admitted_names}
    for t in s.tenants:
        if t.name not in admitting or t.quota_milli is None:
            continue
        ceiling = t.quota_milli if not t.can_borrow else (
            math.inf if t.borrow_limit_milli is None else t.quota_milli + t.borrow_limit_milli)
        assert used.get(t.name, 0) <= ceiling


@st.composite
def borrowed_clusters(draw: st.DrawFn) -> Snapshot:
    """Full clusters where some tenants run on borrowed quota and others wait within theirs."""
    nodes = tuple(node(f"n{i}") for i in range(draw(st.integers(1, 2))))
    tenants = ("a", "b", "c")
    run: list[Running] = []
    for nd in nodes:
        taken = 0
        while taken < len(nd.gpus):
            size = min(draw(st.sampled_from([1, 2, 4])), len(nd.gpus) - taken)
            run.append(running(f"{nd.name}-r{taken}", nd.name, range(taken, taken + size),
                               tenant=draw(st.sampled_from(tenants)),
                               run_s=draw(st.sampled_from([60.0, HOUR])),
                               priority=draw(st.integers(0, 1))))
            taken += size
    total = 8 * len(nodes)
    cut = sorted(draw(st.lists(st.integers(0, total), min_size=2, max_size=2)))
    quotas = (cut[0], cut[1] - cut[0], total - cut[1])
    ts = tuple(Tenant(t, quota_milli=q * 1000) for t, q in zip(tenants, quotas, strict=True))
    gangs = tuple(gang(f"g{i}", draw(st.sampled_from([1, 2, 4])),
                       tenant=draw(st.sampled_from(tenants)), pods=draw(st.integers(1, 2)),
                       wait=draw(st.floats(0, 3600)))
                  for i in range(draw(st.integers(1, 5))))
    return Snapshot(nodes=nodes, gangs=gangs, running=tuple(run), tenants=ts,
                    policy=SolverPolicy(reclaim=Reclaim(enabled=True, min_run_s=300.0)))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=borrowed_clusters())
def test_kueue_reclaims_only_borrowers_whole_gangs_for_gangs_within_quota(s: Snapshot) -> None:
    plan = solve(s, solver="kueue")
    assert check(s, plan) == [], [str(v) for v in check(s, plan)]
    if not plan.evictions:
        return
    assert s.policy.reclaim.enabled
    before = quota_usage_milli(s)
    quota = {t.name: t.quota_milli for t in s.tenants}
    of_gang: dict[str, list[str]] = {}
    for r in s.running:
        of_gang.setdefault(r.gang or "", []).append(r.name)
    gangs = {g.name: g for g in s.gangs}
    for e in plan.evictions:
        q = quota[e.tenant]
        assert q is not None and before.get(e.tenant, 0) > q  # the victim borrowed
        assert sorted(e.pods) == sorted(of_gang[e.gang])  # whole
        assert min(r.run_s or 0.0 for r in s.running if r.gang == e.gang) >= 300.0
        reclaimer = gangs[e.for_gang]
        rq = quota[reclaimer.tenant]
        # the gang it was evicted for is admitted and stays within its tenant's quota
        assert e.for_gang in plan.admitted_names and e.tenant != reclaimer.tenant
        assert rq is not None
        assert before.get(reclaimer.tenant, 0) + reclaimer.gpu_demand_milli <= rq
