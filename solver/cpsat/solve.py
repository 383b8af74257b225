"""The CP-SAT path for one (sub-)problem, end to end: greedy hint, model, judge, choice.

0. the free capacity (:class:`~solver.baselines.ClusterArrays`) is derived once; the greedy
   pass places into a copy of it, the candidate filter and the model read it, and the reasons
   apply the final plan to it last (the checker keeps its own, independent derivation);
1. the order search's plan (:mod:`solver.cpsat.search`: one best-fit pass and seeded FGD
   passes, the best end state kept, on long limits improved by re-ordering): the hint, the
   fallback and the floor (never worth less than the best-fit plan, which is one of its
   passes);
2. the batch model solved within what is left of the time limit;
3. the caller's :data:`Judge` (the checker, which :mod:`solver.api` passes: the solvers do not
   import the checker that judges them) judges CP-SAT's plan; the greedy plan stands instead
   when CP-SAT found nothing, when the judge objects, or when the greedy plan admits more
   priority-weighted GPU demand (:func:`plan_value`; so CP-SAT never admits less than the plan
   it was hinted with). The floor weighs demand by priority without aging: aging orders the
   queue (the greedy pass serves older gangs first) and steers the model, but a few seconds of
   extra wait must not make a first-come plan beat the fair split CP-SAT found among equally
   ranked gangs;
4. every gang left waiting gets a reason.

A window larger than the model can hold in its time (a backlog, a burst of thousands of pods)
is bounded by two cost models, never by measured time (so a plan stays reproducible):

- the **head** of the queue, tenants taking weighted turns within a priority
  (:func:`solver.queue.tenant_turns`: one tenant's burst does not fill it alone; the first
  gangs, at least one) whose model build fits :data:`MODEL_SHARE` of the time limit by
  :func:`model_cost` is what the order search and CP-SAT see; the floor (step 3) holds on
  the head;
- the **tail** is placed after the head's plan by one best-fit pass in that order, as far as
  :data:`TAIL_SHARE` of the limit allows by the search's cost of a pass
  (:func:`solver.cpsat.search.pass_cost`); the gangs beyond wait with
  :data:`QUEUED_REASON` when nothing harder (quota, capacity, eligibility) keeps them out.

Without the bound the controller's model of a 10,000-pod backlog took longer to build than the
time limit, so it never ran, and its build took the CPU the API server needed
(e2e/bench_pace.md). With the fixed bound of 256 pods that came next, the order search
still went over the whole window and the tail's pass over all of it, so a cycle's solve grew
with the backlog (2.8 s of CPU at 10,000 pending at a 2 s limit, bench/solve_scale.md); now it
stays within the limit whatever the backlog.
When the caller passes a hint for the whole window (a partition's share of one greedy plan),
the whole plan is also held to that hint's value.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from solver.baselines import ClusterArrays, GangPlacer, place
from solver.cpsat.candidates import DOMAIN_NODE_CAP, DOMAINS_PER_GANG
from solver.cpsat.instance import PER_POD_NODES
from solver.cpsat.model import CpsatResult, solve_window
from solver.cpsat.reasons import CONTENTION_REASON, arrays_after, deferrals
from solver.cpsat.search import budget_for, pass_cost, search
from solver.names import SolverName
from solver.plan import Deferred, GangPlacement, Plan, SolveStats
from solver.queue import tenant_turns
from solver.types import Gang, Snapshot, TopologyMode

GREEDY_HINT = SolverName.BESTFIT
# Least time worth building and solving the model for; below it the greedy plan stands.
MIN_MODEL_SECONDS = 0.05
# Share of the time limit the search gets in deterministic time (CP-SAT's own work units, so
# the plan does not depend on the machine's load); the rest is for state, hint and model.
SEARCH_SHARE = 0.5
# Share of the state-and-greedy time kept back for the checker and the reasons after the
# search (they cost well under it: see bench/solve_scale.md).
POST_SOLVE_SHARE = 0.5
# The model's cost model: seconds of building it on a quiet machine, per node offered to a pod
# and per GPU with room on those nodes (the place and use variables), fitted on the pace case of
# bench/solve_scale.py (1,000 empty nodes x 8 GPUs) and openb windows on an 80 %-full cluster,
# 64 to 1,024 modelled pods. CP-SAT's own search is held to its deterministic budget
# (SEARCH_SHARE) whatever the model's size, so the build is what grows with the head.
BUILD_PER_NODE_OFFER = 2.1e-5
BUILD_PER_GPU_OFFER = 1.0e-5
#: Share of the time limit the model's build may take by :func:`model_cost`: the head of the
#: queue it holds (module docstring). 0.12 holds every 64-pod openb window of
#: bench/solve_scale.py at 0.25 s whole (21.6-23.5 ms of the 30 by the cost model) and every
#: 128-pod window of the controller replay at 1 s; about 300 one-GPU pods on 1,000 empty 8-GPU
#: nodes at 2 s (the model the controller built before the bound at 10,000 pending took 12 s).
MODEL_SHARE = 0.12
#: Share of the time limit the tail's best-fit pass may take by the search's cost of a pass
#: (:func:`solver.cpsat.search.pass_cost`): about 1,740 one-GPU pods on 1,000 nodes at 2 s. The
#: shares add up to 0.97 of the limit (search 0.2, model build 0.12, CP-SAT 0.5 in
#: deterministic time, tail 0.15); the checker and the reasons take the rest.
TAIL_SHARE = 0.15
#: Why a gang of the tail beyond :data:`TAIL_SHARE` waits when nothing harder keeps it out.
QUEUED_REASON = ("queued behind the current batch: this window's solve placed the gangs ahead "
                 "of it in the queue and reached its time budget; it is placed in a later window")

#: Every hard rule a plan breaks on a snapshot (empty: feasible); CP-SAT's plan is trusted only
#: when it is empty. :mod:`solver.api` passes :func:`solver.checker.check`.
Judge = Callable[[Snapshot, Plan], Sequence[object]]
#: What one gang costs by a cost model (seconds).
GangCost = Callable[[Gang], float]


def greedy_hint(snapshot: Snapshot, arrays: ClusterArrays, *, seed: int) -> Plan:
    """The best-fit plan, placed into a copy of ``arrays`` (``arrays`` stays as it was).
    The same plan as ``solver.baselines.place(snapshot, "bestfit", seed=seed)``."""
    return place(snapshot, GREEDY_HINT, seed=seed, arrays=arrays.copy())


def plan_value(snapshot: Snapshot, plan: Plan) -> int:
    """What the floor compares: admitted GPU demand (milli-GPU) weighted by ``1 + priority``.

    Exact integers, so equal plans tie and the tie goes to CP-SAT, whose objective (fairness,
    topology, fragmentation, energy) already chose between them."""
    by_name = {g.name: g for g in snapshot.gangs}
    return sum(
        by_name[a.gang].gpu_demand_milli * (1 + max(0, by_name[a.gang].priority))
        for a in plan.admitted if a.gang in by_name
    )


def model_cost(snapshot: Snapshot, arrays: ClusterArrays) -> GangCost:
    """What building the model costs per gang by the cost model (:data:`BUILD_PER_NODE_OFFER`,
    :data:`BUILD_PER_GPU_OFFER`): each pod is offered :data:`PER_POD_NODES` of the nodes with
    room, or, in a gang with a topology requirement, the nodes with room of a few domains of
    its level (:mod:`solver.cpsat.candidates`; as many of a domain's nodes as the cluster's
    share with room, at most :data:`DOMAIN_NODE_CAP`); each node with the mean number of GPUs
    with room of the nodes that have any. A function of the snapshot's free capacity and the
    gang only."""
    room = arrays.gfree > 0
    with_room = room.any(axis=1)
    nodes = int(with_room.sum())
    gpus = float(room[with_room].sum(axis=1).mean()) if nodes else 0.0
    share = nodes / max(1, len(snapshot.nodes))
    plain = min(PER_POD_NODES, max(1, nodes))
    per_level: dict[str, float] = {}

    def domain_nodes(level: str) -> float:
        """Nodes with room offered to one pod of a gang bound to ``level``."""
        if level not in per_level:
            domains = len({n.topology.get(level) for n in snapshot.nodes}) if level not in (
                "node", "nvlink") else len(snapshot.nodes)
            size = len(snapshot.nodes) / max(1, domains)
            per_level[level] = min(DOMAIN_NODE_CAP, max(1.0, size * share))
        return per_level[level]

    def cost(gang: Gang) -> float:
        offered = float(plain)
        if gang.topology is not None:
            wide = DOMAINS_PER_GANG * (1 if gang.topology.mode is TopologyMode.REQUIRED
                                       else 4)  # preferred: four times the domains
            offered = min(max(1.0, nodes), wide * domain_nodes(gang.topology.level))
        return sum(offered * (BUILD_PER_NODE_OFFER + (BUILD_PER_GPU_OFFER * gpus
                                                       if p.gpu_count else 0.0))
                   for p in gang.pods)
    return cost


def bounded(snapshot: Snapshot, budget: float, cost: GangCost
            ) -> tuple[Snapshot, list[Gang]]:
    """The snapshot the model holds and the gangs left after it: the head of the queue whose
    ``cost`` adds up to at most ``budget`` (at least one gang), and the rest in queue order. A
    window within the budget is returned whole, with nothing after it."""
    costs = [cost(g) for g in snapshot.gangs]
    if sum(costs) <= budget:
        return snapshot, []
    by_name = dict(zip((g.name for g in snapshot.gangs), costs, strict=True))
    queue = tenant_turns(snapshot)  # one tenant's burst does not fill the bound alone
    taken = 0
    spent = 0.0
    for g in queue:
        if taken and spent + by_name[g.name] > budget:
            break
        taken += 1
        spent += by_name[g.name]
    names = {g.name for g in queue[:taken]}
    # the head keeps the snapshot's own order, so the model sees its gangs as before
    return (replace(snapshot, gangs=tuple(g for g in snapshot.gangs if g.name in names)),
            queue[taken:])


def place_after(snapshot: Snapshot, arrays: ClusterArrays, head: Sequence[GangPlacement],
                tail: list[Gang], *, seed: int, budget: float = math.inf,
                cost: GangCost | None = None) -> tuple[list[GangPlacement], list[Gang]]:
    """``tail`` placed by best-fit in order, into ``arrays`` (left as it was) once ``head``
    (admitted gangs of ``snapshot``) is placed; quotas count the head's gangs. The gangs are
    tried while their ``cost`` (default :func:`solver.cpsat.search.pass_cost`) adds up to at
    most ``budget``; returns the placements and the gangs never tried."""
    if not tail:
        return [], []
    cost = cost if cost is not None else (lambda g: pass_cost(snapshot, g))
    head_plan = Plan(tuple(head), (), SolveStats(solver="head", status="", wall_seconds=0.0))
    work = arrays_after(snapshot, head_plan, arrays.copy())
    by_name = {g.name: g for g in snapshot.gangs}
    placer = GangPlacer(work, SolverName.BESTFIT, np.random.default_rng(seed))
    for gp in head:
        gang = by_name[gp.gang]
        placer.used[gang.tenant] = placer.used.get(gang.tenant, 0) + gang.gpu_demand_milli
        placer.admitting.add(gang.tenant)
    out: list[GangPlacement] = []
    spent = 0.0
    for k, gang in enumerate(tail):
        spent += cost(gang)
        if spent > budget:
            return out, tail[k:]
        result = placer.place(gang)
        if not isinstance(result, str):
            out.append(result)
    return out, []


def queued_reasons(deferred: Sequence[Deferred], queued: Sequence[Gang]) -> tuple[Deferred, ...]:
    """``deferred`` with :data:`QUEUED_REASON` for the gangs of ``queued`` (never tried) whose
    reason is only contention: quota, capacity and eligibility reasons stay, as they would keep
    the gang out whatever its place in the queue."""
    names = {g.name for g in queued}
    return tuple(Deferred(d.gang, QUEUED_REASON) if d.gang in names
                 and d.reason == CONTENTION_REASON else d for d in deferred)


def choose(snapshot: Snapshot, result: CpsatResult, hint: Plan, *,
           judge: Judge) -> tuple[Plan, str]:
    """CP-SAT's plan, or the hint with why: it found none, ``judge`` objects (reported as
    ``checker``), or the hint is worth more (:func:`plan_value`)."""
    if result.admitted is None:
        return hint, "no_solution"
    stats = SolveStats(solver=SolverName.CPSAT, status=result.status, wall_seconds=0.0)
    plan = Plan(tuple(result.admitted), (), stats)
    if judge(snapshot, plan):
        return hint, "checker"
    if plan_value(snapshot, plan) < plan_value(snapshot, hint):
        return hint, "greedy_admits_more"
    return plan, ""


def solve_cpsat(snapshot: Snapshot, *, time_limit: float, seed: int, workers: int,
                judge: Judge, nominal_limit: float | None = None,
                hint: Plan | None = None) -> Plan:
    """Greedy hint, model, ``judge`` and reasons within ``time_limit`` seconds of wall time.

    The search's deterministic budget is a fixed share of ``nominal_limit`` (default
    ``time_limit``), never of measured time, so a fixed seed and worker count give the same
    plan on every run unless the wall-clock limit cuts the search short
    (``detail["wall_capped"]``) or leaves no time for the model at all.

    ``hint``: a feasible plan for ``snapshot`` to use as hint, fallback and floor instead of
    the best-fit plan (a partition's share of one whole-cluster greedy plan)."""
    t0 = time.perf_counter()
    nominal = time_limit if nominal_limit is None else nominal_limit
    arrays = ClusterArrays(snapshot)
    head, tail = bounded(snapshot, MODEL_SHARE * nominal, model_cost(snapshot, arrays))
    state_s = time.perf_counter() - t0
    whole_hint = hint if tail else None  # a given hint covers the whole window: its floor
    if hint is None:
        # the order search sees what the model sees: the head
        passes, moves = budget_for(head, nominal)
        hint = search(head, arrays, seed=seed, passes=passes, moves=moves)
    elif tail:
        names = {g.name for g in head.gangs}
        hint = Plan(tuple(a for a in hint.admitted if a.gang in names), (), hint.stats)
    greedy_s = time.perf_counter() - t0 - state_s
    spent = state_s + greedy_s
    no_time = time_limit - spent * (1 + POST_SOLVE_SHARE) < MIN_MODEL_SECONDS
    if no_time:
        # the state and the greedy plan used the budget: stay on time with it
        result = CpsatResult("NOT_STARTED", None, None, None, 0.0, 0.0)
    else:
        # keep back time for what follows the search (judge, tail, reasons)
        result = solve_window(head, hint=hint,
                              time_limit=max(MIN_MODEL_SECONDS,
                                             time_limit - spent - POST_SOLVE_SHARE * spent),
                              seed=seed, workers=workers, arrays=arrays,
                              deterministic_time=SEARCH_SHARE * nominal)
    t2 = time.perf_counter()
    plan, why = choose(head, result, hint, judge=judge)
    why = "no_time" if no_time else why
    check_s = time.perf_counter() - t2
    t2 = time.perf_counter()
    after, queued = place_after(snapshot, arrays, plan.admitted, tail, seed=seed,
                                budget=TAIL_SHARE * nominal)
    if after:
        whole = Plan((*plan.admitted, *after), (), plan.stats)
        if judge(snapshot, whole):  # a guard: the tail's pass keeps every rule
            why = why or "tail_checker"
            queued = tail
        else:
            plan = whole
    tail_s = time.perf_counter() - t2
    if whole_hint is not None and plan_value(snapshot, plan) < plan_value(snapshot, whole_hint):
        plan, why, queued = whole_hint, why or "greedy_admits_more", []
    detail = {
        "state_seconds": state_s,
        "greedy_seconds": greedy_s,
        "build_seconds": result.build_seconds,
        "cpsat_seconds": result.solve_seconds,
        "check_seconds": check_s,
        "model_gangs": float(len(head.gangs)),
        "model_pods": float(sum(len(g.pods) for g in head.gangs)),
        "after_model_gangs": float(len(tail) - len(queued)),
        "queued_gangs": float(len(queued)),
        "after_model_seconds": tail_s,
        **{f"term_{k}": v for k, v in result.terms.items()},
        **result.size,
    }
    if why:
        detail[f"fallback_{why}"] = 1.0
    t2 = time.perf_counter()
    # the last use of arrays: changed in place
    deferred = queued_reasons(deferrals(snapshot, plan, arrays), queued)
    detail["reasons_seconds"] = time.perf_counter() - t2
    stats = SolveStats(solver=SolverName.CPSAT, status=result.status,
                       wall_seconds=time.perf_counter() - t0, objective=result.objective,
                       bound=result.bound, fallback=bool(why), detail=detail)
    return Plan(plan.admitted, deferred, stats)
