"""The cycle end to end against the in-memory API server, with a fake clock."""

from __future__ import annotations

from admission import constants as c
from admission.controller import translate as tr
from admission.controller.snapshot import build
from solver.plan import GangPlacement, Plan, PodPlacement, SolveStats
from solver.types import GpuShare, Snapshot, Tenant
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import condition, controller, gates, pinned_node, settings
from tests.admission.controller.objects import FakeClock, node, pod


def cluster(nodes: int = 2, gpus: int = 8) -> FakeApi:
    api = FakeApi()
    for i in range(nodes):
        api.add_node(node(f"n{i}", gpus=gpus, rack=f"rack-{i // 2}"))
    return api


def test_complete_gang_is_released_pinned_and_annotated() -> None:
    api = cluster()
    for i in range(2):
        api.add_pod(pod(f"t{i}", gang="train", size=2, gpus=4))
    clock = FakeClock()
    ctl = controller(api, clock)
    clock.advance(10)
    report = ctl.run_cycle()
    assert report.admitted == 1 and report.released[0].complete
    for i in range(2):
        key = f"team-a/t{i}"
        assert gates(api, key) == []
        ann = api.pods[key]["metadata"]["annotations"]
        assert pinned_node(api, key) == ann[c.ANNOTATION_ASSIGNED_NODE]
        assert len(ann[c.ANNOTATION_ASSIGNED_GPUS].split(",")) == 4
        assert ann[c.ANNOTATION_PLAN] == report.released[0].released_pods[0]["metadata"][
            "annotations"][c.ANNOTATION_PLAN]
        cond = condition(api, key)
        assert cond and cond["status"] == "False" and cond["reason"] == "Released"
    # Creation to release: 10 s on the fake clock.
    hist = ctl.metrics.registry.get_sample_value(
        "berth_release_latency_seconds_sum", {"tenant": "team-a", "qos_class": "", "path": "batch"})
    assert hist == 20.0
    # Nothing left to do: a second cycle writes nothing.
    before = len(api.patches)
    ctl.run_cycle()
    assert len(api.patches) == before


def test_gpus_held_by_running_pods_are_respected() -> None:
    api = cluster(nodes=1, gpus=8)
    api.add_pod(pod("other", ns="ops", gpus=6, gated=False, node_name="n0"))
    api.add_pod(pod("big", gpus=4))
    api.add_pod(pod("small", gpus=2))
    ctl = controller(api, FakeClock())
    ctl.run_cycle()
    assert gates(api, "team-a/small") == []
    assert gates(api, "team-a/big") == [c.SCHEDULING_GATE]
    used = api.pods["team-a/small"]["metadata"]["annotations"][c.ANNOTATION_ASSIGNED_GPUS]
    assert set(used.split(",")).isdisjoint({"0", "1", "2", "3", "4", "5"})
    assert condition(api, "team-a/big")["reason"] == "Deferred"


def test_taints_cordon_and_readiness_are_respected() -> None:
    api = FakeApi()
    api.add_node(node("cordoned", cordoned=True))
    api.add_node(node("notready", ready=False))
    api.add_node(node("tainted", taints=[{"key": "dedicated", "value": "x",
                                          "effect": "NoSchedule"}]))
    api.add_node(node("ok"))
    for i in range(3):
        api.add_pod(pod(f"p{i}", gpus=4))
    controller(api, FakeClock()).run_cycle()
    nodes = {pinned_node(api, f"team-a/p{i}") for i in range(3)}
    assert nodes <= {"ok", None}
    assert sum(gates(api, f"team-a/p{i}") == [] for i in range(3)) == 2


def test_quota_wait_says_why_and_how_many_ahead() -> None:
    api = cluster(nodes=2)
    s = settings(tenants=(Tenant("team-a", quota_milli=8000, can_borrow=False),
                          Tenant("team-b")))
    for i in range(4):
        api.add_pod(pod(f"j{i}", gang=f"job{i}", size=1, gpus=4))
    ctl = controller(api, FakeClock(), s=s)
    ctl.run_cycle()
    released = [i for i in range(4) if gates(api, f"team-a/j{i}") == []]
    assert len(released) == 2
    waiting = sorted(condition(api, f"team-a/j{i}")["message"] for i in range(4)
                     if i not in released)
    quota = "quota: tenant team-a would use 12000 of its 8000 milli-GPU and may not borrow"
    assert waiting == [f"waiting: {quota}; 0 gangs ahead", f"waiting: {quota}; 1 gang ahead"]
    assert any(e["reason"] == "Quota" for e in api.events)


def test_incomplete_gang_waits_then_times_out_once() -> None:
    api = cluster()
    api.add_pod(pod("w0", gang="ws", size=3, gpus=1))
    api.add_pod(pod("w1", gang="ws", size=3, gpus=1))
    clock = FakeClock()
    ctl = controller(api, clock)
    ctl.run_cycle()
    assert condition(api, "team-a/w0")["message"] == (
        "waiting: gang team-a/ws has 2 of 3 pods; it is considered once all exist")
    clock.advance(301)
    ctl.run_cycle()
    ctl.run_cycle()
    assert ctl.metrics.registry.get_sample_value(
        "berth_gang_timeouts_total", {"tenant": "team-a"}) == 1.0
    assert condition(api, "team-a/w1")["reason"] == "GangTimedOut"
    assert [e["type"] for e in api.events if e["reason"] == "GangTimedOut"] == ["Warning"] * 2
    # The last pod arrives: the gang is complete and goes.
    api.add_pod(pod("w2", gang="ws", size=3, gpus=1))
    ctl.relist()
    ctl.run_cycle()
    assert all(gates(api, f"team-a/w{i}") == [] for i in range(3))


def test_fast_path_places_on_arrival_without_the_batch() -> None:
    api = cluster(nodes=1)
    api.add_pod(pod("batch", gang="b", size=2, gpus=2))
    api.add_pod(pod("batch2", gang="b", size=2, gpus=2))
    clock = FakeClock()
    ctl = controller(api, clock, s=settings(fast_path_classes=frozenset({"inference"})))
    new = api.add_pod(pod("serve", gpus=1, milli=500, qos="inference"))
    ctl.on_pod_event("ADDED", new)
    assert ctl._wake.is_set()
    clock.advance(0.25)
    report = ctl.run_cycle(fast=True)
    assert report.path == "fast" and report.released[0].complete
    assert gates(api, "team-a/serve") == []
    assert gates(api, "team-a/batch") == [c.SCHEDULING_GATE]  # waits for its window
    assert ctl.metrics.registry.get_sample_value(
        "berth_release_latency_seconds_sum",
        {"tenant": "team-a", "qos_class": "inference", "path": "fast"}) == 0.25


def test_a_plan_the_checker_refuses_releases_nothing() -> None:
    api = cluster(nodes=1)
    api.add_pod(pod("a", gpus=1))
    api.add_pod(pod("b", gpus=1))

    def double_booking(snap: Snapshot) -> Plan:
        place = [GangPlacement(g.name, (PodPlacement(g.pods[0].name, "n0", (GpuShare(0, 1000),)),))
                 for g in snap.gangs]
        return Plan(tuple(place), (), SolveStats("broken", "FEASIBLE", 0.0))

    ctl = controller(api, FakeClock(), solve_fn=double_booking)
    report = ctl.run_cycle()
    assert report.violations and report.admitted == 0
    assert gates(api, "team-a/a") == [c.SCHEDULING_GATE]
    assert condition(api, "team-a/a")["reason"] == "PlanRejected"
    assert not [k for k, _ in api.patches if k.endswith("/a") or k.endswith("/b")]


def test_broken_pod_is_told_and_others_proceed() -> None:
    api = cluster(nodes=1)
    bad = pod("bad", gang="g", size=1)
    bad["metadata"]["annotations"]["berth.dev/gpu-count"] = "lots"
    api.add_pod(bad)
    api.add_pod(pod("good", gpus=1))
    controller(api, FakeClock()).run_cycle()
    assert gates(api, "team-a/good") == []
    cond = condition(api, "team-a/bad")
    assert cond["reason"] == "InvalidPod" and "berth.dev/gpu-count" in cond["message"]


def test_explanations_respect_the_budget_and_are_not_rewritten() -> None:
    api = cluster(nodes=1, gpus=1)
    for i in range(6):
        api.add_pod(pod(f"p{i}", gpus=1, gang=f"g{i}"))
    ctl = controller(api, FakeClock(), s=settings(explain_budget=3))
    ctl.run_cycle()
    told = [i for i in range(6) if condition(api, f"team-a/p{i}")]
    assert len(told) == 3  # 1 released + 2 waiting within a budget of 3
    ctl.run_cycle()
    ctl.run_cycle()
    events = len(api.events)
    ctl.run_cycle()
    assert len(api.events) == events  # nothing changed: nothing written
    assert all(condition(api, f"team-a/p{i}") for i in range(6))


def test_berth_placed_pods_keep_their_shares_after_restart() -> None:
    api = cluster(nodes=1, gpus=2)
    for i in range(3):
        api.add_pod(pod(f"s{i}", gpus=1, milli=500))
    ctl = controller(api, FakeClock())
    ctl.run_cycle()
    placed = {k: tr.assigned_shares(p) for k, p in api.pods.items()}
    for k in placed:
        api.bind(k, "n0")
    # A new replica knows nothing but what the API server says.
    fresh = controller(api, FakeClock(), identity="replica-1")
    snap = build(fresh.inventory.view(), fresh.settings, FakeClock()()).snapshot
    held = {r.name: (r.node, r.gpus) for r in snap.running}
    assert held == placed


def test_memo_follows_changes_and_never_mixes_objects() -> None:
    api = cluster(nodes=2)
    a = pod("m0", gpus=1)
    a["metadata"]["uid"] = "same-uid"
    b = pod("m1", gpus=2)
    b["metadata"]["uid"] = "same-uid"  # a careless copy: the name still tells them apart
    api.add_pod(a)
    api.add_pod(b)
    ctl = controller(api, FakeClock())
    first = build(ctl.inventory.view(), ctl.settings, FakeClock()(), ctl.cycle._memo)
    assert sorted(p.gpu_count for g in first.snapshot.gangs for p in g.pods) == [1, 2]
    # A node change (cordon) is seen by the next cycle although nothing else changed.
    api.nodes["n0"]["spec"]["unschedulable"] = True
    api.nodes["n0"]["metadata"]["resourceVersion"] = "99999"
    ctl.relist()
    again = build(ctl.inventory.view(), ctl.settings, FakeClock()(), ctl.cycle._memo)
    assert not again.nodes["n0"].schedulable and again.nodes["n1"].schedulable


def test_a_replica_that_loses_the_lease_mid_cycle_stops_writing() -> None:
    api = cluster(nodes=2)
    for i in range(4):
        api.add_pod(pod(f"j{i}", gang=f"job{i}", gpus=2))
    ctl = controller(api, FakeClock())
    leading = iter([True, False])  # the lease is lost after the first gang
    ctl.cycle.still_leader = lambda: next(leading, False)
    report = ctl.run_cycle()
    assert report.admitted == 4 and len(report.released) == 1
    assert sum(gates(api, f"team-a/j{i}") == [] for i in range(4)) == 1


def test_gang_states_reach_the_report_and_the_metrics_as_plain_names() -> None:
    api = cluster(nodes=1, gpus=8)
    api.add_pod(pod("other", ns="ops", gpus=6, gated=False, node_name="n0"))
    api.add_pod(pod("big", gpus=4))  # does not fit beside "other": stays pending
    api.add_pod(pod("w0", gang="half", size=2, gpus=1))  # its second pod never comes
    ctl = controller(api, FakeClock())
    report = ctl.run_cycle()
    assert report.gangs == {"pending": 1, "incomplete": 1}
    assert {type(state) for state in report.gangs} == {str}
    assert "'incomplete': 1" in report.summary()
    for state in ("pending", "incomplete"):
        assert ctl.metrics.registry.get_sample_value(
            "berth_pending_gangs", {"tenant": "team-a", "state": state}) == 1
