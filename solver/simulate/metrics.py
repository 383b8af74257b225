"""The numbers a timed replay reports, as small pure functions over plain data.

Kept apart from the simulator loop so each formula can be read and tested on its own with
inputs whose answers are known: percentiles of queueing delay, Jain's fairness index, each
tenant's share against its weight, time-weighted means of step series (utilisation over time)
and the energy a GPU draws at a given allocation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# one definition of the fair split, shared with the controller's fair sharing over time
from solver.fairshare import weighted_max_min as weighted_max_min
from solver.types import MILLI


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values`` with linear interpolation between closest
    ranks (numpy's default method), so results agree with common tooling."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return float(ordered[lo])
    frac = pos - lo
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * frac)


def percentiles(values: Sequence[float], qs: Sequence[float] = (50, 90, 99)) -> dict[str, float]:
    """``{"p50": ..., "p90": ..., ...}``; all zero when there are no values (nobody waited)."""
    if not values:
        return {f"p{q:g}": 0.0 for q in qs}
    return {f"p{q:g}": percentile(values, q) for q in qs}


def jain_index(xs: Sequence[float]) -> float:
    """Jain's fairness index ``(sum x)^2 / (n * sum x^2)``: 1 when all ``xs`` are equal, 1/n when
    one party gets everything. All zeros count as equal (1.0)."""
    if not xs:
        raise ValueError("Jain's index of no values")
    if any(x < 0 for x in xs):
        raise ValueError("Jain's index needs non-negative values")
    top = max(xs)
    if top == 0:
        return 1.0
    # Scaled by the largest first: the squares of tiny values underflow (1e-161 squared is 0
    # in a double), which took the index above 1 or to a false 1.0.
    scaled = [x / top for x in xs]
    total = sum(scaled)
    return min(1.0, total * total / (len(xs) * sum(x * x for x in scaled)))


@dataclass(frozen=True, slots=True)
class TenantShare:
    """A tenant's part of the GPU time handed out, against the part its weight entitles it to.

    ``ratio`` is ``share / entitled``: 1.0 is exactly its weighted fair share.
    """

    tenant: str
    gpu_seconds: float
    share: float
    entitled: float

    @property
    def ratio(self) -> float:
        return self.share / self.entitled if self.entitled > 0 else 0.0


def tenant_shares(
    gpu_seconds: Mapping[str, float], weights: Mapping[str, float]
) -> list[TenantShare]:
    """Each tenant's share of all GPU-seconds allocated and its entitlement ``w / sum(w)``, for
    every tenant in ``weights`` (a tenant that got nothing has share 0)."""
    if not weights:
        return []
    if any(w <= 0 for w in weights.values()):
        raise ValueError("tenant weights must be > 0")
    total = sum(gpu_seconds.get(t, 0.0) for t in weights)
    wsum = sum(weights.values())
    out = []
    for t in sorted(weights):
        got = gpu_seconds.get(t, 0.0)
        out.append(
            TenantShare(
                tenant=t,
                gpu_seconds=got,
                share=got / total if total > 0 else 0.0,
                entitled=weights[t] / wsum,
            )
        )
    return out


def weighted_jain(shares: Sequence[TenantShare]) -> float:
    """Jain's index over each tenant's share divided by its entitlement: 1.0 when every tenant
    received exactly its weighted share."""
    if not shares:
        return 1.0
    return jain_index([s.ratio for s in shares])


def time_weighted_mean(points: Sequence[tuple[float, float]], end: float) -> float:
    """Mean of a step function that takes value ``v`` from time ``t`` until the next point
    (the last one holds until ``end``). Points must be in time order."""
    if not points:
        return 0.0
    start = points[0][0]
    if end <= start:
        return float(points[-1][1])
    area = 0.0
    for (t0, v), (t1, _) in itertools.pairwise(points):
        if t1 < t0:
            raise ValueError("series points must be in time order")
        area += v * (t1 - t0)
    last_t, last_v = points[-1]
    area += last_v * max(0.0, end - last_t)
    return area / (end - start)


def gpu_power_watts(idle_watts: float, active_watts: float, used_milli: int) -> float:
    """Estimated draw of one GPU: idle power plus the dynamic range in proportion to the share
    allocated (a simple linear model; an allocated share is assumed busy)."""
    used = min(max(used_milli, 0), MILLI) / MILLI
    return idle_watts + (active_watts - idle_watts) * used


#: Fallback power figures (watts, idle and busy) by GPU model when the policy names none.
#: Board power limits from vendor data sheets; idle is a typical reading with no context.
DEFAULT_IDLE_WATTS = 50.0
DEFAULT_ACTIVE_WATTS = 300.0


@dataclass(frozen=True, slots=True)
class PodSpan:
    """One pod's life as a replay saw it: it waited from ``arrival_s`` (its gang's arrival) to
    ``start_s`` and held ``milli`` GPU-milli from ``start_s`` to ``end_s``. ``None``: not yet
    (never started, or still running when the replay ended)."""

    tenant: str
    milli: int
    arrival_s: float
    start_s: float | None
    end_s: float | None


@dataclass(frozen=True, slots=True)
class SpanFigures:
    """What :func:`span_figures` integrates over ``[0, cutoff_s]``: the mean allocated share
    of the cluster's GPUs, and per tenant the GPU-milli-seconds it held and what a weighted
    max-min fair split of the cluster over the tenants' demand (held plus waiting) would have
    given it."""

    mean_utilisation: float
    held_milli_s: dict[str, float]
    fair_milli_s: dict[str, float]

    def fair_ratio(self, tenant: str) -> float:
        fair = self.fair_milli_s.get(tenant, 0.0)
        return self.held_milli_s.get(tenant, 0.0) / fair if fair > 0 else 1.0

    @property
    def jain(self) -> float:
        return jain_index([self.fair_ratio(t) for t in self.fair_milli_s]) if self.fair_milli_s \
            else 1.0


def span_figures(spans: Sequence[PodSpan], *, capacity_milli: int,
                 weights: Mapping[str, float], cutoff_s: float) -> SpanFigures:
    """Utilisation and fair shares from pod spans, by the timed replay's definitions
    (:mod:`solver.simulate.timed`): demand is what a tenant holds plus what its arrived, not yet
    started pods ask; both are integrated exactly between events up to ``cutoff_s``. A replay
    on a real cluster (e2e/bench_compare.py) reports its figures through this function, so
    they mean the same as the simulator's."""
    if capacity_milli <= 0:
        raise ValueError("capacity_milli must be > 0")
    changes: list[tuple[float, str, int, int]] = []  # (time, tenant, d held, d waiting)
    for s in spans:
        if s.tenant not in weights:
            raise ValueError(f"pod span of unknown tenant {s.tenant!r}")
        changes.append((s.arrival_s, s.tenant, 0, s.milli))
        if s.start_s is not None:
            changes.append((s.start_s, s.tenant, s.milli, -s.milli))
            if s.end_s is not None:
                changes.append((s.end_s, s.tenant, -s.milli, 0))
    changes.sort(key=lambda c: c[0])
    held = dict.fromkeys(weights, 0)
    waiting = dict.fromkeys(weights, 0)
    held_s = dict.fromkeys(weights, 0.0)
    fair_s = dict.fromkeys(weights, 0.0)
    used_s = 0.0
    now = 0.0

    def integrate(until: float) -> None:
        nonlocal used_s, now
        dt = min(until, cutoff_s) - now
        if dt <= 0:
            return
        for t in weights:
            held_s[t] += held[t] * dt
        used_s += sum(held.values()) * dt
        demands = {t: held[t] + waiting[t] for t in weights}
        if any(demands.values()):
            for t, f in weighted_max_min(capacity_milli, demands, weights).items():
                fair_s[t] += f * dt
        now = min(until, cutoff_s)

    for when, tenant, d_held, d_wait in changes:
        integrate(when)
        held[tenant] += d_held
        waiting[tenant] += d_wait
    integrate(cutoff_s)
    return SpanFigures(
        mean_utilisation=used_s / (capacity_milli * cutoff_s) if cutoff_s > 0 else 0.0,
        held_milli_s=held_s, fair_milli_s=fair_s)
