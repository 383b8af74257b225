"""Why a gang waits, in words a user can act on.

Checked in order of how fundamental the obstacle is: a pod no node may ever run
(models, selectors, taints), the tenant's quota, a pod that fits nowhere right now, a required
topology domain too small, and finally contention: each pod fits somewhere but not the whole
gang at once beside what this window admitted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable

import numpy as np

from solver.baselines import ClusterArrays
from solver.cpsat.candidates import pod_key
from solver.eligibility import why_not
from solver.plan import Deferred, Plan
from solver.queue import quota_reason
from solver.rules import quota_usage_milli, topology_domain
from solver.types import MILLI, Gang, PodRequest, Snapshot, TopologyMode

#: The starts of the reasons that say a gang waits for room (capacity now, or a topology
#: domain large enough): what a reservation's held capacity may be the cause of
#: (solver/reserve.py).
CAPACITY = "capacity: "
TOPOLOGY_TOO_SMALL = "topology domain too small: "
ROOM_REASONS = (CAPACITY, TOPOLOGY_TOO_SMALL)
#: Why a gang waits when nothing but this window's other gangs keeps it out.
CONTENTION_REASON = (f"{CAPACITY}each pod fits somewhere, but not the whole gang at once beside "
                     "the gangs admitted this window")


def arrays_after(snapshot: Snapshot, plan: Plan,
                 arrays: ClusterArrays | None = None) -> ClusterArrays:
    """Free capacity once the plan's admitted gangs are placed (into ``arrays``, the
    snapshot's free capacity before the plan, when given: it is changed in place)."""
    a = arrays if arrays is not None else ClusterArrays(snapshot)
    gangs = {g.name: g for g in snapshot.gangs}
    for gp in plan.admitted:
        a.apply_gang(gangs[gp.gang], gp)
    return a


def _fits_somewhere(a: ClusterArrays, pod: PodRequest) -> bool:
    nodes = a.node_fits(pod)
    if pod.gpu_count == 0:
        return bool(nodes.any())
    return bool((a.gpu_fits(pod, nodes).sum(axis=1) >= pod.gpu_count).any())


def _describe(pod: PodRequest) -> str:
    if pod.gpu_count == 0:
        return f"{pod.cpu_milli}m CPU, {pod.memory_mib} MiB"
    gpu = (f"{pod.gpu_count} GPU" if pod.gpu_milli == MILLI else f"{pod.gpu_milli} milli-GPU")
    return f"{gpu}, {pod.cpu_milli}m CPU, {pod.memory_mib} MiB"


class Explainer:
    """Reasons for one plan's deferred gangs, with the per-shape and per-level work cached."""

    def __init__(self, snapshot: Snapshot, plan: Plan,
                 arrays: ClusterArrays | None = None) -> None:
        self.snapshot = snapshot
        self.arrays = arrays_after(snapshot, plan, arrays)
        self.used = quota_usage_milli(snapshot, plan)
        gangs = {g.name: g for g in snapshot.gangs}
        self.admitting = {gangs[gp.gang].tenant for gp in plan.admitted if gp.gang in gangs}
        self._fits: dict[Hashable, bool] = {}
        self._room: dict[str, int] = {}

    def fits_somewhere(self, pod: PodRequest) -> bool:
        k = pod_key(pod)
        if k not in self._fits:
            self._fits[k] = _fits_somewhere(self.arrays, pod)
        return self._fits[k]

    def largest_domain(self, level: str) -> int:
        """Free milli-GPU of the roomiest domain of ``level``."""
        if level not in self._room:
            nodes = self.snapshot.nodes
            room: Counter[str] = Counter()
            free = np.maximum(self.arrays.gfree, 0)
            for row in np.nonzero(free.sum(axis=1) > 0)[0]:
                n = nodes[row]
                if not n.usable:
                    continue
                for s, g in enumerate(n.gpus):
                    dom = topology_domain(n, g, level)
                    if dom is not None:
                        room[dom] += int(free[row, s])
            self._room[level] = max(room.values(), default=0)
        return self._room[level]

    def reason(self, gang: Gang) -> str:
        snapshot, a = self.snapshot, self.arrays
        for pod in gang.pods:
            if a.eligible(pod).any():
                continue
            if pod.gpu_count and pod.models and not (pod.models & set(a.models)):
                return f"no node with GPU model {'/'.join(sorted(pod.models))} (pod {pod.name})"
            why = Counter(why_not(pod, n) or "" for n in snapshot.nodes).most_common(1)
            common = why[0][0] if why else "the cluster has no nodes"
            return f"no node may run pod {pod.name} (most often: {common})"
        quota = quota_reason(snapshot, gang, self.used, self.admitting)
        if quota is not None:
            return quota
        for pod in gang.pods:
            if not self.fits_somewhere(pod):
                return f"{CAPACITY}no node has room for pod {pod.name} ({_describe(pod)}) now"
        req = gang.topology
        if req is not None and req.mode is TopologyMode.REQUIRED:
            biggest = self.largest_domain(req.level)
            if biggest < gang.gpu_demand_milli:
                return (f"{TOPOLOGY_TOO_SMALL}no {req.level} domain has "
                        f"{gang.gpu_demand_milli} milli-GPU free (largest: {biggest})")
        return CONTENTION_REASON


def deferrals(snapshot: Snapshot, plan: Plan,
              arrays: ClusterArrays | None = None) -> tuple[Deferred, ...]:
    """A reason for every gang of the snapshot the plan does not admit (``arrays``: the
    snapshot's free capacity, reused and changed in place)."""
    admitted = plan.admitted_names
    waiting = [g for g in snapshot.gangs if g.name not in admitted]
    if not waiting:
        return ()
    explain = Explainer(snapshot, plan, arrays)
    return tuple(Deferred(g.name, explain.reason(g)) for g in waiting)
