"""Reclaim's writes: the plan's evictions carried out through the Eviction API.

The solver decides which running gangs give back borrowed quota (:mod:`solver.reclaim`; the
checker judged the plan); this module only does what the plan says, one gang at a time, whole
or not at all as far as the API server lets it:

1. **Ask first**: a dry-run Eviction of every pod of the gang. If any is refused (a
   PodDisruptionBudget allows no disruption now: 429, or any other error), nothing of the gang
   is touched this window; the refusal is logged and counted
   (``berth_reclaim_refused_total``), and the next window plans again.
2. **Say why**: on every pod, the condition ``DisruptionTarget`` (reason ``BerthReclaim``, the
   message naming the tenant that reclaims and its gang) through ``pods/status``, and an Event
   (reason ``Reclaimed``) with the same message.
3. **Evict**: a policy/v1 Eviction of every pod. The API server deletes each pod gracefully
   (and writes its own ``DisruptionTarget`` reason, ``EvictionByEvictionAPI``, over Berth's);
   the owner (a Job, a JobSet...) recreates the pods, which come back through the webhook,
   gated, and wait in the tenant's queue like any new gang. A refusal here (a budget that
   changed since step 1) stops the gang's evictions: its condition is turned False on the pods
   not evicted, and the error is reported.

A pod that is leaving (deleted, or with ``DisruptionTarget`` True) counts as freed in the next
snapshot (:func:`admission.controller.snapshot.leaving`), so a later window does not evict
again for the same gang. Only the batch cycle of the leader evicts; the fast path never does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from admission import constants as c
from admission.controller import keys
from admission.controller import translate as tr
from admission.controller.api import ApiError, ClusterApi, NotFound
from admission.controller.metrics import Metrics
from solver.plan import Eviction

log = logging.getLogger(__name__)


@dataclass(slots=True)
class EvictionResult:
    gang: str
    tenant: str  # the victim's
    for_tenant: str
    evicted: list[str] = field(default_factory=list)  # pod keys
    refused: str | None = None  # why not (whole or in part)

    @property
    def complete(self) -> bool:
        return self.refused is None


def message(e: Eviction) -> str:
    """What the victim's pods are told (condition and Event). A preemption within a tenant is
    said as such; it shares the condition and Event reasons with reclaim, so that `berth
    status` lists both (as Kueue says "Preempted" for both of its kinds)."""
    if e.preempt:
        return (f"preempted within tenant {e.tenant} by its gang {e.for_gang} of higher "
                f"priority: gang {e.gang} had run at least the policy's minimum; the owner "
                "recreates the pods and they wait in the queue again")
    return (f"reclaimed by tenant {e.for_tenant} for its gang {e.for_gang}: tenant {e.tenant} "
            f"runs gang {e.gang} on quota {e.for_tenant} lent; the owner recreates the pods "
            "and they wait in the queue again")


class Evictor:
    def __init__(self, *, api: ClusterApi, clock: Callable[[], datetime], metrics: Metrics,
                 identity: str, pod: Callable[[str], tr.Obj | None]) -> None:
        self.api = api
        self.clock = clock
        self.metrics = metrics
        self.identity = identity
        self.pod = pod  # the inventory's current copy of a pod, by namespace/name

    def evict_all(self, evictions: tuple[Eviction, ...],
                  still_leader: Callable[[], bool]) -> list[EvictionResult]:
        out = []
        for e in evictions:
            if not still_leader():
                break
            out.append(self.evict(e))
        return out

    def evict(self, e: Eviction) -> EvictionResult:
        result = EvictionResult(e.gang, e.tenant, e.for_tenant)
        pods = [self.pod(k) for k in e.pods]
        missing = [k for k, p in zip(e.pods, pods, strict=True) if p is None]
        if missing:
            return self._refused(result, f"pods {', '.join(missing)} are gone")
        found = [p for p in pods if p is not None]
        for pod in found:  # 1. ask first: the whole gang or nothing
            m = tr.meta(pod)
            try:
                self.api.evict_pod(m["namespace"], m["name"], dry_run=True)
            except ApiError as exc:
                return self._refused(result, f"pod {tr.pod_key(pod)}: {exc}")
        why = message(e)
        for pod in found:  # 2. say why
            self._announce(pod, why)
        for i, pod in enumerate(found):  # 3. evict
            m = tr.meta(pod)
            try:
                self.api.evict_pod(m["namespace"], m["name"])
            except NotFound:
                continue  # gone already: what eviction wanted
            except ApiError as exc:
                for rest in found[i:]:
                    self._withdraw(rest, f"eviction refused: {exc}")
                return self._refused(result, f"pod {tr.pod_key(pod)}: {exc}")
            result.evicted.append(tr.pod_key(pod))
        self.metrics.reclaimed_gangs.labels(e.for_tenant, e.tenant).inc()
        log.info("%s: evicted gang %s of tenant %s for %s of tenant %s",
                 "preemption" if e.preempt else "reclaim", e.gang, e.tenant, e.for_gang,
                 e.for_tenant)
        return result

    def _refused(self, result: EvictionResult, why: str) -> EvictionResult:
        result.refused = why
        self.metrics.reclaim_refused.labels(result.for_tenant, result.tenant).inc()
        log.warning("reclaim of gang %s for tenant %s: %s", result.gang, result.for_tenant, why)
        return result

    def _condition(self, pod: tr.Obj, status: str, why: str) -> None:
        m = tr.meta(pod)
        cond = {"type": c.CONDITION_DISRUPTION_TARGET, "status": status,
                "reason": c.REASON_RECLAIM, "message": why,
                "lastTransitionTime": tr.rfc3339(self.clock())}
        try:
            self.api.set_pod_condition(m["namespace"], m["name"], cond)
        except ApiError as exc:
            log.warning("reclaim: condition on %s: %s", tr.pod_key(pod), exc)

    def _announce(self, pod: tr.Obj, why: str) -> None:
        self._condition(pod, "True", why)
        m = tr.meta(pod)
        now = tr.rfc3339(self.clock())
        try:
            self.api.create_event(m["namespace"], {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{m['name']}.", "namespace": m["namespace"]},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": m["name"],
                                   "namespace": m["namespace"], "uid": m.get("uid")},
                "reason": c.EVENT_RECLAIMED, "message": why, "type": "Normal",
                "source": {"component": keys.EVENT_COMPONENT},
                "reportingComponent": keys.EVENT_COMPONENT, "reportingInstance": self.identity,
                "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            })
        except ApiError as exc:
            log.warning("reclaim: event on %s: %s", tr.pod_key(pod), exc)

    def _withdraw(self, pod: tr.Obj, why: str) -> None:
        self._condition(pod, "False", why)
