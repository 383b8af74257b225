"""Greedy baselines behind one interface: first-fit, best-fit, random and FGD.

``place(snapshot, name, seed=seed)`` returns a :class:`~solver.plan.Plan` that the checker
accepts: gangs are taken in queue order (:func:`solver.queue.queue_order`: priority aged by
waiting time), each placed whole or not at all.
The CP-SAT model uses these plans as hints and as its fallback; the trace simulator drives
:class:`GangPlacer` directly so that its state carries over from pod to pod.
"""

from __future__ import annotations

import time

import numpy as np

from solver.baselines.cluster import ClusterArrays
from solver.baselines.greedy import GangPlacer
from solver.baselines.policies import POLICIES
from solver.plan import Deferred, GangPlacement, Plan, SolveStats
from solver.queue import queue_order
from solver.types import Snapshot

NAMES: tuple[str, ...] = tuple(POLICIES)

__all__ = ["NAMES", "ClusterArrays", "GangPlacer", "place"]


def place(snapshot: Snapshot, name: str, *, seed: int = 0,
          arrays: ClusterArrays | None = None) -> Plan:
    """The plan of greedy policy ``name`` (one of :data:`NAMES`) for ``snapshot``.

    ``arrays``: the snapshot's free-capacity state when the caller has built it already; the
    plan is placed into it (pass a copy to keep the original)."""
    if name not in POLICIES:
        raise ValueError(f"unknown baseline {name!r}; choose one of {', '.join(NAMES)}")
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
