"""Reclaim (solver/reclaim.py) through the engine's entry point, and the checker's rule."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.api import solve
from solver.checker import Kind, check
from solver.plan import Eviction, Plan
from solver.reclaim import plan_reclaim
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


def node(name: str, gpus: int = 8) -> Node:
    return Node(name=name, cpu_milli=64000, memory_mib=512000,
                gpus=tuple(GPU(i, "A100", 80000) for i in range(gpus)))


def gang(name: str, gpus: int, *, tenant: str = "b", pods: int = 1, priority: int = 0,
         wait: float = 600.0) -> Gang:
    return Gang(name=name, tenant=tenant, priority=priority, wait_seconds=wait,
                pods=tuple(PodRequest(name=f"{name}-{i}", cpu_milli=1000, memory_mib=1000,
                                      gpu_count=gpus, gpu_milli=1000) for i in range(pods)))


def run_gang(name: str, where: list[tuple[str, range]], *, tenant: str = "a",
             run_s: float | None = HOUR, priority: int = 0,
             remaining: float | None = None) -> tuple[Running, ...]:
    """A running gang: one pod per (node, GPU indexes)."""
    return tuple(Running(name=f"{name}-{i}", node=n, cpu_milli=1000, memory_mib=1000,
                         gpus=tuple(GpuShare(k, 1000) for k in gpus), tenant=tenant,
                         gang=name, priority=priority, run_s=run_s, remaining_s=remaining)
                 for i, (n, gpus) in enumerate(where))


def snap(gangs: tuple[Gang, ...], running: tuple[Running, ...], *, quota_a: int = 4,
         quota_b: int = 4, nodes: int = 1, **rules: object) -> Snapshot:
    return Snapshot(nodes=tuple(node(f"n{i}") for i in range(nodes)), gangs=gangs,
                    running=running,
                    tenants=(Tenant("a", quota_milli=quota_a * 1000),
                             Tenant("b", quota_milli=quota_b * 1000)),
                    policy=SolverPolicy(reclaim=Reclaim(**{"enabled": True, **rules})))  # type: ignore[arg-type]


def decide(s: Snapshot) -> Plan:
    plan = solve(s, time_limit=0.5)
    assert check(s, plan) == [], check(s, plan)
    return plan


def evicted(plan: Plan) -> set[str]:
    return {e.gang for e in plan.evictions}


def test_a_tenant_within_its_quota_reclaims_a_borrowed_gang_whole() -> None:
    # a borrows: 8 GPUs on one node with a quota of 4, in two gangs; b waits for 4 within quota
    running = (*run_gang("a1", [("n0", range(0, 2)), ("n0", range(2, 4))]),
               *run_gang("a2", [("n0", range(4, 8))], run_s=1800.0))
    plan = decide(snap((gang("b1", 4),), running))
    assert evicted(plan) == {"a2"}  # one gang is enough (the one that ran least)
    (e,) = plan.evictions
    assert e.pods == ("a2-0",) and e.tenant == "a" and e.for_gang == "b1" and e.for_tenant == "b"
    # it is placed by the same plan, on the GPUs the eviction frees
    assert plan.admitted_names == {"b1"} and plan.deferred == ()
    (gp,) = plan.admitted
    assert {s.index for pp in gp.pods for s in pp.gpus} <= {4, 5, 6, 7}


def test_every_pod_of_the_victim_gang_is_evicted() -> None:
    running = run_gang("a1", [("n0", range(0, 4)), ("n0", range(4, 8))])  # 8 GPUs, quota 4
    plan = decide(snap((gang("b1", 2),), running))
    (e,) = plan.evictions
    assert e.gang == "a1" and e.pods == ("a1-0", "a1-1")


def test_nothing_is_reclaimed_from_a_tenant_within_its_quota() -> None:
    # a runs exactly its quota of 8 on a full node; b's gang fits its own quota but no GPU is
    # borrowed: b waits
    running = run_gang("a1", [("n0", range(0, 8))])
    plan = decide(snap((gang("b1", 4),), running, quota_a=8, quota_b=4))
    assert plan.evictions == ()
    assert plan.deferred[0].reason.startswith("capacity") or "reclaim" not in \
        plan.deferred[0].reason


def test_no_reclaim_for_a_gang_beyond_its_own_quota() -> None:
    running = (*run_gang("a1", [("n0", range(0, 4))]), *run_gang("a2", [("n0", range(4, 8))]))
    plan = decide(snap((gang("b1", 6),), running, quota_b=4))  # b would borrow itself
    assert plan.evictions == ()


def test_nothing_is_reclaimed_before_the_minimum_run_time() -> None:
    running = (*run_gang("a1", [("n0", range(0, 4))], run_s=HOUR),
               *run_gang("a2", [("n0", range(4, 8))], run_s=120.0))
    gangs = (gang("b1", 4),)
    # a2 is the lower-loss victim, but has run 120 s of the 300 required: a1 goes instead
    assert evicted(decide(snap(gangs, running))) == {"a1"}
    young = (*run_gang("a1", [("n0", range(0, 4))], run_s=100.0),
             *run_gang("a2", [("n0", range(4, 8))], run_s=120.0))
    assert decide(snap(gangs, young)).evictions == ()
    not_started = (*run_gang("a1", [("n0", range(0, 4))], run_s=None),
                   *run_gang("a2", [("n0", range(4, 8))], run_s=None))
    assert decide(snap(gangs, not_started)).evictions == ()
    assert evicted(decide(snap(gangs, young, min_run_s=60.0))) == {"a1"}  # a1 lost less


def test_victims_by_lowest_priority_then_least_run_time_lost() -> None:
    # a runs 16 GPUs on two nodes with a quota of 4; b needs 4
    def four(name: str, n: str, k: int, **kw: object) -> tuple[Running, ...]:
        return run_gang(name, [(n, range(4 * k, 4 * k + 4))], **kw)  # type: ignore[arg-type]

    running = (*four("old", "n0", 0, run_s=5 * HOUR), *four("young", "n0", 1, run_s=HOUR),
               *four("mid", "n1", 0, run_s=2 * HOUR), *four("vip", "n1", 1, run_s=600.0,
                                                              priority=5))
    plan = decide(snap((gang("b1", 4),), running, nodes=2))
    assert evicted(plan) == {"young"}  # least loss among the lowest priority
    low = (*four("old", "n0", 0, run_s=5 * HOUR, priority=-1),
           *four("young", "n0", 1, run_s=HOUR))
    assert evicted(decide(snap((gang("b1", 4),), low, nodes=1))) == {"old"}  # priority first


def test_no_eviction_when_it_would_not_let_the_gang_fit() -> None:
    # a borrows 4 GPUs on n0; b's gang needs 8 GPUs on one node: evicting a1 frees only 4
    running = (*run_gang("a1", [("n0", range(0, 4))]),
               *run_gang("z", [("n0", range(4, 8))], tenant="b"))
    plan = decide(snap((gang("b1", 8),), running, quota_a=0, quota_b=12))
    assert plan.evictions == ()


def test_never_more_than_needed() -> None:
    # three borrowed 2-GPU gangs on a full node; b needs 2: one eviction only
    running = (*run_gang("a1", [("n0", range(0, 2))], run_s=HOUR),
               *run_gang("a2", [("n0", range(2, 4))], run_s=2 * HOUR),
               *run_gang("a3", [("n0", range(4, 6))], run_s=3 * HOUR),
               *run_gang("z", [("n0", range(6, 8))], tenant="b"))
    plan = decide(snap((gang("b1", 2),), running, quota_a=0, quota_b=4))
    assert evicted(plan) == {"a1"}


def test_reclaim_off_and_the_window_bound() -> None:
    running = (*run_gang("a1", [("n0", range(0, 4))]), *run_gang("a2", [("n0", range(4, 8))]))
    assert decide(snap((gang("b1", 4),), running, enabled=False)).evictions == ()
    assert decide(snap((gang("b1", 4),), running, max_gangs=0)).evictions == ()


def test_a_gang_being_deleted_frees_its_capacity_and_is_not_evicted_again() -> None:
    # the window after the eviction: a2's pods are terminating (remaining 0); b1 still cannot
    # fit now, and nothing more is evicted for it
    running = (*run_gang("a1", [("n0", range(0, 4))]),
               *run_gang("a2", [("n0", range(4, 8))], remaining=0.0))
    plan = decide(snap((gang("b1", 4),), running))
    assert plan.evictions == ()


def test_borrowed_admissions_give_way_to_a_gang_within_quota() -> None:
    # a's recreated gang and b's gang arrive together in freed capacity: b's runs within its
    # quota; a's, which would borrow, waits (no eviction: nothing ran)
    running = run_gang("a1", [("n0", range(0, 4))])
    a_new = gang("a2", 4, tenant="a", priority=100, wait=0.0)
    s = snap((a_new, gang("b1", 4, wait=0.0)), running)
    plan = decide(s)
    assert plan.admitted_names == {"b1"} and plan.evictions == ()
    assert "reclaim" in next(d.reason for d in plan.deferred if d.gang == "a2")


def test_reclaim_does_not_take_from_the_own_tenant() -> None:
    # b itself runs over... no: b's own running gangs are never victims for b
    running = (*run_gang("b0", [("n0", range(0, 4))], tenant="b"),
               *run_gang("a1", [("n0", range(4, 8))], run_s=60.0))
    plan = decide(snap((gang("b1", 4),), running, quota_b=8))
    assert plan.evictions == ()


# ------------------------------------------------------------------ preemption within a tenant


def test_a_higher_priority_gang_preempts_its_own_tenants_lower_priority_gang() -> None:
    running = (*run_gang("b0", [("n0", range(0, 4))], tenant="b", priority=0),
               *run_gang("b2", [("n0", range(4, 8))], tenant="b", priority=3))
    s = snap((gang("b1", 4, priority=5),), running, quota_b=8, enabled=False,
             preempt_within_tenant=True)  # preemption on its own, reclaim off
    plan = decide(s)
    (e,) = plan.evictions
    assert (e.gang, e.preempt, e.tenant, e.for_gang, e.for_tenant) == ("b0", True, "b", "b1", "b")
    assert plan.admitted_names == {"b1"}


def test_no_preemption_of_equal_or_higher_priority_young_gangs_or_when_off() -> None:
    def preempts(**kw: object) -> set[str]:
        prio = kw.pop("running_priority", 0)
        run_s = kw.pop("run_s", HOUR)
        running = run_gang("b0", [("n0", range(0, 8))], tenant="b", priority=prio,  # type: ignore[arg-type]
                           run_s=run_s)  # type: ignore[arg-type]
        return evicted(decide(snap((gang("b1", 4, priority=5),), running, quota_b=8, **kw)))

    assert preempts(preempt_within_tenant=True) == {"b0"}
    assert preempts(preempt_within_tenant=True, running_priority=5) == set()  # equal
    assert preempts(preempt_within_tenant=True, running_priority=7) == set()
    assert preempts(preempt_within_tenant=True, run_s=60.0) == set()  # min_run_s 300 s
    assert preempts(preempt_within_tenant=False) == set()  # the default: reclaim only


def test_priority_never_preempts_another_tenants_gang() -> None:
    # a runs low-priority work within its quota; b's high-priority gang waits
    running = run_gang("a1", [("n0", range(0, 8))], tenant="a", priority=-5)
    plan = decide(snap((gang("b1", 4, priority=10),), running, quota_a=8, quota_b=8,
                       preempt_within_tenant=True))
    assert plan.evictions == ()


def test_quota_lent_is_taken_back_before_the_tenants_own_gangs_are_preempted() -> None:
    running = (*run_gang("b0", [("n0", range(0, 4))], tenant="b", priority=0),
               *run_gang("a1", [("n0", range(4, 8))], tenant="a", run_s=HOUR))  # a borrows 4
    plan = decide(snap((gang("b1", 4, priority=5),), running, quota_a=0, quota_b=8,
                       preempt_within_tenant=True))
    (e,) = plan.evictions
    assert e.gang == "a1" and not e.preempt


def test_checker_refuses_preemption_across_tenants_of_no_lower_priority_and_when_off() -> None:
    running = (*run_gang("b0", [("n0", range(0, 4))], tenant="b", priority=0),
               *run_gang("b2", [("n0", range(4, 8))], tenant="b", priority=3))
    s = snap((gang("b1", 4, priority=5),), running, quota_b=8, preempt_within_tenant=True)
    plan = decide(s)
    assert evicted(plan) == {"b0"}
    off = replace(s, policy=SolverPolicy(reclaim=Reclaim(enabled=True)))
    assert any("preemption within a tenant is off" in m for m in _reclaim_errors(off, plan))
    higher = replace(plan, evictions=(Eviction("b2", "b", ("b2-0",), "b1", "b",
                                               preempt=True),))
    s_high = replace(s, gangs=(gang("b1", 4, priority=3),))
    assert any("is not higher" in m for m in _reclaim_errors(s_high, higher))
    other = replace(s, running=(*run_gang("b0", [("n0", range(0, 4))], tenant="b"),
                                *run_gang("a2", [("n0", range(4, 8))], tenant="a")),
                    tenants=(Tenant("a", quota_milli=8000), Tenant("b", quota_milli=8000)))
    across = replace(plan, evictions=(Eviction("a2", "a", ("a2-0",), "b1", "b",
                                               preempt=True),))
    assert any("stays within a tenant" in m for m in _reclaim_errors(other, across))


# ------------------------------------------------------------------ the checker's rule


def _base() -> tuple[Snapshot, Plan]:
    running = (*run_gang("a1", [("n0", range(0, 2)), ("n0", range(2, 4))]),
               *run_gang("a2", [("n0", range(4, 8))], run_s=1800.0))
    s = snap((gang("b1", 4),), running)
    plan = decide(s)
    assert evicted(plan) == {"a2"}
    return s, plan


def _reclaim_errors(s: Snapshot, plan: Plan) -> list[str]:
    return [v.message for v in check(s, plan) if v.kind == Kind.RECLAIM]


def test_checker_refuses_part_of_a_gang() -> None:
    s, plan = _base()
    part = Eviction("a1", "a", ("a1-0",), "b1", "b")
    bad = replace(plan, evictions=(part,))
    assert any("whole gangs" in m for m in _reclaim_errors(s, bad))


def test_checker_refuses_a_victim_within_its_quota_and_the_own_tenant() -> None:
    s, plan = _base()
    both = replace(plan, evictions=(*plan.evictions,
                                    Eviction("a1", "a", ("a1-0", "a1-1"), "b1", "b")))
    assert any("not over its quota" in m for m in _reclaim_errors(s, both))
    own = replace(plan, evictions=(Eviction("a2", "a", ("a2-0",), "x", "a"),))
    errors = _reclaim_errors(s, own)
    assert any("its own tenant" in m for m in errors)


def test_checker_refuses_young_gangs_reclaim_off_and_evictions_for_no_admitted_gang() -> None:
    s, plan = _base()
    young = replace(s, running=tuple(replace(r, run_s=10.0) for r in s.running))
    assert any("min_run_s" in m for m in _reclaim_errors(young, plan))
    off = replace(s, policy=SolverPolicy(reclaim=Reclaim(enabled=False)))
    assert any("reclaim is off" in m for m in _reclaim_errors(off, plan))
    alone = replace(plan, admitted=(), deferred=())  # the evictions without their gang
    assert any("does not admit" in m for m in _reclaim_errors(s, alone))
    # without its evictions, the gang's placement overcommits the GPUs the victim holds
    kept = replace(plan, evictions=())
    assert any(v.kind == Kind.CAPACITY for v in check(s, kept))


def test_checker_refuses_a_reclaimer_beyond_its_quota() -> None:
    s, plan = _base()
    small = replace(s, tenants=(Tenant("a", quota_milli=4000), Tenant("b", quota_milli=2000)))
    assert any("over its own quota" in m for m in _reclaim_errors(small, plan))


def test_checker_refuses_a_gang_berth_did_not_place() -> None:
    s, plan = _base()
    anon = replace(s, running=tuple(replace(r, gang=None) for r in s.running))
    assert any("not a running gang" in m for m in _reclaim_errors(anon, plan))


# ------------------------------------------------------------------ property


@st.composite
def borrowed_clusters(draw: st.DrawFn) -> Snapshot:
    nodes = draw(st.integers(1, 3))
    running: list[Running] = []
    k = 0
    for n in range(nodes):
        at = 0
        while at < 8:
            size = draw(st.sampled_from([1, 2, 4]))
            if at + size > 8 or (at > 0 and draw(st.integers(0, 5)) == 0):
                break
            pods = draw(st.integers(1, 2)) if n + 1 < nodes else 1
            where = [(f"n{n}", range(at, at + size))]
            if pods == 2:
                where.append((f"n{n + 1}", range(0, 0)))  # a CPU-only second pod elsewhere
            tenant = draw(st.sampled_from(["a", "a", "a", "c", "b"]))
            running += run_gang(f"r{k}", where, tenant=tenant,
                                run_s=draw(st.sampled_from([None, 60.0, 600.0, HOUR, HOUR])),
                                priority=draw(st.integers(-2, 2)))
            k += 1
            at += size
    names = {r.name for r in running}
    assert len(names) == len(running)
    gangs = tuple(gang(f"w{i}", draw(st.sampled_from([1, 2, 4, 8])),
                       tenant=draw(st.sampled_from(["a", "b", "b", "c"])),
                       pods=draw(st.integers(1, 2)), priority=draw(st.integers(-2, 2)))
                  for i in range(draw(st.integers(1, 4))))
    quotas = {"a": draw(st.integers(0, 4)) * 1000, "b": draw(st.integers(2, 16)) * 1000,
              "c": draw(st.integers(0, 8)) * 1000}
    return Snapshot(nodes=tuple(node(f"n{i}") for i in range(nodes)), gangs=gangs,
                    running=tuple(running),
                    tenants=tuple(Tenant(t, quota_milli=q) for t, q in quotas.items()),
                    policy=SolverPolicy(reclaim=Reclaim(
                        min_run_s=draw(st.sampled_from([0.0, 300.0])),
                        max_gangs=draw(st.sampled_from([0, 1, 2, 3, 3])),
                        enabled=draw(st.sampled_from([True, True, True, False])),
                        preempt_within_tenant=draw(st.booleans()))))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(borrowed_clusters())
def test_plans_with_evictions_pass_the_checker(s: Snapshot) -> None:
    base = solve(replace(s, policy=replace(s.policy, reclaim=Reclaim(enabled=False))),
                 solver="bestfit")
    plan = plan_reclaim(s, base)
    assert check(s, plan) == []
    assert plan.admitted_names.isdisjoint(d.gang for d in plan.deferred)
    assert len(plan.admitted) + len(plan.deferred) == len(s.gangs)
    by_gang: dict[str, set[str]] = {}
    for r in s.running:
        if r.gang is not None:
            by_gang.setdefault(r.gang, set()).add(r.name)
    for e in plan.evictions:
        assert set(e.pods) == by_gang[e.gang]  # whole
        # across tenants only reclaim; within one only preemption, of lower priority
        assert (e.tenant == e.for_tenant) == e.preempt
        if e.preempt:
            assert s.policy.reclaim.preempt_within_tenant
            want = next(g for g in s.gangs if g.name == e.for_gang)
            assert all(r.priority < want.priority for r in s.running if r.gang == e.gang)
        else:
            assert s.policy.reclaim.enabled
        assert e.for_gang in plan.admitted_names  # placed in what it frees
