"""The order search: the plan CP-SAT starts from, falls back to and must not lose to.

Greedy placers take the queue one gang at a time, and where a gang lands depends on what was
placed before it. The search therefore places the window several times and keeps the best
*end state*, which no one-at-a-time placer can judge:

1. one best-fit pass in queue order (the plan the model was hinted with before; it keeps the
   floor where it was);
2. FGD passes (:func:`solver.baselines.policies.fgd`, fragmentation gradient descent against
   the target workload): the first in queue order, the others in seeded orders that shuffle
   gangs of equal priority among themselves (a higher priority is still placed first). Every
   FGD pass uses the same seeded tie order, so a pass differs from another only by its order.

Every pass is a :class:`~solver.baselines.GangPlacer` run: whole gangs or nothing, quotas,
required topology, allowed models and nodes, interference SLOs; so every pass is a plan the
checker accepts, like the greedy hint it replaces. The passes are ranked by, in turn:

- admitted GPU demand weighted by ``1 + priority`` (:func:`solver.cpsat.solve.plan_value`,
  the floor CP-SAT is held to);
- the same weighted by the aged priority (so that of two passes admitting different gangs of
  equal priority, the one serving those that waited longer wins);
- admitted pods (CPU-only pods too);
- the least expected fragmentation of the whole cluster after the pass (FGD's measure summed
  over nodes);
- the earliest pass.

How many FGD passes: as many as fit in :data:`SEARCH_SHARE` of the time limit by a fixed cost
model (:data:`SECONDS_PER_POD_NODE`, measured on the openb cluster), between 1 and
:data:`MAX_PASSES`. The count depends on the window and the time limit only, never on measured
time, so a solve stays reproducible for a fixed seed. On the FGD-protocol replay of the
default openb pod list the gain over one FGD pass grows with the passes, most of it by 12-16
(bench/trace_replay.md).
"""

from __future__ import annotations

import time
import zlib

import numpy as np

from solver.baselines import ClusterArrays, GangPlacer
from solver.cpsat.instance import weighted_demand
from solver.fairshare import boosts
from solver.names import SolverName
from solver.plan import Deferred, GangPlacement, Plan, SolveStats
from solver.queue import queue_order
from solver.types import Gang, Snapshot

#: Most FGD passes one search makes.
MAX_PASSES = 16
#: Share of the time limit the passes may take, by the cost model below.
SEARCH_SHARE = 0.4
#: Cost model of one FGD pass: seconds per pod of the window and node of the cluster
#: (~0.3 ms per pod on the openb cluster's 1,213 nodes: bench/solve_scale.md).
SECONDS_PER_POD_NODE = 2.5e-7


def passes_for(snapshot: Snapshot, time_limit: float) -> int:
    """FGD passes that fit in the search's share of ``time_limit``: 0 (best-fit alone) when
    not even one does, 1 for a window of one gang, at most :data:`MAX_PASSES`."""
    pods = sum(len(g.pods) for g in snapshot.gangs)
    cost = max(1, pods) * max(1, len(snapshot.nodes)) * SECONDS_PER_POD_NODE
    fit = min(MAX_PASSES, int(SEARCH_SHARE * time_limit / cost))
    return min(fit, 1) if len(snapshot.gangs) <= 1 else fit


def search(snapshot: Snapshot, arrays: ClusterArrays, *, seed: int,
           passes: int) -> Plan:
    """The best of one best-fit pass and ``passes`` FGD passes (see the module docstring).

    ``arrays``: the snapshot's free capacity; it is left as it was."""
    if passes < 0:
        raise ValueError(f"passes must be at least 0, got {passes}")
    start = time.perf_counter()
    work = arrays.copy()
    queue = queue_order(snapshot)
    weights = snapshot.policy.weights
    boost = boosts(snapshot)
    # the orders are drawn from the seed and the window's first gang: reproducible, and not
    # the same for every window of one size
    rng = np.random.default_rng([seed, zlib.crc32(queue[0].name.encode()) if queue else 0])
    runs: list[tuple[str, list[Gang]]] = [(SolverName.BESTFIT, queue)]
    if passes:
        runs.append((SolverName.FGD, queue))
    runs += [(SolverName.FGD, _shuffled(queue, rng)) for _ in range(passes - 1)]
    best: tuple[tuple[float, ...], list[GangPlacement], list[Deferred], int] | None = None
    for k, (policy, order) in enumerate(runs):
        work.checkpoint()
        # a fresh placer per pass (quota usage starts over); the same seed gives every FGD
        # pass the same tie order
        placer = GangPlacer(work, policy, np.random.default_rng(seed))
        admitted: list[GangPlacement] = []
        deferred: list[Deferred] = []
        value = aged = 0.0
        pods = 0
        for gang in order:
            result = placer.place(gang)
            if isinstance(result, str):
                deferred.append(Deferred(gang=gang.name, reason=result))
                continue
            admitted.append(result)
            value += gang.gpu_demand_milli * (1 + max(0, gang.priority))
            aged += weighted_demand(gang, weights, boost.get(gang.tenant, 0.0))
            pods += len(gang.pods)
        key = (-value, -aged, -pods, float(work.frag_stats()[3].sum()))
        work.rollback()
        if best is None or key < best[0]:  # strictly better: the earliest pass wins ties
            best = (key, admitted, deferred, k)
    assert best is not None
    _, admitted, deferred, k = best
    stats = SolveStats(solver="search", status="GREEDY", wall_seconds=time.perf_counter() - start,
                       detail={"search_passes": float(len(runs)), "search_best_pass": float(k)})
    return Plan(admitted=tuple(admitted), deferred=tuple(deferred), stats=stats)


def _shuffled(queue: list[Gang], rng: np.random.Generator) -> list[Gang]:
    """``queue`` with gangs of equal priority shuffled among themselves (higher first)."""
    perm = rng.permutation(len(queue))
    return [queue[int(i)] for i in sorted(perm, key=lambda i: -queue[int(i)].priority)]
