"""policy.queueing: short runs first, and the window's packing keeping the queue's order
(solver/queue.py, solver/cpsat/search.py, solver/cpsat/order.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from test_cpsat_cases import gang, node, pod, snap
from test_cpsat_random import snapshots

from solver.api import solve
from solver.baselines import ClusterArrays, place
from solver.checker import check
from solver.cpsat.search import search
from solver.queue import kept_in_order, queue_order, short_run_bonus
from solver.types import Gang, ProblemError, Queueing, Reservations, Snapshot, SolverPolicy


def test_the_bonus_is_full_at_zero_and_falls_linearly_to_none_at_the_limit() -> None:
    q = Queueing(short_run_bonus=1.0, short_run_s=3600.0)
    at = [short_run_bonus(gang("g", runtime_s=r), q) for r in (1e-9, 900.0, 1800.0, 3600.0, 7200.0)]
    assert at == pytest.approx([1.0, 0.75, 0.5, 0.0, 0.0])
    # no enforced limit, or the bonus off: nothing
    assert short_run_bonus(gang("g"), q) == 0.0
    assert short_run_bonus(gang("g", runtime_s=60.0), Queueing(short_run_bonus=0.0)) == 0.0


def test_a_short_deadline_goes_first_among_equals_and_aging_catches_up() -> None:
    s = snap([node("n", gpus=1)], [gang("long", runtime_s=3000.0), gang("none"),
                                   gang("short", runtime_s=300.0)])
    assert [g.name for g in queue_order(s)] == ["short", "long", "none"]
    assert place(s, "bestfit").admitted_names == {"short"}
    # priority still comes first: the bonus is at most short_run_bonus points
    s = snap([node("n", gpus=1)], [gang("short", runtime_s=1.0), gang("high", priority=2)])
    assert [g.name for g in queue_order(s)] == ["high", "short"]
    # a gang without a deadline that waited 2 h (0.5 per hour: 1 point) passes a 300 s run
    s = snap([node("n", gpus=1)], [gang("short", runtime_s=300.0),
                                   gang("old", wait_seconds=2 * 3600.0)])
    assert [g.name for g in queue_order(s)] == ["old", "short"]
    off = replace(s, policy=SolverPolicy(queueing=Queueing(short_run_bonus=0.0)))
    assert [g.name for g in queue_order(replace(off, gangs=(
        gang("long", runtime_s=3000.0), gang("short", runtime_s=300.0))))] == ["long", "short"]


def test_the_queueing_knobs_are_bounded() -> None:
    for bad in (dict(short_run_bonus=-1.0), dict(short_run_bonus=float("nan")),
                dict(short_run_s=0.0), dict(keep_order_after_s=-5.0),
                dict(short_run_bonus=1e9)):
        with pytest.raises(ProblemError) as err:
            Queueing(**bad)  # type: ignore[arg-type]
        assert err.value.path.startswith("policy.queueing.")


def head_and_big(head_wait: float, keep: float | None = 30.0) -> Snapshot:
    """One free 8-GPU node; ``head`` (2 GPUs) first in the queue by its wait, ``big`` (8 GPUs)
    worth four times as much and fitting only if head waits."""
    return snap([node("n", gpus=8)],
                [gang("head", pod("h", gpus=2), wait_seconds=head_wait),
                 gang("big", pod("b", gpus=8))],
                policy=SolverPolicy(queueing=Queueing(keep_order_after_s=keep),
                                    reservations=Reservations(max_gangs=0)))


def test_a_gang_that_waited_is_not_left_out_for_a_better_packing() -> None:
    s = head_and_big(head_wait=60.0)
    assert [g.name for g in queue_order(s)] == ["head", "big"]
    assert place(s, "bestfit").admitted_names == {"head"}
    # the order search's FGD passes in shuffled orders find big-first (8 GPUs against 2), and
    # CP-SAT's value prefers it too: both are held to starting head
    assert search(s, ClusterArrays(s), seed=0, passes=8).admitted_names == {"head"}
    plan = solve(s, time_limit=1.0)
    assert plan.admitted_names == {"head"} and check(s, plan) == []
    assert "fallback_no_solution" not in plan.stats.detail


def test_before_the_wait_or_with_keep_order_off_the_packing_decides() -> None:
    for s in (head_and_big(head_wait=10.0), head_and_big(head_wait=60.0, keep=None)):
        assert kept_in_order(s, ["head"]) == frozenset()
        assert search(s, ClusterArrays(s), seed=0, passes=8).admitted_names == {"big"}
        assert solve(s, time_limit=1.0).admitted_names == {"big"}


def _waited(s: Snapshot, after: float) -> Snapshot:
    gangs: list[Gang] = [replace(g, wait_seconds=after * (i % 3)) for i, g in enumerate(s.gangs)]
    policy = replace(s.policy, queueing=Queueing(keep_order_after_s=after),
                     reservations=Reservations(max_gangs=0))
    return replace(s, gangs=tuple(gangs), policy=policy)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_cpsat_starts_every_waited_gang_best_fit_in_queue_order_starts(s: Snapshot) -> None:
    s = _waited(s, 30.0)  # a third of the gangs fresh, the others waited 30 s or 60 s
    kept = kept_in_order(s, place(s, "bestfit").admitted_names)
    plan = solve(s, time_limit=1.0)
    assert check(s, plan) == []
    assert kept <= plan.admitted_names, (kept, plan.admitted_names)


# --------------------------------------------------------------------------------------------
# policy.reservations.keep: a reservation, once given, keeps its gang's place
# --------------------------------------------------------------------------------------------

def _keeping(*gangs: Gang, keep: bool = True) -> Snapshot:
    return snap([node("n", gpus=1)], list(gangs),
                policy=SolverPolicy(reservations=Reservations(keep=keep)))


def test_a_kept_reservation_goes_ahead_of_gangs_of_its_priority_or_lower() -> None:
    held = gang("held", wait_seconds=600.0)
    held = replace(held, reserved=True)
    later = [gang("bonus", runtime_s=60.0),  # 0.98 points of short-run bonus
             gang("older", wait_seconds=4 * 3600.0),  # 2 points of aging
             gang("urgent", priority=5), gang("low", priority=-1)]
    s = _keeping(held, *later)
    # it ranks with the highest of its priority (older, by aging); urgent's class is higher
    assert [g.name for g in queue_order(s)] == ["urgent", "held", "older", "bonus", "low"]
    # off, or not reserved: the usual order, where aging and the bonus pass it
    for other in (_keeping(held, *later, keep=False),
                  _keeping(replace(held, reserved=False), *later)):
        assert [g.name for g in queue_order(other)] == ["urgent", "older", "bonus", "held",
                                                         "low"]


def test_reserved_gangs_keep_their_own_order_among_themselves() -> None:
    a = replace(gang("a", wait_seconds=100.0), reserved=True)
    b = replace(gang("b", wait_seconds=200.0), reserved=True)
    c = replace(gang("c", priority=2), reserved=True)
    s = _keeping(a, gang("x", wait_seconds=9000.0), b, c)
    assert [g.name for g in queue_order(s)] == ["c", "b", "a", "x"]


def test_a_reserved_gang_that_fits_is_started_even_with_keep_order_off() -> None:
    # head_and_big's packing prefers big (8 GPUs) over head (2); a reserved head that fits is
    # started however short it waited and with keep-order off
    base = head_and_big(head_wait=0.0, keep=None)
    reserved = replace(base, gangs=tuple(replace(g, reserved=g.name == "head")
                                         for g in base.gangs))
    kept = replace(reserved, policy=replace(reserved.policy,
                                            reservations=Reservations(max_gangs=0, keep=True)))
    assert kept_in_order(kept, ["head", "big"]) == frozenset({"head"})
    assert solve(kept, time_limit=1.0).admitted_names == {"head"}
    assert kept_in_order(reserved, ["head", "big"]) == frozenset()  # keep off
    assert solve(reserved, time_limit=1.0).admitted_names == {"big"}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_cpsat_starts_every_reserved_gang_best_fit_in_queue_order_starts(s: Snapshot) -> None:
    gangs = tuple(replace(g, reserved=i % 2 == 0) for i, g in enumerate(s.gangs))
    s = replace(s, gangs=gangs, policy=replace(s.policy, queueing=Queueing(
        keep_order_after_s=None), reservations=Reservations(max_gangs=0, keep=True)))
    kept = kept_in_order(s, place(s, "bestfit").admitted_names)
    plan = solve(s, time_limit=1.0)
    assert check(s, plan) == []
    assert kept <= plan.admitted_names, (kept, plan.admitted_names)
