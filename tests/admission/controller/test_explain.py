"""What a waiting gang is told: its place in the solver's own queue order and the solver's own
quota reason (:mod:`solver.queue`)."""

from __future__ import annotations

from datetime import UTC, datetime

from admission.controller.explain import _as_time, reasons, start_at
from admission.controller.snapshot import Built, GangInfo
from solver.baselines import place
from solver.types import GPU, Gang, Node, PodRequest, Snapshot, SolverPolicy, Tenant, Weights

NOW = datetime(2026, 11, 29, 14, 0, tzinfo=UTC)


def one_gpu_gang(name: str, **kw: object) -> Gang:
    pod = PodRequest(name=f"{name}-0", cpu_milli=1000, memory_mib=1000, gpu_count=1,
                     gpu_milli=1000)
    return Gang(name=name, tenant="team-a", pods=(pod,), **kw)  # type: ignore[arg-type]


def built(gangs: list[Gang], *, gpus: int = 0, tenants: tuple[Tenant, ...] = (),
          aging: float = 0.5) -> Built:
    nodes = (Node(name="n0", cpu_milli=64000, memory_mib=256000,
                  gpus=tuple(GPU(i, "A100", 40000) for i in range(gpus))),)
    snapshot = Snapshot(nodes=nodes, gangs=tuple(gangs), tenants=tenants,
                        policy=SolverPolicy(weights=Weights(aging_per_hour=aging)))
    infos = {g.name: GangInfo(key=g.name, tenant=g.tenant, size=len(g.pods), gang=g)
             for g in gangs}
    return Built(snapshot=snapshot, gangs=infos, nodes={n.name: n for n in nodes},
                 node_errors={})


def test_gangs_ahead_follow_the_solvers_order_with_aging() -> None:
    # fresh has the higher priority, old has waited three hours: with aging 0.5 per hour old
    # ranks 1.5 against 1, so the solver serves it first, and that is what both are told.
    gangs = [one_gpu_gang("team-a/fresh", priority=1),
             one_gpu_gang("team-a/old", wait_seconds=3 * 3600.0)]
    b = built(gangs)
    why = reasons(b, place(b.snapshot, "bestfit"), timeout_s=300.0, now=NOW)
    assert why["team-a/old"].message.endswith("; 0 gangs ahead")
    assert why["team-a/fresh"].message.endswith("; 1 gang ahead")
    # one GPU free: the gang the message put first is the one the solver admits
    b1 = built(gangs, gpus=1)
    assert place(b1.snapshot, "bestfit").admitted_names == {"team-a/old"}
    # without aging, priority alone decides
    flat = built(gangs, aging=0.0)
    why = reasons(flat, place(flat.snapshot, "bestfit"), timeout_s=300.0, now=NOW)
    assert why["team-a/fresh"].message.endswith("; 0 gangs ahead")


def test_a_quota_wait_says_what_the_solver_deferred_it_with() -> None:
    gangs = [one_gpu_gang("team-a/a"), one_gpu_gang("team-a/b")]
    b = built(gangs, gpus=4, tenants=(Tenant("team-a", quota_milli=1000, can_borrow=False),))
    plan = place(b.snapshot, "bestfit")
    (deferred,) = plan.deferred
    why = reasons(b, plan, timeout_s=300.0, now=NOW)[deferred.gang]
    assert why.reason == "Quota"
    assert why.message == f"waiting: {deferred.reason}; 0 gangs ahead"
    assert deferred.reason == ("quota: tenant team-a would use 2000 of its 1000 milli-GPU and "
                               "may not borrow")


def test_a_reserved_start_is_told_as_a_time_rounded_up_to_the_minute() -> None:
    now = datetime(2026, 12, 7, 19, 0, 30, tzinfo=UTC)
    assert start_at(now, 30.0) == "2026-12-07T19:01:00Z"  # on the minute: as it is
    assert start_at(now, 31.0) == "2026-12-07T19:02:00Z"
    assert start_at(now, 0.2) == "2026-12-07T19:01:00Z"
    said = ("held: it fits now only in capacity held on n0 for a reserved gang expected to "
            "start in 5400 s; only a gang whose own deadline ends before then may use it")
    assert _as_time(said, now) == said.replace("in 5400 s", "at 2026-12-07T20:31:00Z")
    # what a datetime cannot hold, or text that is not the solver's, is left as it came
    for text in ("reserved: expected to start in 99999999999999 s on n0",
                 "reserved: expected to start in soon s", "quota: nothing about starts"):
        assert _as_time(text, now) == text
