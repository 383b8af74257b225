"""Pods Kueue will never admit say so: the controller reads the Workloads of gangs that wait for
Kueue long enough (admission/controller/queued.py, admission/backends/kueue.py)."""

from __future__ import annotations

import random
import string
from typing import Any

import pytest

from admission import constants as c
from admission.backends.kueue import QUOTED_CHARS, never_admitted, workload_owners
from admission.controller.api import ApiError
from admission.controller.queued import CHECK_AFTER_S, REASON, RELIST_S
from tests.admission.controller.fakeapi import FakeApi
from tests.admission.controller.harness import condition, controller, gates, settings
from tests.admission.controller.objects import FakeClock, node, pod

KUEUE = "kueue.x-k8s.io"
PREEMPTED = ("Preempted to accommodate a workload (UID: 1d2c, JobUID: UNKNOWN) due to "
             "prioritization in the ClusterQueue")


def _cond(kind: str, status: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-12-05T00:00:00Z"}


def workload(name: str, owners: list[str], *conditions: dict[str, str], ns: str = "team-a",
             active: bool | None = None) -> dict[str, Any]:
    w: dict[str, Any] = {
        "apiVersion": f"{KUEUE}/v1beta2", "kind": "Workload",
        "metadata": {"name": name, "namespace": ns, "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": o, "uid": f"uid-{ns}-{o}"}
            for o in owners]},
        "spec": {"queueName": "team-a-queue"},
        "status": {"conditions": list(conditions)}}
    if active is not None:
        w["spec"]["active"] = active
    return w


STRANDED = (_cond("QuotaReserved", "False", "Pending", PREEMPTED),
            _cond("Evicted", "True", "Preempted", PREEMPTED),
            _cond("Requeued", "False", "Preempted", PREEMPTED))


# ------------------------------------------------------------------ what a Workload says


def test_a_workload_preempted_and_not_requeued_is_never_admitted_and_the_words_name_the_fix(
) -> None:
    said = never_admitted(workload("pod-low-3f9a2", ["low"], *STRANDED))
    assert said is not None
    assert "pod-low-3f9a2" in said and "Requeued=False, Preempted" in said
    assert PREEMPTED in said
    assert "--feature-gates=SkipReassignmentForPodOwnedWorkloads=false" in said
    assert "deactivated and activated again" in said


@pytest.mark.parametrize("conditions", [
    (),  # pending for quota: Kueue has not looked yet
    (_cond("QuotaReserved", "False", "Pending", "couldn't assign flavors"),),
    (_cond("QuotaReserved", "True", "QuotaReserved"),),
    # preempted and requeued (the gate off): back in Kueue's queue
    (_cond("QuotaReserved", "False", "Pending", PREEMPTED),
     _cond("Requeued", "True", "Preempted", PREEMPTED)),
    # requeued False but its quota reserved again: admitted after all
    (_cond("QuotaReserved", "True", "QuotaReserved"),
     _cond("Requeued", "False", "Preempted", PREEMPTED)),
    (_cond("Finished", "True", "Succeeded"), _cond("Requeued", "False", "Preempted")),
], ids=["new", "pending", "reserved", "requeued", "reserved-again", "finished"])
def test_a_workload_kueue_may_still_admit_says_nothing(conditions: tuple[dict[str, str], ...]
                                                        ) -> None:
    assert never_admitted(workload("w", ["p"], *conditions)) is None


def test_a_workload_kueue_will_requeue_at_a_set_time_says_nothing() -> None:
    """Kueue's waitForPodsReady back-off: Requeued=False until status.requeueState.requeueAt."""
    w = workload("w", ["p"], *STRANDED)
    w["status"]["requeueState"] = {"count": 1, "requeueAt": "2026-12-05T00:10:00Z"}
    assert never_admitted(w) is None


def test_a_deactivated_workload_is_never_admitted_until_activated() -> None:
    said = never_admitted(workload("w", ["p"], active=False))
    assert said is not None and "deactivated (spec.active: false)" in said
    assert never_admitted(workload("w", ["p"], active=True)) is None


def test_another_reason_than_a_preemption_does_not_blame_the_feature_gate() -> None:
    said = never_admitted(workload("w", ["p"], _cond("Requeued", "False", "InactiveWorkload")))
    assert said is not None and "InactiveWorkload" in said
    assert "SkipReassignment" not in said


def test_only_pod_owners_count_and_kueues_message_is_quoted_short() -> None:
    w = workload("w", ["a", "b"], *STRANDED)
    w["metadata"]["ownerReferences"].append(
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "uid-job"})
    assert workload_owners(w) == {"uid-team-a-a", "uid-team-a-b"}
    long = "x" * 5000 + "\n\t"
    w = workload("w", ["p"], _cond("QuotaReserved", "False", "Pending", long),
                 _cond("Requeued", "False", "Preempted" * 100))
    said = never_admitted(w)
    assert said is not None and "x" * (QUOTED_CHARS + 1) not in said
    assert "Preempted" * 30 not in said and "\n" not in said


def _garbage(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(7 if depth < 3 else 4)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False, 0, -1, 3.5, float("nan")])
    if kind == 2:
        return "".join(rng.choice(string.printable) for _ in range(rng.randrange(12)))
    if kind == 3:
        return rng.choice(["False", "True", "Requeued", "QuotaReserved", "Preempted", "Pod"])
    if kind == 4:
        return [_garbage(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["metadata", "spec", "status", "conditions", "type", "status", "reason", "message",
            "active", "name", "ownerReferences", "kind", "uid"]
    return {rng.choice(keys): _garbage(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_malformed_workloads_never_raise() -> None:
    """Whatever a Workload holds (a CRD of another version, a hand-written object), reading it
    gives words or None, never a traceback in the controller's cycle."""
    rng = random.Random(7)
    for _ in range(3000):
        w = _garbage(rng)
        if not isinstance(w, dict):
            continue
        said = never_admitted(w)
        assert said is None or isinstance(said, str)
        assert all(isinstance(u, str) for u in workload_owners(w))


# ------------------------------------------------------------------ the controller


def _stuck_pod(api: FakeApi, name: str = "low", ns: str = "team-a") -> str:
    p = pod(name, ns=ns, gpus=8, extra_gates=(c.KUEUE_GATE,))
    p["metadata"]["labels"][c.KUEUE_QUEUE_LABEL] = f"{ns}-queue"
    api.add_pod(p)
    return f"{ns}/{name}"


def _kueue_cluster() -> tuple[FakeApi, FakeClock, Any]:
    api = FakeApi()
    api.add_node(node("n0", gpus=8))
    clock = FakeClock()
    s = settings(backend="kueue", queues={"team-a": "team-a-queue", "team-b": "team-b-queue"})
    return api, clock, controller(api, clock, s=s)


def test_a_pod_kueue_will_never_admit_says_so_once_it_has_waited() -> None:
    api, clock, ctl = _kueue_cluster()
    key = _stuck_pod(api)
    api.custom[("workloads", "team-a", "pod-low-3f9a2")] = workload("pod-low-3f9a2", ["low"],
                                                                     *STRANDED)
    ctl.relist()
    ctl.run_cycle()
    cond = condition(api, key)
    assert cond is not None and cond["reason"] == "QueueAdmission", cond
    assert api.custom_lists == [], "read Workloads of a gang that just arrived"
    clock.advance(CHECK_AFTER_S + 1)
    ctl.run_cycle()
    cond = condition(api, key)
    assert cond is not None and cond["reason"] == REASON, cond
    assert "SkipReassignmentForPodOwnedWorkloads=false" in cond["message"]
    assert cond["message"].startswith(f"waiting: pod {key}: Kueue will not requeue")
    event = api.events[-1]
    assert event["reason"] == REASON and event["type"] == "Warning"
    assert c.SCHEDULING_GATE in gates(api, key) and c.KUEUE_GATE in gates(api, key)
    assert api.custom_lists == [(KUEUE, "v1beta2", "workloads", "team-a")]
    assert ctl.metrics.registry.get_sample_value("berth_queue_will_not_admit_gangs") == 1


def test_workloads_are_listed_at_most_once_a_relist_period_per_namespace() -> None:
    api, clock, ctl = _kueue_cluster()
    _stuck_pod(api)
    _stuck_pod(api, "other")
    clock.advance(CHECK_AFTER_S + 1)
    ctl.relist()
    for _ in range(3):
        ctl.run_cycle()
        clock.advance(1)
    assert len(api.custom_lists) == 1
    clock.advance(RELIST_S)
    ctl.run_cycle()
    assert len(api.custom_lists) == 2


def _stranded_and_told(api: FakeApi, clock: FakeClock, ctl: Any) -> str:
    """A pod whose Workload ``w`` says Kueue will not requeue it, after a cycle past the
    wait; returns its key, once its condition says so."""
    key = _stuck_pod(api)
    api.custom[("workloads", "team-a", "w")] = workload("w", ["low"], *STRANDED)
    clock.advance(CHECK_AFTER_S + 1)
    ctl.relist()
    ctl.run_cycle()
    assert condition(api, key)["reason"] == REASON  # type: ignore[index]
    return key


def test_a_workload_requeued_later_turns_the_words_back() -> None:
    api, clock, ctl = _kueue_cluster()
    key = _stranded_and_told(api, clock, ctl)
    # deactivated and activated again: Kueue requeues it
    api.custom[("workloads", "team-a", "w")] = workload(
        "w", ["low"], _cond("QuotaReserved", "False", "Pending", "waiting for quota"))
    clock.advance(RELIST_S + 1)
    ctl.run_cycle()
    assert condition(api, key)["reason"] == "QueueAdmission"  # type: ignore[index]
    assert ctl.metrics.registry.get_sample_value("berth_queue_will_not_admit_gangs") == 0


def test_a_workload_names_only_pods_of_its_own_namespace() -> None:
    """A Workload in team-b naming team-a's pod uid (a tenant who may write Workloads in its
    own namespace) words nothing in team-a."""
    api, clock, ctl = _kueue_cluster()
    key = _stuck_pod(api)
    forged = workload("forged", ["low"], *STRANDED, ns="team-b")
    forged["metadata"]["ownerReferences"][0]["uid"] = "uid-team-a-low"
    api.custom[("workloads", "team-b", "forged")] = forged
    _stuck_pod(api, "mine", ns="team-b")
    clock.advance(CHECK_AFTER_S + 1)
    ctl.relist()
    ctl.run_cycle()
    assert condition(api, key)["reason"] == "QueueAdmission"  # type: ignore[index]
    assert condition(api, "team-b/mine")["reason"] == "QueueAdmission"  # type: ignore[index]


def test_an_older_kueue_serves_v1beta1_and_the_version_is_remembered() -> None:
    api, clock, ctl = _kueue_cluster()
    api.custom_versions[KUEUE] = ("v1beta1",)
    _stranded_and_told(api, clock, ctl)
    clock.advance(RELIST_S + 1)
    ctl.run_cycle()
    assert [v for _, v, _, _ in api.custom_lists] == ["v1beta2", "v1beta1", "v1beta1"]


@pytest.mark.parametrize("refusal", [
    ApiError(403, 'workloads.kueue.x-k8s.io is forbidden: User "system:serviceaccount:'
                  'berth-system:berth" cannot list resource "workloads"'),
    ApiError(0, "no answer from the API server: timed out"),
], ids=["rbac", "timeout"])
def test_without_the_list_the_pod_keeps_the_plain_words_and_the_log_says_why_once(
    refusal: ApiError, caplog: pytest.LogCaptureFixture
) -> None:
    api, clock, ctl = _kueue_cluster()
    api.custom_refusal = refusal
    key = _stuck_pod(api)
    clock.advance(CHECK_AFTER_S + 1)
    ctl.relist()
    for _ in range(3):
        ctl.run_cycle()
        clock.advance(RELIST_S + 1)
    assert condition(api, key)["reason"] == "QueueAdmission"  # type: ignore[index]
    warned = [r for r in caplog.records if "Kueue's Workloads" in r.getMessage()]
    assert len(warned) == 1 and "rbac.yaml" in warned[0].getMessage()


def test_a_cluster_without_kueue_workloads_is_not_asked_again_and_again() -> None:
    api, clock, ctl = _kueue_cluster()
    api.custom_versions[KUEUE] = ()
    key = _stuck_pod(api)
    clock.advance(CHECK_AFTER_S + 1)
    ctl.relist()
    ctl.run_cycle()
    ctl.run_cycle()
    assert condition(api, key)["reason"] == "QueueAdmission"  # type: ignore[index]
    assert len(api.custom_lists) == 2  # both versions once, then the relist period


def test_other_backends_never_read_workloads() -> None:
    api = FakeApi()
    api.add_node(node("n0", gpus=1))
    clock = FakeClock()
    ctl = controller(api, clock)  # standalone
    api.add_pod(pod("big", gpus=8))
    clock.advance(CHECK_AFTER_S + 1)
    ctl.relist()
    ctl.run_cycle()
    assert api.custom_lists == []


def test_one_cycle_lists_a_bounded_number_of_namespaces_the_longest_unlisted_first() -> None:
    from admission.controller.queued import MAX_LISTS_PER_CYCLE
    from solver.types import Tenant

    names = [f"t{i}" for i in range(MAX_LISTS_PER_CYCLE + 2)]
    api = FakeApi()
    api.add_node(node("n0", gpus=8))
    clock = FakeClock()
    s = settings(backend="kueue", tenants=tuple(Tenant(n) for n in names),
                 namespaces={n: n for n in names}, queues={n: f"{n}-queue" for n in names})
    for n in names:
        _stuck_pod(api, f"p-{n}", ns=n)
    ctl = controller(api, clock, s=s)
    clock.advance(CHECK_AFTER_S + 1)
    ctl.run_cycle()
    first = [ns for _, _, _, ns in api.custom_lists]
    assert len(first) == MAX_LISTS_PER_CYCLE
    clock.advance(1)
    ctl.run_cycle()
    second = [ns for _, _, _, ns in api.custom_lists][len(first):]
    assert sorted(first + second) == sorted(names)  # the rest next cycle, none twice
    clock.advance(1)
    ctl.run_cycle()
    assert len(api.custom_lists) == len(names)  # nothing due before the relist period
