"""The order search: the plan CP-SAT starts from, falls back to and must not lose to.

Greedy placers take the queue one gang at a time, and where a gang lands depends on what was
placed before it. The search therefore places the window several times and keeps the best
*end state*, which no one-at-a-time placer can judge:

1. one best-fit pass in queue order (the plan the model was hinted with before; it keeps the
   floor where it was);
2. FGD passes (:func:`solver.baselines.policies.fgd`, fragmentation gradient descent against
   the target workload): the first in queue order, the others in seeded orders that shuffle
   gangs of equal priority among themselves (a higher priority is still placed first). Every
   FGD pass uses the same seeded tie order, so a pass differs from another only by its order,
   and keeps room on each GPU model for the pods that may run only there
   (:mod:`solver.baselines.steer`; FGD itself, the baseline, does not).

Every pass is a :class:`~solver.baselines.GangPlacer` run: whole gangs or nothing, quotas,
required topology, allowed models and nodes, interference SLOs; so every pass is a plan the
checker accepts, like the greedy hint it replaces. A pass that admits less GPU demand weighted
by ``1 + priority`` (:func:`solver.cpsat.solve.plan_value`, the floor CP-SAT is held to) than
the best-fit pass is out: the floor never drops below best-fit's. The others are ranked by, in
turn:

- their admitted demand so weighted, less the policy's fragmentation weight times the expected
  fragmentation of the whole cluster after the pass (FGD's measure summed over nodes, in
  milli-GPU): the model's own trade between admitting now and wasting GPUs for what comes
  next, judged on the end state (:func:`rank_key`, :func:`best_pass`);
- the same demand weighted by the aged priority (so that of two passes admitting different
  gangs of equal priority, the one serving those that waited longer wins);
- admitted pods (CPU-only pods too);
- the least expected fragmentation;
- the earliest pass.

Why the trade and not the demand first: in a window where passes differ in what they admit,
the pass that admits the most now is often the one that strands GPUs behind exhausted CPU, and
the next windows pay for it. On the CPU-heavy openb list ``cpu300`` (FGD protocol, seed 42)
ranking by demand first left 14.7-14.9 % of the GPUs unallocated, behind FGD alone (14.5 %);
ranked by the trade 13.9 % (bench/controller_replay.md). A fragmentation weight of 0 gives the
old order (demand first, fragmentation only between equals).

How many FGD passes: as many as the cost model (:func:`search_cost`) fits in
:data:`SEARCH_SHARE` of the time limit, between 1 and :data:`MAX_PASSES`. The count depends on
the window, the cluster and the time limit only, never on measured time, so a solve stays
reproducible for a fixed seed. On the FGD-protocol replay of the default openb pod list the
gain over one FGD pass grows with the passes, most of it by 12-16 (bench/trace_replay.md).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from solver.baselines import ClusterArrays, GangPlacer
from solver.baselines.fgdcache import shape_of
from solver.baselines.steer import ModelSteer
from solver.cpsat.instance import weighted_demand
from solver.fairshare import boosts
from solver.names import SolverName
from solver.plan import Deferred, GangPlacement, Plan, SolveStats
from solver.queue import queue_order
from solver.types import Gang, Snapshot, TopologyMode

#: Most FGD passes one search makes.
MAX_PASSES = 16
#: Share of the time limit the whole search (setup, the best-fit pass, the FGD passes) may
#: take by the cost model below, which is a quiet machine's. A loaded machine takes two or
#: three times as long (the shared 2-core development machine under other work): the search
#: then still leaves the model, CP-SAT and the checker their time within the limit
#: (bench/solve_scale.md). 0.2 gives 10 FGD passes to a 128-pod openb window at 1 s, as the
#: old model did (bench/controller_replay.md), and 2 to a 64-pod window at 0.25 s.
SEARCH_SHARE = 0.2

# The cost model: seconds on a quiet machine, fitted on the openb cluster (1,213 nodes, windows
# of 16 to 256 pods) and on the generated clusters of bench/solve_scale.py (500 to 10,000
# nodes, ~97 % full, gangs that must stay in one rack).
#: Setup per node and per running pod: the free state copied, the target workload counted, the
#: fragmentation table built.
SETUP_PER_NODE = 3e-6
SETUP_PER_RUNNING = 1e-6
#: Every pass, per pod: the placer's own work, the node it lands on rescored, the pass undone.
#: Passes after the first FGD pass pay little more, as FGD's scores are cached per pod shape
#: (:mod:`solver.baselines.fgdcache`) and only the changed nodes are rescored.
PASS_PER_POD = 1e-4
PASS_PER_POD_NODE = 1.2e-8
#: A pod of a gang that must stay in one domain is tried domain by domain, over a full cluster
#: often in many before it fits or is deferred.
PASS_PER_DOMAIN_POD = 3e-4
#: The best-fit pass scores every node for every pod; the first FGD pass every node for every
#: pod shape (later passes reuse those scores).
BESTFIT_PER_POD_NODE = 6e-8
FGD_FIRST_PER_SHAPE_NODE = 3.5e-7


def _cost_terms(snapshot: Snapshot) -> tuple[float, float, float]:
    """The cost model's terms for ``snapshot``: the search without FGD passes, what the first
    FGD pass adds to any pass, and one pass."""
    pods = sum(len(g.pods) for g in snapshot.gangs)
    domain_pods = sum(len(g.pods) for g in snapshot.gangs
                      if g.topology is not None and g.topology.mode == TopologyMode.REQUIRED)
    nodes = len(snapshot.nodes)
    shapes = len({shape_of(p) for g in snapshot.gangs for p in g.pods})
    setup = SETUP_PER_NODE * nodes + SETUP_PER_RUNNING * len(snapshot.running)
    one_pass = pods * (PASS_PER_POD + PASS_PER_POD_NODE * nodes) + (
        domain_pods * PASS_PER_DOMAIN_POD)
    return (setup + one_pass + BESTFIT_PER_POD_NODE * pods * nodes,
            FGD_FIRST_PER_SHAPE_NODE * shapes * nodes, one_pass)


def search_cost(snapshot: Snapshot, passes: int) -> float:
    """What the search with ``passes`` FGD passes costs on a quiet machine by the cost model
    (seconds): setup and the best-fit pass, the first FGD pass's scoring of every node and
    ``passes`` FGD passes. A function of the snapshot's sizes and pod shapes only."""
    base, first, one_pass = _cost_terms(snapshot)
    return base + (first + passes * one_pass if passes else 0.0)


def pass_cost(snapshot: Snapshot, gang: Gang) -> float:
    """What placing ``gang`` in one best-fit pass costs by the cost model (seconds): its pods'
    share of a pass and of the best-fit pass's scoring of every node."""
    nodes = len(snapshot.nodes)
    per_pod = PASS_PER_POD + (PASS_PER_POD_NODE + BESTFIT_PER_POD_NODE) * nodes
    if gang.topology is not None and gang.topology.mode == TopologyMode.REQUIRED:
        per_pod += PASS_PER_DOMAIN_POD
    return len(gang.pods) * per_pod


def passes_for(snapshot: Snapshot, time_limit: float) -> int:
    """FGD passes that fit in the search's share of ``time_limit`` by :func:`search_cost`: 0
    (best-fit alone) when not even one does, 1 for a window of one gang, at most
    :data:`MAX_PASSES`."""
    base, first, one_pass = _cost_terms(snapshot)
    left = SEARCH_SHARE * time_limit - base - first
    if left < one_pass or left <= 0:
        return 0
    cap = 1 if len(snapshot.gangs) <= 1 else MAX_PASSES
    return cap if one_pass <= 0 else min(cap, int(left / one_pass))  # no pods: a pass is free


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
    steer = ModelSteer.of(work)
    scores: list[PassScore] = []
    plans: list[tuple[list[GangPlacement], list[Deferred]]] = []
    for policy, order in runs:
        work.checkpoint()
        # a fresh placer per pass (quota usage starts over); the same seed gives every FGD
        # pass the same tie order
        placer = GangPlacer(work, policy, np.random.default_rng(seed),
                            steer=steer if policy == SolverName.FGD else None)
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
        scores.append(PassScore(value, aged, pods, float(work.frag_stats()[3].sum())))
        plans.append((admitted, deferred))
        work.rollback()
    k = best_pass(scores, weights.fragmentation)
    admitted, deferred = plans[k]
    stats = SolveStats(solver="search", status="GREEDY", wall_seconds=time.perf_counter() - start,
                       detail={"search_passes": float(len(runs)), "search_best_pass": float(k)})
    return Plan(admitted=tuple(admitted), deferred=tuple(deferred), stats=stats)


class PassScore(NamedTuple):
    """What the search knows of a pass: ``value`` admitted GPU demand weighted by
    ``1 + priority``, ``aged`` the same by the aged priority, ``pods`` admitted pods, ``frag``
    the cluster's expected fragmentation after the pass (milli-GPU, FGD's measure)."""

    value: float
    aged: float
    pods: int
    frag: float


def rank_key(score: PassScore, frag_weight: float) -> tuple[float, float, float, float]:
    """How the search ranks an eligible pass, lowest first (the module docstring);
    ``frag_weight``: the policy's fragmentation weight (a negative one counts as 0)."""
    return (-(score.value - max(0.0, frag_weight) * score.frag), -score.aged, -score.pods,
            score.frag)


def best_pass(scores: Sequence[PassScore], frag_weight: float) -> int:
    """The index of the pass the search keeps: ``scores[0]`` is the best-fit pass, and a pass
    worth less than it is never kept (the floor); among the others the lowest
    :func:`rank_key`, the earliest on ties."""
    if not scores:
        raise ValueError("the search needs at least the best-fit pass")
    floor = scores[0].value
    eligible = [k for k, sc in enumerate(scores) if sc.value >= floor]
    return min(eligible, key=lambda k: (rank_key(scores[k], frag_weight), k))


def _shuffled(queue: list[Gang], rng: np.random.Generator) -> list[Gang]:
    """``queue`` with gangs of equal priority shuffled among themselves (higher first)."""
    perm = rng.permutation(len(queue))
    return [queue[int(i)] for i in sorted(perm, key=lambda i: -queue[int(i)].priority)]
