"""Volcano-like: a model of Volcano's session (actions enqueue, allocate, backfill; plugins
gang, proportion, priority, binpack) as a baseline for Berth.

A model, not Volcano: the real Volcano is run against Berth in e2e/bench_compare.py. What it
follows, from volcano-sh/volcano (read 2026-12-04):

- pkg/scheduler/plugins/proportion/proportion.go: each queue's *deserved* share is found by
  water-filling the cluster's capacity by queue weight: every round gives each unsatisfied
  queue ``remaining * weight / total weight`` more, capped by its request (what it runs plus
  what it waits for) and its ``capability``; a capped queue is satisfied and leaves; rounds
  repeat while capacity remains. A queue's *share* is allocated / deserved; queues are served
  lowest share first (``QueueOrderFn``); a queue whose allocation reached its deserved share is
  *overused* and gets nothing more this session (``OverusedFn``); a job that would take its
  queue past ``capability`` is not allocated (``AllocatableFn``).
- pkg/scheduler/actions/allocate/allocate.go: pop the queue of lowest share, pop its first job
  (priority plugin: higher priority first; then creation time), try every task of it inside a
  Statement; the gang plugin (plugins/gang/gang.go) commits only if the job is ready (all of
  ``minMember`` placed, here every pod of the gang), else discards it; push the queue back.
- pkg/scheduler/actions/backfill/backfill.go and docs/design (backfill): backfill places
  BestEffort pods that request no resources. Every pod Berth queues asks for a GPU, so it has
  nothing to do here (it is *not* EASY backfilling behind a reservation).
- enqueue (actions/enqueue): a PodGroup moves to Inqueue when its queue's capability allows its
  ``minResources``; here every waiting gang of the snapshot counts as Inqueue and the capability
  check is done at allocation (the same test, one step later).
- Node scoring: binpack (plugins/binpack: the node that ends fullest), modelled by Berth's
  best-fit (:func:`solver.baselines.policies.best_fit`). e2e/bench_compare.py also turns on
  nodeorder, whose least-requested score pulls the other way; the model leaves it out.

Mapping from Berth's snapshot (as e2e/bench_compare.py creates Volcano Queues): each tenant is a
Queue with its ``weight``; its capability is ``quota_milli`` plus ``borrow_limit_milli`` (plus
nothing when it may not borrow; no cap when either is unset: bench_compare.py gives every queue
the whole cluster). Priority is the PodGroup's priority, arrival its creation time.

Simplifications: one resource (GPU milli) for shares and deserved, where proportion and drf
compare every resource (CPU and memory are bounded by the nodes only); the snapshot's quotas
are also enforced with Berth's rule (:func:`solver.queue.quota_reason`, the checker's), which
Volcano's capability cannot state (borrowing only from others' idle quota); no reclaim:
Volcano's default actions are "enqueue, allocate, backfill" and proportion's reclaim runs only
when the reclaim action is configured (bench_compare.py configures it for the real Volcano;
this model does not reclaim, and says so in the results).
"""

from __future__ import annotations

import heapq
import math
import time

import numpy as np

from solver.baselines.cluster import ClusterArrays
from solver.baselines.greedy import GangPlacer
from solver.names import SolverName
from solver.plan import Deferred, GangPlacement, Plan, SolveStats
from solver.types import MILLI, Gang, Snapshot, Tenant

#: Below this (milli-GPU) capacity left to share counts as none.
EPS = 1e-6


def capability(tenant: Tenant) -> float:
    """The Queue's capability in GPU milli (inf: no cap)."""
    if tenant.quota_milli is None:
        return math.inf
    if not tenant.can_borrow:
        return float(tenant.quota_milli)
    if tenant.borrow_limit_milli is None:
        return math.inf
    return float(tenant.quota_milli + tenant.borrow_limit_milli)


def deserved(total: float, weights: dict[str, float], request: dict[str, float],
             cap: dict[str, float]) -> dict[str, float]:
    """Proportion's deserved share of each queue: ``total`` water-filled by weight, each queue
    capped by ``min(request, capability)``."""
    out = dict.fromkeys(weights, 0.0)
    met = {q for q in weights if min(request.get(q, 0.0), cap.get(q, math.inf)) <= 0}
    remaining = total
    while remaining > EPS:
        open_ = [q for q in weights if q not in met]
        total_w = sum(weights[q] for q in open_)
        if total_w <= 0:
            break
        given = 0.0
        for q in open_:
            limit = min(request.get(q, 0.0), cap.get(q, math.inf))
            d = out[q] + remaining * weights[q] / total_w
            if d >= limit:
                d = limit
                met.add(q)
            given += d - out[q]
            out[q] = d
        remaining -= given
        if given <= EPS:
            break
    return out


def share(allocated: float, deserve: float) -> float:
    """allocated / deserved (0 when both are 0; inf when nothing is deserved but some held)."""
    if deserve <= 0:
        return 0.0 if allocated <= 0 else math.inf
    return allocated / deserve


def job_order(snapshot: Snapshot) -> dict[str, list[Gang]]:
    """Each queue's jobs: higher priority first, then creation (longest waiting), then
    snapshot order."""
    out: dict[str, list[Gang]] = {}
    for _, g in sorted(enumerate(snapshot.gangs),
                       key=lambda ig: (-ig[1].priority, -ig[1].wait_seconds, ig[0])):
        out.setdefault(g.tenant, []).append(g)
    return out


def place(snapshot: Snapshot, *, seed: int = 0) -> Plan:
    """The Volcano-like plan of ``snapshot``: one session's allocate action."""
    start = time.perf_counter()
    placer = GangPlacer(ClusterArrays(snapshot), SolverName.VOLCANO,
                        np.random.default_rng(seed))
    jobs = job_order(snapshot)
    tenants = {t.name: t for t in snapshot.tenants}
    names = list(dict.fromkeys([*tenants, *jobs]))
    weights = {q: tenants[q].weight if q in tenants else 1.0 for q in names}
    cap = {q: capability(tenants[q]) if q in tenants else math.inf for q in names}
    allocated = {q: float(placer.used.get(q, 0)) for q in names}
    request = {q: allocated[q] + sum(g.gpu_demand_milli for g in jobs.get(q, ())) for q in names}
    total = float(sum(len(n.gpus) for n in snapshot.nodes) * MILLI)
    deserve = deserved(total, weights, request, cap)
    heap = [(share(allocated[q], deserve[q]), q) for q in names if jobs.get(q)]
    heapq.heapify(heap)
    nxt = dict.fromkeys(names, 0)
    admitted: list[GangPlacement] = []
    deferred: list[Deferred] = []
    while heap:
        _, q = heapq.heappop(heap)
        pending = jobs[q]
        if allocated[q] >= deserve[q] and allocated[q] > 0:
            # overused: nothing more for this queue in this session
            deferred += [Deferred(g.name, f"volcano-like: queue {q} holds {allocated[q]:.0f} "
                                  f"of its deserved {deserve[q]:.0f} milli-GPU")
                         for g in pending[nxt[q]:]]
            continue
        gang = pending[nxt[q]]
        nxt[q] += 1
        if allocated[q] + gang.gpu_demand_milli > cap[q]:
            deferred.append(Deferred(gang.name, f"volcano-like: queue {q} would pass its "
                                     f"capability of {cap[q]:.0f} milli-GPU"))
        else:
            result = placer.place(gang)
            if isinstance(result, str):
                deferred.append(Deferred(gang.name, f"volcano-like: {result}"))
            else:
                admitted.append(result)
                allocated[q] += gang.gpu_demand_milli
        if nxt[q] < len(pending):
            heapq.heappush(heap, (share(allocated[q], deserve[q]), q))
    stats = SolveStats(solver=SolverName.VOLCANO, status="GREEDY",
                       wall_seconds=time.perf_counter() - start)
    return Plan(admitted=tuple(admitted), deferred=tuple(deferred), stats=stats)
