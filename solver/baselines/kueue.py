"""Kueue-like: a model of Kueue's admission (per-tenant ClusterQueues in one cohort,
BestEffortFIFO, borrowing within the cohort, reclaimWithinCohort) as a baseline for Berth.

A model, not Kueue: the real Kueue is run against Berth in e2e/bench_compare.py. What it
follows, from kubernetes-sigs/kueue (read 2026-12-04):

- pkg/scheduler/scheduler.go (``schedule``, ``entryOrdering.Less``): a scheduling cycle takes
  the *head* of every ClusterQueue, nominates each, and tries them in order: heads that fit
  within nominal quota before heads that must borrow, then higher priority, then FIFO on
  creation time. Fair sharing is off by default (no ``fairSharing`` in the Configuration), so
  no dominant-resource-share term.
- site/content/en/docs/concepts/cluster_queue.md (``queueingStrategy``): within a
  ClusterQueue workloads are ordered by priority, then
  creation time. ``BestEffortFIFO``: a head that cannot be admitted is set aside as
  inadmissible and the next workload becomes the head, so a later, smaller workload may go
  first; it is retried when the cluster changes (here: the next window).
- Cohort borrowing (docs: cluster_queue.md, "Cohort", ``borrowingLimit``): a ClusterQueue may
  use other ClusterQueues' unused nominal quota, up to its ``borrowingLimit``.
- pkg/scheduler/preemption/preemption.go and preemption/common/ordering.go
  (``CandidatesOrdering``): with ``reclaimWithinCohort: Any`` a workload that fits within its
  ClusterQueue's nominal quota evicts whole workloads of ClusterQueues that borrow; candidates
  lowest priority first, then the most recently admitted; the fewest that make it fit.

Mapping from Berth's snapshot (the same translation as e2e/bench_compare.py's
``kueue_cluster_queues``): each tenant is a ClusterQueue in one cohort; ``quota_milli`` its
nominal quota of GPUs (None: no limit), ``can_borrow``/``borrow_limit_milli`` its
``borrowingLimit`` (0 when it may not borrow); ``policy.reclaim.enabled`` is
``reclaimWithinCohort: Any`` (off: ``Never``); gang priority is the workload's priority and its
arrival (``wait_seconds``) its creation time.

Simplifications (each flatters or handicaps the model as said):

- Admission *and* placement. Kueue admits by quota and kube-scheduler then places the pods;
  a workload admitted on quota that no node can fit holds its quota while its pods wait
  Unschedulable (kueue issue 4329). This model admits a gang only when it also fits on the
  nodes now, as if quota and nodes always agreed (it flatters Kueue): a head that fits its
  quota but not the nodes is treated like one that does not fit, and BestEffortFIFO moves on.
- Node scoring: kube-scheduler's default, NodeResourcesFit LeastAllocated over CPU and memory
  (:func:`solver.baselines.policies.least_allocated`), because that is what places a
  Kueue-admitted pod in the e2e comparison (kube-scheduler with its default profile); GPUs go
  to the lowest free slots, whole gangs or nothing (the transaction of
  :class:`solver.baselines.greedy.GangPlacer`; Kueue's pod groups do not place as one: this
  too flatters it).
- One resource: quota is GPU milli (as Berth's); CPU and memory are bounded by the nodes only.
  One flavor: bench_compare.py gives Kueue one ResourceFlavor per GPU model with the quota
  split per model; here a tenant's quota covers every model.
- Cycles are not timed: within one window, cycles run until no head is left, as Kueue's
  back-to-back cycles would within a few seconds.
- Quota is judged with Berth's rule (:func:`solver.queue.quota_reason`, the checker's), which
  is the cohort rule: borrowing only from others' idle nominal quota.
- Reclaim is :func:`solver.reclaim.plan_reclaim` run on this plan with Kueue's order of the
  waiting workloads (:func:`reclaim_order`), applied by :func:`solver.api.solve`: the same
  idea, one copy. It differs from Kueue in that the reclaiming gang must fit on the nodes once
  the victims are gone (best-fit), and it honours ``policy.reclaim.min_run_s`` and
  ``max_gangs`` (Kueue has neither: set them to 0 and large to match), which the checker
  enforces on every plan.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from solver.baselines.cluster import ClusterArrays
from solver.baselines.greedy import GangPlacer
from solver.names import SolverName
from solver.plan import Deferred, GangPlacement, Plan, SolveStats
from solver.types import Gang, Snapshot


def cluster_queue_order(snapshot: Snapshot) -> dict[str, list[Gang]]:
    """Each tenant's ClusterQueue: its gangs by priority, then creation (longest waiting
    first), then snapshot order."""
    queues: dict[str, list[Gang]] = {}
    for _, g in sorted(enumerate(snapshot.gangs),
                       key=lambda ig: (-ig[1].priority, -ig[1].wait_seconds, ig[0])):
        queues.setdefault(g.tenant, []).append(g)
    return queues


def reclaim_order(snapshot: Snapshot) -> list[Gang]:
    """The order waiting gangs reclaim in: priority, then creation (Kueue's FIFO)."""
    return [g for _, g in sorted(enumerate(snapshot.gangs),
                                 key=lambda ig: (-ig[1].priority, -ig[1].wait_seconds, ig[0]))]


def place(snapshot: Snapshot, *, seed: int = 0) -> Plan:
    """The Kueue-like plan of ``snapshot`` (reclaim is added by :func:`solver.api.solve`)."""
    start = time.perf_counter()
    placer = GangPlacer(ClusterArrays(snapshot), SolverName.KUEUE, np.random.default_rng(seed))
    nominal = {t.name: t.quota_milli for t in snapshot.tenants}
    queues = {t: deque(gs) for t, gs in cluster_queue_order(snapshot).items()}
    admitted: list[GangPlacement] = []
    deferred: list[Deferred] = []
    while any(queues.values()):
        # one cycle: every ClusterQueue's head, those within nominal quota first
        heads = [q[0] for q in queues.values() if q]

        def borrows(g: Gang) -> bool:
            q = nominal.get(g.tenant)
            return q is not None and placer.used.get(g.tenant, 0) + g.gpu_demand_milli > q

        order = {g.name: i for i, g in enumerate(snapshot.gangs)}
        heads.sort(key=lambda g: (borrows(g), -g.priority, -g.wait_seconds, order[g.name]))
        for gang in heads:
            queues[gang.tenant].popleft()
            result = placer.place(gang)
            if isinstance(result, str):
                # BestEffortFIFO: inadmissible until the cluster changes; the next is head
                deferred.append(Deferred(gang=gang.name, reason=f"kueue-like: {result}"))
            else:
                admitted.append(result)
    stats = SolveStats(solver=SolverName.KUEUE, status="GREEDY",
                       wall_seconds=time.perf_counter() - start)
    return Plan(admitted=tuple(admitted), deferred=tuple(deferred), stats=stats)
