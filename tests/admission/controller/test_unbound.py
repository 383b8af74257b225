"""A pod Berth released that its scheduler does not bind says so (NotBound, with what the
scheduler reports), keeps its GPUs held, and says Bound once bound."""

from __future__ import annotations

from admission.controller.unbound import not_bound, scheduler_says
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import condition, controller, gates
from tests.admission.controller.objects import FakeClock, node, pod


def released_one() -> tuple[FakeApi, FakeClock]:
    api = FakeApi()
    api.add_node(node("n0", gpus=8))
    api.add_pod(pod("big", gang="big", size=1, gpus=8))
    clock = FakeClock()
    controller(api, clock).run_cycle()
    assert gates(api, "team-a/big") == []
    return api, clock


def refuse(api: FakeApi, key: str, message: str) -> None:
    """What a scheduler that will not bind the pod writes on it."""
    conds = api.pods[key].setdefault("status", {}).setdefault("conditions", [])
    conds[:] = [c for c in conds if c["type"] != "PodScheduled"] + [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": message}]


def test_a_released_pod_left_unbound_says_why_and_keeps_its_gpus() -> None:
    api, clock = released_one()
    assert condition(api, "team-a/big")["reason"] == "Released"
    refuse(api, "team-a/big", "queue q-1 is over its capability")
    clock.advance(10)  # inside the grace: nothing said yet
    controller(api, clock).run_cycle()
    assert condition(api, "team-a/big")["reason"] == "Released"
    clock.advance(25)
    api.add_pod(pod("next", gang="next", size=1, gpus=1))
    controller(api, clock).run_cycle()
    cond = condition(api, "team-a/big")
    assert (cond["status"], cond["reason"]) == ("True", "NotBound")
    assert "node n0" in cond["message"]
    assert "Unschedulable queue q-1 is over its capability" in cond["message"]
    warning = [e for e in api.events if e["reason"] == "NotBound"]
    assert len(warning) == 1 and warning[0]["type"] == "Warning"
    # Its 8 GPUs stay held: the next pod is not placed on them.
    assert gates(api, "team-a/next") != []
    # Said once: the next cycles write nothing new while nothing changes.
    events = len(api.events)
    controller(api, clock).run_cycle()
    assert len(api.events) == events
    # Bound at last: the condition turns False.
    api.pods["team-a/big"]["spec"]["nodeName"] = "n0"
    controller(api, clock).run_cycle()
    cond = condition(api, "team-a/big")
    assert (cond["status"], cond["reason"]) == ("False", "Bound")


def test_pods_bound_gated_or_never_released_are_not_reported() -> None:
    api, clock = released_one()
    clock.advance(3600)
    bound = dict(api.pods["team-a/big"], spec={**api.pods["team-a/big"]["spec"],
                                               "nodeName": "n0"})
    gated = pod("g", gang="g", size=1, gpus=1)
    plain = pod("plain", gated=False)
    assert list(not_bound([bound, gated, plain], clock(), 30)) == []
    assert scheduler_says(plain) is None


def test_a_scheduler_that_says_nothing_is_reported_only_after_ten_graces() -> None:
    api, clock = released_one()
    clock.advance(31)
    controller(api, clock).run_cycle()
    assert condition(api, "team-a/big")["reason"] == "Released"  # just behind, maybe
    clock.advance(300)
    controller(api, clock).run_cycle()
    cond = condition(api, "team-a/big")
    assert cond["reason"] == "NotBound" and "says: nothing yet" in cond["message"]
