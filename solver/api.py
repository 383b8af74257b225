"""One entry point for every placement policy: ``solve(snapshot, solver=...) -> Plan``.

The CP-SAT path is always feasible and always on time:

1. a greedy plan (best fit) is computed first; it is the hint, the fallback and the floor;
2. CP-SAT solves the batch model (split into partitions on large clusters) within what is left
   of the time limit;
3. the checker judges CP-SAT's plan; the greedy plan stands instead when CP-SAT found nothing,
   when the checker objects, or when the greedy plan admits more priority-weighted GPU demand
   (so CP-SAT never admits less than the plan it was hinted with);
4. every gang left waiting gets a reason.

Deterministic for a fixed seed and worker count: CP-SAT runs under a deterministic time budget
(the wall-clock limit only guards against a slow machine, and ``stats.detail["wall_capped"]``
says when it cut the search short).
"""

from __future__ import annotations

import time
from typing import Literal

from solver import partition
from solver.checker import check
from solver.cpsat.instance import plan_weighted_demand
from solver.cpsat.model import CpsatResult, solve_window
from solver.cpsat.reasons import deferrals
from solver.plan import Plan, SolveStats
from solver.types import Snapshot

SolverName = Literal["cpsat", "fgd", "bestfit", "firstfit", "random"]
SOLVERS: tuple[SolverName, ...] = ("cpsat", "fgd", "bestfit", "firstfit", "random")
GREEDY_HINT: SolverName = "bestfit"


def greedy(snapshot: Snapshot, name: str, *, seed: int = 0) -> Plan:
    from solver.baselines import place

    plan: Plan = place(snapshot, name, seed=seed)
    return plan


def solve(
    snapshot: Snapshot,
    *,
    solver: SolverName = "cpsat",
    time_limit: float = 1.0,
    seed: int = 0,
    workers: int = 1,
    partitions: int | None = None,
) -> Plan:
    """Place the snapshot's pending gangs with ``solver``.

    ``partitions``: split the cluster into this many sub-problems (None: decided from its size,
    see :func:`solver.partition.auto_partitions`; 1: never split).
    """
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {solver!r}")
    t0 = time.perf_counter()
    if solver != "cpsat":
        plan = greedy(snapshot, solver, seed=seed)
        wall = time.perf_counter() - t0
        stats = SolveStats(solver=solver, status="GREEDY", wall_seconds=wall)
        return Plan(plan.admitted, deferrals(snapshot, plan), stats)

    hint = greedy(snapshot, GREEDY_HINT, seed=seed)
    greedy_s = time.perf_counter() - t0
    budget = max(0.05, time_limit - greedy_s)
    parts = partitions if partitions is not None else partition.auto_partitions(snapshot)
    if parts > 1:
        result = partition.solve_partitioned(
            snapshot, parts=parts, hint=hint, time_limit=budget, seed=seed, workers=workers
        )
    else:
        result = solve_window(
            snapshot, hint=hint, time_limit=budget, seed=seed, workers=workers
        )
    plan, fallback, why = _choose(snapshot, result, hint)
    wall = time.perf_counter() - t0
    detail = {
        "greedy_seconds": greedy_s,
        "build_seconds": result.build_seconds,
        "cpsat_seconds": result.solve_seconds,
        "partitions": float(parts),
        **{f"term_{k}": val for k, val in result.terms.items()},
        **result.size,
    }
    if why:
        detail[f"fallback_{why}"] = 1.0
    stats = SolveStats(
        solver="cpsat",
        status=result.status,
        wall_seconds=wall,
        objective=result.objective,
        bound=result.bound,
        fallback=fallback,
        detail=detail,
    )
    return Plan(plan.admitted, deferrals(snapshot, plan), stats)


def _choose(snapshot: Snapshot, result: CpsatResult, hint: Plan) -> tuple[Plan, bool, str]:
    """CP-SAT's plan unless it is missing, infeasible, or admits less than the greedy hint."""
    if result.admitted is None:
        return hint, True, "no_solution"
    stats = SolveStats(solver="cpsat", status=result.status, wall_seconds=0.0)
    plan = Plan(tuple(result.admitted), (), stats)
    if check(snapshot, plan):
        return hint, True, "checker"
    if plan_weighted_demand(snapshot, plan) < plan_weighted_demand(snapshot, hint):
        return hint, True, "greedy_admits_more"
    return plan, False, ""
