"""The placement policies by name, listed once.

Every choice of solver (the ``solve`` and ``simulate`` command lines, the timed replay, the
controller, :func:`solver.api.solve`) and every check of one reads this enum, so a new solver
is named in one place. ``kueue`` and ``volcano`` are *models* of those systems' queueing
(solver/baselines/kueue.py and volcano.py: the Kueue-like and Volcano-like baselines), not
the systems; the real ones are compared in e2e/bench_compare.py. Light on purpose: a
command-line parser imports it for its choices without loading CP-SAT. Names stay plain
strings on the wire: a member equals its value.
"""

from __future__ import annotations

from enum import StrEnum


class SolverName(StrEnum):
    CPSAT = "cpsat"
    FGD = "fgd"
    BESTFIT = "bestfit"
    FIRSTFIT = "firstfit"
    RANDOM = "random"
    KUEUE = "kueue"
    VOLCANO = "volcano"

    @classmethod
    def of(cls, text: str) -> SolverName | None:
        """The solver called ``text``, or None (Python 3.11's ``in`` takes members only)."""
        try:
            return cls(text)
        except ValueError:
            return None


#: The baselines that model another system's queueing (per-tenant queues, their own order),
#: not only where a pod goes.
QUEUEING: tuple[SolverName, ...] = (SolverName.KUEUE, SolverName.VOLCANO)
