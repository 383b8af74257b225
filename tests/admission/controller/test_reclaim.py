"""Reclaim in the controller: a tenant waiting within its own quota gets back the GPUs another
tenant borrowed. The victim gang is evicted whole through the Eviction API (dry run first, so a
PodDisruptionBudget keeps the whole gang), its pods say who reclaimed them, and the reclaiming
gang starts once they are gone. What the victims are chosen by is read only from what a tenant
cannot change (Berth's protected keys), never from the pod's status."""

from __future__ import annotations

from typing import Any

from admission.controller.snapshot import build
from solver.types import Reclaim, SolverPolicy, Tenant
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import condition, controller, gates, settings
from tests.admission.controller.objects import FakeClock, node, pod

A_QUOTA = 8000


def reclaim_settings(**kw: Any) -> Any:
    return settings(tenants=(Tenant("team-a", quota_milli=A_QUOTA),
                             Tenant("team-b", quota_milli=kw.pop("b_quota", 0))),
                    solver_policy=SolverPolicy(reclaim=Reclaim(
                        enabled=kw.pop("enabled", True), min_run_s=kw.pop("min_run_s", 300.0),
                        max_gangs=4, preempt_within_tenant=kw.pop("preempt", False))), **kw)


def borrowed(api: FakeApi, clock: FakeClock, **kw: Any) -> Any:
    """n0 (8 GPUs) filled by team-b, which has no quota of its own: gang b1 (two pods of two
    GPUs, priority 0) and gang b2 (one pod of four GPUs, priority 5), released by Berth on
    team-a's idle quota and bound."""
    api.add_node(node("n0", gpus=8))
    for i in range(2):
        api.add_pod(pod(f"b1-{i}", ns="team-b", gang="b1", size=2, gpus=2))
    p = pod("b2-0", ns="team-b", gang="b2", size=1, gpus=4)
    p["metadata"]["annotations"]["berth.dev/priority"] = "5"
    api.add_pod(p)
    ctl = controller(api, clock, s=reclaim_settings(**kw))
    report = ctl.run_cycle()
    assert report.admitted == 2, report
    for key in ("team-b/b1-0", "team-b/b1-1", "team-b/b2-0"):
        api.bind(key, "n0")
    ctl.relist()
    return ctl


def reclaimed_events(api: FakeApi) -> list[dict[str, Any]]:
    return [e for e in api.events if e["reason"] == "Reclaimed"]


def assert_b1_evicted_whole(api: FakeApi, report: Any, says: str) -> None:
    """Gang team-b/b1 (both pods, nothing else) evicted in one complete eviction, an Event on
    each pod saying ``says``."""
    assert sorted(api.evictions) == ["team-b/b1-0", "team-b/b1-1"]
    assert [r.complete for r in report.evictions] == [True]
    events = reclaimed_events(api)
    assert sorted(e["involvedObject"]["name"] for e in events) == ["b1-0", "b1-1"]
    assert all(says in e["message"] for e in events), [e["message"] for e in events]


def test_a_tenant_within_its_quota_reclaims_a_borrowed_gang_whole() -> None:
    api, clock = FakeApi(), FakeClock()
    ctl = borrowed(api, clock)
    clock.advance(600)
    api.add_pod(pod("a1-0", gang="a1", size=1, gpus=4, created=clock()))
    ctl.relist()
    report = ctl.run_cycle()
    # the lowest priority gang goes, both of its pods, nothing else
    assert_b1_evicted_whole(api, report, "reclaimed by tenant team-a for its gang team-a/a1")
    # the reclaiming gang is released in the same cycle, pinned where the evicted pods were
    # (the scheduler binds it once they are gone)
    assert gates(api, "team-a/a1-0") == []
    assert api.pods["team-a/a1-0"]["metadata"]["annotations"]["berth.dev/assigned-node"] == "n0"
    metric = ctl.metrics.registry.get_sample_value(
        "berth_reclaimed_gangs_total", {"tenant": "team-a", "victim_tenant": "team-b"})
    assert metric == 1.0
    # while the evicted pods terminate, nothing more is evicted for the same gang, and the
    # pods their owner makes again wait as the same gang (the inventory drops pods being
    # deleted, so the leaving ones are not counted as members)
    for i in range(2):
        api.add_pod(pod(f"b1-new-{i}", ns="team-b", gang="b1", size=2, gpus=2,
                        created=clock()))
    ctl.relist()
    report = ctl.run_cycle()
    assert sorted(api.evictions) == ["team-b/b1-0", "team-b/b1-1"]
    assert report.why["team-b/b1"].reason in ("Quota", "Deferred", "Reclaim"), \
        report.why["team-b/b1"]
    # once they are gone, the recreated gang still waits: no quota is idle for it to borrow
    for key in ("team-b/b1-0", "team-b/b1-1"):
        del api.pods[key]
    ctl.relist()
    ctl.run_cycle()
    assert gates(api, "team-b/b1-new-0") == ["berth.dev/admission"]
    assert sorted(api.evictions) == ["team-b/b1-0", "team-b/b1-1"]  # b2 kept running


def test_berth_announces_the_disruption_before_it_evicts() -> None:
    api, clock = FakeApi(), FakeClock()
    ctl = borrowed(api, clock)
    clock.advance(600)
    seen: list[tuple[str, dict[str, Any]]] = []
    real = api.set_pod_condition

    def spy(namespace: str, name: str, cond: dict[str, Any]) -> dict[str, Any]:
        seen.append((f"{namespace}/{name}", cond))
        return real(namespace, name, cond)

    api.set_pod_condition = spy  # type: ignore[method-assign]
    api.add_pod(pod("a1-0", gang="a1", size=1, gpus=4, created=clock()))
    ctl.relist()
    ctl.run_cycle()
    disruption = {k: c for k, c in seen if c["type"] == "DisruptionTarget"}
    assert set(disruption) == {"team-b/b1-0", "team-b/b1-1"}
    for c in disruption.values():
        assert c["status"] == "True" and c["reason"] == "BerthReclaim"
        assert "tenant team-a" in c["message"]


def test_a_disruption_budget_keeps_the_whole_gang() -> None:
    api, clock = FakeApi(), FakeClock()
    ctl = borrowed(api, clock)
    clock.advance(600)
    api.blocked.add("team-b/b1-1")  # its PDB allows no disruption now
    api.add_pod(pod("a1-0", gang="a1", size=1, gpus=4, created=clock()))
    ctl.relist()
    report = ctl.run_cycle()
    assert api.evictions == []  # not even b1-0: the dry run asked for every pod first
    assert len(report.evictions) == 1 and not report.evictions[0].complete
    assert "429" in (report.evictions[0].refused or "")
    assert reclaimed_events(api) == []
    # the gang it was for is not released onto GPUs that are still held
    assert gates(api, "team-a/a1-0") == ["berth.dev/admission"]
    cond = condition(api, "team-a/a1-0")
    assert cond is not None and cond["reason"] == "Reclaim" and "429" in cond["message"], cond
    assert ctl.metrics.registry.get_sample_value(
        "berth_reclaim_refused_total", {"tenant": "team-a", "victim_tenant": "team-b"}) == 1.0


def test_nothing_is_reclaimed_before_the_minimum_run_time_or_when_off() -> None:
    api, clock = FakeApi(), FakeClock()
    ctl = borrowed(api, clock, min_run_s=900.0)
    clock.advance(600)
    api.add_pod(pod("a1-0", gang="a1", size=1, gpus=4, created=clock()))
    ctl.relist()
    ctl.run_cycle()
    assert api.evictions == []
    api2, clock2 = FakeApi(), FakeClock()
    ctl2 = borrowed(api2, clock2, enabled=False)
    clock2.advance(3600)
    api2.add_pod(pod("a1-0", gang="a1", size=1, gpus=4, created=clock2()))
    ctl2.relist()
    ctl2.run_cycle()
    assert api2.evictions == []


def test_nothing_is_reclaimed_from_a_tenant_within_its_quota() -> None:
    # team-b's quota covers the 8 GPUs it runs: team-a's gang waits, nothing is evicted
    api, clock = FakeApi(), FakeClock()
    ctl = borrowed(api, clock, b_quota=8000)
    clock.advance(3600)
    api.add_pod(pod("a1-0", gang="a1", size=1, gpus=4, created=clock()))
    ctl.relist()
    ctl.run_cycle()
    assert api.evictions == []


def test_a_gang_beyond_its_own_quota_reclaims_nothing() -> None:
    api, clock = FakeApi(), FakeClock()
    ctl = borrowed(api, clock)
    clock.advance(3600)
    # team-a asks for 12 GPUs in one gang: more than its quota of 8 (it would borrow)
    for i in range(3):
        api.add_pod(pod(f"a1-{i}", gang="a1", size=3, gpus=4, created=clock()))
    ctl.relist()
    ctl.run_cycle()
    assert api.evictions == []


def test_victims_are_chosen_from_what_the_tenant_cannot_change() -> None:
    """A borrowing tenant cannot shield its gang: a status start time set to now does not
    shorten its run time (Berth's protected assigned-at says when it was released), and a
    priority above its bound counts as the bound."""
    api, clock = FakeApi(), FakeClock()
    ctl = borrowed(api, clock, min_run_s=300.0)
    clock.advance(600)
    for key in ("team-b/b1-0", "team-b/b1-1"):
        api.pods[key]["status"]["startTime"] = "2099-01-01T00:00:00Z"
    ctl.relist()
    built = build(ctl.inventory.view(), ctl.settings, clock())
    runs = {r.name: r for r in built.snapshot.running}
    assert runs["team-b/b1-0"].run_s == 600.0 and runs["team-b/b1-0"].gang == "team-b/b1"
    assert runs["team-b/b2-0"].priority == 5
    api.add_pod(pod("a1-0", gang="a1", size=1, gpus=4, created=clock()))
    ctl.relist()
    ctl.run_cycle()
    assert sorted(api.evictions) == ["team-b/b1-0", "team-b/b1-1"]


def test_pods_berth_did_not_place_are_never_victims() -> None:
    """A pod bound outside Berth (no plan of Berth's), or one in a namespace the policy does
    not manage that carries Berth's keys, has no gang in the snapshot: never evicted."""
    api, clock = FakeApi(), FakeClock()
    api.add_node(node("n0", gpus=8))
    api.add_pod(pod("foreign", ns="elsewhere", gang="x", size=1, gpus=4, gated=False,
                    node_name="n0"))
    p = pod("plain", ns="team-b", gang="y", size=1, gpus=4, gated=False, node_name="n0")
    api.add_pod(p)
    ctl = controller(api, clock, s=reclaim_settings(min_run_s=0.0))
    clock.advance(3600)
    api.add_pod(pod("a1-0", gang="a1", size=1, gpus=4, created=clock()))
    ctl.relist()
    built = build(ctl.inventory.view(), ctl.settings, clock())
    assert all(r.gang is None for r in built.snapshot.running)
    ctl.run_cycle()
    assert api.evictions == []


def test_without_an_evictor_the_gang_it_was_for_is_not_released() -> None:
    """A plan whose evictions are not carried out (the fast path, a controller without an
    evictor) releases no gang onto GPUs the victims still hold."""
    api, clock = FakeApi(), FakeClock()
    ctl = borrowed(api, clock)
    ctl.cycle.evictor = None
    clock.advance(600)
    api.add_pod(pod("a1-0", gang="a1", size=1, gpus=4, created=clock()))
    ctl.relist()
    report = ctl.run_cycle()
    assert api.evictions == [] and report.admitted == 1  # the plan admitted it ...
    assert gates(api, "team-a/a1-0") == ["berth.dev/admission"]  # ... it was not released


def _prioritised(name: str, ns: str, gpus: int, priority: int, created: Any) -> dict[str, Any]:
    p = pod(f"{name}-0", ns=ns, gang=name, size=1, gpus=gpus, created=created)
    p["metadata"]["annotations"]["berth.dev/priority"] = str(priority)
    return p


def test_a_higher_priority_gang_preempts_its_own_tenants_gang_and_says_so() -> None:
    """Preemption within a tenant (policy reclaim.preemptWithinTenant): team-b, within its own
    quota, runs b1 (priority 0) and b2 (priority 5); its b3 (priority 9) evicts b1, the lowest,
    whole; the pods are told who preempted them, under the reclaim's condition and Event."""
    api, clock = FakeApi(), FakeClock()
    ctl = borrowed(api, clock, b_quota=8000, preempt=True, enabled=False)
    clock.advance(600)
    api.add_pod(_prioritised("b3", "team-b", 4, 9, clock()))
    ctl.relist()
    report = ctl.run_cycle()
    assert_b1_evicted_whole(
        api, report, "preempted within tenant team-b by its gang team-b/b3 of higher priority")
    assert gates(api, "team-b/b3-0") == []


def test_priority_never_reaches_past_the_tenant() -> None:
    """A user of team-a with a gang at its tenant's highest priority cannot preempt team-b's
    gangs, which run within team-b's quota; nor can team-b's gang of equal priority preempt."""
    api, clock = FakeApi(), FakeClock()
    ctl = borrowed(api, clock, b_quota=8000, preempt=True)
    clock.advance(600)
    api.add_pod(_prioritised("a1", "team-a", 4, 100, clock()))
    api.add_pod(_prioritised("b4", "team-b", 4, 5, clock()))  # = b2's, above b1's 0
    ctl.relist()
    ctl.run_cycle()
    # b4 preempts b1 (priority 0 < 5), never b2 (5); team-a's gang takes nothing from team-b
    assert sorted(api.evictions) == ["team-b/b1-0", "team-b/b1-1"]
    for e in reclaimed_events(api):
        assert "by its gang team-b/b4" in e["message"], e["message"]
    assert gates(api, "team-a/a1-0") != []
