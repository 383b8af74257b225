"""Run times learned from finished pods: an estimate for the pods nobody gave one.

Most pods declare nothing of how long they run: no deadline, no ``berth.dev/expected-runtime``.
A reservation then cannot tell when their capacity frees. What the cluster has seen can: the
pods of one *kind* (one tenant, one owner kind, one GPU count: a team's 8-GPU Job pods, its
one-GPU notebooks) tend to run alike, as the duration-estimating schedulers on the Alibaba PAI
trace found. :class:`RunHistory` keeps the run times of the last pods of each kind that
finished and answers their median (robust to the odd crash or runaway) once enough finished.

Kept by the controller (admission/controller: fed by its pod watch, pods it released that
ended Succeeded) and by the timed replay (solver/simulate/timed.py: gangs that departed), with
the policy's :class:`~solver.types.LearnedRuntimes`. An estimate, read as a declared one is
(admission/controller/runtimes.py): it gives a running pod an expected end, so a reservation
plans when its capacity frees, and it never lets a waiting gang backfill.

What a tenant can do with it: only its own pods are its own kinds' samples (the tenant comes
from the namespace), so it can make its own pods look shorter or longer than they run, which
moves when a reservation expects their capacity back (a reserved gang starts late, or capacity
is held early), never whether anything fits or may backfill. Each tenant keeps at most
``MAX_KINDS_PER_TENANT`` kinds (the least recently finished one goes), so pods of made-up owner
kinds cannot grow the memory or push out another tenant's kinds.
"""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict, deque
from dataclasses import dataclass

from solver.types import MAX_WAIT_SECONDS, LearnedRuntimes

#: Kinds of pod remembered per tenant; the least recently finished kind goes first.
MAX_KINDS_PER_TENANT = 64


@dataclass(frozen=True, slots=True)
class Kind:
    """Pods expected to run alike: one tenant's, with one owner kind ("Job", "JobSet",
    "Pod" for a pod nobody owns...), asking for one number of GPUs."""

    tenant: str
    owner: str
    gpus: int


class RunHistory:
    """The run times of the last finished pods of each :class:`Kind`, and their median."""

    def __init__(self, settings: LearnedRuntimes | None = None) -> None:
        self.settings = settings or LearnedRuntimes()
        self._kinds: dict[str, OrderedDict[Kind, deque[float]]] = {}

    def record(self, kind: Kind, seconds: float) -> bool:
        """One pod of ``kind`` finished after running ``seconds``. Returns False (and keeps
        nothing) for a run time that is not a finite number in [0, MAX_WAIT_SECONDS]."""
        if not (isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
                and math.isfinite(seconds) and 0.0 <= seconds <= MAX_WAIT_SECONDS):
            return False
        kinds = self._kinds.setdefault(kind.tenant, OrderedDict())
        runs = kinds.get(kind)
        if runs is None or runs.maxlen != self.settings.samples:
            runs = deque(runs or (), maxlen=self.settings.samples)
            kinds[kind] = runs
        runs.append(float(seconds))
        kinds.move_to_end(kind)
        while len(kinds) > MAX_KINDS_PER_TENANT:
            kinds.popitem(last=False)
        return True

    def estimate(self, kind: Kind) -> float | None:
        """The median run time of ``kind``'s last finished pods, once at least
        ``min_samples`` finished; None before that, or when learning is off."""
        if not self.settings.enabled:
            return None
        runs = self._runs(kind)
        if runs is None or len(runs) < self.settings.min_samples:
            return None
        return float(statistics.median(runs))

    def samples(self, kind: Kind) -> int:
        """How many finished pods of ``kind`` are remembered."""
        return len(self._runs(kind) or ())

    def _runs(self, kind: Kind) -> deque[float] | None:
        kinds = self._kinds.get(kind.tenant)
        return None if kinds is None else kinds.get(kind)

    def kinds(self) -> int:
        """How many kinds are remembered, over every tenant."""
        return sum(len(k) for k in self._kinds.values())
