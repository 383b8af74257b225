"""The target workload, learned: the pod shapes that have arrived, averaged with a half-life.

Why
---
FGD's fragmentation measure (:mod:`solver.fragmentation`) asks how much free GPU a *target
workload* could not use. Without one in the policy, the engine used the pods of the window
itself. A window of small pods then teaches the measure that only small pods exist, so it
fills the empty 8-GPU nodes that the next hour's training gangs need. In the timed replay of
the embedded default (seed 4) the engine's allocation was 51 % against best-fit's 65 %, and the
training tenant got 0.53 of its fair share; given the shapes of the whole workload it reached
67 % and 0.89 (bench/timed_sim.md). The FGD paper, too, measures against the workload's own
distribution of shapes, not a window's.

The record
----------
:class:`WorkloadRecord` counts the pods of every gang the first time a window sees it,
per tenant and shape (CPU, GPU count, per-GPU share, models: :func:`solver.fragmentation.
pod_shape`), each count decayed with the half-life ``H`` (``solver.targetWorkload.
halfLifeSeconds``). :meth:`WorkloadRecord.typical` turns it into typical pods: each tenant's
shapes as a distribution of its own, mixed by the tenants' fair-share weights, then the most
popular shapes covering 95 % (:func:`solver.fragmentation.typical_of`).

Trust
-----
Shapes come from the gangs' demand as Berth read it. Mixing per tenant by weight means a
tenant that floods small pods moves only its own part of the target workload: it cannot make
the measure forget another tenant's training shapes.
"""

from __future__ import annotations

from dataclasses import replace

from solver.fragmentation import DEFAULT_COVERAGE, Shape, pod_shape, typical_of
from solver.types import Snapshot, TypicalPod

#: Most shapes kept per tenant; the least weighted go first beyond it.
MAX_SHAPES = 256
#: A tenant's shape whose decayed count falls below this is forgotten.
FORGET = 1e-3


class WorkloadRecord:
    """Decayed counts of the pod shapes that arrived, per tenant (see the module doc)."""

    def __init__(self, half_life_s: float) -> None:
        if not half_life_s > 0:
            raise ValueError(f"half_life_s must be > 0, got {half_life_s}")
        self.half_life_s = float(half_life_s)
        self._counts: dict[str, dict[Shape, float]] = {}
        self._last_s: float | None = None
        self._seen: frozenset[str] = frozenset()

    def observe(self, now_s: float, snapshot: Snapshot) -> None:
        """Count the pods of the gangs ``snapshot`` holds that the previous observation did
        not, after decaying what was counted before by the time since then."""
        if self._last_s is not None and now_s > self._last_s:
            d = 0.5 ** ((now_s - self._last_s) / self.half_life_s)
            for tenant, shapes in list(self._counts.items()):
                kept = {k: v * d for k, v in shapes.items() if v * d >= FORGET}
                if kept:
                    self._counts[tenant] = kept
                else:
                    del self._counts[tenant]
        if self._last_s is None or now_s > self._last_s:
            self._last_s = now_s
        for gang in snapshot.gangs:
            if gang.name in self._seen:
                continue
            shapes = self._counts.setdefault(gang.tenant, {})
            for pod in gang.pods:
                key = pod_shape(pod)
                shapes[key] = shapes.get(key, 0.0) + 1.0
            if len(shapes) > MAX_SHAPES:
                ranked = sorted(shapes.items(), key=lambda kv: kv[1], reverse=True)
                self._counts[gang.tenant] = dict(ranked[:MAX_SHAPES])
        self._seen = frozenset(g.name for g in snapshot.gangs)

    def typical(self, weights: dict[str, float],
                coverage: float = DEFAULT_COVERAGE) -> tuple[TypicalPod, ...]:
        """Typical pods: each tenant's shapes normalised to its weight (1 for a tenant not
        in ``weights``), then the most popular covering ``coverage``."""
        mixed: dict[Shape, float] = {}
        for tenant, shapes in self._counts.items():
            total = sum(shapes.values())
            if total <= 0:
                continue
            w = weights.get(tenant, 1.0)
            for key, n in shapes.items():
                mixed[key] = mixed.get(key, 0.0) + w * n / total
        return typical_of(mixed, coverage)


def with_workload(snapshot: Snapshot, record: WorkloadRecord) -> Snapshot:
    """``snapshot`` with the learned target workload, unless its policy names one already or
    nothing has been counted yet (then the measure uses the snapshot's own pods)."""
    if snapshot.policy.typical_pods:
        return snapshot
    typical = record.typical({t.name: t.weight for t in snapshot.tenants})
    if not typical:
        return snapshot
    return replace(snapshot, policy=replace(snapshot.policy, typical_pods=typical))
