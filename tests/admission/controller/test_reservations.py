"""Reservations in the controller: expected ends come from pods' activeDeadlineSeconds (an
enforced bound a tenant cannot stretch), the reserved gang is told when it should start, and
only gangs whose own deadline ends in time backfill what is held."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from admission.controller.settings import Settings
from admission.controller.snapshot import build
from admission.controller.translate import remaining_s
from solver.types import Queueing, SolverPolicy
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import condition, controller, gates, settings
from tests.admission.controller.objects import T0, FakeClock, node, pod

NOW = T0 + timedelta(seconds=2000)


def running(name: str, gpus: int, *, deadline: int | None, started: int = 0) -> dict[str, Any]:
    """A pod bound to n0, started ``started`` seconds after T0."""
    p = pod(name, gpus=gpus, gated=False, node_name="n0")
    p["status"]["startTime"] = (T0 + timedelta(seconds=started)).strftime("%Y-%m-%dT%H:%M:%SZ")
    if deadline is not None:
        p["spec"]["activeDeadlineSeconds"] = deadline
    return p


def waiting(name: str, gpus: int, *, age: float, deadline: int | None = None,
            **kw: Any) -> dict[str, Any]:
    p = pod(name, gpus=gpus, created=NOW - timedelta(seconds=age), **kw)
    if deadline is not None:
        p["spec"]["activeDeadlineSeconds"] = deadline
    return p


def cluster(*pods: dict[str, Any], deadline: int | None = 2600) -> tuple[FakeApi, FakeClock]:
    """n0 (8 GPUs), half held by a pod started at T0 with ``deadline``: it ends at the latest
    600 s from NOW."""
    api = FakeApi()
    api.add_node(node("n0", gpus=8))
    api.add_pod(running("r0", 4, deadline=deadline))
    for p in pods:
        api.add_pod(p)
    return api, FakeClock(NOW)


def test_deadlines_are_the_expected_ends_and_runtimes() -> None:
    api, clock = cluster(waiting("big", 8, age=1000, deadline=3600), waiting("free", 1, age=5))
    ctl = controller(api, clock)
    built = build(ctl.inventory.view(), ctl.settings, clock())
    (r0,) = built.snapshot.running
    assert r0.remaining_s == 600.0
    gangs = {g.name: g for g in built.snapshot.gangs}
    assert gangs["team-a/big"].runtime_s == 3600.0 and gangs["team-a/free"].runtime_s is None
    # a pod not started yet has its whole deadline ahead; a pod past it, none left
    assert remaining_s(waiting("w", 1, age=0, deadline=90), NOW) == 90.0
    assert remaining_s(running("late", 1, deadline=60), NOW) == 0.0
    assert remaining_s(running("none", 1, deadline=None), NOW) is None


def test_a_big_gang_gets_a_reservation_and_small_pods_without_deadlines_wait() -> None:
    api, clock = cluster(waiting("big", 8, age=1000),
                         *(waiting(f"small-{i}", 1, age=10) for i in range(4)))
    ctl = controller(api, clock)
    clock.advance(10)
    report = ctl.run_cycle()
    assert report.admitted == 0, report
    cond = condition(api, "team-a/big")
    assert cond is not None and cond["reason"] == "Reserved", cond
    # NOW + 10 s + 590 s, rounded up to the minute: a time, not a countdown
    assert cond["message"].startswith(
        "waiting: reserved: expected to start at 2026-11-29T14:44:00Z on n0"), cond
    assert "on n0" in cond["message"]
    for i in range(4):
        assert gates(api, f"team-a/small-{i}") == ["berth.dev/admission"]


def test_the_reserved_message_does_not_count_down_so_it_is_written_once() -> None:
    api, clock = cluster(waiting("big", 8, age=1000), waiting("small", 1, age=10))
    ctl = controller(api, clock)
    clock.advance(10)
    ctl.run_cycle()
    told = {k: condition(api, k)["message"]  # type: ignore[index]
            for k in ("team-a/big", "team-a/small")}
    events = len(api.events)
    for _ in range(3):  # three more windows, the plan the same
        clock.advance(10)
        ctl.run_cycle()
    assert {k: condition(api, k)["message"] for k in told} == told  # type: ignore[index]
    assert len(api.events) == events
    assert "expected to start at 2026-11-29T14:44:00Z" in told["team-a/big"]


def no_short_first() -> Settings:
    """The queue as priority and aging alone: with the short-run bonus (policy
    solver.queueing, on by default) a pod with a deadline shorter than an hour outranks the big
    gang aged 1,000 s and goes first instead of backfilling behind it."""
    return settings(solver_policy=SolverPolicy(queueing=Queueing(short_run_bonus=0.0)))


def test_a_pod_whose_deadline_ends_before_the_reserved_start_backfills() -> None:
    api, clock = cluster(waiting("big", 8, age=1000), waiting("short", 2, age=10, deadline=300),
                         waiting("long", 2, age=10, deadline=3000))
    ctl = controller(api, clock, s=no_short_first())
    clock.advance(10)
    ctl.run_cycle()
    assert gates(api, "team-a/short") == []
    assert gates(api, "team-a/long") == ["berth.dev/admission"]


def test_without_deadlines_or_with_reservations_off_the_hole_is_filled() -> None:
    from solver.types import Reservations
    off = settings(solver_policy=SolverPolicy(reservations=Reservations(max_gangs=0)))
    for api, clock, s in (
            (*cluster(waiting("big", 8, age=1000), waiting("small", 1, age=10), deadline=None),
             settings()),
            (*cluster(waiting("big", 8, age=1000), waiting("small", 1, age=10)), off)):
        ctl = controller(api, clock, s=s)
        clock.advance(10)
        ctl.run_cycle()
        assert gates(api, "team-a/small") == []
        cond = condition(api, "team-a/big")
        assert cond is not None and cond["reason"] != "Reserved"


def test_pods_kept_out_only_by_held_capacity_say_so_and_not_for_whom() -> None:
    api, clock = cluster(waiting("big", 8, age=1000, ns="team-b"), waiting("small", 1, age=10),
                         waiting("long", 2, age=10, deadline=3000))
    ctl = controller(api, clock, s=no_short_first())
    clock.advance(10)
    ctl.run_cycle()
    for key in ("team-a/small", "team-a/long"):
        assert gates(api, key) == ["berth.dev/admission"]
        cond = condition(api, key)
        assert cond is not None and cond["reason"] == "HeldForReservation", cond
        message = cond["message"]
        assert message.startswith("waiting: held: it fits now only in capacity held on n0 for "
                                  "a reserved gang expected to start at 2026-11-29T14:44:00Z"
                                  ), message
        assert "big" not in message and "team-b" not in message  # another tenant's gang
    assert condition(api, "team-a/long")["message"].endswith(  # type: ignore[index]
        "(its own deadline, 3000 s, ends later); 0 gangs ahead")
    cond = condition(api, "team-b/big")
    assert cond is not None and cond["reason"] == "Reserved", cond


def _slips(ctl: Any) -> tuple[float | None, float | None]:
    reg = ctl.metrics.registry
    return (reg.get_sample_value("berth_reservation_slip_seconds_sum"),
            reg.get_sample_value("berth_reservations_late_total"))


def _finish(api: FakeApi, ctl: Any, name: str) -> None:
    api.pods[f"team-a/{name}"]["status"]["phase"] = "Succeeded"
    ctl.relist()


def test_a_reserved_gang_released_at_its_planned_start_is_not_late() -> None:
    api, clock = cluster(waiting("big", 8, age=1000))
    ctl = controller(api, clock)
    clock.advance(10)
    ctl.run_cycle()  # reserved: expected to start in 590 s, when r0's deadline ends
    assert gates(api, "team-a/big") == ["berth.dev/admission"]
    ctl.run_cycle(fast=True)  # its snapshot holds only the fast classes: nothing forgotten
    assert set(ctl.cycle._planned_start) == {"team-a/big"}
    clock.advance(590)
    _finish(api, ctl, "r0")
    ctl.run_cycle()
    assert gates(api, "team-a/big") == []
    assert _slips(ctl) == (0.0, 0.0)


def test_a_reserved_gang_released_after_its_planned_start_is_counted_late() -> None:
    api, clock = cluster(waiting("big", 8, age=1000))
    ctl = controller(api, clock)
    clock.advance(10)
    ctl.run_cycle()
    clock.advance(590)
    ctl.run_cycle()  # r0 is past its deadline and still there: still reserved, not released
    assert gates(api, "team-a/big") == ["berth.dev/admission"]
    clock.advance(600)
    _finish(api, ctl, "r0")
    ctl.run_cycle()
    assert gates(api, "team-a/big") == []
    slip, late = _slips(ctl)
    assert slip == 600.0 and late == 1.0


def test_a_reserved_gang_deleted_before_it_starts_is_forgotten() -> None:
    api, clock = cluster(waiting("big", 8, age=1000))
    ctl = controller(api, clock)
    clock.advance(10)
    ctl.run_cycle()
    assert ctl.cycle._planned_start
    del api.pods["team-a/big"]
    ctl.relist()
    ctl.run_cycle()
    assert not ctl.cycle._planned_start
    assert _slips(ctl) == (0.0, 0.0)


def _keeping(keep: bool) -> Settings:
    from solver.types import Reservations
    return settings(solver_policy=SolverPolicy(reservations=Reservations(keep=keep)))


def test_a_kept_reservation_is_not_taken_by_a_later_gang_with_a_larger_bonus() -> None:
    # big is reserved for r0's end (600 s); just before, rush arrives: 8 GPUs, a 60 s
    # deadline, so a short-run bonus of 0.98 points against big's 0.22 of aging. Planned
    # afresh, rush takes n0 when r0 ends; kept, big does, and rush waits
    for keep, first, second in ((False, "rush", "big"), (True, "big", "rush")):
        api, clock = cluster(waiting("big", 8, age=1000))
        ctl = controller(api, clock, s=_keeping(keep))
        clock.advance(10)
        ctl.run_cycle()
        cond = condition(api, "team-a/big")
        assert cond is not None and cond["reason"] == "Reserved", cond
        api.add_pod(waiting("rush", 8, age=-580, deadline=60))
        ctl.relist()
        clock.advance(590)
        _finish(api, ctl, "r0")
        ctl.run_cycle()
        assert gates(api, f"team-a/{first}") == [], keep
        assert gates(api, f"team-a/{second}") == ["berth.dev/admission"], keep
        if keep:
            assert _slips(ctl) == (0.0, 0.0)  # released at its planned start


def test_only_this_leaders_own_plans_mark_a_gang_reserved() -> None:
    api, clock = cluster(waiting("big", 8, age=1000), waiting("small", 1, age=10))
    ctl = controller(api, clock, s=_keeping(True))
    clock.advance(10)
    ctl.run_cycle()
    seen = ctl.cycle._with_reserved(build(ctl.inventory.view(), ctl.settings, clock()).snapshot)
    assert {g.name for g in seen.gangs if g.reserved} == {"team-a/big"}
    # a new leader remembers no plan: nothing is reserved until it plans again
    fresh = controller(api, clock, s=_keeping(True))
    seen = fresh.cycle._with_reserved(
        build(fresh.inventory.view(), fresh.settings, clock()).snapshot)
    assert not any(g.reserved for g in seen.gangs)
