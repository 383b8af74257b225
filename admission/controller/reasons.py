"""Every reason the controller writes on a pod, with what it means: the table behind
docs/reference/conditions-and-events.md.

The writers (:mod:`.explain`, :mod:`.cycle`, :mod:`.unbound`) spell their reasons where they
build each :class:`~.explain.Why`; this module lists them once for people.
``tests/admission/test_reference.py`` reads every ``Why(...)`` in ``admission/controller/`` and
fails when a reason is written that is not listed here, or listed and no longer written.

Each reason is both the ``reason`` of the pod condition ``berth.dev/Waiting`` and the
``reason`` of the Event written with it (source ``berth-controller``), in one write, only when
the condition's status, reason or message changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from admission.controller import keys
from admission.controller.queued import CHECK_AFTER_S, RELIST_S
from admission.controller.settings import Settings
from admission.controller.unbound import SILENT_GRACES


@dataclass(frozen=True, slots=True)
class Reason:
    name: str  # the condition's and the Event's reason, CamelCase
    waiting: bool  # condition status True (still held) or False
    event: Literal["Normal", "Warning"]
    written_by: str  # module under admission/controller/
    meaning: str
    example: str  # a message as a user sees it
    action: str  # what to do about it


CONDITION_TYPE: Final = keys.CONDITION_WAITING
EVENT_SOURCE: Final = keys.EVENT_COMPONENT
EXPLAIN_BUDGET: Final = Settings().explain_budget  # condition writes per cycle, at most
_GRACE = Settings().bind_grace_seconds

REASONS: Final[tuple[Reason, ...]] = (
    Reason(
        "GangIncomplete", True, "Normal", "explain.py",
        "Some pods of the pod's gang do not exist yet; a gang is considered only once all "
        "its pods exist.",
        "waiting: gang team-a/job-1 has 3 of 4 pods; it is considered once all exist",
        "Check that the gang size (`berth.dev/gang-size`, Kueue's `pod-group-total-count`, "
        "the Job's parallelism) matches the pods that will be created.",
    ),
    Reason(
        "GangTimedOut", True, "Warning", "explain.py",
        "The gang is still incomplete after `batch.gangTimeoutSeconds`; it keeps waiting "
        "(nothing is deleted) and `berth_gang_timeouts_total` counts it once.",
        "waiting: gang team-a/job-1 has 3 of 4 pods after 612s (timeout 600s); the missing "
        "pods were never created",
        "Create the missing pods or delete the gang's pods; fix the gang size.",
    ),
    Reason(
        "InvalidPod", True, "Warning", "explain.py",
        "The controller cannot turn the pod into a gang it can plan: a value on the pod it "
        "cannot read (priority, topology or gang-size annotation) or a demand the solver "
        "refuses.",
        "waiting: pod team-a/p-0: annotation berth.dev/priority='high' is not an integer",
        "Delete the pod and create it again with a valid value.",
    ),
    Reason(
        "DemandMismatch", True, "Warning", "explain.py",
        "The GPU demand Berth's annotations state (`berth.dev/gpu-count`, `gpu-milli`) is not "
        "what the pod's resources request in the sharing backend's vocabulary (whole GPUs as "
        "`nvidia.com/gpu`, a share as time-slicing slots, an MPS slot, a MIG profile or "
        "HAMi's `gpucores`). The resources are what the scheduler and the device plugin "
        "enforce, so the pod is never released and never charged to its tenant.",
        "waiting: pod team-b/p-0: its GPU demand (berth.dev/gpu-count=4, berth.dev/gpu-milli"
        "=1000) is not what its resources request (no GPU resource; time-slicing sharing "
        "would need nvidia.com/gpu: 4); it is not released",
        "Delete the pod and create it again through the webhook, asking for GPUs in its "
        "resources (or with `berth.dev/gpu-fraction`); do not write Berth's annotations.",
    ),
    Reason(
        "GangSizeMismatch", True, "Warning", "explain.py",
        "The pods of the gang disagree on its size (`berth.dev/gang-size`; some declare one "
        "and others none), or the gang has more pods than they declare. Such a gang is never "
        "released as it is.",
        "waiting: gang team-b/swarm has 30 pods but its pods declare berth.dev/gang-size: 1; "
        "it is never released as it is",
        "Give every pod of the gang the same `berth.dev/gang-size`, equal to the number of "
        "pods, or give the pods different gang names.",
    ),
    Reason(
        "GangTooLarge", True, "Warning", "explain.py",
        "The gang is larger than its tenant's `limits.maxGangSize`.",
        "waiting: gang team-b/wide of 20 pods exceeds tenant team-b's maxGangSize of 16; "
        "split the job",
        "Split the job into gangs within the limit, or raise `tenants[].limits.maxGangSize`.",
    ),
    Reason(
        "QueueAdmission", True, "Normal", "explain.py",
        "With `release.backend: kueue`, Kueue has not admitted the gang's Workload yet (its "
        "gate is still on a pod): Kueue's ClusterQueue quota decides *how much* each tenant "
        "runs, and Berth places only what Kueue admitted, within the ResourceFlavor's node "
        "labels Kueue writes on the pods.",
        "waiting: pod team-a/train-0: Kueue has not admitted it yet (gate "
        "kueue.x-k8s.io/admission: its ClusterQueue's quota, see the QuotaReserved condition "
        "of its Workload with `kubectl get workloads`); Berth places the gang once Kueue has",
        "Read the Workload's `QuotaReserved` condition (`kubectl describe workload`); wait for "
        "the ClusterQueue's quota, or raise its nominal quota or borrowing limit. A single "
        "pod whose Workload says `Requeued=False` after `Preempted` is never admitted again "
        "by Kueue v0.19 or newer unless Kueue runs with "
        "`SkipReassignmentForPodOwnedWorkloads=false` (troubleshooting.md, step 1).",
    ),
    Reason(
        "QueueWillNotAdmit", True, "Warning", "queued.py",
        f"With `release.backend: kueue`, the gang has waited for Kueue at least "
        f"{CHECK_AFTER_S:.0f} s and its "
        "Workload says Kueue will not admit it as it stands: `Requeued=False` after Kueue took "
        "its quota back (Kueue v0.19 and newer with `SkipReassignmentForPodOwnedWorkloads` on, "
        "its default, never requeues a single pod it preempted while the pod carried Kueue's "
        "gate), or `spec.active: false`. Berth reads the Workloads of such a namespace at most "
        f"every {RELIST_S:.0f} s; without RBAC to list them "
        "(config/components/kueue/rbac.yaml) the pod keeps saying `QueueAdmission`.",
        "waiting: pod team-a/low: Kueue will not requeue its Workload pod-low-3f9a2 "
        "(Requeued=False, Preempted: Preempted to accommodate a workload (UID: ...) due to "
        "prioritization in the ClusterQueue); Kueue v0.19 and newer with its "
        "SkipReassignmentForPodOwnedWorkloads feature gate on (its default) never admits again "
        "a single pod it preempted while the pod carried Kueue's gate: run Kueue with "
        "--feature-gates=SkipReassignmentForPodOwnedWorkloads=false (docs/troubleshooting.md, "
        "step 1); it goes back to Kueue's queue when its Workload pod-low-3f9a2 is deactivated "
        "and activated again (...), or when the pod is deleted and its owner makes another",
        "Run Kueue with `--feature-gates=SkipReassignmentForPodOwnedWorkloads=false` "
        "(troubleshooting.md, step 1); for the pod already stuck, deactivate and activate its "
        "Workload again, or delete the pod so that its Job or other owner makes another.",
    ),
    Reason(
        "Quota", True, "Normal", "explain.py",
        "Admitting the gang would take its tenant over its quota, beyond its borrowing limit, "
        "or beyond the idle quota other tenants leave (the solver's own quota rule).",
        "waiting: quota: tenant team-a would use 20000 of its 16000 milli-GPU and may not "
        "borrow; 3 gangs ahead",
        "Wait for the tenant's running pods to finish, or raise `tenants[].quota.gpus` or "
        "its `borrowing`.",
    ),
    Reason(
        "Reserved", True, "Normal", "explain.py",
        "The gang cannot fit now and has waited past `solver.reservations.afterSeconds`: "
        "its earliest expected start is planned from the expected ends of the pods running "
        "where it will go (their own or their Job's `activeDeadlineSeconds`, Kueue's maximum "
        "execution time, else their `berth.dev/expected-runtime`; the message names which), "
        "and what it will use is held from `solver.reservations.holdAheadSeconds` before that "
        "start (the message says when a hold is still to come); only gangs whose own enforced "
        "bound ends before that start may use what is held (docs/reservations.md). "
        "Re-planned every window; the start is a time rounded up to the minute, so the "
        "message (and an Event) changes only when the plan does.",
        "waiting: reserved: expected to start at 2026-12-07T19:31:00Z on gpu-node-3, "
        "gpu-node-4, when "
        "running pods there end (ends from: job-deadline, pod-deadline); 0 gangs ahead",
        "Nothing; it starts when those pods end (at the latest at their deadlines; an "
        "estimate may be late). Pods with an `activeDeadlineSeconds` of their own (a Job's "
        "pod template may set it) may backfill the held capacity.",
    ),
    Reason(
        "HeldForReservation", True, "Normal", "explain.py",
        "The gang would fit now beside what this window placed, but only in capacity held for "
        "another gang's reservation (`Reserved`), which starts there soon; a gang may use held "
        "capacity only when its own enforced bound (its pods' `activeDeadlineSeconds`, or "
        "Kueue's maximum execution time) ends before the reserved start. The message names "
        "the nodes and the start, never the reserved gang (it may be another tenant's).",
        "waiting: held: it fits now only in capacity held on gpu-node-3 for a reserved gang "
        "expected to start at 2026-12-07T19:28:00Z; only a gang whose own deadline ends before "
        "then may use "
        "it (this one has no deadline of its own); 2 gangs ahead",
        "Nothing; it is placed when room is free that is not held, or after the reserved gang "
        "starts. A Job whose pods run shorter than the wait may set `activeDeadlineSeconds` "
        "on its pod template to backfill held capacity.",
    ),
    Reason(
        "Reclaim", True, "Normal", "explain.py",
        "Reclaim (`solver.reclaim`, docs/reclaim.md). The gang's tenant borrows, and a tenant "
        "waiting within its own quota takes that quota back before the gang starts; or the "
        "gang was to start in GPUs freed by evicting another tenant's borrowed gang, and an "
        "eviction was refused (a PodDisruptionBudget): it is planned again next window.",
        "waiting: reclaim: tenant team-a takes back its quota, lent to tenant team-b, for gang "
        "team-a/train; 0 gangs ahead",
        "Nothing; a borrowing tenant's gang starts when quota is idle again, a refused "
        "eviction is retried every window.",
    ),
    Reason(
        "Deferred", True, "Normal", "explain.py",
        "Quota allows the gang but this window's plan did not place it. The message is the "
        "solver's reason (solver/cpsat/reasons.py), the most fundamental first: `no node with "
        "GPU model ...`; `no node may run pod ... (most often: node selector ... does not "
        "match | untolerated taint ... | node is cordoned | ...)`; `capacity: no node has "
        "room for pod ... now`; `topology domain too small: no rack domain has ... milli-GPU "
        "free`; `capacity: each pod fits somewhere, but not the whole gang at once beside the "
        "gangs admitted this window`; in a backlog larger than one window's solve can place "
        "in its time limit, `queued behind the current batch: ...` (the gangs ahead of it in "
        "the queue were placed first; it is placed in a later window; with "
        "the shipped explanation grace (`Settings.explain_grace_batches` = 1) a gang only "
        "queued is not told, "
        "as it moves up every cycle).",
        "waiting: topology domain too small: no rack domain has 16000 milli-GPU free "
        "(largest: 8000); 0 gangs ahead",
        "A model, selector or taint reason does not go away by waiting: fix the pod's "
        "`berth.dev/gpu-models`, node selector or tolerations, or the nodes' labels. A "
        "capacity or topology reason clears as running pods finish; a queued gang needs "
        "nothing.",
    ),
    Reason(
        "PlanRejected", True, "Warning", "explain.py",
        "The checker refused this window's plan, so nothing was released; every pending "
        "gang keeps waiting and the next window solves again.",
        "waiting: <the checker's violation>; 2 gangs ahead",
        "Look for `berth_plans_rejected_total` and the controller's log; report the "
        "violation, it is a bug.",
    ),
    Reason(
        "Released", False, "Normal", "cycle.py",
        "Berth wrote the pod's placement and removed its gate; the pod now belongs to its "
        "scheduler. Said only to a pod that had been told it waits.",
        "released by Berth to its placement",
        "None.",
    ),
    Reason(
        "NotBound", True, "Warning", "unbound.py",
        f"Released, but its scheduler has not bound it: {_GRACE:g} s after the release if the "
        f"scheduler refused it (its `PodScheduled` condition), {_GRACE * SILENT_GRACES:g} s if "
        "it said nothing. Berth keeps its GPUs held and cannot gate it again.",
        "released to node n-3 by Berth but not bound after 30s; volcano says: Unschedulable "
        "...",
        "Read what the scheduler says (its queue closed or over capability, the node gone); "
        "fix the queue or delete the pod.",
    ),
    Reason(
        "Bound", False, "Normal", "unbound.py",
        "A pod that was reported `NotBound` has been bound since.",
        "bound to n-3",
        "None.",
    ),
)


def reason(name: str) -> Reason:
    """The entry for ``name``; KeyError when the table lacks it."""
    for r in REASONS:
        if r.name == name:
            return r
    raise KeyError(name)
