"""What the requeue phase writes with the shipped grace (``explain_grace_batches`` = 1): a gang
is told it waits from the second batch cycle that passes it over; warnings and changes to what a
gang was told go out at once; ``Released`` goes only to pods told they wait. A burst released
within a cycle or two then costs the API server no explanation writes at all."""

from __future__ import annotations

import pytest

import solver.cpsat.solve as solve_mod
from admission.controller.settings import Settings
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import condition, controller, gates, settings
from tests.admission.controller.objects import FakeClock, node, pod

QUIET = settings(explain_grace_batches=1)


def _cluster(gpus: int = 8) -> FakeApi:
    api = FakeApi()
    api.add_node(node("n0", gpus=gpus, rack="rack-0"))
    return api


def _one_waiting() -> FakeApi:
    """A node full of a running pod, and a pod that waits for it."""
    api = _cluster()
    api.add_pod(pod("run", gpus=8, gated=False, node_name="n0"))
    api.add_pod(pod("wait", gpus=4))
    return api


def test_the_shipped_default_is_the_quiet_one() -> None:
    assert Settings().explain_grace_batches == 1


def test_a_gang_released_by_its_first_cycle_is_written_once_and_told_nothing() -> None:
    api = _cluster()
    for i in range(2):
        api.add_pod(pod(f"t{i}", gang="train", size=2, gpus=4))
    ctl = controller(api, FakeClock(), s=QUIET)
    ctl.run_cycle()
    assert all(gates(api, f"team-a/t{i}") == [] for i in range(2))
    assert [condition(api, f"team-a/t{i}") for i in range(2)] == [None, None]
    assert api.events == []


def test_a_gang_passed_over_twice_is_told_then_told_it_was_released() -> None:
    api = _one_waiting()
    clock = FakeClock()
    ctl = controller(api, clock, s=QUIET)
    ctl.run_cycle()
    assert condition(api, "team-a/wait") is None and api.events == []  # first pass: quiet
    clock.advance(10)
    ctl.run_cycle()
    cond = condition(api, "team-a/wait")
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "Deferred"
    assert [e["reason"] for e in api.events] == ["Deferred"]
    # The running pod ends: the next cycle releases the waiting one and turns its condition.
    del api.pods["team-a/run"]
    ctl.relist()
    clock.advance(10)
    ctl.run_cycle()
    assert gates(api, "team-a/wait") == []
    cond = condition(api, "team-a/wait")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "Released")
    assert [e["reason"] for e in api.events] == ["Deferred", "Released"]


def test_a_warning_is_said_at_the_first_cycle() -> None:
    api = _cluster()
    bad = pod("bad", gang="g", size=2, gpus=1)
    bad["metadata"]["annotations"]["berth.dev/gpu-count"] = "3"  # not what its spec asks
    api.add_pod(bad)
    ctl = controller(api, FakeClock(), s=QUIET)
    ctl.run_cycle()
    cond = condition(api, "team-a/bad")
    assert cond is not None and cond["status"] == "True"
    assert [e["type"] for e in api.events] == ["Warning"]


def test_what_a_gang_was_told_stays_true_after_a_restart() -> None:
    api = _one_waiting()
    clock = FakeClock()
    first = controller(api, clock, s=QUIET)
    first.run_cycle()
    clock.advance(10)
    first.run_cycle()
    assert condition(api, "team-a/wait")["reason"] == "Deferred"  # type: ignore[index]
    # A new controller (a restart, a new leader) knows nothing of its predecessor's cycles;
    # the condition it finds on the pod is what it keeps true, from its first cycle.
    api.pods["team-a/wait"]["metadata"]["annotations"]["berth.dev/gpu-count"] = "3"
    clock.advance(10)
    controller(api, clock, s=QUIET).run_cycle()
    cond = condition(api, "team-a/wait")
    assert cond is not None and cond["reason"] != "Deferred" and cond["status"] == "True"


def test_a_gang_queued_behind_the_batch_is_not_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight one-GPU pods on eight free GPUs, a solve that places one gang a cycle (the model
    holds one, the tail's pass none): the other pods are queued behind the batch, cycle after
    cycle, and no condition or Event is written for them while they move up."""
    monkeypatch.setattr(solve_mod, "MODEL_SHARE", 1e-9)
    monkeypatch.setattr(solve_mod, "TAIL_SHARE", 1e-9)
    api = _cluster()
    for i in range(8):
        api.add_pod(pod(f"q{i}", gpus=1))
    clock = FakeClock()
    ctl = controller(api, clock, s=QUIET)
    for cycle in range(1, 4):
        ctl.run_cycle()
        clock.advance(10)
        released = [i for i in range(8) if gates(api, f"team-a/q{i}") == []]
        assert len(released) == cycle
    assert [condition(api, f"team-a/q{i}") for i in range(8)] == [None] * 8
    assert api.events == []
