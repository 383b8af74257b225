"""The CP-SAT path for one (sub-)problem, end to end: greedy hint, model, judge, choice.

0. the free capacity (:class:`~solver.baselines.ClusterArrays`) is derived once; the greedy
   pass places into a copy of it, the candidate filter and the model read it, and the reasons
   apply the final plan to it last (the checker keeps its own, independent derivation);
1. the order search's plan (:mod:`solver.cpsat.search`: one best-fit pass and seeded FGD
   passes, the best end state kept): the hint, the fallback and the floor (never worth less
   than the best-fit plan, which is one of its passes);
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

A window of more than :data:`MODEL_MAX_PODS` pending pods (a backlog, a burst of thousands of
pods) is bounded: the model holds the head of the queue (the first gangs in queue order, at
most :data:`MODEL_MAX_PODS` pods, always at least one gang) and the rest of the queue is placed
after the model's plan by best-fit in queue order. Without the bound the model for a
10,000-pod backlog took longer to build than the time limit, so it never ran and its build
took the CPU the API server needed (e2e/bench_pace.md). The floor still compares the whole
plan against the whole search plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from solver.baselines import ClusterArrays, GangPlacer, place
from solver.cpsat.model import CpsatResult, solve_window
from solver.cpsat.reasons import arrays_after, deferrals
from solver.cpsat.search import passes_for, search
from solver.names import SolverName
from solver.plan import GangPlacement, Plan, SolveStats
from solver.queue import queue_order
from solver.types import Gang, Snapshot

GREEDY_HINT = SolverName.BESTFIT
# Least time worth building and solving the model for; below it the greedy plan stands.
MIN_MODEL_SECONDS = 0.05
# Share of the time limit the search gets in deterministic time (CP-SAT's own work units, so
# the plan does not depend on the machine's load); the rest is for state, hint and model.
SEARCH_SHARE = 0.5
# Share of the state-and-greedy time kept back for the checker and the reasons after the
# search (they cost well under it: see bench/solve_scale.md).
POST_SOLVE_SHARE = 0.5
#: Most pending pods one model holds; the rest of the queue is placed after it by best-fit
#: (module docstring). ~1 ms of build per pod on the openb cluster (bench/solve_scale.md).
MODEL_MAX_PODS = 256

#: Every hard rule a plan breaks on a snapshot (empty: feasible); CP-SAT's plan is trusted only
#: when it is empty. :mod:`solver.api` passes :func:`solver.checker.check`.
Judge = Callable[[Snapshot, Plan], Sequence[object]]


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


def bounded(snapshot: Snapshot, max_pods: int | None = None
            ) -> tuple[Snapshot, list[Gang]]:
    """The snapshot the model holds and the gangs left to place after it: the head of the
    queue up to ``max_pods`` pods (at least one gang; default :data:`MODEL_MAX_PODS`), and
    the rest in queue order. A window within the bound is returned whole, with nothing after
    it."""
    max_pods = MODEL_MAX_PODS if max_pods is None else max_pods
    if sum(len(g.pods) for g in snapshot.gangs) <= max_pods:
        return snapshot, []
    queue = queue_order(snapshot)
    head: list[Gang] = []
    pods = 0
    for g in queue:
        if head and pods + len(g.pods) > max_pods:
            break
        head.append(g)
        pods += len(g.pods)
    names = {g.name for g in head}
    # the head keeps the snapshot's own order, so the model sees its gangs as before
    return (replace(snapshot, gangs=tuple(g for g in snapshot.gangs if g.name in names)),
            queue[len(head):])


def place_after(snapshot: Snapshot, arrays: ClusterArrays, head: list[GangPlacement],
                tail: list[Gang], *, seed: int) -> list[GangPlacement]:
    """``tail`` placed by best-fit in order, into ``arrays`` (left as it was) once ``head``
    (admitted gangs of ``snapshot``) is placed; quotas count the head's gangs."""
    if not tail:
        return []
    head_plan = Plan(tuple(head), (), SolveStats(solver="head", status="", wall_seconds=0.0))
    work = arrays_after(snapshot, head_plan, arrays.copy())
    by_name = {g.name: g for g in snapshot.gangs}
    placer = GangPlacer(work, SolverName.BESTFIT, np.random.default_rng(seed))
    for gp in head:
        gang = by_name[gp.gang]
        placer.used[gang.tenant] = placer.used.get(gang.tenant, 0) + gang.gpu_demand_milli
        placer.admitting.add(gang.tenant)
    out = []
    for gang in tail:
        result = placer.place(gang)
        if not isinstance(result, str):
            out.append(result)
    return out


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
    arrays = ClusterArrays(snapshot)
    state_s = time.perf_counter() - t0
    if hint is None:
        passes = passes_for(snapshot, time_limit if nominal_limit is None else nominal_limit)
        hint = search(snapshot, arrays, seed=seed, passes=passes)
    greedy_s = time.perf_counter() - t0 - state_s
    spent = state_s + greedy_s
    if time_limit - spent * (1 + POST_SOLVE_SHARE) < MIN_MODEL_SECONDS:
        # the state and the greedy plan used the budget: stay on time with it
        stats = SolveStats(solver=SolverName.CPSAT, status="NOT_STARTED",
                           wall_seconds=time.perf_counter() - t0, fallback=True,
                           detail={"state_seconds": state_s, "greedy_seconds": greedy_s,
                                   "fallback_no_time": 1.0})
        return Plan(hint.admitted, hint.deferred, stats)  # the greedy policy's own reasons
    # keep back time for what follows the search (judge, reasons)
    reserve = POST_SOLVE_SHARE * spent
    head, tail = bounded(snapshot)
    head_names = {g.name for g in head.gangs}
    head_hint = hint if not tail else Plan(
        tuple(a for a in hint.admitted if a.gang in head_names), (), hint.stats)
    result = solve_window(head, hint=head_hint,
                          time_limit=max(MIN_MODEL_SECONDS, time_limit - spent - reserve),
                          seed=seed, workers=workers, arrays=arrays,
                          deterministic_time=SEARCH_SHARE * (
                              time_limit if nominal_limit is None else nominal_limit))
    t1 = time.perf_counter()
    if tail and result.admitted is not None:
        result.admitted = result.admitted + place_after(snapshot, arrays, result.admitted,
                                                        tail, seed=seed)
    tail_s = time.perf_counter() - t1
    t1 = time.perf_counter()
    plan, why = choose(snapshot, result, hint, judge=judge)
    check_s = time.perf_counter() - t1
    detail = {
        "state_seconds": state_s,
        "greedy_seconds": greedy_s,
        "build_seconds": result.build_seconds,
        "cpsat_seconds": result.solve_seconds,
        "check_seconds": check_s,
        "model_gangs": float(len(head.gangs)),
        "after_model_gangs": float(len(tail)),
        "after_model_seconds": tail_s,
        **{f"term_{k}": v for k, v in result.terms.items()},
        **result.size,
    }
    if why:
        detail[f"fallback_{why}"] = 1.0
    t2 = time.perf_counter()
    deferred = deferrals(snapshot, plan, arrays)  # the last use of arrays: changed in place
    detail["reasons_seconds"] = time.perf_counter() - t2
    stats = SolveStats(solver=SolverName.CPSAT, status=result.status,
                       wall_seconds=time.perf_counter() - t0, objective=result.objective,
                       bound=result.bound, fallback=bool(why), detail=detail)
    return Plan(plan.admitted, deferred, stats)
