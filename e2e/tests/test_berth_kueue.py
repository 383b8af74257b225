"""Berth in front of the real Kueue manager (``release.backend: kueue``).

``berth serve`` and Kueue's manager (its plain-pod integration on for the test's namespace) run
side by side. Berth's webhook runs first (configurations are called in name order) and adds the
tenant's LocalQueue label and, for a gang, Kueue's pod-group keys; Kueue's webhook then adds
its own gate. Each tool removes only its own gate, Kueue first: Kueue when the Workload fits
its ClusterQueue quota, then Berth, which places only gangs Kueue has admitted, when its batch
window places the gang. The pod binds on the node Berth wrote.

Quotas: Berth's team-a may hold 16 GPUs (plus 8 borrowed); the ClusterQueue here holds 10.
Past 10 GPUs Kueue's quota decides: the pod keeps both gates, Berth holds no GPUs for it and
tells it it waits for Kueue, until Kueue admits it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import dynamic
from kubernetes.client.rest import ApiException

from admission import constants as c
from admission.controller import keys
from admission.controller.queued import CHECK_AFTER_S, REASON, RELIST_S
from admission.devcluster import kueue as dk
from admission.devcluster.processes import ProcessRecord
from e2e.berth import BerthWebhook, berth_serve_as_deployed
from e2e.conftest import E2ECluster
from e2e.helpers import eventually, pod_manifest
from e2e.kueue import gpu_queues, kueue_manager

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="starts the Kueue manager and berth serve on this host"),
]

KUEUE_V = "kueue.x-k8s.io/v1beta2"
QUEUE = "team-a-queue"  # tenants[team-a].queues.kueue in the sample policy
KUEUE_GPUS = 10  # the ClusterQueue's nominal GPU quota, below Berth's 16 for team-a
# Kueue's pod webhook adds its admission gate and, with its TopologyAwareScheduling feature
# on (the default since v0.14), kueue.x-k8s.io/topology as well; admission without a topology
# flavor lifts both in one update. Gates are compared by owner: Berth or Kueue.
BOTH = frozenset({"berth", "kueue"})


def owners(gates: object) -> frozenset[str]:
    """Who holds a pod: "berth" for Berth's gate, "kueue" for any of Kueue's."""
    names = {g.name for g in gates or []}  # type: ignore[attr-defined]
    held = {"berth"} if c.SCHEDULING_GATE in names else set()
    if any(n.startswith("kueue.x-k8s.io/") for n in names):
        held.add("kueue")
    return frozenset(held)


def _kueue_backend(doc: dict[str, Any]) -> None:
    doc["release"] = {"backend": "kueue"}
    # A window long enough that Kueue's admission (immediate) is seen before Berth's release.
    doc["batch"]["windowSeconds"] = 4


@pytest.fixture
def kueue(cluster: E2ECluster, tenant_namespaces: dict[str, str],
          tmp_path: Path) -> Iterator[ProcessRecord]:
    ns = tenant_namespaces["team-a"]
    with kueue_manager(cluster, tmp_path / "kueue", ns, frameworks=("pod",)) as record, \
            gpu_queues(cluster, ns, QUEUE, KUEUE_GPUS):
        try:
            yield record
        finally:
            _delete_pods_while_kueue_runs(cluster, ns)


def _delete_pods_while_kueue_runs(cluster: E2ECluster, ns: str) -> None:
    """Kueue puts its finalizer on the pods it manages and lifts it as they go; delete them
    while it still runs, and lift any finalizer left so the namespace can go."""
    core = cluster.core
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    deadline = time.monotonic() + 20
    while core.list_namespaced_pod(ns).items and time.monotonic() < deadline:
        time.sleep(0.3)
    for p in core.list_namespaced_pod(ns).items:
        with contextlib.suppress(ApiException):
            core.patch_namespaced_pod(p.metadata.name, ns, {"metadata": {"finalizers": None}})


@pytest.fixture
def berth(cluster: E2ECluster, tenant_namespaces: dict[str, str], kueue: ProcessRecord,
          tmp_path: Path) -> Iterator[BerthWebhook]:
    with berth_serve_as_deployed(cluster, tmp_path / "berth", tenant_namespaces,
                                 components=("kueue",), edit_policy=_kueue_backend) as hook:
        yield hook


class GateHistory:
    """Every set of gates each pod of a namespace was seen with, polled in the background;
    polled once more on exit, so the last state is never missed. A failed poll is kept in
    ``errors`` (a gap in the history) rather than ending the polling."""

    def __init__(self, cluster: E2ECluster, ns: str) -> None:
        self.seen: dict[str, list[frozenset[str]]] = {}
        self.errors: list[str] = []
        self._core, self._ns = cluster.core, ns
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll_once(self) -> None:
        for p in self._core.list_namespaced_pod(self._ns).items:
            gates = owners(p.spec.scheduling_gates)
            states = self.seen.setdefault(p.metadata.name, [])
            if not states or states[-1] != gates:
                states.append(gates)

    def _poll(self) -> None:
        while not self._done.is_set():
            try:
                self._poll_once()
            except Exception as exc:  # kept and shown with the history
                self.errors.append(repr(exc))
            time.sleep(0.05)

    def __enter__(self) -> GateHistory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=5)
        self._poll_once()


def _workloads(cluster: E2ECluster, ns: str) -> list[Any]:
    res = dynamic.DynamicClient(cluster.api).resources.get(api_version=KUEUE_V, kind="Workload")
    return list(res.get(namespace=ns).items)


def _conditions(workload: Any) -> dict[str, str]:
    return {cond.type: cond.status for cond in (workload.status or {}).get("conditions") or []}


def _logs(berth: BerthWebhook, kueue: ProcessRecord) -> str:
    def tail(path: Path) -> str:
        return "\n".join(path.read_text(errors="replace").splitlines()[-25:])
    return (f"\n--- berth serve log:\n{tail(berth.log)}"
            f"\n--- kueue log:\n{tail(Path(kueue.log))}")


def test_pods_pass_both_gates_each_removed_by_its_owner_and_run_where_berth_placed_them(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], kueue: ProcessRecord,
    berth: BerthWebhook
) -> None:
    ns = tenant_namespaces["team-a"]
    core = cluster.core
    gang = {c.ANNOTATION_GANG: "pair", c.ANNOTATION_GANG_SIZE: "2"}
    with GateHistory(cluster, ns) as history:
        made = [core.create_namespaced_pod(ns, pod_manifest("solo", gpus=2))]
        made += [core.create_namespaced_pod(ns, pod_manifest(f"pair-{i}", gpus=4,
                                                             annotations=dict(gang)))
                 for i in range(2)]
        # As stored at CREATE: both webhooks ran, Berth's first.
        for p in made:
            gates = [g.name for g in p.spec.scheduling_gates or []]
            assert c.KUEUE_GATE in gates and owners(p.spec.scheduling_gates) == BOTH, \
                f"{p.metadata.name} created with gates {gates}"
            assert p.metadata.labels[c.KUEUE_QUEUE_LABEL] == QUEUE
        for p in made[1:]:
            assert p.metadata.labels[c.KUEUE_POD_GROUP_LABEL] == \
                p.metadata.labels[c.LABEL_GANG]
            assert p.metadata.annotations[c.KUEUE_POD_GROUP_COUNT] == "2"
        try:
            pods = eventually(lambda: core.list_namespaced_pod(ns).items,
                              lambda ps: len(ps) == 3 and all(p.status.phase == "Running"
                                                              for p in ps),
                              timeout=120, what="all three pods admitted, released and run")
            # 2 + 2 x 4 = 10 GPUs: within the ClusterQueue's quota, so Kueue admitted both
            # workloads (one per pod group).
            admitted = eventually(lambda: _workloads(cluster, ns),
                                  lambda ws: len(ws) == 2 and all(
                                      _conditions(w).get("Admitted") == "True" for w in ws),
                                  timeout=30, what="both Kueue Workloads Admitted")
        except AssertionError as exc:
            raise AssertionError(f"{exc}{_logs(berth, kueue)}") from None
    assert len(admitted) == 2
    for p in pods:
        name = p.metadata.name
        assert not p.spec.scheduling_gates
        assert p.spec.node_name == p.metadata.annotations[c.ANNOTATION_ASSIGNED_NODE], \
            f"{name} bound to {p.spec.node_name}, Berth placed it elsewhere"
        states = history.seen[name]
        # Each tool removed its own gate only: every state on the way is one of these, and
        # the gates went one at a time (never both in one update).
        assert len(states) == 3 and states[0] == BOTH and states[-1] == frozenset(), \
            f"{name}: gates did not go one at a time: {states}"
    # Kueue admits first, always: Berth places only what Kueue admitted.
    assert all(history.seen[p.metadata.name][1] == frozenset({"berth"}) for p in pods), \
        {k: [sorted(s) for s in v] for k, v in history.seen.items()}
    # The gang landed where Berth put it, both pods at once.
    assert {p.metadata.name for p in pods} == {"solo", "pair-0", "pair-1"}


def test_over_kueue_quota_a_pod_waits_for_kueue_and_berth_holds_nothing_for_it(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], kueue: ProcessRecord,
    berth: BerthWebhook
) -> None:
    ns = tenant_namespaces["team-a"]
    core = cluster.core
    core.create_namespaced_pod(ns, pod_manifest("first", gpus=8))
    try:
        eventually(lambda: core.read_namespaced_pod("first", ns),
                   lambda p: p.status.phase == "Running",
                   timeout=120, what="the first 8-GPU pod to run")
        # 8 of Kueue's 10 GPUs are taken; 4 more fit Berth's quota (16) but not Kueue's.
        core.create_namespaced_pod(ns, pod_manifest("over", gpus=4))
        over = eventually(lambda: core.read_namespaced_pod("over", ns),
                          lambda p: (w := _waiting(p)) is not None
                          and w.reason == "QueueAdmission",
                          timeout=60, what="Berth to say the 4-GPU pod waits for Kueue")
        pending = [w for w in _workloads(cluster, ns)
                   if _conditions(w).get("QuotaReserved") != "True"]
    except AssertionError as exc:
        raise AssertionError(f"{exc}{_logs(berth, kueue)}") from None
    gates = [g.name for g in over.spec.scheduling_gates or []]
    assert owners(over.spec.scheduling_gates) == BOTH and c.KUEUE_GATE in gates, \
        f"over-quota pod has gates {gates}, expected both{_logs(berth, kueue)}"
    assert c.ANNOTATION_ASSIGNED_NODE not in (over.metadata.annotations or {}), \
        "Berth placed a pod Kueue had not admitted"
    assert over.spec.node_name is None
    waiting = _waiting(over)
    assert waiting is not None and "Kueue has not admitted it yet" in waiting.message, waiting
    assert len(pending) == 1, [w.metadata.name for w in _workloads(cluster, ns)]
    # Kueue's verdict names its quota: nvidia.com/gpu in the ClusterQueue.
    messages = [cond.message for cond in pending[0].status.conditions or []
                if cond.type == "QuotaReserved"]
    assert any("nvidia.com/gpu" in m for m in messages), messages

    # Kueue's quota frees when the first pod goes; Kueue admits, then Berth places and
    # releases the held pod, which binds where Berth put it.
    core.delete_namespaced_pod("first", ns, grace_period_seconds=0)
    try:
        ran = eventually(lambda: core.read_namespaced_pod("over", ns),
                         lambda p: p.status.phase == "Running", timeout=90,
                         what="the held pod to be admitted by Kueue, placed by Berth and run")
    except AssertionError as exc:
        raise AssertionError(f"{exc}{_logs(berth, kueue)}") from None
    assert ran.spec.node_name == ran.metadata.annotations[c.ANNOTATION_ASSIGNED_NODE]
    waiting = _waiting(ran)
    assert waiting is None or waiting.status == "False", waiting


HELD_CHECK = "berth.dev/e2e-never-answered"  # an AdmissionCheck controller nobody runs


@contextlib.contextmanager
def _held_queue(cluster: E2ECluster, ns: str, workdir: Path,
                feature_gates: dict[str, bool] | None = None
                ) -> Iterator[tuple[ProcessRecord, str]]:
    """Kueue (as the devcluster starts it, ``feature_gates`` on top) with ``ns``'s queue behind
    an AdmissionCheck that is Active but never answers: a Workload gets its quota reserved and
    its pod keeps Kueue's gates, as in the moment between Kueue's reservation and its
    ungating. The ClusterQueue preempts lower priorities; yields the manager and the name of a
    WorkloadPriorityClass above the default."""
    suffix = ns[-5:]
    check, high = f"held-{suffix}", f"high-{suffix}"
    with kueue_manager(cluster, workdir, ns, frameworks=("pod",),
                       feature_gates=feature_gates) as record:
        checks = dk.kube.resource(cluster.api, KUEUE_V, "AdmissionCheck")
        classes = dk.kube.resource(cluster.api, KUEUE_V, "WorkloadPriorityClass")
        checks.create(body={"apiVersion": KUEUE_V, "kind": "AdmissionCheck",
                            "metadata": {"name": check},
                            "spec": {"controllerName": HELD_CHECK}})
        # What the check's controller would say: it is ready to answer (it never will).
        checks.status.patch(name=check, content_type="application/merge-patch+json", body={
            "status": {"conditions": [{
                "type": "Active", "status": "True", "reason": "Active", "message": "e2e",
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]}})
        classes.create(body={"apiVersion": KUEUE_V, "kind": "WorkloadPriorityClass",
                             "metadata": {"name": high}, "value": 1000})
        made = dk.create_gpu_queue(cluster.api, dk.GpuQueue(
            cluster_queue=f"cq-{suffix}", flavor=f"gpu-{suffix}", gpus=KUEUE_GPUS,
            local=QUEUE, namespaces=(ns,), admission_checks=(check,),
            preemption={"withinClusterQueue": "LowerPriority"}))
        try:
            yield record, high
        finally:
            _delete_pods_while_kueue_runs(cluster, ns)
            dk.delete_gpu_queue(cluster.api, made)
            classes.delete(name=high)
            checks.delete(name=check)


@pytest.fixture
def kueue_held(cluster: E2ECluster, tenant_namespaces: dict[str, str],
               tmp_path: Path) -> Iterator[tuple[ProcessRecord, str]]:
    """:func:`_held_queue` with Kueue as the devcluster runs it
    (admission.devcluster.kueue.POD_INTEGRATION_GATES)."""
    with _held_queue(cluster, tenant_namespaces["team-a"], tmp_path / "kueue") as held:
        yield held


@pytest.fixture
def kueue_held_as_shipped(cluster: E2ECluster, tenant_namespaces: dict[str, str],
                          tmp_path: Path) -> Iterator[tuple[ProcessRecord, str]]:
    """:func:`_held_queue` with Kueue's SkipReassignmentForPodOwnedWorkloads gate as Kueue
    ships it (on), as a cluster admin who missed the install notes runs it."""
    with _held_queue(cluster, tenant_namespaces["team-a"], tmp_path / "kueue",
                     feature_gates={"SkipReassignmentForPodOwnedWorkloads": True}) as held:
        yield held


@pytest.fixture
def berth_held(cluster: E2ECluster, tenant_namespaces: dict[str, str],
               kueue_held: tuple[ProcessRecord, str], tmp_path: Path) -> Iterator[BerthWebhook]:
    with berth_serve_as_deployed(cluster, tmp_path / "berth", tenant_namespaces,
                                 components=("kueue",), edit_policy=_kueue_backend) as hook:
        yield hook


@pytest.fixture
def berth_held_as_shipped(cluster: E2ECluster, tenant_namespaces: dict[str, str],
                          kueue_held_as_shipped: tuple[ProcessRecord, str],
                          tmp_path: Path) -> Iterator[BerthWebhook]:
    with berth_serve_as_deployed(cluster, tmp_path / "berth", tenant_namespaces,
                                 components=("kueue",), edit_policy=_kueue_backend) as hook:
        yield hook


def _workload_of(cluster: E2ECluster, ns: str, pod: str) -> Any:
    uid = cluster.core.read_namespaced_pod(pod, ns).metadata.uid
    return next((w for w in _workloads(cluster, ns)
                 if any(o.uid == uid for o in w.metadata.ownerReferences or [])), None)


def _condition(workload: Any, kind: str) -> Any:
    if workload is None:
        return None
    return next((cond for cond in (workload.status or {}).get("conditions") or []
                 if cond.type == kind), None)


def test_a_single_pod_kueue_preempts_before_it_ran_goes_back_to_kueues_queue(
    cluster: E2ECluster, tenant_namespaces: dict[str, str],
    kueue_held: tuple[ProcessRecord, str], berth_held: BerthWebhook
) -> None:
    """Kueue v0.19 never requeues a preempted Workload owned by one pod (its
    SkipReassignmentForPodOwnedWorkloads gate, on by default) and expects the pod to go, but
    does not stop a pod that still carries its gate: behind Berth's gate such a pod waited
    forever (e2e/bench_compare.py: 8 of 140 gangs in one run). The devcluster's Kueue runs
    with the gate off (admission.devcluster.kueue.POD_INTEGRATION_GATES); the pod goes back
    to Kueue's queue and is admitted when the quota frees."""
    record, high = kueue_held
    ns = tenant_namespaces["team-a"]
    core = cluster.core
    try:
        _preempt_while_gated(cluster, ns, high)
        evicted = _requeued(cluster, ns, "low", "True",
                            what="the preempted pod's Workload to be requeued")
        assert _condition(evicted, "Requeued").reason == "Preempted", evicted.status
        # Back in the queue: when the quota frees, Kueue reserves it again.
        core.delete_namespaced_pod("high", ns, grace_period_seconds=0)
        eventually(lambda: _condition(_workload_of(cluster, ns, "low"), "QuotaReserved"),
                   lambda cond: cond is not None and cond.status == "True", timeout=60,
                   what="Kueue to reserve the preempted pod's quota again")
    except AssertionError as exc:
        raise AssertionError(f"{exc}{_logs(berth_held, record)}") from None
    low = core.read_namespaced_pod("low", ns)
    assert low.status.phase == "Pending" and c.ANNOTATION_ASSIGNED_NODE not in (
        low.metadata.annotations or {}), "Berth placed a pod Kueue had not admitted"


def _waiting(pod: Any) -> Any:
    return next((cond for cond in pod.status.conditions or []
                 if cond.type == keys.CONDITION_WAITING), None)


def _requeued(cluster: E2ECluster, ns: str, pod: str, status: str, *, what: str) -> Any:
    """``pod``'s Workload once its ``Requeued`` condition has ``status``."""
    return eventually(lambda: _workload_of(cluster, ns, pod),
                      lambda w: (cond := _condition(w, "Requeued")) is not None
                      and cond.status == status, timeout=30, what=what)


def _preempt_while_gated(cluster: E2ECluster, ns: str, high: str) -> None:
    """A pod ``low`` whose quota Kueue reserves while its gates stay on, then a pod of a
    higher priority that fits the quota only without it: Kueue preempts ``low``."""
    core = cluster.core
    core.create_namespaced_pod(ns, pod_manifest("low", gpus=8))
    eventually(lambda: _condition(_workload_of(cluster, ns, "low"), "QuotaReserved"),
               lambda cond: cond is not None and cond.status == "True", timeout=60,
               what="Kueue to reserve the low-priority pod's quota")
    low = core.read_namespaced_pod("low", ns)
    assert owners(low.spec.scheduling_gates) == BOTH, low.spec.scheduling_gates
    core.create_namespaced_pod(ns, pod_manifest(
        "high", gpus=8, labels={"kueue.x-k8s.io/priority-class": high}))
    eventually(lambda: _condition(_workload_of(cluster, ns, "high"), "QuotaReserved"),
               lambda cond: cond is not None and cond.status == "True", timeout=60,
               what="Kueue to preempt the first and reserve the high-priority pod's quota")


def test_a_pod_kueue_will_never_admit_again_says_so_and_names_the_fix(
    cluster: E2ECluster, tenant_namespaces: dict[str, str],
    kueue_held_as_shipped: tuple[ProcessRecord, str], berth_held_as_shipped: BerthWebhook
) -> None:
    """With Kueue's SkipReassignmentForPodOwnedWorkloads gate on (Kueue's default), a single
    pod preempted while it still carries Kueue's gate is never admitted again. Berth, reading
    Kueue's Workloads with the RBAC of config/components/kueue (enforced here), tells the pod
    so: reason QueueWillNotAdmit, a Warning Event, the Workload's name and the fix; it never
    places the pod."""
    record, high = kueue_held_as_shipped
    ns = tenant_namespaces["team-a"]
    core = cluster.core
    try:
        _preempt_while_gated(cluster, ns, high)
        stuck = _requeued(cluster, ns, "low", "False",
                          what="Kueue to leave the preempted pod's Workload not requeued")
        said = eventually(lambda: _waiting(core.read_namespaced_pod("low", ns)),
                          lambda cond: cond is not None and cond.reason == REASON,
                          timeout=CHECK_AFTER_S + 2 * RELIST_S + 30,
                          what=f"Berth to tell the stuck pod {REASON}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}{_logs(berth_held_as_shipped, record)}") from None
    assert stuck.metadata.name in said.message, said.message
    assert "--feature-gates=SkipReassignmentForPodOwnedWorkloads=false" in said.message
    events = core.list_namespaced_event(
        ns, field_selector=f"involvedObject.name=low,reason={REASON}").items
    assert events and all(e.type == "Warning" for e in events), events
    high_pod = core.read_namespaced_pod("high", ns)
    assert _waiting(high_pod) is None or _waiting(high_pod).reason != REASON
    low = core.read_namespaced_pod("low", ns)
    assert low.status.phase == "Pending" and c.ANNOTATION_ASSIGNED_NODE not in (
        low.metadata.annotations or {}), "Berth placed a pod Kueue had not admitted"
