"""One entry point for every placement policy: ``solve(snapshot, solver=...) -> Plan``.

The CP-SAT path (:func:`solver.cpsat.solve.solve_cpsat`) is always feasible and on time: the
order search's plan (best-fit and FGD passes over the window) is its hint, fallback and
floor, the checker (passed in from here: the solvers do not import it) judges what CP-SAT
returns, and every deferred gang gets a reason. Large clusters or windows are split into
sub-problems solved in parallel (:mod:`solver.partition`). Gangs that cannot fit now get
capacity reserved for their earliest expected start, and gangs known to end before it backfill
it (:mod:`solver.reserve`), when running pods' expected ends are known. A tenant waiting within
its own quota takes GPUs back from tenants on borrowed quota (:mod:`solver.reclaim`): whole
gangs, evicted by the plan. The Kueue-like baseline reclaims through the same code, in its own
order of waiting gangs (reclaimWithinCohort: :mod:`solver.baselines.kueue`).

Deterministic for a fixed seed and worker count: CP-SAT runs under a deterministic time budget
sized from the time limit alone; the wall-clock limit only guards against a slow machine
(``stats.detail["wall_capped"]`` says when it cut the search short, ``fallback_no_time`` when
it left no time for the model: the cases where a rerun may differ).
"""

from __future__ import annotations

import time
from dataclasses import replace

from solver import partition
from solver.baselines import kueue, place
from solver.checker import check
from solver.cpsat.reasons import deferrals
from solver.cpsat.solve import solve_cpsat
from solver.names import SolverName
from solver.plan import Plan
from solver.reclaim import plan_reclaim
from solver.reserve import solve_with_reservations
from solver.types import Snapshot


def solve(
    snapshot: Snapshot,
    *,
    solver: str = SolverName.CPSAT,
    time_limit: float = 1.0,
    seed: int = 0,
    workers: int = 1,
    partitions: int | None = None,
    processes: bool = False,
) -> Plan:
    """Place the snapshot's pending gangs with ``solver`` (a :class:`SolverName` or its value).

    ``partitions``: split the cluster into this many sub-problems (None: decided from its size,
    :func:`solver.partition.auto_partitions`; 1: never). ``workers``: CP-SAT threads for one
    problem, or sub-problems solved at once. ``processes``: solve sub-problems in forked worker
    processes instead of threads (faster on large clusters, where model building dominates;
    not for a process that must not fork).
    """
    name = SolverName.of(solver)
    if name is None:
        raise ValueError(f"solver must be one of {', '.join(SolverName)}, got {solver!r}")
    if time_limit <= 0:
        raise ValueError(f"time_limit must be > 0 seconds, got {time_limit}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if name != SolverName.CPSAT:
        t0 = time.perf_counter()
        plan = place(snapshot, name, seed=seed)
        if name == SolverName.KUEUE:
            plan = plan_reclaim(snapshot, plan, waiting_order=kueue.reclaim_order(snapshot))
        stats = replace(plan.stats, solver=name, status="GREEDY",
                        wall_seconds=time.perf_counter() - t0)
        return replace(plan, deferred=deferrals(snapshot, plan), stats=stats)
    def window(snap: Snapshot, limit: float) -> Plan:
        parts = partitions if partitions is not None else partition.auto_partitions(snap)
        if parts > 1:
            return partition.solve_partitioned(snap, parts=parts, time_limit=limit, seed=seed,
                                               workers=workers, judge=check,
                                               processes=processes)
        return solve_cpsat(snap, time_limit=limit, seed=seed, workers=workers, judge=check)

    return plan_reclaim(snapshot, solve_with_reservations(snapshot, time_limit, window))
