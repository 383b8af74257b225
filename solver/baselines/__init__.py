"""Greedy baselines behind one interface: first-fit, best-fit, random and FGD; and the
Kueue-like and Volcano-like baselines (:mod:`solver.baselines.kueue`,
:mod:`solver.baselines.volcano`: models of those systems' queueing, not the systems).

``place(snapshot, name, seed=seed)`` returns a :class:`~solver.plan.Plan` that the checker
accepts, each gang placed whole or not at all. The first four take gangs in Berth's queue
order (:func:`solver.queue.queue_order`: priority aged by waiting time, fair-share boosts) and
differ only in where a pod goes; the Kueue-like and Volcano-like ones take them in their own
systems' order (per-tenant queues) and place with those systems' node scoring.
The CP-SAT model uses these plans as hints and as its fallback; the trace simulator drives
:class:`GangPlacer` directly so that its state carries over from pod to pod.
"""

from __future__ import annotations

import time

import numpy as np

from solver.baselines import kueue, volcano
from solver.baselines.cluster import ClusterArrays
from solver.baselines.greedy import GangPlacer
from solver.baselines.policies import PLACEMENT_ONLY
from solver.names import QUEUEING, SolverName
from solver.plan import Deferred, GangPlacement, Plan, SolveStats
from solver.queue import queue_order
from solver.types import Snapshot

#: The baselines in Berth's queue order (the FGD paper's protocol places pods with them).
NAMES: tuple[str, ...] = PLACEMENT_ONLY

__all__ = ["NAMES", "QUEUEING", "ClusterArrays", "GangPlacer", "place"]


def place(snapshot: Snapshot, name: str, *, seed: int = 0,
          arrays: ClusterArrays | None = None) -> Plan:
    """The plan of baseline ``name`` (one of :data:`NAMES` or :data:`QUEUEING`) for
    ``snapshot``.

    ``arrays``: the snapshot's free-capacity state when the caller has built it already; the
    plan is placed into it (pass a copy to keep the original; not for :data:`QUEUEING`)."""
    if name == SolverName.KUEUE and arrays is None:
        return kueue.place(snapshot, seed=seed)
    if name == SolverName.VOLCANO and arrays is None:
        return volcano.place(snapshot, seed=seed)
    if name not in NAMES:
        raise ValueError(f"unknown baseline {name!r}; choose one of "
                         f"{', '.join((*NAMES, *QUEUEING))} (the last two without arrays)")
    start = time.perf_counter()
    state = ClusterArrays(snapshot) if arrays is None else arrays
    placer = GangPlacer(state, name, np.random.default_rng(seed))
    admitted: list[GangPlacement] = []
    deferred: list[Deferred] = []
    for gang in queue_order(snapshot):
        result = placer.place(gang)
        if isinstance(result, str):
            deferred.append(Deferred(gang=gang.name, reason=result))
        else:
            admitted.append(result)
    stats = SolveStats(solver=name, status="GREEDY", wall_seconds=time.perf_counter() - start)
    return Plan(admitted=tuple(admitted), deferred=tuple(deferred), stats=stats)
