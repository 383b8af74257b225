"""The solver's answer: which gangs are admitted now, where each pod goes, and why the rest wait."""

from __future__ import annotations

from dataclasses import dataclass, field

from solver.types import GpuShare


@dataclass(frozen=True, slots=True)
class PodPlacement:
    pod: str
    node: str
    gpus: tuple[GpuShare, ...] = ()


@dataclass(frozen=True, slots=True)
class GangPlacement:
    gang: str
    pods: tuple[PodPlacement, ...]


@dataclass(frozen=True, slots=True)
class Deferred:
    """A gang left waiting, with a reason a user can read."""

    gang: str
    reason: str


@dataclass(frozen=True, slots=True)
class Reservation:
    """Capacity held for a gang that cannot fit now: it is expected to start in
    ``start_in_s`` seconds on ``nodes``; until then only gangs known to end before that may use
    what is held for it (solver/reserve.py)."""

    gang: str
    start_in_s: float
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Eviction:
    """A running gang of ``tenant`` (on borrowed quota) to evict whole, every pod of ``pods``,
    so that ``for_gang`` of ``for_tenant`` can start within its own quota once they are gone
    (solver/reclaim.py). ``preempt``: instead, a gang of lower priority of the same tenant,
    evicted for its higher-priority ``for_gang`` (policy reclaim.preempt_within_tenant)."""

    gang: str
    tenant: str
    pods: tuple[str, ...]
    for_gang: str
    for_tenant: str
    preempt: bool = False


@dataclass(frozen=True, slots=True)
class SolveStats:
    """How the plan was found. ``status`` is CP-SAT's (OPTIMAL, FEASIBLE, ...) or ``GREEDY``."""

    solver: str
    status: str
    wall_seconds: float
    objective: float | None = None
    bound: float | None = None
    fallback: bool = False  # True when CP-SAT found nothing in time and the greedy plan stands
    detail: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Plan:
    admitted: tuple[GangPlacement, ...]
    deferred: tuple[Deferred, ...]
    stats: SolveStats
    reservations: tuple[Reservation, ...] = ()
    evictions: tuple[Eviction, ...] = ()

    def placement(self, gang: str) -> GangPlacement | None:
        for g in self.admitted:
            if g.gang == gang:
                return g
        return None

    @property
    def admitted_names(self) -> frozenset[str]:
        return frozenset(g.gang for g in self.admitted)
