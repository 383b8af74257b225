"""Fair sharing over time in the controller: each batch cycle records what every tenant holds
and is due, from Berth's own view of the cluster (running pods' demand, namespaces), and a
tenant owed from the past gets the next free GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from admission.controller.controller import Controller
from admission.controller.snapshot import build
from solver.types import FairSharing, SolverPolicy
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import controller, gates, settings, solver_fn
from tests.admission.controller.objects import T0, FakeClock, node, pod

ON = SolverPolicy(fair_sharing=FairSharing(half_life_s=3600.0, boost=2.0))
OFF = SolverPolicy(fair_sharing=FairSharing(half_life_s=0.0))


def _history(fair: bool, solver: str = "cpsat") -> tuple[FakeApi, FakeClock, Controller]:
    """team-a holds both GPUs of n0 for an hour while team-b's pod waits; then team-a's pod
    ends, an unmanaged pod takes one GPU, and one pod of each tenant, created at the same
    moment, want the other."""
    api = FakeApi()
    api.add_node(node("n0", gpus=2))
    api.add_pod(pod("hog", gpus=2, gated=False, node_name="n0"))
    api.add_pod(pod("early", ns="team-b", gpus=2))
    clock = FakeClock(T0)
    s = settings(solver_policy=ON if fair else OFF)
    ctl = controller(api, clock, s=s, solve_fn=solver_fn(solver))
    for _ in range(6):
        clock.advance(600)
        ctl.run_cycle()
    assert gates(api, "team-b/early") == ["berth.dev/admission"]  # it never fitted
    del api.pods["team-a/hog"], api.pods["team-b/early"]
    api.add_pod(pod("other", ns="unmanaged", gpus=1, gated=False, node_name="n0"))
    api.add_pod(pod("a1", gpus=1, created=clock()))
    api.add_pod(pod("b1", ns="team-b", gpus=1, created=clock()))
    ctl.relist()
    return api, clock, ctl


def test_the_record_comes_from_what_runs_and_waits() -> None:
    _, _, ctl = _history(fair=True)
    usage = ctl.cycle.records.usage
    assert usage is not None
    held_a, due_a = usage.past("team-a")
    held_b, due_b = usage.past("team-b")
    # an hour of team-a holding 2000 milli while both were due 1000 (2 GPUs, equal weights)
    assert (held_a, due_a) == pytest.approx((2000.0, 1000.0))
    assert (held_b, due_b) == pytest.approx((0.0, 1000.0))


@pytest.mark.parametrize("solver", ["cpsat", "bestfit"])
def test_a_tenant_owed_from_the_past_gets_the_free_gpu(solver: str) -> None:
    api, clock, ctl = _history(fair=True, solver=solver)
    clock.advance(10)
    ctl.run_cycle()
    assert gates(api, "team-b/b1") == []
    assert gates(api, "team-a/a1") == ["berth.dev/admission"]


def test_without_fair_sharing_the_queue_order_decides() -> None:
    """Best-fit serves the queue in order, so without the record team-a's pod (first in the
    snapshot's order, equal in all else) gets the GPU; CP-SAT would see a tie."""
    api, clock, ctl = _history(fair=False, solver="bestfit")
    assert ctl.cycle.records.usage is None
    built = build(ctl.inventory.view(), ctl.settings, clock())
    assert all(t.past_fair_milli == 0.0 for t in built.snapshot.tenants)
    clock.advance(10)
    ctl.run_cycle()
    # the two are equal now, so the queue's own order (team-a's first) decides
    assert gates(api, "team-a/a1") == []
    assert gates(api, "team-b/b1") == ["berth.dev/admission"]


def test_a_new_half_life_starts_a_new_record() -> None:
    _, clock, ctl = _history(fair=True)
    ctl.update_settings(settings(solver_policy=replace(
        ON, fair_sharing=FairSharing(half_life_s=60.0, boost=2.0))))
    clock.advance(10)
    ctl.run_cycle()
    usage = ctl.cycle.records.usage
    assert usage is not None and usage.half_life_s == 60.0
    assert usage.past("team-a") == (0.0, 0.0)  # one observation, no interval yet
