"""The solver, kept off the event loop and the watch threads: a worker process with a deadline.

CP-SAT holds the GIL for seconds on a large window, so it runs in a
:class:`concurrent.futures.ProcessPoolExecutor` child. The solver's own time limit bounds the
search; the deadline here (limit plus a grace for pickling the snapshot and building the model)
bounds everything else (at 10,000 pending pods, building the model alone can outlast the
limit). If the child does not answer in time or dies, it is killed and the window falls back to
the greedy best-fit placement computed here (contract 4: a plan the checker accepts, greedy when
CP-SAT has nothing in time); with ``fallback=None`` the cycle gets an empty plan that defers
every gang with the reason instead. The worker is started when the controller starts
(:meth:`WorkerSolver.warm`) and again at once when one is replaced, so no batch waits for a
fresh interpreter to import the solver.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from multiprocessing import get_context

from solver.names import SolverName
from solver.plan import Deferred, Plan, SolveStats
from solver.types import Snapshot

log = logging.getLogger(__name__)


def solve_snapshot(snapshot: Snapshot, solver: SolverName, time_limit: float,
                   seed: int) -> Plan:
    """Runs in the worker process."""
    from solver.api import solve

    return solve(snapshot, solver=solver, time_limit=time_limit, seed=seed)


def warm_up() -> None:
    """Runs in the worker process: import what a solve needs (the solver, CP-SAT), so that the
    first batch does not pay it."""
    from ortools.sat.python import cp_model  # noqa: F401

    import solver.api  # noqa: F401


def nothing_admitted(snapshot: Snapshot, solver: str, why: str, seconds: float) -> Plan:
    return Plan(admitted=(), deferred=tuple(Deferred(g.name, why) for g in snapshot.gangs),
                stats=SolveStats(solver=solver, status="NO_ANSWER", wall_seconds=seconds))


class WorkerSolver:
    """Callable ``snapshot -> Plan`` that solves in a child process."""

    def __init__(self, *, solver: SolverName = SolverName.CPSAT, time_limit: float = 5.0,
                 seed: int = 0, grace_seconds: float = 10.0,
                 fallback: SolverName | None = SolverName.BESTFIT) -> None:
        self.solver = solver
        self.time_limit = time_limit
        self.seed = seed
        self.grace = grace_seconds
        self.fallback = fallback
        self._pool: Executor | None = None

    def _executor(self) -> Executor:
        if self._pool is None:
            # spawn: the parent runs watch threads; forking a threaded process is unsafe.
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"))
        return self._pool

    def warm(self) -> Future[None]:
        """Start the worker process and its imports now, without waiting for them: spawned at
        the first solve instead, they would add seconds to the first batch's release (a fresh
        interpreter importing OR-Tools, on a machine busy with the pods being created)."""
        return self._executor().submit(warm_up)

    def __call__(self, snapshot: Snapshot) -> Plan:
        if not snapshot.gangs:
            return Plan(admitted=(), deferred=(),
                        stats=SolveStats(solver=self.solver, status="EMPTY", wall_seconds=0.0))
        start = time.monotonic()
        fut = self._executor().submit(solve_snapshot, snapshot, self.solver, self.time_limit,
                                      self.seed)
        try:
            return fut.result(timeout=self.time_limit + self.grace)
        except (FutureTimeout, BrokenProcessPool) as exc:
            log.error("solver worker gave no plan (%s); replacing it", type(exc).__name__)
            self.close(kill=True)
            self.warm()  # the next window's worker starts while this one falls back
            if self.fallback is None:
                return nothing_admitted(snapshot, self.solver, "the solver did not answer in "
                                        "time; retrying next window", time.monotonic() - start)
            from solver.api import solve

            plan = solve(snapshot, solver=self.fallback)
            stats = replace(plan.stats, fallback=True, wall_seconds=time.monotonic() - start,
                            detail={**plan.stats.detail, "worker_timeout": 1.0})
            return replace(plan, stats=stats)

    def close(self, kill: bool = False) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if kill and isinstance(pool, ProcessPoolExecutor):
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.kill()  # only this pool's own children
        pool.shutdown(wait=True, cancel_futures=True)  # killed workers end at once
