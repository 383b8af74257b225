"""Fair share over time (solver/fairshare.py): the decayed record, the deficit and its boost,
and where the boost acts (queue order, CP-SAT's gang values, the search's ranking)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.api import solve
from solver.cpsat.instance import plan_weighted_demand, priority_weight
from solver.fairshare import (
    UsageHistory,
    boosts,
    deficit,
    demand_and_share,
    observe_snapshot,
    with_history,
)
from solver.plan import GangPlacement, Plan, PodPlacement, SolveStats
from solver.queue import queue_order
from solver.schema import SnapshotError, parse_snapshot, snapshot_to_dict
from solver.types import (
    GPU,
    FairSharing,
    Gang,
    GpuShare,
    Node,
    PodRequest,
    ProblemError,
    Running,
    Snapshot,
    SolverPolicy,
    Tenant,
)

H = 3600.0
ON = SolverPolicy(fair_sharing=FairSharing(half_life_s=H, boost=2.0))


def node(name: str, gpus: int) -> Node:
    return Node(name=name, cpu_milli=64_000, memory_mib=512_000,
                gpus=tuple(GPU(index=i, model="A100", memory_mib=81_920) for i in range(gpus)))


def gang(name: str, tenant: str, gpus: int = 1, *, wait: float = 0.0) -> Gang:
    return Gang(name=name, tenant=tenant, wait_seconds=wait,
                pods=(PodRequest(name=f"{name}-0", cpu_milli=1000, memory_mib=1000,
                                 gpu_count=gpus, gpu_milli=1000),))


def running(name: str, tenant: str | None, gpus: int, node_name: str = "n0") -> Running:
    return Running(name=name, node=node_name, cpu_milli=1000, memory_mib=1000,
                   gpus=tuple(GpuShare(index=i, milli=1000) for i in range(gpus)), tenant=tenant)


# ------------------------------------------------------------------ the record


def test_constant_values_average_to_themselves() -> None:
    h = UsageHistory(H)
    for t in range(0, 10_000, 10):
        h.observe(float(t), {"a": 3000}, {"a": 4000})
    held, fair = h.past("a")
    assert held == pytest.approx(3000) and fair == pytest.approx(4000)


def test_one_half_life_moves_the_average_half_way() -> None:
    h = UsageHistory(H)
    h.observe(0.0, {"a": 0}, {"a": 1000})
    h.observe(100 * H, {"a": 1000}, {"a": 1000})  # a century of half-lives at 0
    h.observe(101 * H, {"a": 1000}, {"a": 1000})  # one half-life at 1000
    held, fair = h.past("a")
    assert held == pytest.approx(500, rel=1e-6) and fair == pytest.approx(1000)


def test_a_fresh_record_is_not_biased_towards_zero() -> None:
    h = UsageHistory(H)
    assert h.past("a") == (0.0, 0.0)  # nothing yet
    h.observe(0.0, {"a": 2000}, {"a": 2000})
    h.observe(10.0, {"a": 2000}, {"a": 2000})
    assert h.past("a") == pytest.approx((2000, 2000))  # ten seconds say all there is to say


def test_a_clock_that_goes_back_folds_nothing_in() -> None:
    h = UsageHistory(H)
    h.observe(1000.0, {"a": 1000}, {"a": 1000})
    h.observe(2000.0, {"a": 0}, {"a": 1000})
    before = h.past("a")
    h.observe(500.0, {"a": 5000}, {"a": 1000})  # skewed clock: no interval, no weight
    assert h.past("a") == before


def test_a_tenant_that_left_is_forgotten() -> None:
    h = UsageHistory(60.0)
    h.observe(0.0, {"gone": 1000}, {"gone": 1000})
    h.observe(60.0, {}, {})
    assert "gone" in h.tenants
    h.observe(60.0 * 100, {}, {})
    assert "gone" not in h.tenants and h.past("gone") == (0.0, 0.0)


def test_half_life_must_be_positive() -> None:
    with pytest.raises(ValueError, match="half_life_s"):
        UsageHistory(0.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e5), st.floats(0, 1e7), st.floats(0, 1e7)),
                min_size=1, max_size=30))
def test_averages_stay_within_what_was_observed(steps: list[tuple[float, float, float]]) -> None:
    h = UsageHistory(H)
    t = 0.0
    for dt, held, fair in steps:
        t += dt
        h.observe(t, {"a": held}, {"a": fair})
    past_held, past_fair = h.past("a")
    # the last observation has no interval yet; every earlier one may carry weight
    folded = steps[:-1] or steps
    assert 0 <= past_held <= max(s[1] for s in folded) + 1e-6
    assert 0 <= past_fair <= max(s[2] for s in folded) + 1e-6


# ------------------------------------------------------------------ due shares and the boost


def test_due_share_is_water_filled_over_held_plus_pending() -> None:
    snap = Snapshot(nodes=(node("n0", 8),), running=(running("r", "a", 6),),
                    gangs=(gang("b1", "b", 4),),
                    tenants=(Tenant("a"), Tenant("b")))
    held, fair = demand_and_share(snap)
    assert held == {"a": 6000.0}
    assert fair == pytest.approx({"a": 4000.0, "b": 4000.0})


def test_a_flood_of_pending_gangs_is_due_no_more_than_its_weight() -> None:
    """Abuse: a tenant submitting far more than the cluster holds is due its weight's part."""
    flood = tuple(gang(f"f{i}", "b", 8) for i in range(50))
    snap = Snapshot(nodes=(node("n0", 8),), running=(running("r", "a", 8),), gangs=flood,
                    tenants=(Tenant("a", weight=3.0), Tenant("b", weight=1.0)))
    _, fair = demand_and_share(snap)
    assert fair["b"] == pytest.approx(2000.0) and fair["a"] == pytest.approx(6000.0)
    # ... and its boost is capped by the policy, however long it floods
    h = UsageHistory(H)
    for t in range(0, 20_000, 10):
        observe_snapshot(h, float(t), snap)
    seen = with_history(replace(snap, policy=ON), h)
    assert boosts(seen)["b"] == pytest.approx(2.0)  # held nothing: the whole boost, no more
    assert "a" not in boosts(seen)  # above its share: never pushed down, just not pulled up


def test_a_tenant_that_may_not_borrow_is_due_at_most_its_quota() -> None:
    snap = Snapshot(nodes=(node("n0", 8),), gangs=(gang("b1", "b", 8),),
                    tenants=(Tenant("a"), Tenant("b", quota_milli=2000, can_borrow=False)))
    _, fair = demand_and_share(snap)
    assert fair["b"] == pytest.approx(2000.0)


def test_deficit_is_clamped() -> None:
    assert deficit(0, 1000) == 1.0
    assert deficit(500, 1000) == 0.5
    assert deficit(2000, 1000) == 0.0
    assert deficit(0, 0) == 0.0


def test_off_means_no_boost() -> None:
    t = (Tenant("a", past_held_milli=0, past_fair_milli=1000), Tenant("b"))
    snap = Snapshot(nodes=(node("n0", 1),), tenants=t, policy=SolverPolicy(
        fair_sharing=FairSharing(half_life_s=0.0)))
    assert boosts(snap) == {}
    assert boosts(replace(snap, policy=SolverPolicy(
        fair_sharing=FairSharing(half_life_s=H, boost=0.0)))) == {}
    assert boosts(replace(snap, policy=ON)) == {"a": 2.0}


def test_policy_values_are_bounded() -> None:
    with pytest.raises(ProblemError, match="half_life_s"):
        FairSharing(half_life_s=-1.0)
    with pytest.raises(ProblemError, match="boost"):
        FairSharing(half_life_s=H, boost=1e9)
    with pytest.raises(ProblemError, match="past_held_milli"):
        Tenant("a", past_held_milli=-5.0)


# ------------------------------------------------------------------ where the boost acts


OFF = SolverPolicy(fair_sharing=FairSharing(half_life_s=0.0))


def test_on_by_default() -> None:
    assert SolverPolicy().fair_sharing == FairSharing(half_life_s=3600.0, boost=2.0)


def _contest(*, owed: bool) -> Snapshot:
    """One free GPU, two equal gangs of two tenants; tenant b owed (or not) from the past."""
    b = Tenant("b", past_held_milli=0.0, past_fair_milli=1000.0) if owed else Tenant("b")
    return Snapshot(nodes=(node("n0", 1),),
                    gangs=(gang("a1", "a", wait=60), gang("b1", "b", wait=60)),
                    tenants=(Tenant("a", past_held_milli=1000.0, past_fair_milli=1000.0), b),
                    policy=ON)


def test_an_owed_tenant_goes_first_in_the_queue() -> None:
    assert [g.name for g in queue_order(_contest(owed=False))] == ["a1", "b1"]
    assert [g.name for g in queue_order(_contest(owed=True))] == ["b1", "a1"]


def test_the_boost_raises_the_gang_value_that_cpsat_and_the_floor_use() -> None:
    snap = _contest(owed=True)
    g = snap.gangs[1]
    w = snap.policy.weights
    assert priority_weight(g, w, 2.0) == pytest.approx(priority_weight(g, w) + 2.0)
    assert priority_weight(g, w, -5.0) == priority_weight(g, w)  # never below its own
    plan = Plan(admitted=(GangPlacement(gang="b1", pods=(
        PodPlacement(pod="b1-0", node="n0", gpus=(GpuShare(0, 1000),)),)),),
        deferred=(), stats=SolveStats(solver="test", status="GREEDY", wall_seconds=0.0))
    assert plan_weighted_demand(snap, plan) == pytest.approx(1000 * priority_weight(g, w, 2.0))


@pytest.mark.parametrize("solver", ["cpsat", "bestfit", "fgd"])
def test_every_engine_gives_the_free_gpu_to_the_owed_tenant(solver: str) -> None:
    plan = solve(_contest(owed=True), solver=solver, time_limit=2.0)  # type: ignore[arg-type]
    assert [a.gang for a in plan.admitted] == ["b1"]


def test_the_greedy_engines_keep_queue_order_without_a_record() -> None:
    plan = solve(_contest(owed=False), solver="bestfit", time_limit=2.0)  # type: ignore[arg-type]
    assert [a.gang for a in plan.admitted] == ["a1"]


# ------------------------------------------------------------------ the snapshot format


def test_snapshot_round_trip_keeps_the_record_and_the_policy() -> None:
    snap = _contest(owed=True)
    back = parse_snapshot(snapshot_to_dict(snap))
    assert back.tenants == snap.tenants
    assert back.policy.fair_sharing == snap.policy.fair_sharing


@pytest.mark.parametrize(("patch", "field"), [
    ({"policy": {"fair_sharing": {"half_life_s": -1}}}, "policy.fair_sharing.half_life_s"),
    ({"policy": {"fair_sharing": {"boost": "lots"}}}, "policy.fair_sharing.boost"),
    ({"policy": {"fair_sharing": {"halfLife": 5}}}, "policy.fair_sharing"),
    ({"tenants": [{"name": "a", "past_held_milli": float("nan")}]}, "tenants[0].past_held_milli"),
    ({"tenants": [{"name": "a", "past_fair_milli": -3}]}, "tenants[0].past_fair_milli"),
])
def test_bad_fair_sharing_input_names_the_field(patch: dict, field: str) -> None:
    data = {"nodes": [{"name": "n0", "cpu_milli": 1000, "memory_mib": 1000}], **patch}
    with pytest.raises(SnapshotError) as err:
        parse_snapshot(data)
    assert field in str(err.value)

