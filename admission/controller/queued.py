"""Gangs their queue will never admit: what Kueue's Workloads say about the pods it gates.

A gang whose pods still carry Kueue's gate waits for Kueue (``QueueAdmission``: its ClusterQueue's
quota), which Berth does not decide. Some such pods wait for good: Kueue preempted their
Workload before it lifted its gate and will not requeue it (v0.19 and newer with its
``SkipReassignmentForPodOwnedWorkloads`` feature gate on, its default), or the Workload is
deactivated. Their pods would say they wait for quota forever; this reads the Workloads of the
namespaces where gangs have waited for Kueue at least :data:`CHECK_AFTER_S` and words those
gangs with :func:`admission.backends.kueue.never_admitted` instead (reason
``QueueWillNotAdmit``, a Warning).

Cost: one list of Workloads per such namespace at most every :data:`RELIST_S` (served from the
API server's watch cache), at most :data:`MAX_LISTS_PER_CYCLE` namespaces a cycle, only while a
gang there waits for Kueue that long; nothing at all with the other backends. A list holds
every Workload of the namespace: with thousands of pods waiting for Kueue's quota in one
namespace that is megabytes every 30 s, the price of telling the few stranded ones. A cluster whose
Berth may not list Workloads (RBAC from before this, config/components/kueue/rbac.yaml) or
that does not serve them gets the plain message, and the log says why once.

Trust: a Workload counts only for the pods of its own namespace that its ``ownerReferences``
name by uid (Kueue's pod integration owns its Workloads by the pods), so what one namespace
holds words no other namespace's pods, and at worst a tenant who may write Workloads there
changes the message on its own pods.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime

from admission.backends.base import BackendName
from admission.backends.kueue import (
    WORKLOAD_GROUP,
    WORKLOAD_PLURAL,
    WORKLOAD_VERSIONS,
    never_admitted,
    workload_owners,
)
from admission.controller import translate as tr
from admission.controller.api import ApiError, ClusterApi, NotFound
from admission.controller.explain import Why
from admission.controller.snapshot import Built, GangState

log = logging.getLogger(__name__)

#: How long a gang waits for Kueue before its Workload is read (Kueue admits within seconds
#: when it has quota; a gang waiting longer is worth one look).
CHECK_AFTER_S = 30.0
#: How often one namespace's Workloads are listed again while gangs there wait for Kueue.
RELIST_S = 30.0
#: The most namespaces whose Workloads one cycle lists (those listed longest ago first), so
#: that a cluster with many namespaces waiting for Kueue adds a bounded time to a cycle.
MAX_LISTS_PER_CYCLE = 4
#: The reason a pod's condition and Event give when its queue will never admit it.
REASON = "QueueWillNotAdmit"


@dataclass
class _Listed:
    at: float  # when, on QueueCheck's clock (seconds)
    words: dict[str, str] = field(default_factory=dict)  # pod uid -> never_admitted's words


class QueueCheck:
    """Reads Kueue's Workloads for gangs that wait for Kueue long enough (module docstring)."""

    def __init__(self, api: ClusterApi, clock: Callable[[], float]) -> None:
        self.api = api
        self.clock = clock  # seconds: the controller's clock as a timestamp
        self._listed: dict[str, _Listed] = {}
        self._version: str | None = None  # the Workload API version the cluster serves
        self._refused: str | None = None  # why listing failed, logged once

    def amend(self, built: Built, why: MutableMapping[str, Why], backend: str,
              now: datetime) -> int:
        """Replace the ``QueueAdmission`` words of each gang Kueue will not admit; returns
        how many gangs were so worded."""
        if backend != BackendName.KUEUE:
            self._listed.clear()
            return 0
        waiting: dict[str, list[str]] = {}  # namespace -> keys of gangs waiting long enough
        for g in built.gangs.values():
            if g.state != GangState.QUEUED or g.key not in why:
                continue
            age = (now - g.first_created).total_seconds() if g.first_created else 0.0
            if age >= CHECK_AFTER_S:
                waiting.setdefault(g.key.split("/", 1)[0], []).append(g.key)
        for ns in list(self._listed):
            if ns not in waiting:
                del self._listed[ns]  # nothing waits there any more: forget what was read
        worded = 0
        due = sorted((ns for ns in waiting if self._due(ns)),
                     key=lambda ns: self._listed[ns].at if ns in self._listed else -math.inf)
        for ns in due[:MAX_LISTS_PER_CYCLE]:
            self._relist(ns)
        for ns, gang_keys in waiting.items():
            listed = self._listed.get(ns)
            words = listed.words if listed is not None else {}
            for key in gang_keys:
                for pod in sorted(built.gangs[key].gated, key=tr.pod_key):
                    said = words.get(str(tr.meta(pod).get("uid") or ""))
                    if said is not None:
                        why[key] = Why(REASON, f"waiting: pod {tr.pod_key(pod)}: {said}",
                                       warning=True)
                        worded += 1
                        break
        return worded

    def _due(self, namespace: str) -> bool:
        listed = self._listed.get(namespace)
        return listed is None or self.clock() - listed.at >= RELIST_S

    def _relist(self, namespace: str) -> None:
        listed = _Listed(at=self.clock())
        for workload in self._list(namespace):
            said = never_admitted(workload)
            if said is not None:
                for uid in workload_owners(workload):
                    listed.words[uid] = said
        self._listed[namespace] = listed

    def _list(self, namespace: str) -> list[tr.Obj]:
        versions = (self._version,) if self._version else WORKLOAD_VERSIONS
        for version in versions:
            try:
                items = self.api.list_custom(WORKLOAD_GROUP, version, WORKLOAD_PLURAL, namespace)
            except NotFound:
                continue  # not served in this version (or at all)
            except ApiError as exc:
                self._refuse(f"listing Kueue's Workloads in {namespace}: {exc}")
                return []
            self._version = version
            self._refused = None
            return [w for w in items if isinstance(w, dict)]
        self._version = None
        self._refuse(f"the cluster serves no Kueue Workloads ({WORKLOAD_GROUP} "
                     f"{', '.join(WORKLOAD_VERSIONS)})")
        return []

    def _refuse(self, why: str) -> None:
        if why != self._refused:
            log.warning("%s; pods waiting for Kueue say only that they wait for its quota "
                        "(config/components/kueue/rbac.yaml grants the list)", why)
            self._refused = why
