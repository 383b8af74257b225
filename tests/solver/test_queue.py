"""The queue order and the quota reason: one definition each, for every solver and for the
controller's messages."""

from __future__ import annotations

from test_cpsat_cases import gang, node, snap

from solver.baselines import place
from solver.cpsat.reasons import deferrals
from solver.queue import queue_order, quota_reason
from solver.types import Tenant, Weights


def test_aging_lifts_a_gang_that_waited_above_a_higher_priority() -> None:
    fresh = gang("fresh", priority=1)
    old = gang("old", wait_seconds=3 * 3600.0)  # 0 + 0.5 x 3 h = 1.5 > 1
    s = snap([node("n", gpus=1)], [fresh, old], weights=Weights(aging_per_hour=0.5))
    assert [g.name for g in queue_order(s)] == ["old", "fresh"]
    assert place(s, "firstfit").admitted_names == {"old"}  # the greedy pass serves that order
    flat = snap([node("n", gpus=1)], [fresh, old], weights=Weights(aging_per_hour=0.0))
    assert [g.name for g in queue_order(flat)] == ["fresh", "old"]


def test_equal_effective_priorities_keep_the_snapshot_order() -> None:
    s = snap([], [gang("b", wait_seconds=60.0), gang("a", wait_seconds=60.0), gang("c")],
             weights=Weights(aging_per_hour=0.0))
    assert [g.name for g in queue_order(s)] == ["b", "a", "c"]


def test_the_greedy_pass_and_the_reasons_word_a_quota_wait_alike() -> None:
    s = snap([node("n", gpus=4)], [gang(f"a{i}", tenant="a") for i in range(3)],
             tenants=(Tenant("a", 1000, can_borrow=False), Tenant("b", 3000)))
    greedy = place(s, "bestfit")
    said = {d.reason for d in greedy.deferred}
    assert said == {"quota: tenant a would use 2000 of its 1000 milli-GPU and may not borrow"}
    assert {d.reason for d in deferrals(s, greedy)} == said


def test_borrow_limit_and_idle_quota_are_named() -> None:
    tenants = (Tenant("a", 1000, borrow_limit_milli=500), Tenant("b", 2000), Tenant("c", 1000))
    s = snap([node("n")], [gang("big", tenant="a")], tenants=tenants)
    big = s.gangs[0]
    assert quota_reason(s, big, {"a": 600}) == (
        "quota: tenant a would borrow 600 milli-GPU, above its limit of 500")
    assert quota_reason(s, big, {"a": 400}) is None
    # c already borrows 500 of b's idle 2000 - 1500: 0 is left for a's 500
    s2 = snap([node("n")], [gang("g", tenant="a")],
              tenants=(Tenant("a", 1000), Tenant("b", 2000), Tenant("c", 1000)))
    used = {"a": 500, "b": 1500, "c": 1500}
    assert quota_reason(s2, s2.gangs[0], used, {"c"}) == (
        "quota: tenant a would use 1500 of its 1000 milli-GPU and only 0 idle quota is left "
        "to borrow")


def test_a_gang_within_its_quota_may_not_take_the_idle_quota_others_borrow() -> None:
    s = snap([node("n")], [gang("g", tenant="b")],
             tenants=(Tenant("a", 1000), Tenant("b", 2000)))
    used = {"a": 2000, "b": 1000}  # a borrows b's last idle 1000
    assert quota_reason(s, s.gangs[0], used, {"a"}) == (
        "quota: tenants borrow 1000 milli-GPU in all but only 0 of others' quota is idle")
    assert quota_reason(s, s.gangs[0], {"a": 1000, "b": 1000}, {"a"}) is None


def test_no_tenants_no_quota() -> None:
    s = snap([node("n")], [gang("g")])
    assert quota_reason(s, s.gangs[0], {"t1": 10**9}) is None
