"""The CP-SAT path for one (sub-)problem, end to end: greedy hint, model, checker, choice.

1. best-fit greedy plan: the hint, the fallback and the floor;
2. the batch model solved within what is left of the time limit;
3. the checker judges CP-SAT's plan; the greedy plan stands instead when CP-SAT found nothing,
   when the checker objects, or when the greedy plan admits more priority-weighted GPU demand
   (so CP-SAT never admits less than the plan it was hinted with);
4. every gang left waiting gets a reason.
"""

from __future__ import annotations

import time

from solver.baselines import place
from solver.checker import check
from solver.cpsat.instance import plan_weighted_demand
from solver.cpsat.model import CpsatResult, solve_window
from solver.cpsat.reasons import deferrals
from solver.plan import Plan, SolveStats
from solver.types import Snapshot

GREEDY_HINT = "bestfit"
# Least time worth building and solving the model for; below it the greedy plan stands.
MIN_MODEL_SECONDS = 0.05
# Share of the greedy pass's time kept back for the checker and the reasons after the search.
POST_SOLVE_SHARE = 0.75


def choose(snapshot: Snapshot, result: CpsatResult, hint: Plan) -> tuple[Plan, str]:
    """CP-SAT's plan, or the hint with why: it found none, the checker objects, or the hint
    admits more priority-weighted demand."""
    if result.admitted is None:
        return hint, "no_solution"
    stats = SolveStats(solver="cpsat", status=result.status, wall_seconds=0.0)
    plan = Plan(tuple(result.admitted), (), stats)
    if check(snapshot, plan):
        return hint, "checker"
    if plan_weighted_demand(snapshot, plan) < plan_weighted_demand(snapshot, hint):
        return hint, "greedy_admits_more"
    return plan, ""


def solve_cpsat(snapshot: Snapshot, *, time_limit: float, seed: int, workers: int) -> Plan:
    t0 = time.perf_counter()
    hint = place(snapshot, GREEDY_HINT, seed=seed)
    greedy_s = time.perf_counter() - t0
    if time_limit - greedy_s * (1 + POST_SOLVE_SHARE) < MIN_MODEL_SECONDS:
        # the greedy plan alone used the budget: stay on time with it
        stats = SolveStats(solver="cpsat", status="NOT_STARTED",
                           wall_seconds=time.perf_counter() - t0, fallback=True,
                           detail={"greedy_seconds": greedy_s, "fallback_no_time": 1.0})
        return Plan(hint.admitted, hint.deferred, stats)  # the greedy policy's own reasons
    # keep back time for what follows the search (checker, reasons): each derives the free
    # capacity again, about what the greedy policy's own state cost
    reserve = POST_SOLVE_SHARE * greedy_s
    result = solve_window(snapshot, hint=hint,
                          time_limit=max(MIN_MODEL_SECONDS, time_limit - greedy_s - reserve),
                          seed=seed, workers=workers)
    plan, why = choose(snapshot, result, hint)
    detail = {
        "greedy_seconds": greedy_s,
        "build_seconds": result.build_seconds,
        "cpsat_seconds": result.solve_seconds,
        **{f"term_{k}": v for k, v in result.terms.items()},
        **result.size,
    }
    if why:
        detail[f"fallback_{why}"] = 1.0
    deferred = deferrals(snapshot, plan, result.arrays)
    stats = SolveStats(solver="cpsat", status=result.status,
                       wall_seconds=time.perf_counter() - t0, objective=result.objective,
                       bound=result.bound, fallback=bool(why), detail=detail)
    return Plan(plan.admitted, deferred, stats)
