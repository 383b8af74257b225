"""The inventory never brings back a pod the cluster no longer has.

The release records each object the API server answers, and that answer may reach the inventory
after the watch's DELETED for the same pod; a 404 on a write says the pod is gone even when the
watch has not told yet. Either way the next cycle must not see the pod, or it keeps admitting a
ghost and holding capacity for it until the next relist.
"""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.controller.inventory import DROPPED_REMEMBERED, Inventory
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import controller
from tests.admission.controller.objects import FakeClock, node, pod


def _at(obj: dict, rv: int, **meta: object) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = str(rv)
    obj["metadata"].update(meta)
    return obj


def test_a_copy_recorded_after_the_delete_does_not_bring_the_pod_back() -> None:
    inv = Inventory()
    p = pod("w0")
    inv.apply_pod("ADDED", _at(p, 10))
    inv.apply_pod("DELETED", _at(p, 12))
    # The release's answer for a write made at rv 11, arriving after the watch's DELETED.
    assert inv.apply_pod("MODIFIED", _at(p, 11)) is False
    assert inv.apply_pod("MODIFIED", _at(p, 13)) is False  # a uid never comes back
    assert inv.view().pods == {}


def test_a_terminating_pod_stays_out_even_when_an_older_copy_arrives() -> None:
    inv = Inventory()
    p = pod("w0")
    inv.apply_pod("ADDED", _at(p, 10))
    inv.apply_pod("MODIFIED", _at(p, 12, deletionTimestamp="2026-01-01T00:00:00Z"))
    assert inv.apply_pod("MODIFIED", _at(p, 11)) is False
    assert inv.view().pods == {}


def test_a_pod_that_stopped_mattering_may_matter_again_at_a_later_version() -> None:
    inv = Inventory()
    ungated = pod("w0", gated=False)
    inv.apply_pod("ADDED", _at(ungated, 10))  # not Berth's, not bound: not kept
    assert inv.view().pods == {}
    assert inv.apply_pod("MODIFIED", _at(pod("w0", gated=False, node_name="n0"), 9)) is False
    assert inv.apply_pod("MODIFIED", _at(pod("w0", gated=False, node_name="n0"), 11)) is True
    assert list(inv.view().pods) == ["team-a/w0"]


def test_a_pod_recreated_under_the_same_name_is_a_new_pod() -> None:
    inv = Inventory()
    inv.apply_pod("ADDED", _at(pod("w0"), 10))
    inv.apply_pod("DELETED", _at(pod("w0"), 11))
    again = _at(pod("w0"), 12, uid="uid-second")
    assert inv.apply_pod("ADDED", again) is True
    assert inv.view().pods["team-a/w0"]["metadata"]["uid"] == "uid-second"


def test_the_memory_of_dropped_pods_is_bounded() -> None:
    inv = Inventory()
    for i in range(DROPPED_REMEMBERED + 10):
        inv.apply_pod("DELETED", _at(pod(f"p{i}"), i + 1))
    assert len(inv._dropped) == DROPPED_REMEMBERED
    assert "uid-team-a-p0" not in inv._dropped


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
                          st.integers(1, 30)), min_size=1, max_size=12))
def test_any_order_of_events_after_a_delete_leaves_the_pod_out(events) -> None:
    inv = Inventory()
    p = pod("w0")
    inv.apply_pod("ADDED", _at(p, 1))
    inv.apply_pod("DELETED", _at(p, 31))
    for event, rv in events:
        inv.apply_pod(event, _at(p, rv))
    assert inv.view().pods == {}


def test_a_pod_deleted_before_its_release_is_not_admitted_again() -> None:
    # The watch never reports the delete (the fake API has no watch): the release's 404 alone
    # must drop the pod, so the next cycle admits nothing and writes nothing for it.
    api = FakeApi()
    api.add_node(node("n0", gpus=8))
    api.add_pod(pod("w0", gpus=2))
    clock = FakeClock()
    ctl = controller(api, clock)
    del api.pods["team-a/w0"]
    first = ctl.run_cycle()
    assert first.admitted == 1 and not any(r.complete for r in first.released)
    assert ctl.inventory.view().pods == {}
    clock.advance(ctl.settings.window_seconds)
    second = ctl.run_cycle()
    assert second.admitted == 0 and second.released == []
    assert api.patches == []


def test_a_waiting_pod_deleted_unseen_is_dropped_when_its_condition_write_404s() -> None:
    api = FakeApi()
    api.add_node(node("n0", gpus=1))
    api.add_pod(pod("w0", gpus=4))  # never fits: it waits, and the cycle tells it why
    clock = FakeClock()
    ctl = controller(api, clock)
    del api.pods["team-a/w0"]
    ctl.run_cycle()
    assert ctl.inventory.view().pods == {}


def _released_unbound(pods: dict) -> int:
    from admission import constants as c
    return sum(1 for p in pods.values()
               if p["metadata"].get("annotations", {}).get(c.ANNOTATION_ASSIGNED_NODE)
               and not any(g.get("name") == c.SCHEDULING_GATE
                           for g in p["spec"].get("schedulingGates") or [])
               and not p["spec"].get("nodeName"))


_STATES = ("gated", "gated-planned", "released", "bound", "finished")


def _in_state(name: str, state: str, rv: int) -> dict:
    from admission import constants as c
    p = _at(pod(name, gated=state.startswith("gated"), node_name="n0" if state in (
        "bound", "finished") else None), rv)
    if state != "gated":
        p["metadata"]["annotations"][c.ANNOTATION_ASSIGNED_NODE] = "n0"
    if state == "finished":
        p.setdefault("status", {})["phase"] = "Succeeded"
    return p


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from((*_STATES, "DELETED")),
                          st.booleans()), max_size=60))
def test_the_count_of_released_unbound_pods_is_what_the_pods_say(events: list) -> None:
    """Whatever the order of events, stale copies, deletes and relists, the count the
    writes' pacing reads equals the pods the inventory holds that are released, ungated and
    unbound."""
    inv = Inventory()
    for rv, (i, state, relist) in enumerate(events, start=1):
        name = f"w{i}"
        if relist:
            inv.replace_pods(list(inv.view().pods.values()))
        if state == "DELETED":
            inv.apply_pod("DELETED", _at(pod(name), rv))
        else:
            inv.apply_pod("MODIFIED", _in_state(name, state, rv))
        assert inv.released_unbound() == _released_unbound(inv.view().pods)
    assert inv.counts()["released_unbound"] == inv.released_unbound()
