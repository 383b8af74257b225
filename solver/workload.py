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

import hashlib
from dataclasses import replace

from solver.fairshare import state_fields, state_map, state_number
from solver.fragmentation import DEFAULT_COVERAGE, Shape, pod_shape, typical_of
from solver.types import MAX_CPU_MILLI, MAX_GPUS_PER_POD, MILLI, Snapshot, TypicalPod

#: Most shapes kept per tenant; the least weighted go first beyond it.
MAX_SHAPES = 256
#: Most counted gangs a saved record names (by digest); and a digest's length in hex.
MAX_SEEN = 20_000
DIGEST_CHARS = 12
#: A tenant's shape whose decayed count falls below this is forgotten.
FORGET = 1e-3
#: Most a saved shape's decayed count may be: far past any cluster's (a million pods a second
#: for a day is 1e11), and small enough that a tenant's 256 counts sum to a finite number.
MAX_COUNT = 1e12


class WorkloadRecord:
    """Decayed counts of the pod shapes that arrived, per tenant (see the module doc)."""

    def __init__(self, half_life_s: float) -> None:
        if not half_life_s > 0:
            raise ValueError(f"half_life_s must be > 0, got {half_life_s}")
        self.half_life_s = float(half_life_s)
        self._counts: dict[str, dict[Shape, float]] = {}
        self._last_s: float | None = None
        # gangs counted at the last observation; None: read back from a saved state, whose
        # digests of them (or, when it kept none, every gang of the next observation) are
        # taken as counted
        self._seen: frozenset[str] | None = frozenset()
        self._seen_digests: frozenset[str] | None = None

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
        if self._seen is None:  # read back from a saved state: its writer counted these
            self._seen = frozenset(g.name for g in snapshot.gangs
                                   if self._seen_digests is None
                                   or name_digest(g.name) in self._seen_digests)
            self._seen_digests = None
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

    def state(self, max_shapes: int = MAX_SHAPES) -> dict[str, object]:
        """The record as plain JSON values, each tenant's ``max_shapes`` most counted shapes
        (:meth:`from_state` reads it back), with short digests of the gangs already counted
        (up to :data:`MAX_SEEN`; beyond, none, and a record read back takes every gang of its
        first observation as counted)."""
        counts = {}
        for tenant, shapes in sorted(self._counts.items()):
            ranked = sorted(shapes.items(), key=lambda kv: (-kv[1], _shape_key(kv[0])))
            counts[tenant] = [[cpu, gpus, milli, sorted(models), n]
                              for (cpu, gpus, milli, models), n in ranked[:max_shapes]]
        seen = None
        if self._seen is not None and len(self._seen) <= MAX_SEEN:
            seen = sorted(name_digest(n) for n in self._seen)
        return {"halfLifeSeconds": self.half_life_s, "lastSeconds": self._last_s,
                "counts": counts, "seen": seen}

    @classmethod
    def from_state(cls, data: object, where: str = "workload") -> WorkloadRecord:
        """A record from :meth:`state`'s form; ValueError naming the field when it is not
        one. Its first observation counts nothing, only notes the gangs pending then (the
        record's writer counted them already)."""
        d = state_fields(data, where, ("halfLifeSeconds", "lastSeconds", "counts", "seen"))
        rec = cls(state_number(d["halfLifeSeconds"], f"{where}.halfLifeSeconds", low=1e-9))
        last = d["lastSeconds"]
        rec._last_s = None if last is None else state_number(last, f"{where}.lastSeconds",
                                                             low=None)
        for tenant, rows in state_map(d["counts"], f"{where}.counts").items():
            at = f"{where}.counts.{tenant}"
            if not isinstance(rows, list) or len(rows) > MAX_SHAPES:
                raise ValueError(f"{at}: must be a list of at most {MAX_SHAPES} shapes")
            shapes: dict[Shape, float] = {}
            for i, row in enumerate(rows):
                if not isinstance(row, list) or len(row) != 5:
                    raise ValueError(f"{at}[{i}]: must be [cpu milli, GPUs, milli per GPU, "
                                     f"[models], count], got {row!r:.80}")
                cpu, gpus, milli, models, n = row
                ints = [(cpu, "cpu milli", MAX_CPU_MILLI), (gpus, "GPUs", MAX_GPUS_PER_POD),
                        (milli, "milli per GPU", MILLI)]
                for v, what, high in ints:
                    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= high:
                        raise ValueError(f"{at}[{i}]: {what} must be an integer in "
                                         f"[0, {high}], got {v!r:.40}")
                if (gpus == 0) != (milli == 0):
                    raise ValueError(f"{at}[{i}]: GPUs and milli per GPU must both be 0 (a "
                                     f"CPU pod) or both above 0, got {gpus} and {milli}")
                if not isinstance(models, list) or not all(
                        isinstance(m, str) and 0 < len(m) <= 253 for m in models):
                    raise ValueError(f"{at}[{i}]: models must be a list of model names")
                count = state_number(n, f"{at}[{i}]", high=MAX_COUNT)
                if count > 0:  # a shape counted 0 times weighs nothing
                    shapes[(cpu, gpus, milli, frozenset(models))] = count
            if shapes:
                rec._counts[tenant] = shapes
        rec._seen = None
        seen = d["seen"]
        if seen is not None:
            if not isinstance(seen, list) or len(seen) > MAX_SEEN or not all(
                    isinstance(s, str) and len(s) == DIGEST_CHARS for s in seen):
                raise ValueError(f"{where}.seen: must be null or a list of at most {MAX_SEEN} "
                                 f"digests of {DIGEST_CHARS} characters")
            rec._seen_digests = frozenset(seen)
        return rec

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


def name_digest(name: str) -> str:
    """A short digest of a gang's name: what a saved record keeps of the gangs it counted."""
    return hashlib.blake2b(name.encode(), digest_size=DIGEST_CHARS // 2).hexdigest()


def _shape_key(shape: Shape) -> tuple[int, int, int, list[str]]:
    return (shape[0], shape[1], shape[2], sorted(shape[3]))


def with_workload(snapshot: Snapshot, record: WorkloadRecord) -> Snapshot:
    """``snapshot`` with the learned target workload, unless its policy names one already or
    nothing has been counted yet (then the measure uses the snapshot's own pods)."""
    if snapshot.policy.typical_pods:
        return snapshot
    typical = record.typical({t.name: t.weight for t in snapshot.tenants})
    if not typical:
        return snapshot
    return replace(snapshot, policy=replace(snapshot.policy, typical_pods=typical))
