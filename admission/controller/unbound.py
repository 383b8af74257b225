"""Pods Berth released that their scheduler has not bound: said on the pod, never left silent.

Once Berth lifts its gate the pod belongs to its scheduler (kube-scheduler, or Volcano), which
may still refuse it: a Volcano queue over its capability or closed, a PodGroup short of
members, a node gone since the plan. Berth cannot close the gate again (Kubernetes only lets
gates be removed), and must not give the pod's GPUs to anyone else while the scheduler may bind
it at any moment, so it keeps holding them and says so: ``grace`` seconds after the release,
if the scheduler has refused the pod (its ``PodScheduled`` condition says why), or ten graces
after it if the scheduler has said nothing at all, the pod's ``berth.dev/Waiting`` condition
turns True with reason ``NotBound`` and a Warning Event names the node Berth chose and what
the scheduler reports. When the
pod is bound at last the condition turns False (``Bound``). Nothing is deleted: what to do with
a pod its scheduler refuses (fix the queue, or delete the pod) is the user's call.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime

from admission import constants as c
from admission.controller import keys
from admission.controller import translate as tr
from admission.controller.explain import Why
from admission.controller.translate import Obj

NOT_BOUND = "NotBound"
BOUND = "Bound"
SILENT_GRACES = 10


def scheduler_says(pod: Obj) -> str | None:
    """The scheduler's own account of a pod it has not bound (its PodScheduled condition), or
    None while it has said nothing."""
    cond = tr.pod_condition(pod, "PodScheduled")
    # SchedulingGated is the API server's note from while Berth's gate was on, not an answer.
    if cond is None or cond.get("status") == "True" or cond.get("reason") == "SchedulingGated":
        return None
    said = " ".join(str(cond.get(k) or "") for k in ("reason", "message")).strip()
    return said or None


def not_bound(pods: Iterable[Obj], now: datetime, grace: float) -> Iterator[tuple[Obj, Why]]:
    """What to say on each pod Berth released: ``NotBound`` when it is still unbound ``grace``
    seconds after its release, ``Bound`` when a pod that was told so has been bound since."""
    for pod in pods:
        ann = tr.annotations_of(pod)
        node = ann.get(c.ANNOTATION_ASSIGNED_NODE)
        if (not node or tr.has_berth_gate(pod) or tr.is_finished(pod)
                or tr.meta(pod).get("deletionTimestamp")):
            continue
        bound_to = tr.spec(pod).get("nodeName")
        if bound_to:
            ours = tr.pod_condition(pod, keys.CONDITION_WAITING)
            if ours is not None and ours.get("reason") == NOT_BOUND:
                yield pod, Why(BOUND, f"bound to {bound_to}", waiting=False)
            continue
        released = tr.parse_time(ann.get(c.ANNOTATION_ASSIGNED_AT))
        if released is None:
            continue
        age = (now - released).total_seconds()
        said = scheduler_says(pod)
        # A scheduler that has not answered yet is usually just behind (a burst): say nothing
        # until it refuses, or until it has been silent for SILENT_GRACES graces.
        after = grace if said else grace * SILENT_GRACES
        if age < after:
            continue
        scheduler = tr.spec(pod).get("schedulerName") or "default-scheduler"
        yield pod, Why(NOT_BOUND, f"released to node {node} by Berth but not bound after "
                       f"{int(after)}s; {scheduler} says: {said or 'nothing yet'}", warning=True)
