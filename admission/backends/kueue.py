"""Kueue release: the tenant's LocalQueue and Kueue's plain-pod group keys.

Two gates, two owners. Kueue's pod webhook adds ``kueue.x-k8s.io/admission`` to a pod that
carries the ``kueue.x-k8s.io/queue-name`` label at CREATE, so Berth's webhook writes the queue
label and the pod-group keys at CREATE too (after this, labels set at release only repeat them).
Berth never touches Kueue's gate, and Kueue never touches Berth's. Two details seen with the
real Kueue v0.14 and v0.19 managers (e2e/tests/test_berth_kueue.py):

- Kueue's webhook must see Berth's labels: the apiserver calls mutating webhook configurations
  in name order, and ``berth`` sorts before ``kueue-mutating-webhook-configuration``.
- With its TopologyAwareScheduling feature on (its default), Kueue adds a second gate,
  ``kueue.x-k8s.io/topology``, and lifts both in one update when it admits without a topology.
- From v0.19 Kueue never requeues a preempted Workload owned by one pod
  (``SkipReassignmentForPodOwnedWorkloads``, on by default) and does not stop a pod that still
  carries its gate, so a single pod preempted between Kueue's quota reservation and its
  ungating stays gated forever; Kueue must run with that gate off in front of Berth
  (docs/troubleshooting.md; admission.devcluster.kueue.POD_INTEGRATION_GATES). Where it does
  not, the controller reads such a pod's Workload and tells the pod (:func:`never_admitted`,
  admission/controller/queued.py).

Order and who decides what:

1. Kueue sees the pod group as a Workload once all its pods exist and admits it against its
   ClusterQueue quota (nominal quota, cohort borrowing, preemption): *how much* each tenant may
   run, in Kueue's terms. Admission removes Kueue's gate(s) and writes the chosen
   ResourceFlavor's node labels into the pods' ``nodeSelector``.
2. Only then does Berth consider the gang (:meth:`KueueBackend.waiting_for`: a pod still
   carrying a ``kueue.x-k8s.io/`` gate keeps its gang out of the solve, its pods told they wait
   for Kueue). Every batch window Berth decides *which* admitted gangs run now and *where*:
   per-pod node and GPUs, within the flavor's node labels as it reads any ``nodeSelector``,
   GPU fractions, topology, interference and its own fair share; then it removes its gate and
   the pod is scheduled.

Kueue first, because the other order wastes GPUs and can deadlock: a gang Berth placed before
Kueue admitted it held the capacity Berth assigned it while it waited on Kueue's quota (Berth
counts a released pod as held until it is bound or deleted), and with a ResourceFlavor per GPU
model Kueue could then pick another model's flavor than the node Berth pinned, leaving the pod
unschedulable (e2e/bench_compare.md measured both). Berth's quota stays the placement-level
ceiling (fractions in milli-GPU, which Kueue does not model); Kueue's quota is the accounting
of record.

Why not Kueue's AdmissionCheck: an admission check answers per Workload and can only hand back
``podSetUpdates`` per PodSet (one node selector for every pod of a shape), while Berth assigns a
different node and GPU set to each pod of a gang. A gate Berth owns carries per-pod placements
and works unchanged with or without Kueue.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission import constants as c
from admission import objects
from admission.backends.base import BackendName, CustomObjects, ReleasedGang
from admission.objects import Obj

#: Every gate Kueue puts on a pod (its admission gate, and its topology gate when its
#: TopologyAwareScheduling feature is on) starts with this.
KUEUE_GATE_PREFIX = "kueue.x-k8s.io/"

#: Kueue's Workloads, newest API version first (v1beta2 from Kueue v0.15, v1beta1 before).
WORKLOAD_GROUP = "kueue.x-k8s.io"
WORKLOAD_PLURAL = "workloads"
WORKLOAD_VERSIONS = ("v1beta2", "v1beta1")
#: How much of a Workload's own message a pod's condition quotes.
QUOTED_CHARS = 200


def _field(obj: object, name: str) -> dict[str, Any]:
    """``obj[name]`` when both are mappings, else an empty one: a Workload is read as the API
    server serves it, whatever another version or a hand-written object holds."""
    got = obj.get(name) if isinstance(obj, dict) else None
    return got if isinstance(got, dict) else {}


def _condition(workload: Obj, kind: str) -> dict[str, Any]:
    conditions = _field(workload, "status").get("conditions")
    return next((cond for cond in (conditions if isinstance(conditions, list) else [])
                 if isinstance(cond, dict) and cond.get("type") == kind), {})


def _quote(text: object) -> str:
    words = " ".join(str(text or "").split())
    return words if len(words) <= QUOTED_CHARS else words[:QUOTED_CHARS - 3] + "..."


def workload_owners(workload: Obj) -> frozenset[str]:
    """The uids of the pods a Workload of Kueue's pod integration stands for (its owners)."""
    refs = _field(workload, "metadata").get("ownerReferences")
    return frozenset(r["uid"] for r in (refs if isinstance(refs, list) else [])
                     if isinstance(r, dict) and r.get("kind") == "Pod"
                     and isinstance(r.get("uid"), str) and r["uid"])


def never_admitted(workload: Obj) -> str | None:
    """Why Kueue will not admit this Workload again as it stands, or None while it may.

    A Workload Kueue took its quota back from (preempted, evicted) says ``Requeued=False``
    until Kueue puts it back in its queue. From v0.19, with the
    ``SkipReassignmentForPodOwnedWorkloads`` feature gate on (Kueue's default), it never does
    so for a Workload owned by one pod that still carries Kueue's gate: the pod waits for good
    (docs/troubleshooting.md, step 1). A Workload whose ``spec.active`` is false (deactivated
    by a person or by Kueue's waitForPodsReady back-off) waits until it is activated again.
    One whose ``status.requeueState.requeueAt`` is set is requeued by Kueue then."""
    name = _quote(_field(workload, "metadata").get("name")) or "?"
    or_delete = "or when the pod is deleted and its owner makes another"
    if _field(workload, "spec").get("active") is False:
        return (f"Kueue will not admit it: its Workload {name} is deactivated (spec.active: "
                f"false); it goes back to Kueue's queue when it is activated again, {or_delete}")
    status = _field(workload, "status")
    if _field(status, "requeueState").get("requeueAt"):
        return None  # Kueue requeues it then (its waitForPodsReady back-off)
    finished = _condition(workload, "Finished")
    reserved = _condition(workload, "QuotaReserved")
    requeued = _condition(workload, "Requeued")
    if finished.get("status") == "True" or reserved.get("status") == "True":
        return None
    if requeued.get("status") != "False":
        return None
    reason = _quote(requeued.get("reason")) or "no reason given"
    said = _quote(reserved.get("message") or requeued.get("message"))
    why = f"Kueue will not requeue its Workload {name} (Requeued=False, {reason}"
    why += f": {said}); " if said else "); "
    if reason in ("Preempted", "Evicted"):
        why += ("Kueue v0.19 and newer with its SkipReassignmentForPodOwnedWorkloads feature "
                "gate on (its default) never admits again a single pod it preempted while the "
                "pod carried Kueue's gate: run Kueue with "
                "--feature-gates=SkipReassignmentForPodOwnedWorkloads=false "
                "(docs/troubleshooting.md, step 1); ")
    return (f"{why}it goes back to Kueue's queue when its Workload {name} is deactivated and "
            "activated again (`kubectl patch workload ... -p '{\"spec\":{\"active\":false}}' "
            f"--type merge`, then true), {or_delete}")


class KueueBackend:
    name = BackendName.KUEUE
    title = "Kueue"
    scheduler_name: str | None = None
    queue_kind: str | None = "LocalQueue"

    def creation_keys(self, *, queue: str | None, group: str, size: int | None,
                      labels: Mapping[str, str], annotations: Mapping[str, str],
                      add_labels: dict[str, str], add_annotations: dict[str, str]) -> None:
        """Kueue gates and manages a pod only if its queue label (and, for a group, the
        pod-group keys) is there when Kueue's own webhook sees the CREATE, after Berth's."""
        if queue and c.KUEUE_QUEUE_LABEL not in labels:
            add_labels[c.KUEUE_QUEUE_LABEL] = queue
        if size is not None and size > 1 and c.KUEUE_POD_GROUP_LABEL not in labels:
            add_labels[c.KUEUE_POD_GROUP_LABEL] = group
            add_annotations[c.KUEUE_POD_GROUP_COUNT] = str(size)

    def pod_metadata(self, gang: ReleasedGang, queue: str | None) -> tuple[dict[str, str],
                                                                          dict[str, str]]:
        labels: dict[str, str] = {}
        annotations: dict[str, str] = {}
        if queue:
            labels[c.KUEUE_QUEUE_LABEL] = queue
        group = next((objects.labels(p).get(c.LABEL_GANG) for p in gang.pods), None)
        if gang.size > 1 and group:
            labels[c.KUEUE_POD_GROUP_LABEL] = group
            annotations[c.KUEUE_POD_GROUP_COUNT] = str(gang.size)
        return labels, annotations

    def prepare(self, api: CustomObjects, gang: ReleasedGang, queue: str | None) -> None:
        return None  # Kueue builds the Workload from the pods itself

    def problem(self, pod: Obj) -> str | None:
        if c.KUEUE_QUEUE_LABEL not in objects.labels(pod):
            return (f"label {c.KUEUE_QUEUE_LABEL} was not set at creation, so Kueue does not "
                    "manage this pod; set the tenant's queue under tenants[].queues.kueue")
        return None

    def waiting_for(self, pod: Obj) -> str | None:
        held = sorted(g for g in objects.gate_names(pod)
                      if g.startswith(KUEUE_GATE_PREFIX))
        if not held:
            return None
        return (f"Kueue has not admitted it yet (gate {', '.join(held)}: its ClusterQueue's "
                "quota, see the QuotaReserved condition of its Workload with `kubectl get "
                "workloads`); Berth places the gang once Kueue has")
