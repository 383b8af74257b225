"""Run times: bounds (a pod's deadline, Kueue's limit, a Job's deadline) and estimates
(berth.dev/expected-runtime) kept apart. An estimate, or a bound the tenant may stretch (a
Job's deadline), never makes a gang backfill; both plan running pods' expected ends; an
overrun estimate is unknown, never "being deleted"."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from admission import constants as c
from admission.controller import runtimes as rt
from admission.controller.inventory import Inventory
from admission.controller.settings import from_policy
from admission.controller.snapshot import build
from admission.controller.translate import rfc3339
from admission.policy import Policy
from solver.queue import queue_order
from solver.reclaim import leaving
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import condition, controller, gates, settings
from tests.admission.controller.objects import T0, FakeClock, node
from tests.admission.controller.test_reservations import NOW, running, waiting

Source = rt.Source


def job(name: str = "train", *, deadline: int | None = 2600, started: int | None = 0,
        ns: str = "team-a") -> dict[str, Any]:
    """A batch/v1 Job as the API server returns it, started ``started`` s after T0."""
    out: dict[str, Any] = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-job-{ns}-{name}",
                     "managedFields": [{"manager": "kubectl"}]},
        "spec": {"template": {"spec": {"containers": [{"name": "main"}]}}},
        "status": {}}
    if deadline is not None:
        out["spec"]["activeDeadlineSeconds"] = deadline
    if started is not None:
        out["status"]["startTime"] = rfc3339(T0 + timedelta(seconds=started))
    return out


def owned(pod: dict[str, Any], name: str = "train", uid: str | None = None) -> dict[str, Any]:
    pod["metadata"]["ownerReferences"] = [{
        "apiVersion": "batch/v1", "kind": "Job", "name": name, "controller": True,
        "uid": uid or f"uid-job-{pod['metadata']['namespace']}-{name}"}]
    return pod


def declaring(pod: dict[str, Any], value: str) -> dict[str, Any]:
    pod["metadata"]["annotations"][c.ANNOTATION_EXPECTED_RUNTIME] = value
    return pod


def kueue_limited(pod: dict[str, Any], seconds: str) -> dict[str, Any]:
    pod["metadata"]["labels"][c.KUEUE_MAX_EXEC_LABEL] = seconds
    return pod


def job_cluster(*pods: dict[str, Any], **job_kw: Any) -> tuple[FakeApi, FakeClock]:
    """n0 (8 GPUs), half held by r0, a pod of Job "train" with no deadline of its own; the
    Job's deadline (2600 s from T0 by default) ends it 600 s from NOW."""
    api = FakeApi()
    api.add_node(node("n0", gpus=8))
    api.add_pod(owned(running("r0", 4, deadline=None)))
    api.add_job(job(**job_kw))
    for p in pods:
        api.add_pod(p)
    return api, FakeClock(NOW)


def test_only_a_bound_the_tenant_cannot_stretch_moves_a_gang_up_the_queue() -> None:
    """The short-run bonus (policy solver.queueing) reads the bound backfill reads: a declared
    estimate or a Job's deadline, however short, gains nothing; the pod's own deadline, which
    the kubelet enforces and the API server lets only be lowered, does."""
    api, clock = job_cluster(
        waiting("first", 1, age=20),
        declaring(waiting("estimate", 1, age=10), "1m"),
        owned(waiting("jobdl", 1, age=10)),  # Job "train": its deadline ends 600 s from NOW
        waiting("own", 1, age=10, deadline=60))
    ctl = controller(api, clock)
    snap = build(ctl.inventory.view(), ctl.settings, clock()).snapshot
    runtimes = {g.name: g.runtime_s for g in snap.gangs}
    assert runtimes == {"team-a/first": None, "team-a/estimate": None, "team-a/jobdl": None,
                        "team-a/own": 60.0}
    order = [g.name for g in queue_order(snap)]
    assert order[:2] == ["team-a/own", "team-a/first"]  # the others: aged least, no bonus


# ------------------------------------------------------------------ the rules, one pod at a time


@pytest.mark.parametrize(("case", "pod", "backend", "bound"), [
    ("own deadline", waiting("p", 1, age=0, deadline=900), "standalone",
     rt.Expected(900.0, Source.POD_DEADLINE)),
    ("Kueue's limit under Kueue", kueue_limited(waiting("p", 1, age=0), "600"), "kueue",
     rt.Expected(600.0, Source.KUEUE)),
    ("the smaller of both", kueue_limited(waiting("p", 1, age=0, deadline=900), "600"),
     "kueue", rt.Expected(600.0, Source.KUEUE)),
    ("Kueue's label without Kueue enforces nothing", kueue_limited(waiting("p", 1, age=0),
                                                                   "600"), "standalone",
     rt.UNKNOWN),
    ("a label Kueue ignores (not an int32)", kueue_limited(waiting("p", 1, age=0),
                                                           "4294967296"), "kueue", rt.UNKNOWN),
    ("a label Kueue ignores (not digits)", kueue_limited(waiting("p", 1, age=0), "10m"),
     "kueue", rt.UNKNOWN),
    ("an estimate", declaring(waiting("p", 1, age=0), "5m"), "standalone", rt.UNKNOWN),
    ("a Job's deadline", owned(waiting("p", 1, age=0)), "standalone", rt.UNKNOWN),
])
def test_only_bounds_the_tenant_cannot_stretch_may_backfill(
        case: str, pod: dict[str, Any], backend: str, bound: rt.Expected) -> None:
    assert rt.backfill_bound(pod, backend) == bound, case


@given(estimate=st.text(max_size=12) | st.sampled_from(["1s", "1m", "2h", "90m", "1h30m"]),
       job_deadline=st.none() | st.integers(min_value=1, max_value=10**6),
       own=st.none() | st.integers(min_value=1, max_value=10**6),
       backend=st.sampled_from(["standalone", "kueue", "volcano"]))
def test_what_a_tenant_may_stretch_never_changes_backfill(
        estimate: str, job_deadline: int | None, own: int | None, backend: str) -> None:
    """Adding an estimate (any text) and a Job (any deadline) to a pod leaves its backfill
    bound what its own deadline alone makes it."""
    bare = waiting("p", 1, age=0, deadline=own)
    stretched = owned(declaring(waiting("p", 1, age=0, deadline=own), estimate))
    jobs = {"team-a/train": job(deadline=job_deadline)}
    assert rt.owner_job(stretched, jobs) is jobs["team-a/train"]
    assert rt.backfill_bound(stretched, backend) == rt.backfill_bound(bare, backend)
    assert rt.backfill_bound(stretched, backend).remaining_s == (None if own is None
                                                                 else float(own))


def test_expected_ends_take_the_earliest_bound_else_the_estimate() -> None:
    j = job(deadline=2600)  # ends 600 s from NOW
    r = running("r", 1, deadline=None)  # started at T0, 2000 s before NOW
    assert rt.expected_end(owned(r), j, "standalone", NOW) == rt.Expected(600.0,
                                                                           Source.JOB_DEADLINE)
    assert rt.expected_end(owned(running("r", 1, deadline=2300)), j, "standalone", NOW) == \
        rt.Expected(300.0, Source.POD_DEADLINE)
    limited = kueue_limited(owned(running("r", 1, deadline=None)), "2100")
    assert rt.expected_end(limited, j, "kueue", NOW) == rt.Expected(100.0, Source.KUEUE)
    assert rt.expected_end(limited, j, "volcano", NOW).source == Source.JOB_DEADLINE
    est = declaring(owned(running("r", 1, deadline=None)), "1h")
    assert rt.expected_end(est, j, "standalone", NOW).source == Source.JOB_DEADLINE
    assert rt.expected_end(est, None, "standalone", NOW) == rt.Expected(1600.0,
                                                                         Source.DECLARED)
    # not started: each whole
    assert rt.expected_end(declaring(waiting("w", 1, age=0), "90m"), None, "standalone",
                           NOW) == rt.Expected(5400.0, Source.DECLARED)
    # a policy lowered since CREATE caps the estimate
    assert rt.expected_end(declaring(waiting("w", 1, age=0), "90m"), None, "standalone",
                           NOW, estimate_cap=3600.0) == rt.Expected(3600.0, Source.DECLARED)


def test_past_ends() -> None:
    # a pod's own deadline past: 0, as before (the kubelet is ending it)
    assert rt.expected_end(running("r", 1, deadline=60), None, "standalone", NOW) == \
        rt.Expected(0.0, Source.POD_DEADLINE)
    # a Job's deadline past, Kueue's limit past, an estimate overrun: unknown, never 0
    assert rt.expected_end(owned(running("r", 1, deadline=None)), job(deadline=60),
                           "standalone", NOW) == rt.UNKNOWN
    assert rt.expected_end(kueue_limited(running("r", 1, deadline=None), "60"), None, "kueue",
                           NOW) == rt.UNKNOWN
    assert rt.expected_end(declaring(running("r", 1, deadline=None), "10m"), None,
                           "standalone", NOW) == rt.UNKNOWN
    # a Job past its deadline but still holding a declared estimate: the estimate
    assert rt.expected_end(declaring(owned(running("r", 1, deadline=None)), "1h"),
                           job(deadline=60), "standalone", NOW).source == Source.DECLARED


def test_the_job_is_the_owner_the_pod_names_uid_included() -> None:
    jobs = {"team-a/train": job()}
    pod = owned(running("r", 1, deadline=None))
    assert rt.owner_job(pod, jobs) is jobs["team-a/train"]
    assert rt.owner_job(owned(running("r", 1, deadline=None), uid="other"), jobs) is None
    pod["metadata"]["ownerReferences"][0]["controller"] = False
    assert rt.owner_job(pod, jobs) is None
    assert rt.owner_job(running("r", 1, deadline=None), jobs) is None
    other_ns = owned(running("r", 1, deadline=None))
    other_ns["metadata"]["namespace"] = "team-b"
    assert rt.owner_job(other_ns, jobs) is None  # the Job is looked up in the pod's namespace


def test_release_annotations() -> None:
    assert rt.release_annotations(rt.Expected(90.0, Source.JOB_DEADLINE), NOW) == {
        c.ANNOTATION_EXPECTED_END: rfc3339(NOW + timedelta(seconds=90)),
        c.ANNOTATION_RUNTIME_SOURCE: "job-deadline"}
    assert rt.release_annotations(rt.UNKNOWN, NOW) == {c.ANNOTATION_RUNTIME_SOURCE: "unknown"}


# ------------------------------------------------------------------ the Job watch


def test_the_inventory_keeps_what_it_needs_of_jobs_with_a_deadline() -> None:
    inv = Inventory()
    inv.replace_jobs([{**job("a"), "metadata": {**job("a")["metadata"], "resourceVersion": "5"}},
                      job("none", deadline=None)])
    (kept,) = inv.view().jobs.values()
    assert kept == {"metadata": {"name": "a", "namespace": "team-a", "uid": "uid-job-team-a-a",
                                 "resourceVersion": "5"},
                    "spec": {"activeDeadlineSeconds": 2600},
                    "status": {"startTime": rfc3339(T0)}}
    raised = job("a", deadline=9000)
    raised["metadata"]["resourceVersion"] = "7"
    assert inv.apply_job("MODIFIED", raised)
    assert inv.view().jobs["team-a/a"]["spec"]["activeDeadlineSeconds"] == 9000
    stale = job("a", deadline=10)
    stale["metadata"]["resourceVersion"] = "6"
    assert not inv.apply_job("MODIFIED", stale)
    other = job("a")
    other["metadata"]["uid"] = "recreated"
    assert not inv.apply_job("DELETED", other)  # another Job of that name: not ours to drop
    lifted = job("a", deadline=None)
    lifted["metadata"]["resourceVersion"] = "8"
    assert inv.apply_job("MODIFIED", lifted)  # its deadline removed: nothing left to learn
    assert inv.view().jobs == {}


def test_the_job_watch_feeds_expected_ends_and_reservations() -> None:
    """The usual ML workload: a Job's pods carry no deadline of their own. The Job's deadline
    (learned from the Job watch) says when r0 ends, so the big gang gets a reservation."""
    api, clock = job_cluster(waiting("big", 8, age=1000))
    ctl = controller(api, clock)
    built = build(ctl.inventory.view(), ctl.settings, clock())
    (r0,) = built.snapshot.running
    assert r0.remaining_s == 600.0
    clock.advance(10)
    ctl.run_cycle()
    cond = condition(api, "team-a/big")
    assert cond is not None and cond["reason"] == "Reserved", cond
    assert "expected to start at 2026-11-29T14:44:00Z" in cond["message"]
    assert "ends from: job-deadline" in cond["message"]


def test_without_the_job_nothing_is_known() -> None:
    api, clock = job_cluster(waiting("big", 8, age=1000))
    del api.jobs["team-a/train"]
    ctl = controller(api, clock)
    (r0,) = build(ctl.inventory.view(), ctl.settings, clock()).snapshot.running
    assert r0.remaining_s is None


def test_a_raised_job_deadline_moves_the_plan_and_never_made_a_gang_backfill() -> None:
    """The abuse: a Job with a short deadline asks to backfill, then raises its deadline (the
    API server allows it). Berth never lets a Job's deadline make a gang backfill, so there is
    nothing to stretch; for a running pod, the raised deadline only moves its expected end."""
    short = owned(waiting("short", 2, age=10), name="quick")
    api, clock = job_cluster(waiting("big", 8, age=1000), short)
    api.add_job(job("quick", deadline=60, started=None))
    ctl = controller(api, clock)
    built = build(ctl.inventory.view(), ctl.settings, clock())
    gangs = {g.name: g for g in built.snapshot.gangs}
    assert gangs["team-a/short"].runtime_s is None  # not eligible: its Job may stretch 60 s
    clock.advance(10)
    ctl.run_cycle()
    assert gates(api, "team-a/short") == ["berth.dev/admission"]  # the hold is not its to use
    # the running Job raises its deadline: the next build plans with it
    ctl.inventory.apply_job("MODIFIED", {**job(deadline=5600), "metadata": {
        **job()["metadata"], "resourceVersion": "999999"}})
    (r0,) = build(ctl.inventory.view(), ctl.settings, clock()).snapshot.running
    assert r0.remaining_s == 3590.0


def test_an_estimate_never_makes_a_gang_backfill() -> None:
    api, clock = job_cluster(waiting("big", 8, age=1000),
                             declaring(waiting("short", 2, age=10), "1m"),
                             waiting("bounded", 2, age=10, deadline=300))
    ctl = controller(api, clock)
    gangs = {g.name: g for g in build(ctl.inventory.view(), ctl.settings, clock()).snapshot.gangs}
    assert gangs["team-a/short"].runtime_s is None
    assert gangs["team-a/bounded"].runtime_s == 300.0
    clock.advance(10)
    ctl.run_cycle()
    assert gates(api, "team-a/short") == ["berth.dev/admission"]
    assert gates(api, "team-a/bounded") == []  # a deadline does


def test_kueue_limits_backfill_only_under_kueue() -> None:
    for backend, runtime in (("kueue", 300.0), ("standalone", None)):
        api, clock = job_cluster(kueue_limited(waiting("k", 2, age=10), "300"))
        ctl = controller(api, clock, s=settings(backend=backend))
        (gang,) = build(ctl.inventory.view(), ctl.settings, clock()).snapshot.gangs
        assert gang.runtime_s == runtime, backend


def test_estimates_plan_running_ends_and_an_overrun_is_unknown_not_leaving() -> None:
    api = FakeApi()
    api.add_node(node("n0", gpus=8))
    api.add_pod(declaring(running("on-time", 2, deadline=None), "1h"))  # 1600 s left
    api.add_pod(declaring(running("overrun", 2, deadline=None), "10m"))  # 1400 s over
    clock = FakeClock(NOW)
    ctl = controller(api, clock)
    by_name = {r.name: r for r in build(ctl.inventory.view(), ctl.settings,
                                        clock()).snapshot.running}
    assert by_name["team-a/on-time"].remaining_s == 1600.0
    overrun = by_name["team-a/overrun"]
    assert overrun.remaining_s is None
    assert not leaving(overrun)  # reclaim does not count its GPUs as freed


def test_the_release_shows_the_expected_end_and_its_source() -> None:
    api, clock = job_cluster(waiting("bounded", 1, age=10, deadline=300),
                             owned(waiting("jobpod", 1, age=10)),
                             declaring(waiting("declared", 1, age=10), "2h"),
                             waiting("plain", 1, age=10))
    ctl = controller(api, clock)
    ctl.run_cycle()
    now = clock()

    def shown(key: str) -> tuple[str | None, str | None]:
        ann = api.pods[key]["metadata"]["annotations"]
        assert gates(api, key) == [], key
        return ann.get(c.ANNOTATION_EXPECTED_END), ann.get(c.ANNOTATION_RUNTIME_SOURCE)

    assert shown("team-a/bounded") == (rfc3339(now + timedelta(seconds=300)), "pod-deadline")
    assert shown("team-a/jobpod") == (rfc3339(T0 + timedelta(seconds=2600)), "job-deadline")
    assert shown("team-a/declared") == (rfc3339(now + timedelta(hours=2)), "expected-runtime")
    assert shown("team-a/plain") == (None, "unknown")


def test_the_controllers_job_watch_lists_then_follows_changes() -> None:
    """The Job watch as ``berth serve`` runs it: a list, then each change streamed."""
    class JobStream(FakeApi):
        def watch_jobs(self, resource_version: str,
                       timeout_seconds: int) -> Iterator[tuple[str, Any]]:
            yield "MODIFIED", {**job(deadline=5600), "metadata": {
                **job()["metadata"], "resourceVersion": str(int(resource_version) + 1)}}
            yield "ADDED", job("eval", deadline=None)  # no deadline: nothing kept
            stop.wait(5)

    api = JobStream()
    api.add_job(job())
    ctl = controller(api, FakeClock(NOW))
    ctl.inventory.replace_jobs([])  # as a fresh start: only the watch fills it
    stop = threading.Event()
    thread = threading.Thread(target=ctl.job_watch.run, args=(stop,), daemon=True)
    thread.start()
    try:
        for _ in range(200):
            jobs = ctl.inventory.view().jobs
            if jobs.get("team-a/train", {}).get("spec", {}).get("activeDeadlineSeconds") == 5600:
                break
            stop.wait(0.01)
        assert list(ctl.inventory.view().jobs) == ["team-a/train"]
        assert ctl.inventory.view().jobs["team-a/train"]["spec"]["activeDeadlineSeconds"] == 5600
        assert ctl.job_watch.synced.is_set()
    finally:
        stop.set()
        thread.join(5)


def test_the_policys_bound_on_estimates_reaches_the_controller() -> None:
    policy = Policy.model_validate({"tenants": [{"name": "team-a", "namespaces": ["team-a"]}],
                                    "admission": {"maxExpectedRuntimeSeconds": 3600}})
    assert from_policy(policy).max_expected_runtime_seconds == 3600.0
    api = FakeApi()
    api.add_node(node("n0", gpus=8))
    api.add_pod(declaring(running("r", 2, deadline=None, started=1000), "2h"))
    clock = FakeClock(NOW)
    ctl = controller(api, clock, s=settings(max_expected_runtime_seconds=3600.0))
    (r,) = build(ctl.inventory.view(), ctl.settings, clock()).snapshot.running
    assert r.remaining_s == 2600.0  # 1 h from its start, not 2 h


def test_a_replanned_pod_keeps_no_end_an_earlier_plan_wrote() -> None:
    """A gang whose release stopped half-way is planned again; what it shows is this plan's."""
    stale = waiting("plain", 1, age=10)
    stale["metadata"]["annotations"].update({c.ANNOTATION_EXPECTED_END: "2026-01-01T00:00:00Z",
                                             c.ANNOTATION_RUNTIME_SOURCE: "pod-deadline"})
    api, clock = job_cluster(stale)
    ctl = controller(api, clock)
    ctl.run_cycle()
    ann = api.pods["team-a/plain"]["metadata"]["annotations"]
    assert gates(api, "team-a/plain") == []
    assert c.ANNOTATION_EXPECTED_END not in ann
    assert ann[c.ANNOTATION_RUNTIME_SOURCE] == "unknown"


def test_a_retried_release_keeps_the_times_it_wrote() -> None:
    api, clock = job_cluster(waiting("a", 1, age=10, deadline=300),
                             waiting("b", 1, age=10, deadline=300))
    ctl = controller(api, clock)
    info = build(ctl.inventory.view(), ctl.settings, clock()).gangs["team-a/a"]
    info = build(ctl.inventory.view(), ctl.settings, clock()).expect(info, ctl.settings, clock())
    pod = info.gated[0]
    first, _ = ctl.releaser.write_placement(pod, "n0", (), "plan-1", info)
    clock.advance(30)
    again, changed = ctl.releaser.write_placement(first, "n0", (), "plan-1", info)
    assert not changed
    assert again["metadata"]["annotations"][c.ANNOTATION_EXPECTED_END] == rfc3339(
        NOW + timedelta(seconds=300))
