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

How much search: as many FGD passes as the cost model (:func:`search_cost`) fits in
:data:`SEARCH_SHARE` of the time limit, between 1 and :data:`MAX_PASSES`; what the share leaves
after :data:`MAX_PASSES` passes goes to moves, at :data:`MOVE_COST` of a pass each, at most
:data:`MAX_MOVES` (:func:`budget_for`), and they stop after :data:`PATIENCE` in a row found
nothing better. The counts depend on the window, the cluster and the time limit only, never on
measured time, so a solve stays reproducible for a fixed seed.

Keeping the queue's order: a gang that has waited ``policy.queueing.keep_order_after_s`` and
that the best-fit pass (queue order) starts must be started by the pass the search keeps, and
by every move kept (:func:`solver.queue.kept_in_order`; the model is held to the same,
:mod:`solver.cpsat.order`). The search still ranks every pass that starts them, and a pass
may start more. Without this the ranking (admitted demand first) kept passes that left the
queue's head waiting for a large gang a different order made fit, and in the timed replay the
head's waits undid what serving short runs first had gained (bench/reservations_sim.md,
"Keeping the queue's order, and short runs first"). Gangs in their first windows (below the
wait; every pod of the FGD-protocol replay) are the passes' to trade as before.

Why moves, and why only after the passes: on the FGD-protocol replay the allocation keeps
growing with the search well past :data:`MAX_PASSES` (`gpushare60`, seed 42, 1 s a window,
search and CP-SAT: unallocated % 8.36 with 10 passes, 8.27 with 16, 8.19 with 32, 8.14 with
64), and from 16 passes on, moves find better end states than more random orders for the same
time (16 passes and 32 moves: 8.06, in about the time of 32 passes). Within the first 16 they
do not: six passes and eight moves in place of ten passes gained on some lists and lost on
others (bench/controller_replay.md, "Moves"). For the replay's 128-pod openb windows the share
holds about ten passes at 1 s, so moves start at longer limits there (the controller's default
is 5 s); smaller windows and clusters reach 16 passes sooner (a 64-pod openb window gets 16
passes and 15 moves at 1 s, the embedded default's 8-node cluster its 48 at once).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from solver.baselines import ClusterArrays, GangPlacer
from solver.baselines.fgdcache import shape_of
from solver.baselines.steer import ModelSteer
from solver.cpsat.instance import weighted_demand
from solver.fairshare import boosts
from solver.names import SolverName
from solver.plan import Deferred, GangPlacement, Plan, SolveStats
from solver.queue import gang_boost, kept_in_order, queue_order
from solver.types import Gang, Queueing, Snapshot, TopologyMode, Weights

#: Most FGD passes one search makes.
MAX_PASSES = 16
#: Share of the time limit the whole search (setup, the best-fit pass, the FGD passes) may
#: take by the cost model below, which is a quiet machine's. A loaded machine takes two or
#: three times as long (the shared 2-core development machine under other work): the search
#: then still leaves the model, CP-SAT and the checker their time within the limit
#: (bench/solve_scale.md). 0.2 gives 10 FGD passes to a 128-pod openb window at 1 s, as the
#: old model did (bench/controller_replay.md), and 2 to a 64-pod window at 0.25 s.
SEARCH_SHARE = 0.2
#: What a move costs, in passes: it re-places half a window on average and, when it is not
#: kept, puts the old placements back (cheaper than placing them: no choice to make).
MOVE_COST = 0.5
#: Most moves one search makes.
MAX_MOVES = 48
#: Moves stop after this many in a row found nothing better: where every order ends alike (a
#: small cluster, a window that fits whole), the time is CP-SAT's.
PATIENCE = 12

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


def budget_for(snapshot: Snapshot, time_limit: float) -> tuple[int, int]:
    """(FGD passes, moves) that fit in the search's share of ``time_limit`` by
    :func:`search_cost`: :func:`passes_for`'s passes, then, once they are :data:`MAX_PASSES`,
    as many moves as the rest of the share holds at :data:`MOVE_COST` of a pass each, at most
    :data:`MAX_MOVES`. No moves for a window of one gang (nothing to re-order)."""
    passes = passes_for(snapshot, time_limit)
    if passes < MAX_PASSES or len(snapshot.gangs) <= 1:
        return passes, 0
    base, first, one_pass = _cost_terms(snapshot)
    left = SEARCH_SHARE * time_limit - base - first - passes * one_pass
    if one_pass <= 0:  # no pods
        return passes, 0
    return passes, max(0, min(MAX_MOVES, int(left / (MOVE_COST * one_pass))))


def search(snapshot: Snapshot, arrays: ClusterArrays, *, seed: int,
           passes: int, moves: int = 0) -> Plan:
    """The best of one best-fit pass and ``passes`` FGD passes, improved by ``moves``
    re-orderings (see the module docstring).

    ``arrays``: the snapshot's free capacity; it is left as it was."""
    if passes < 0 or moves < 0:
        raise ValueError(f"passes and moves must be at least 0, got {passes} and {moves}")
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
        results = [(gang, placer.place(gang)) for gang in order]
        scores.append(_scored(results, work, weights, boost, snapshot.policy.queueing))
        plans.append(_split(results))
        work.rollback()
    # the gangs that waited and that best-fit in queue order starts: only a pass that starts
    # them all may be kept (the module docstring, "Keeping the queue's order")
    keep = kept_in_order(snapshot, (a.gang for a in plans[0][0]))
    eligible = [i for i, (placed, _) in enumerate(plans)
                if keep <= {a.gang for a in placed}]
    k = eligible[best_pass([scores[i] for i in eligible], weights.fragmentation)]
    admitted, deferred = plans[k]
    score, kept, made = scores[k], 0, 0
    if moves and len(queue) > 1:
        policy, order = runs[k]
        reorder = _Reorder(snapshot, work, policy, order, seed=seed,
                           steer=steer if policy == SolverName.FGD else None)
        moved, kept, made = reorder.improve(rng, moves, floor=scores[0].value,
                                            frag_weight=weights.fragmentation, keep=keep)
        placed = reorder.plan()
        # the pass placed again is the pass that was ranked, so the moves only improve on it;
        # kept as a guard all the same
        if moved.value >= scores[0].value and (rank_key(moved, weights.fragmentation)
                                               <= rank_key(score, weights.fragmentation)):
            (admitted, deferred), score = placed, moved
        else:
            kept = 0
    stats = SolveStats(solver="search", status="GREEDY", wall_seconds=time.perf_counter() - start,
                       detail={"search_passes": float(len(runs)), "search_best_pass": float(k),
                               "search_moves": float(made),
                               "search_moves_kept": float(kept),
                               "search_value": score.value, "search_frag": score.frag})
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


Placed = list[tuple[Gang, GangPlacement | str]]
"""Gangs in the order a pass placed them, each with its placement or why it was deferred."""


def _scored(placed: Placed, work: ClusterArrays, weights: Weights,
            boost: Mapping[str, float], queueing: Queueing) -> PassScore:
    """The :class:`PassScore` of ``placed``, with ``work`` as the placements left it."""
    value = aged = 0.0
    pods = 0
    for gang, result in placed:
        if isinstance(result, str):
            continue
        value += gang.gpu_demand_milli * (1 + max(0, gang.priority))
        aged += weighted_demand(gang, weights, gang_boost(gang, boost, queueing))
        pods += len(gang.pods)
    return PassScore(value, aged, pods, float(work.frag_stats()[3].sum()))


def _split(placed: Placed) -> tuple[list[GangPlacement], list[Deferred]]:
    """``placed`` as the plan's admitted placements and deferrals, in order."""
    return ([r for _, r in placed if not isinstance(r, str)],
            [Deferred(gang=g.name, reason=r) for g, r in placed if isinstance(r, str)])


def _shuffled(queue: list[Gang], rng: np.random.Generator) -> list[Gang]:
    """``queue`` with gangs of equal priority shuffled among themselves (higher first)."""
    perm = rng.permutation(len(queue))
    return [queue[int(i)] for i in sorted(perm, key=lambda i: -queue[int(i)].priority)]


class _Reorder:
    """The moves (the module docstring): the best pass's order placed once more into ``work``,
    then suffixes of it placed again in new orders. Every placement goes through the
    checkpoint journal of ``work``, and a suffix is taken back newest first, so the state
    after the gangs before a cut is exactly what it was when they were placed."""

    def __init__(self, snapshot: Snapshot, work: ClusterArrays, policy: str,
                 order: list[Gang], *, seed: int, steer: ModelSteer | None) -> None:
        self.work, self.policy, self.seed, self.steer = work, policy, seed, steer
        self.weights = snapshot.policy.weights
        self.boost = boosts(snapshot)
        self.queueing = snapshot.policy.queueing
        self.order = list(order)
        self.results: list[GangPlacement | str] = []
        self.marks: list[int] = []  # the journal's length before each gang was placed
        self.journal = work.checkpoint()
        self._place_from(0, self.order)

    def _placer(self, upto: int) -> GangPlacer:
        """A placer whose quota usage counts the gangs admitted before position ``upto``."""
        used: dict[str, int] = {}
        admitting: set[str] = set()
        for gang, result in zip(self.order[:upto], self.results[:upto], strict=True):
            if not isinstance(result, str):
                used[gang.tenant] = used.get(gang.tenant, 0) + gang.gpu_demand_milli
                admitting.add(gang.tenant)
        base = self.work.quota_used()
        used = {t: base.get(t, 0) + used.get(t, 0) for t in set(base) | set(used)}
        # the same seed as every pass: the same tie order
        return GangPlacer(self.work, self.policy, np.random.default_rng(self.seed),
                          used=used, admitting=admitting, steer=self.steer)

    def _place_from(self, cut: int, gangs: list[Gang]) -> None:
        placer = self._placer(cut)
        del self.results[cut:], self.marks[cut:]
        self.order[cut:] = gangs
        for gang in gangs:
            self.marks.append(len(self.journal))
            self.results.append(placer.place(gang))

    def _take_back(self, cut: int) -> None:
        """Undo every placement from position ``cut`` on, newest first."""
        start = self.marks[cut]
        for saved in reversed(self.journal[start:]):
            self.work.undo(saved)
        del self.journal[start:]

    def _put_back(self, cut: int, order: list[Gang],
                  results: list[GangPlacement | str]) -> None:
        """Apply ``results`` (placements made before) again from position ``cut`` on."""
        self.order[cut:], self.results[cut:] = order, results
        del self.marks[cut:]
        for gang, result in zip(order, results, strict=True):
            self.marks.append(len(self.journal))
            if not isinstance(result, str):
                self.work.apply_gang(gang, result)

    def score(self) -> PassScore:
        """The order kept so far, scored as a pass is, on ``work`` as it stands."""
        return _scored(list(zip(self.order, self.results, strict=True)), self.work,
                       self.weights, self.boost, self.queueing)

    def improve(self, rng: np.random.Generator, moves: int, *, floor: float,
                frag_weight: float, keep: frozenset[str] = frozenset(),
                ) -> tuple[PassScore, int, int]:
        """Make up to ``moves`` moves, stopping after :data:`PATIENCE` in a row that found
        nothing better; a move that leaves a gang of ``keep`` waiting is not kept. Returns the
        final score, the moves kept and the moves made."""
        best, kept, idle = self.score(), 0, 0
        n = len(self.order)
        made = 0
        while made < moves and idle < PATIENCE:
            made += 1
            cut = int(rng.integers(0, n - 1))  # at least two gangs after the cut
            old_order, old_results = self.order[cut:], self.results[cut:]
            self._take_back(cut)
            self._place_from(cut, _shuffled(old_order, rng))
            score = self.score()
            if (score.value >= floor and rank_key(score, frag_weight) < rank_key(best, frag_weight)
                    and self._starts(keep)):
                best, kept, idle = score, kept + 1, 0
                continue
            idle += 1
            self._take_back(cut)
            self._put_back(cut, old_order, old_results)
        return best, kept, made

    def _starts(self, keep: frozenset[str]) -> bool:
        """Whether the order as placed now starts every gang of ``keep``."""
        if not keep:
            return True
        return keep <= {g.name for g, r in zip(self.order, self.results, strict=True)
                        if not isinstance(r, str)}

    def plan(self) -> tuple[list[GangPlacement], list[Deferred]]:
        """The placements and deferrals of the order kept; ``work`` is rolled back."""
        self.work.rollback()
        return _split(list(zip(self.order, self.results, strict=True)))
