"""Run times learned from finished pods, in the controller: the pods Berth released that ended
Succeeded teach their kind's run time (tenant, owner kind, GPU count); where a running pod has
no bound and declares nothing, the median is its expected end (source ``learned``, shown on
the pod at release), while the policy turns learning on. An estimate: it never makes a gang
backfill. A tenant teaches only its own kinds, and nothing a pod says of itself breaks it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from admission import constants as c
from admission.controller import runtimes as rt
from admission.controller.settings import from_policy
from admission.controller.snapshot import build
from admission.controller.translate import rfc3339
from admission.policy import Policy
from solver.types import LearnedRuntimes, SolverPolicy
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import controller, gates, settings
from tests.admission.controller.objects import T0, FakeClock, node
from tests.admission.controller.test_reservations import NOW, running, waiting
from tests.admission.controller.test_runtimes import declaring, job, owned

Source = rt.Source
ON = SolverPolicy(learned_runtimes=LearnedRuntimes(enabled=True, min_samples=2, samples=5))


def finished(name: str, gpus: int, ran_s: float, *, ns: str = "team-a", phase: str = "Succeeded",
             released: bool = True, ended_at: int = 0) -> dict[str, Any]:
    """A pod Berth released that ran ``ran_s`` seconds and ended ``ended_at`` s after T0."""
    p = running(name, gpus, deadline=None, started=0)
    p["metadata"]["namespace"] = ns
    p["metadata"]["uid"] = f"uid-{ns}-{name}"
    p["metadata"]["labels"]["berth.dev/tenant"] = ns
    if released:
        p["metadata"]["annotations"][c.ANNOTATION_ASSIGNED_NODE] = "n0"
    end = T0 + timedelta(seconds=ended_at)
    p["status"]["phase"] = phase
    p["status"]["startTime"] = rfc3339(end - timedelta(seconds=ran_s))
    p["status"]["containerStatuses"] = [
        {"name": "main", "state": {"terminated": {
            "exitCode": 0 if phase == "Succeeded" else 1,
            "finishedAt": rfc3339(end - timedelta(seconds=ran_s / 2))}}},
        {"name": "sidecar", "state": {"terminated": {"exitCode": 0,
                                                     "finishedAt": rfc3339(end)}}}]
    return p


def bare(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod without owners (the recorded pods are a Job's)."""
    pod["metadata"].pop("ownerReferences", None)
    return pod


def learner(**kw: int) -> rt.Learner:
    return rt.Learner(LearnedRuntimes(enabled=True, **({"min_samples": 1} | kw)))


# ------------------------------------------------------------------ what is learned from


def test_a_finished_pod_teaches_its_kind_once() -> None:
    ln = learner()
    p = finished("done", 2, 900.0)
    assert rt.run_seconds(p) == 900.0  # to the last container's end
    assert ln.observe(p, "team-a")
    assert not ln.observe(p, "team-a")  # its deletion, a relist: counted once
    assert ln.estimate(waiting("next", 2, age=0), "team-a") == 900.0
    assert ln.estimate(waiting("other", 1, age=0), "team-a") is None  # another GPU count
    assert ln.estimate(bare(waiting("mine", 2, age=0)), "team-a") is None  # another owner


@pytest.mark.parametrize(("case", "pod", "tenant"), [
    ("failed", finished("f", 2, 900.0, phase="Failed"), "team-a"),
    ("running", running("r", 2, deadline=None), "team-a"),
    ("never released by Berth", finished("n", 2, 900.0, released=False), "team-a"),
    ("no tenant (an unmanaged namespace)", finished("u", 2, 900.0), None),
])
def test_what_is_not_learned_from(case: str, pod: dict[str, Any], tenant: str | None) -> None:
    ln = learner()
    assert not ln.observe(pod, tenant), case
    assert ln.kinds() == 0


def test_owner_kinds() -> None:
    assert rt.owner_kind(bare(waiting("p", 1, age=0))) == "Pod"
    assert rt.owner_kind(owned(bare(waiting("p", 1, age=0)))) == "Job"
    p = waiting("p", 1, age=0)
    p["metadata"]["ownerReferences"] = [
        "junk", {"kind": "Ignored", "controller": False},
        {"kind": "../" + "x" * 300, "controller": True}]
    assert rt.owner_kind(p) == rt.OTHER_OWNER


@hsettings(max_examples=200)
@given(status=st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["phase", "startTime", "containerStatuses", "state", "terminated",
                         "finishedAt", "name"]), inner, max_size=4), max_leaves=12),
    refs=st.none() | st.lists(st.dictionaries(st.sampled_from(["kind", "controller", "name"]),
                                              st.none() | st.booleans() | st.text(max_size=70),
                                              max_size=3), max_size=3))
def test_hostile_status_and_owners_never_break_learning(status: Any, refs: Any) -> None:
    """A pod's status and owner references as anything at all: learning takes it or leaves
    it, never raises, and never keeps a run time that is not a duration."""
    p = finished("h", 1, 60.0)
    p["status"] = status if isinstance(status, dict) else {"phase": "Succeeded",
                                                           "containerStatuses": status}
    p["status"].setdefault("phase", "Succeeded")
    if refs is not None:
        p["metadata"]["ownerReferences"] = refs
    ln = learner()
    try:
        ln.observe(p, "team-a")
    except (AttributeError, TypeError) as exc:  # pragma: no cover - the failure reported
        pytest.fail(f"learning raised {exc!r} on status {status!r}")
    est = ln.estimate(p, "team-a")
    assert est is None or est >= 0


# ------------------------------------------------------------------ what it decides


def test_the_order_of_sources_and_an_overrun() -> None:
    r = running("r", 1, deadline=None)  # started at T0, 2000 s before NOW
    assert rt.expected_end(r, None, "standalone", NOW, learned=2600.0) == \
        rt.Expected(600.0, Source.LEARNED)
    assert rt.expected_end(r, None, "standalone", NOW, learned=1500.0) == rt.UNKNOWN  # overrun
    # a declared estimate comes first, and its overrun is not replaced by a learned one
    assert rt.expected_end(declaring(running("d", 1, deadline=None), "1h"), None, "standalone",
                           NOW, learned=9000.0).source == Source.DECLARED
    assert rt.expected_end(declaring(running("d", 1, deadline=None), "10m"), None,
                           "standalone", NOW, learned=9000.0) == rt.UNKNOWN
    # any bound comes first
    assert rt.expected_end(running("b", 1, deadline=2300), None, "standalone", NOW,
                           learned=9000.0) == rt.Expected(300.0, Source.POD_DEADLINE)
    assert rt.expected_end(owned(r), job(deadline=2600), "standalone", NOW,
                           learned=9000.0).source == Source.JOB_DEADLINE
    assert not Source.LEARNED.enforced


def learning_cluster(*pods: dict[str, Any], on: bool = True) -> tuple[FakeApi, Any]:
    """n0 (8 GPUs), 4 held by r0 (started at T0, declares nothing), two finished 2-GPU pods of
    team-a that ran 2,400 and 2,600 s, one of team-b that ran 100 s."""
    api = FakeApi()
    api.add_node(node("n0", gpus=8))
    api.add_pod(running("r0", 2, deadline=None))
    for p in (finished("a1", 2, 2400.0), finished("a2", 2, 2600.0),
              finished("b1", 2, 100.0, ns="team-b")):
        api.add_pod(p)
    for p in pods:
        api.add_pod(p)
    clock = FakeClock(NOW)
    return api, controller(api, clock, s=settings(solver_policy=ON if on else SolverPolicy()))


def test_the_relist_learns_and_a_running_pod_of_the_kind_gets_an_expected_end() -> None:
    _, ctl = learning_cluster()
    built = build(ctl.inventory.view(), ctl.settings, NOW, learner=ctl.cycle.learner)
    (r0,) = built.snapshot.running
    assert r0.remaining_s == 500.0  # median 2,500 s, 2,000 s run
    assert built.end_sources[r0.name] == Source.LEARNED
    # learning off: the same history, no expected end
    _, off = learning_cluster(on=False)
    (r0,) = build(off.inventory.view(), off.settings, NOW,
                  learner=off.cycle.learner).snapshot.running
    assert r0.remaining_s is None


def test_the_watch_learns_and_another_tenant_teaches_nothing_of_ours() -> None:
    api = FakeApi()
    api.add_node(node("n0", gpus=8))
    api.add_pod(running("r0", 2, deadline=None))
    ctl = controller(api, FakeClock(NOW), s=settings(solver_policy=ON))
    for i in range(5):  # team-b's short pods of the same shape
        ctl.on_pod_event("MODIFIED", finished(f"b{i}", 2, 10.0, ns="team-b"))
    (r0,) = build(ctl.inventory.view(), ctl.settings, NOW,
                  learner=ctl.cycle.learner).snapshot.running
    assert r0.remaining_s is None
    ctl.on_pod_event("MODIFIED", finished("a1", 2, 3000.0))
    ctl.on_pod_event("DELETED", finished("a1", 2, 3000.0))  # the same pod: once
    ctl.on_pod_event("MODIFIED", finished("a2", 2, 2200.0))
    (r0,) = build(ctl.inventory.view(), ctl.settings, NOW,
                  learner=ctl.cycle.learner).snapshot.running
    assert r0.remaining_s == 600.0  # median of 3,000 and 2,200 is 2,600


def test_the_release_shows_the_learned_end_and_a_learned_kind_never_backfills() -> None:
    api, ctl = learning_cluster(waiting("next", 2, age=10))
    built = build(ctl.inventory.view(), ctl.settings, NOW, learner=ctl.cycle.learner)
    (gang,) = built.snapshot.gangs
    assert gang.runtime_s is None  # an estimate is no backfill bound
    ctl.run_cycle()
    assert gates(api, "team-a/next") == []
    ann = api.pods["team-a/next"]["metadata"]["annotations"]
    assert ann[c.ANNOTATION_RUNTIME_SOURCE] == "learned"
    assert ann[c.ANNOTATION_EXPECTED_END] == rfc3339(NOW + timedelta(seconds=2500))


def test_a_new_policy_turns_learning_on_and_keeps_what_was_seen() -> None:
    _, ctl = learning_cluster(on=False)
    base = {"apiVersion": "berth.dev/v1alpha1", "kind": "Policy",
            "tenants": [{"name": "team-a", "namespaces": ["team-a"]},
                        {"name": "team-b", "namespaces": ["team-b"]}]}
    off = from_policy(Policy.model_validate(base))
    assert not off.solver_policy.learned_runtimes.enabled
    on = from_policy(Policy.model_validate(base | {"solver": {"learnedRuntimes": {
        "enabled": True, "minSamples": 2, "samples": 10}}}))
    assert on.solver_policy.learned_runtimes == LearnedRuntimes(enabled=True, min_samples=2,
                                                                samples=10)
    ctl.update_settings(on)
    (r0,) = build(ctl.inventory.view(), ctl.settings, NOW,
                  learner=ctl.cycle.learner).snapshot.running
    assert r0.remaining_s == 500.0


def test_the_status_commands_learn_from_the_finished_pods_as_a_new_leader_does() -> None:
    """`berth status` / `berth explain` read the cluster, not the leader's memory: they learn
    from the finished pods the API server holds, as a leader does at its relist."""
    from tests.admission.status.fakesource import POLICY_TEXT
    from tests.admission.status.scene import Scene

    text = POLICY_TEXT + "solver:\n  learnedRuntimes: {enabled: true, minSamples: 2}\n"
    scene = Scene(nodes=1, text=text)
    scene.clock.now = NOW
    for p in (finished("a1", 2, 2400.0), finished("a2", 2, 2600.0), running("r0", 2,
                                                                            deadline=None)):
        scene.api.add_pod(p)
    pic = scene.picture()
    assert pic.built.end_sources == {"team-a/r0": Source.LEARNED}
    (r0,) = pic.built.snapshot.running
    assert r0.remaining_s == 500.0
    off = Scene(nodes=1)
    off.clock.now = NOW
    for p in (finished("a1", 2, 2400.0), finished("a2", 2, 2600.0), running("r0", 2,
                                                                          deadline=None)):
        off.api.add_pod(p)
    assert off.picture().built.end_sources == {}
