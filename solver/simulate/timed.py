"""``berth simulate --mode timed``: a replay in simulated time, with queues, departures and
tenants, through the same solver and checker as the live controller.

How the clock works: :func:`simulate_timed` is a short numbered recipe, as the controller's
cycle is, and each step is one method of the one state object (:class:`_Replay`):

1. wake up    the controller wakes at the end of a batch window (multiples of ``window_s``):
              the first one at or after the next arrival or departure. Windows in which
              nothing arrived and nothing left are skipped: the snapshot would be the one
              already solved, so the answer could not change capacity-wise. With
              ``settle_s`` it wakes sooner, ``settle_s`` after an arrival while nothing waits
              or a departure while gangs wait, that no other such event followed within
              ``settle_s`` (the window ends after it then count from there, as the
              controller's next batch does); during a creation burst (``BURST_PODS`` pods
              within ``BURST_WINDOW_S``) while nothing waits, ``settle_s`` after the first
              arrival since the last batch, as the controller does while its scheduler is
              short of released pods (this replay's scheduler binds at once: always short).
2. play       gangs join their tenant's queue at their arrival time; placed gangs leave when
              they have run for their duration, freeing capacity at that exact moment (for
              arrivals at that same moment too).
3. (idle)     a window in which nothing waits decides nothing.
4. snapshot   what runs and what waits: the oldest ``max_pending`` gangs, tenants interleaved
              so a burst of one cannot crowd the others out.
5. solve      :func:`solver.api.solve` with the policy's name bound in, timed.
6. check      :func:`solver.checker.check` judges the plan. A violation stops the replay: the
              contract is that every policy returns a feasible plan.
7. start      admitted gangs start at the window's end; the rest keep waiting, with their
              waiting time (which the solver ages) growing. Gangs the plan reclaims
              (``policy.reclaim``, solver/reclaim.py) stop first, at once, and go back to
              their queue in arrival order (their run so far counted as lost); the gangs they
              made room for start in what they freed.
8. stop       the clock stops when nothing is left to happen, or at ``until_s``.

Everything that changes the GPUs' state goes through one place (:class:`_Cluster`), which
integrates utilisation, per-tenant GPU time, energy and SLO attainment between changes.
Interference is judged with the *true* QoS profiles of the scenario's policy even when the
solver was shown an interference-oblivious policy (:func:`oblivious_policy`), so the two can be
compared on equal terms.
"""

from __future__ import annotations

import heapq
import math
import time
import zlib
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from solver.checker import check
from solver.fairshare import gang_models, gpu_pools, pooled_max_min
from solver.history import Kind, RunHistory
from solver.interference import (
    may_share,
    predicted_latency_ms,
    profile_for,
    resolve_profiles,
    slowdown,
    within_slo,
)
from solver.names import SolverName
from solver.plan import Plan
from solver.records import Records
from solver.simulate.metrics import (
    DEFAULT_ACTIVE_WATTS,
    DEFAULT_IDLE_WATTS,
    TenantShare,
    gpu_power_watts,
    jain_index,
    percentiles,
    tenant_shares,
    time_weighted_mean,
    weighted_max_min,
)
from solver.simulate.timed_scenario import Scenario, TimedGang
from solver.types import (
    MILLI,
    Gang,
    GpuShare,
    ProblemError,
    QoSProfile,
    Running,
    Snapshot,
    SolverPolicy,
)

#: A creation burst, as the controller tells one (admission/controller/pacing.py's
#: ``Arrivals``; a unit test holds the two equal): this many pods created within this long.
BURST_PODS = 40
BURST_WINDOW_S = 2.0

#: What places a snapshot: ``solver.api.solve`` with the policy's name bound in.
SolveFn = Callable[[Snapshot], Plan]


class SimulationError(RuntimeError):
    """The replay met a plan the checker rejects (a solver bug), or an impossible state."""


@dataclass(frozen=True, slots=True)
class TimedConfig:
    """How a timed replay runs.

    ``policy``: any name :func:`solver.api.solve` accepts. ``interference_aware=False`` shows
    the solver :func:`oblivious_policy` instead of the scenario's policy. ``until_s``: stop the
    clock there (None: run until nothing is left to happen). ``label``: the name results carry.
    ``deadline_factor``: every gang declares a deadline of this many times its run time (an
    enforced bound, as ``activeDeadlineSeconds`` is: the solver sees it as the gang's
    ``runtime_s`` and running pods' ``remaining_s``; 1.0: exact, 2.0: users ask for twice what
    they use); None: no gang declares one, so nothing is known to end and nothing is reserved.
    ``settle_s``: a batch also runs this long after an arrival while nothing waits, or a
    departure while gangs wait, when no other such event came meanwhile, before the window
    ends, as the controller's ``batch.settleSeconds`` makes it
    (admission/controller/batching.py); None: only at window ends.
    ``estimate_factor``: every gang's user declares an expected run time
    (``berth.dev/expected-runtime``) of this many times its run time, each also scaled by
    ``exp(estimate_sigma x z)`` with ``z`` a standard normal drawn from the seed and the gang's
    name (0: no noise). An estimate, not a bound, as the controller reads it
    (admission/controller/runtimes.py): it gives a running pod's expected end
    (``remaining_s``; unknown, None, once overrun) where no deadline does, and never a gang's
    ``runtime_s``, so it plans reservations but lets nothing backfill. None: no estimates.
    """

    policy: str = SolverName.CPSAT
    window_s: float = 5.0
    settle_s: float | None = None
    time_limit_s: float = 2.0
    seed: int = 0
    interference_aware: bool = True
    max_pending: int = 64
    until_s: float | None = None
    label: str | None = None
    deadline_factor: float | None = 1.0
    estimate_factor: float | None = None
    estimate_sigma: float = 0.0

    def __post_init__(self) -> None:
        if self.estimate_factor is not None and not 0.01 <= self.estimate_factor <= 1000.0:
            raise ProblemError("estimate_factor", "must be from 0.01 to 1000 (times the run "
                               f"time), got {self.estimate_factor}")
        if not 0.0 <= self.estimate_sigma <= 3.0:
            raise ProblemError("estimate_sigma", "must be from 0 (exact) to 3 (a log-normal "
                               f"spread), got {self.estimate_sigma}")
        if self.deadline_factor is not None and not 1.0 <= self.deadline_factor <= 1000.0:
            raise ProblemError("deadline_factor", "must be from 1 to 1000 (a deadline below "
                               f"the run time would end the gang), got {self.deadline_factor}")
        if self.window_s <= 0:
            raise ProblemError("window_s", f"must be > 0, got {self.window_s}")
        if self.settle_s is not None and not 0 < self.settle_s < math.inf:
            raise ProblemError("settle_s", "must be > 0 and finite (None: batches only at "
                               f"the window), got {self.settle_s}")
        if self.time_limit_s <= 0:
            raise ProblemError("time_limit_s", f"must be > 0, got {self.time_limit_s}")
        if self.max_pending < 1:
            raise ProblemError("max_pending", f"must be >= 1, got {self.max_pending}")

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        return self.policy if self.interference_aware else f"{self.policy}-oblivious"


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GangOutcome:
    """What became of one gang: ``state`` is ``departed``, ``running`` or ``waiting``;
    ``start_s`` and ``end_s`` are its last run's (None while it waits), ``first_start_s`` its
    first start (earlier when reclaim evicted it and it started again, or waits again)."""

    gang: str
    tenant: str
    arrival_s: float
    start_s: float | None
    end_s: float | None
    state: str
    first_start_s: float | None = None

    @property
    def wait_s(self) -> float | None:
        """From arrival to the gang's first start: the queueing delay as e2e/bench_compare.py
        measures it on the real systems (the first moment all its pods ran). What a reclaimed
        gang loses after that is its run so far (``TimedResult.reclaim_lost_gpu_s``), not
        counted again as waiting."""
        start = self.first_start_s if self.first_start_s is not None else self.start_s
        return None if start is None else start - self.arrival_s


@dataclass(frozen=True, slots=True)
class TenantResult:
    """One tenant's service over the arrival period (0 to the last arrival). ``share``: its part
    of all GPU time handed out; ``entitled``: its weight's part; ``fair_gpu_seconds``: what a
    weighted max-min fair split of the cluster over the tenants' demand (running plus waiting)
    would have given it, integrated over time."""

    tenant: str
    weight: float
    gangs: int
    placed: int
    gpu_seconds: float
    share: float
    entitled: float
    fair_gpu_seconds: float
    wait_p50_s: float
    wait_p90_s: float
    pooled_fair_gpu_seconds: float = 0.0

    @property
    def fair_ratio(self) -> float:
        """GPU time received over its fair share (1.0: exactly fair; None-like 1.0 when it had
        no demand at all)."""
        return self.gpu_seconds / self.fair_gpu_seconds if self.fair_gpu_seconds > 0 else 1.0

    @property
    def pooled_fair_ratio(self) -> float:
        """GPU time received over its fair share within the GPU models its gangs may use
        (:func:`solver.fairshare.pooled_max_min`): a tenant whose training asks for H100s is
        not owed the L4s it cannot run on."""
        return (self.gpu_seconds / self.pooled_fair_gpu_seconds
                if self.pooled_fair_gpu_seconds > 0 else 1.0)


@dataclass(frozen=True, slots=True)
class SloResult:
    """Latency-sensitive pods judged by the interference model while they ran.

    ``attainment``: share of their pod-seconds spent with a predicted latency within the SLO
    and no banned neighbour. ``latency_miss_s`` / ``ban_miss_s``: pod-seconds missed for each
    reason (a second can miss for both). ``pods_always_met``: pods that never missed.
    ``mean_latency_ms``: their predicted latency; ``mean_slowdown``: the predicted slowdown of
    every pod on a fractional GPU share (latency-sensitive or not), both pod-time weighted.
    """

    pods: int
    pod_seconds: float
    met_seconds: float
    latency_miss_s: float
    ban_miss_s: float
    pods_always_met: int
    mean_latency_ms: float = 0.0  # predicted latency, pod-time weighted
    mean_slowdown: float = 1.0  # predicted slowdown of fractional-GPU pods, pod-time weighted

    @property
    def attainment(self) -> float:
        return self.met_seconds / self.pod_seconds if self.pod_seconds > 0 else 1.0


@dataclass(frozen=True, slots=True)
class TimedResult:
    name: str
    policy: str
    window_s: float
    seed: int
    end_s: float
    outcomes: tuple[GangOutcome, ...]
    wait_percentiles_s: dict[str, float]
    utilisation: tuple[tuple[float, float], ...]  # (time, allocated GPU fraction) steps
    mean_utilisation: float  # over the arrival period: from 0 to the last arrival
    tenants: tuple[TenantResult, ...]
    jain: float  # Jain's index over the tenants' fair ratios
    slo: SloResult
    energy_kwh: float
    solves: int
    solve_seconds: float
    fallbacks: int
    reserved_gangs: int = 0  # gangs that ever held a reservation
    reserved_late: int = 0  # of them, started later than their first reserved start
    reserved_late_s: float = 0.0  # the sum of those delays
    # of the late ones, those planned behind a running pod that ran past the end the plan
    # expected (an estimate that was wrong); the others were pushed back by the queue
    reserved_late_overrun: int = 0
    backfilled: int = 0  # gangs placed by the backfill solve (known to end before a reserved start)
    reclaimed: int = 0  # gangs evicted by reclaim (each went back to its queue)
    reclaim_lost_gpu_s: float = 0.0  # GPU-seconds those gangs had run, lost
    # (window end, gangs holding a reservation, gangs backfilled, gangs reclaimed) for each
    # window whose plan changed any of the three from the one before: what the plot shows
    planning: tuple[tuple[float, int, int, int], ...] = ()

    def count(self, state: str) -> int:
        return sum(1 for o in self.outcomes if o.state == state)

    @property
    def placed(self) -> int:
        return sum(1 for o in self.outcomes if o.start_s is not None)

    @property
    def waits_s(self) -> tuple[float, ...]:
        return tuple(o.wait_s for o in self.outcomes if o.wait_s is not None)

    def summary(self) -> dict[str, object]:
        """The headline figures as plain JSON-ready data."""
        return {
            "name": self.name,
            "policy": self.policy,
            "window": self.window_s,
            "seed": self.seed,
            "end_s": self.end_s,
            "gangs": len(self.outcomes),
            "placed": self.placed,
            "departed": self.count("departed"),
            "running_at_end": self.count("running"),
            "waiting_at_end": self.count("waiting"),
            "wait_s": self.wait_percentiles_s,
            "mean_utilisation": self.mean_utilisation,
            "jain": self.jain,
            "tenants": [
                {
                    "tenant": t.tenant,
                    "weight": t.weight,
                    "gangs": t.gangs,
                    "placed": t.placed,
                    "gpu_hours": t.gpu_seconds / 3600,
                    "share": t.share,
                    "entitled": t.entitled,
                    "fair_gpu_hours": t.fair_gpu_seconds / 3600,
                    "fair_ratio": t.fair_ratio,
                    "pooled_fair_gpu_hours": t.pooled_fair_gpu_seconds / 3600,
                    "pooled_fair_ratio": t.pooled_fair_ratio,
                    "wait_p50_s": t.wait_p50_s,
                    "wait_p90_s": t.wait_p90_s,
                }
                for t in self.tenants
            ],
            "slo_attainment": self.slo.attainment,
            "slo_pods": self.slo.pods,
            "slo_pods_always_met": self.slo.pods_always_met,
            "slo_latency_miss_s": self.slo.latency_miss_s,
            "slo_ban_miss_s": self.slo.ban_miss_s,
            "slo_mean_latency_ms": self.slo.mean_latency_ms,
            "mean_slowdown": self.slo.mean_slowdown,
            "energy_kwh": self.energy_kwh,
            "solves": self.solves,
            "solve_seconds": self.solve_seconds,
            "fallbacks": self.fallbacks,
            "reserved_gangs": self.reserved_gangs,
            "reserved_late": self.reserved_late,
            "reserved_late_s": self.reserved_late_s,
            "reserved_late_overrun": self.reserved_late_overrun,
            "backfilled": self.backfilled,
            "reclaimed": self.reclaimed,
            "reclaim_lost_gpu_hours": self.reclaim_lost_gpu_s / 3600,
        }


# --------------------------------------------------------------------------------------------
# Interference-oblivious packing
# --------------------------------------------------------------------------------------------


def oblivious_policy(policy: SolverPolicy) -> SolverPolicy:
    """``policy`` as a solver blind to interference sees it: every QoS class (shipped and
    declared) redefined as idle, never latency-sensitive, banning nothing, and the interference
    weight zero. Memory footprints stay, as they are capacity, not interference."""
    blind = tuple(
        QoSProfile(name=p.name, sm=0.0, membw=0.0, memory_mib=p.memory_mib)
        for p in resolve_profiles(policy.qos_classes).values()
    )
    w = policy.weights
    return replace(policy, qos_classes=blind, weights=replace(w, interference=0.0))


# --------------------------------------------------------------------------------------------
# Cluster state and the integrals over time
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Placed:
    timed: TimedGang
    start_s: float
    end_s: float
    pods: list[Running]


@dataclass(slots=True)
class _Cluster:
    """What runs where, and every time integral the result reports."""

    scenario: Scenario
    profiles: dict[str, QoSProfile]
    now: float = 0.0
    capacity_milli: int = 0
    used_milli: int = 0
    power_w: float = 0.0
    energy_j: float = 0.0
    series: list[tuple[float, float]] = field(default_factory=list)
    tenant_milli: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    tenant_milli_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    # what each tenant waits for, and the integral of its weighted max-min fair share
    waiting_milli: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    fair_milli_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    weights: dict[str, float] = field(default_factory=dict)
    # the same fair share within the GPU models each tenant's gangs may use (pooled_max_min):
    # held plus waiting per (tenant, models), the cluster's GPUs per model, and its integral
    class_milli: dict[tuple[str, frozenset[str]], int] = field(
        default_factory=lambda: defaultdict(int))
    pools: dict[str, float] = field(default_factory=dict)
    pooled_fair_milli_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    loaded_pooled_fair_milli_s: dict[str, float] | None = None
    _pooled_memo: dict[tuple[tuple[tuple[str, frozenset[str]], int], ...], dict[str, float]] = \
        field(default_factory=dict)
    # fairness is judged over the arrival period (0 .. last arrival): over the whole replay
    # every tenant eventually gets all it asked for, whatever the policy
    cutoff: float = 0.0
    loaded_milli_s: dict[str, float] | None = None
    loaded_fair_milli_s: dict[str, float] | None = None
    # per GPU: milli in use and the running pods on it
    gpu_used: dict[tuple[str, int], int] = field(default_factory=lambda: defaultdict(int))
    gpu_pods: dict[tuple[str, int], list[Running]] = field(
        default_factory=lambda: defaultdict(list)
    )
    watts: dict[tuple[str, int], tuple[float, float]] = field(default_factory=dict)
    running: dict[str, Running] = field(default_factory=dict)
    # latency-sensitive pods: pod -> (latency ok, ban ok); and who ever missed
    ls_state: dict[str, tuple[bool, bool]] = field(default_factory=dict)
    ls_seen: set[str] = field(default_factory=set)
    ls_missed: set[str] = field(default_factory=set)
    ls_seconds: float = 0.0
    ls_met: float = 0.0
    ls_latency_miss: float = 0.0
    ls_ban_miss: float = 0.0
    ls_latency: dict[str, float] = field(default_factory=dict)  # predicted ms per LS pod
    ls_latency_area: float = 0.0
    # predicted slowdown of every pod holding a GPU share, and its pod-time integral
    slow: dict[str, float] = field(default_factory=dict)
    slow_area: float = 0.0
    slow_seconds: float = 0.0

    def __post_init__(self) -> None:
        policy = self.scenario.policy
        for n in self.scenario.nodes:
            for g in n.gpus:
                idle = policy.idle_watts.get(g.model, DEFAULT_IDLE_WATTS)
                active = policy.active_watts.get(g.model, DEFAULT_ACTIVE_WATTS)
                self.watts[(n.name, g.index)] = (idle, active)
                self.power_w += idle
        self.capacity_milli = self.scenario.gpu_capacity_milli
        self.weights = {t.name: t.weight for t in self.scenario.tenants}
        self.pools = gpu_pools(self.scenario.nodes)
        self.series.append((0.0, 0.0))

    def advance(self, t: float) -> None:
        """Integrate everything from ``now`` to ``t`` at the current rates."""
        if self.loaded_milli_s is None and self.now < self.cutoff <= t:
            self._integrate(self.cutoff)
            self.freeze_fairness()
        self._integrate(t)

    def freeze_fairness(self) -> None:
        """Keep the tenants' integrals as they stand now, the end of the arrival period."""
        if self.loaded_milli_s is None:
            self.loaded_milli_s = dict(self.tenant_milli_s)
            self.loaded_fair_milli_s = dict(self.fair_milli_s)
            self.loaded_pooled_fair_milli_s = dict(self.pooled_fair_milli_s)

    def _pooled_fair(self) -> dict[str, float]:
        key = tuple(sorted(((k, v) for k, v in self.class_milli.items() if v > 0),
                           key=lambda kv: (kv[0][0], sorted(kv[0][1]))))
        fair = self._pooled_memo.get(key)
        if fair is None:
            fair = pooled_max_min(self.pools, {k: float(v) for k, v in key}, self.weights)
            if len(self._pooled_memo) > 4096:
                self._pooled_memo.clear()
            self._pooled_memo[key] = fair
        return fair

    def _integrate(self, t: float) -> None:
        dt = t - self.now
        if dt < 0:
            raise SimulationError(f"clock moved back from {self.now} to {t}")
        if dt == 0:
            return
        self.energy_j += self.power_w * dt
        for tenant, milli in self.tenant_milli.items():
            self.tenant_milli_s[tenant] += milli * dt
        demands = {
            name: self.tenant_milli.get(name, 0) + self.waiting_milli.get(name, 0)
            for name in self.weights
        }
        if any(demands.values()):
            fair = weighted_max_min(self.capacity_milli, demands, self.weights)
            for name, fair_milli in fair.items():
                self.fair_milli_s[name] += fair_milli * dt
            for name, fair_milli in self._pooled_fair().items():
                self.pooled_fair_milli_s[name] += fair_milli * dt
        n = len(self.ls_state)
        lat_ok = sum(1 for ok, _ in self.ls_state.values() if ok)
        ban_ok = sum(1 for _, ok in self.ls_state.values() if ok)
        met = sum(1 for a, b in self.ls_state.values() if a and b)
        self.ls_seconds += n * dt
        self.ls_met += met * dt
        self.ls_latency_miss += (n - lat_ok) * dt
        self.ls_ban_miss += (n - ban_ok) * dt
        self.ls_latency_area += sum(self.ls_latency.values()) * dt
        self.slow_area += sum(self.slow.values()) * dt
        self.slow_seconds += len(self.slow) * dt
        self.now = t

    def slo_result(self) -> SloResult:
        """The latency-sensitive pods' integrals as they stand."""
        return SloResult(
            pods=len(self.ls_seen),
            pod_seconds=self.ls_seconds,
            met_seconds=self.ls_met,
            latency_miss_s=self.ls_latency_miss,
            ban_miss_s=self.ls_ban_miss,
            pods_always_met=len(self.ls_seen - self.ls_missed),
            mean_latency_ms=(self.ls_latency_area / self.ls_seconds
                             if self.ls_seconds > 0 else 0.0),
            mean_slowdown=(self.slow_area / self.slow_seconds
                           if self.slow_seconds > 0 else 1.0),
        )

    def _profile(self, r: Running) -> QoSProfile:
        return profile_for(r.qos_class, self.profiles)

    def _judge(self, key: tuple[str, int]) -> None:
        """Re-judge every pod on GPU ``key`` against its neighbours: predicted slowdown for
        all, SLO and bans for the latency-sensitive ones."""
        pods = self.gpu_pods.get(key, [])
        for r in pods:
            me = self._profile(r)
            others = [self._profile(o) for o in pods if o is not r]
            if any(share.milli < MILLI for share in r.gpus):  # fractional pods only
                self.slow[r.name] = slowdown(me, others)
            if not me.latency_sensitive:
                continue
            self.ls_latency[r.name] = predicted_latency_ms(me, others) or 0.0
            lat_ok = within_slo(me, others)
            ban_ok = all(may_share(me, o) for o in others)
            self.ls_state[r.name] = (lat_ok, ban_ok)
            self.ls_seen.add(r.name)
            if not (lat_ok and ban_ok):
                self.ls_missed.add(r.name)

    def _set_gpu(self, key: tuple[str, int], delta: int) -> None:
        idle, active = self.watts[key]
        before = self.gpu_used[key]
        after = before + delta
        self.power_w += gpu_power_watts(idle, active, after) - gpu_power_watts(idle, active, before)
        self.gpu_used[key] = after

    def enqueue(self, timed: TimedGang) -> None:
        self.waiting_milli[timed.gang.tenant] += timed.gang.gpu_demand_milli
        self.class_milli[(timed.gang.tenant, gang_models(timed.gang))] += \
            timed.gang.gpu_demand_milli

    def start(self, placed: _Placed) -> None:
        tenant = placed.timed.gang.tenant
        self.waiting_milli[tenant] -= placed.timed.gang.gpu_demand_milli
        touched: set[tuple[str, int]] = set()
        for r in placed.pods:
            self.running[r.name] = r
            for s in r.gpus:
                key = (r.node, s.index)
                self._set_gpu(key, s.milli)
                self.gpu_pods[key].append(r)
                self.used_milli += s.milli
                self.tenant_milli[tenant] += s.milli
                touched.add(key)
        for key in touched:
            self._judge(key)
        self.series.append((self.now, self.used_milli / self.capacity_milli))

    def stop(self, placed: _Placed) -> None:
        tenant = placed.timed.gang.tenant
        touched: set[tuple[str, int]] = set()
        for r in placed.pods:
            del self.running[r.name]
            self.ls_state.pop(r.name, None)
            self.ls_latency.pop(r.name, None)
            self.slow.pop(r.name, None)
            for s in r.gpus:
                key = (r.node, s.index)
                self._set_gpu(key, -s.milli)
                self.gpu_pods[key].remove(r)
                self.used_milli -= s.milli
                self.tenant_milli[tenant] -= s.milli
                touched.add(key)
        # held or waiting, the gang is demand until it stops (a reclaimed one is enqueued again)
        self.class_milli[(tenant, gang_models(placed.timed.gang))] -= \
            placed.timed.gang.gpu_demand_milli
        for key in touched:
            self._judge(key)
        self.series.append((self.now, self.used_milli / self.capacity_milli))


# --------------------------------------------------------------------------------------------
# The replay
# --------------------------------------------------------------------------------------------


def _take_pending(
    queues: dict[str, deque[TimedGang]], limit: int
) -> list[TimedGang]:
    """Up to ``limit`` waiting gangs, oldest first within each tenant, tenants taken in turn
    (a round-robin over queues ordered by their oldest arrival)."""
    heads = sorted(
        (q[0].arrival_s, t) for t, q in queues.items() if q
    )
    iters = [iter(queues[t]) for _, t in heads]
    out: list[TimedGang] = []
    while iters and len(out) < limit:
        alive = []
        for it in iters:
            nxt = next(it, None)
            if nxt is None:
                continue
            out.append(nxt)
            alive.append(it)
            if len(out) >= limit:
                break
        iters = alive
    return out


def _running_pods(placement_pods: dict[str, tuple[str, tuple[GpuShare, ...]]], gang: Gang
                  ) -> list[Running]:
    out = []
    for pod in gang.pods:
        node, gpus = placement_pods[pod.name]
        out.append(
            Running(
                name=pod.name,
                node=node,
                cpu_milli=pod.cpu_milli,
                memory_mib=pod.memory_mib,
                gpus=gpus,
                tenant=gang.tenant,
                qos_class=pod.qos_class,
            )
        )
    return out


#: The owner kind of every replayed pod: a scenario names no owners, so a tenant's pods are
#: told apart by their GPU count alone (as plain pods are by the controller).
REPLAY_OWNER = "Pod"


def pod_kind(tenant: str, gpus: int) -> Kind:
    """The kind a replayed pod's run time is learned under (solver/history.py)."""
    return Kind(tenant=tenant, owner=REPLAY_OWNER, gpus=gpus)


def default_solve(config: TimedConfig) -> SolveFn:
    """:func:`solver.api.solve` with ``config``'s policy, time limit and seed."""
    from solver.api import solve

    name = SolverName.of(config.policy)
    if name is None:
        raise ProblemError("policy", f"must be one of {', '.join(SolverName)}, "
                           f"got {config.policy!r}")

    def run(snapshot: Snapshot) -> Plan:
        return solve(snapshot, solver=name, time_limit=config.time_limit_s, seed=config.seed)

    return run


def simulate_timed(
    scenario: Scenario,
    config: TimedConfig | None = None,
    *,
    solve: SolveFn | None = None,
    progress: Callable[[float], None] | None = None,
) -> TimedResult:
    """Replay ``scenario`` in simulated time under ``config``. ``solve`` replaces the call into
    :mod:`solver.api` (the same policy for every window); ``progress`` gets the share of
    arrivals seen so far after each window."""
    config = config or TimedConfig()
    solve = solve or default_solve(config)
    replay = _Replay.begin(scenario, config)
    until = config.until_s
    while (event := replay.next_event()) is not None:
        # 1. Wake up at the first window end at or after the next event.
        boundary = replay.wake_up(event)
        if until is not None and boundary > until:
            replay.play_until(until)  # the clock stops before that window ends
            break
        # 2. Play the departures and arrivals up to the window's end.
        replay.play_until(boundary)
        # 3. A window in which nothing waits decides nothing (the records still see what
        #    runs, as the controller's every batch cycle does).
        if not replay.waiting():
            replay.record(replay.snapshot([], now=boundary), now=boundary)
            replay.note_planning(boundary)
            continue
        # 4. Snapshot: what runs, and the oldest waiting gangs, tenants in turn; with what the
        #    controller remembers across windows (fair shares over time, the target workload).
        pending = _take_pending(replay.queues, config.max_pending)
        snapshot = replay.record(replay.snapshot(pending, now=boundary), now=boundary)
        # 5. Solve, timed.
        plan = replay.solve(solve, snapshot)
        # 6. Check: a plan the checker rejects stops the replay.
        replay.check_plan(snapshot, plan, now=boundary)
        # 7. Start the admitted gangs at the window's end; the gangs reclaim evicts go back
        #    to their queues.
        replay.evict(plan, now=boundary)
        replay.start(pending, plan, now=boundary)
        if progress is not None and scenario.arrivals:
            progress(replay.next_arrival / len(scenario.arrivals))
    # 8. Stop the clock (at ``until`` if that is later than the last event) and sum up.
    return replay.result(end=replay.stop_clock())


@dataclass(slots=True, kw_only=True)
class _Replay:
    """Everything one timed replay changes as its clock runs: the cluster (the clock, what runs
    where, every integral over time), the tenants' queues, the gangs placed and when they
    leave, and the solver's tally. Each step of :func:`simulate_timed` is one method."""

    scenario: Scenario
    config: TimedConfig
    shown: SolverPolicy  # what the solver sees: the scenario's policy, or blind to interference
    cluster: _Cluster
    queues: dict[str, deque[TimedGang]]  # waiting gangs per tenant, oldest first
    next_arrival: int = 0  # index in scenario.arrivals of the next gang to arrive
    last_boundary: float  # the window end the controller last woke at
    placed: dict[str, _Placed] = field(default_factory=dict)
    departures: list[tuple[float, str]] = field(default_factory=list)  # heap of (end, gang)
    departed: set[str] = field(default_factory=set)
    solves: int = 0
    solve_seconds: float = 0.0
    fallbacks: int = 0
    deadline_end: dict[str, float] = field(default_factory=dict)  # running pod -> deadline
    estimate_end: dict[str, float] = field(default_factory=dict)  # running pod -> estimated end
    # run times learned from departed gangs (policy learned_runtimes), and each running pod's
    # kind and start, to read its learned estimate by
    history: RunHistory = field(default_factory=RunHistory)
    learned_kind: dict[str, tuple[Kind, float]] = field(default_factory=dict)
    reserved_at: dict[str, float] = field(default_factory=dict)  # gang -> first reserved start
    reserved_late: int = 0
    reserved_late_s: float = 0.0
    # reserved gangs planned, in some window, behind a running pod that then ran past the end
    # the plan expected of it
    overrun_behind: set[str] = field(default_factory=set)
    reserved_late_overrun: int = 0
    backfilled: int = 0
    reclaimed: int = 0
    reclaim_lost_gpu_s: float = 0.0
    first_start: dict[str, float] = field(default_factory=dict)  # gang -> its first start
    planning: list[tuple[float, int, int, int]] = field(default_factory=list)
    # what the controller remembers across windows (solver/records.py), kept the same way
    records: Records = field(default_factory=Records)

    @classmethod
    def begin(cls, scenario: Scenario, config: TimedConfig) -> _Replay:
        truth = scenario.policy
        return cls(
            scenario=scenario,
            config=config,
            shown=truth if config.interference_aware else oblivious_policy(truth),
            cluster=_Cluster(scenario=scenario, profiles=resolve_profiles(truth.qos_classes),
                             cutoff=scenario.arrivals[-1].arrival_s if scenario.arrivals
                             else 0.0),
            queues={t.name: deque() for t in scenario.tenants},
            # so that an arrival at 0 is solved in the window ending at 0
            last_boundary=-config.window_s,
            history=RunHistory(truth.learned_runtimes),
        )

    def next_event(self) -> float | None:
        """When the next gang arrives or leaves, whichever comes first (None: neither)."""
        cands = []
        if self.next_arrival < len(self.scenario.arrivals):
            cands.append(self.scenario.arrivals[self.next_arrival].arrival_s)
        if self.departures:
            cands.append(self.departures[0][0])
        return min(cands) if cands else None

    def wake_up(self, event: float) -> float:
        """When the controller next runs a batch, given that ``event`` is the next arrival or
        departure: the first window end at or after it, past the last one woken at. With
        ``settle_s`` sooner, as admission/controller/batching.py has it: ``settle_s`` after
        an arrival while nothing waits, or a departure while gangs wait, that no other such
        event followed within ``settle_s``; while nothing waits and a creation burst goes on
        (:meth:`burst_at`), ``settle_s`` after the first arrival since the last batch."""
        w = self.config.window_s
        s = self.config.settle_s
        if s is None:
            self.last_boundary = max(-(-event // w) * w, self.last_boundary + w)
            return self.last_boundary
        last = self.last_boundary
        # the controller's next window ends: every ``w`` from the last batch (a float's
        # rounding is not let skip one)
        regular = last + max(1, math.ceil((event - last) / w - 1e-9)) * w
        # what the last batch left decides which events count; nothing has been played since
        triggers = self.events_between(last, regular, departures=self.waiting())
        if not triggers:
            self.last_boundary = regular
            return regular
        quiet_from = triggers[0]
        for t in triggers[1:]:
            if t - quiet_from >= s:
                break
            quiet_from = t
        quiet = quiet_from + s
        burst = None if self.waiting() else self.burst_at(triggers)
        if burst is not None:  # the controller sees it at that arrival, and runs then at once
            quiet = min(quiet, max(burst, triggers[0] + s))
        self.last_boundary = min(regular, max(quiet, last + s))
        return self.last_boundary

    def burst_at(self, times: list[float]) -> float | None:
        """The first of ``times`` (arrival times, in order) at which ``BURST_PODS`` pods had
        been created within the last ``BURST_WINDOW_S`` (the arrivals' pods, as the
        controller counts pod creations), or None."""
        arrivals = self.scenario.arrivals
        i = self.next_arrival
        while i > 0 and arrivals[i - 1].arrival_s >= times[0] - BURST_WINDOW_S:
            i -= 1  # what arrived before the first counts towards the burst too
        window: deque[tuple[float, int]] = deque()
        pods = 0
        for a in arrivals[i:]:
            if a.arrival_s > times[-1]:
                break
            window.append((a.arrival_s, len(a.gang.pods)))
            pods += len(a.gang.pods)
            while window[0][0] < a.arrival_s - BURST_WINDOW_S:
                pods -= window.popleft()[1]
            if pods >= BURST_PODS and a.arrival_s >= times[0]:
                return a.arrival_s
        return None

    def events_between(self, lo: float, hi: float, *, departures: bool) -> list[float]:
        """The departure (``departures``) or else arrival times after ``lo`` and at most
        ``hi``, in order."""
        if departures:
            return sorted(d for d, _ in self.departures if lo < d <= hi)
        out = []
        arrivals = self.scenario.arrivals
        i = self.next_arrival
        while i < len(arrivals) and arrivals[i].arrival_s <= hi:
            if arrivals[i].arrival_s > lo:
                out.append(arrivals[i].arrival_s)
            i += 1
        return out

    def play_until(self, horizon: float) -> None:
        """Departures and arrivals up to ``horizon``, in time order, each at its own time
        (departures first on a tie: capacity freed at t is there for arrivals at t); then the
        clock runs on to ``horizon``."""
        arrivals = self.scenario.arrivals
        while (event := self.next_event()) is not None and event <= horizon:
            self.cluster.advance(event)
            if self.departures and self.departures[0][0] == event:
                _, name = heapq.heappop(self.departures)
                ran = self.placed.get(name)
                if ran is None or ran.end_s != event or name in self.departed:
                    continue  # the end of a run that reclaim cut short
                self.cluster.stop(ran)
                self.departed.add(name)
                for pod in ran.timed.gang.pods:  # every pod of a gang runs its whole run
                    self.history.record(pod_kind(ran.timed.gang.tenant, pod.gpu_count),
                                        ran.end_s - ran.start_s)
                self.forget_ends(self.placed[name])
            else:
                a = arrivals[self.next_arrival]
                self.queues[a.gang.tenant].append(a)
                self.cluster.enqueue(a)
                self.next_arrival += 1
        self.cluster.advance(horizon)

    def waiting(self) -> bool:
        return any(self.queues.values())

    def snapshot(self, pending: list[TimedGang], *, now: float) -> Snapshot:
        """What runs, and ``pending`` with the time each has waited until ``now`` and whether
        an earlier window gave it a reservation it has not started on yet (what the
        controller remembers of its own plans)."""
        factor = self.config.deadline_factor
        gangs = tuple(
            replace(a.gang, wait_seconds=max(0.0, now - a.arrival_s),
                    runtime_s=None if factor is None else factor * a.duration_s,
                    reserved=(a.gang.name in self.reserved_at
                              and a.gang.name not in self.first_start))
            for a in pending
        )
        running = tuple(self.cluster.running.values())
        if self.scenario.policy.reclaim.enabled:  # what reclaim chooses victims by
            of_pod = {pod.name: p for p in self.placed.values() if p.timed.gang.name
                      not in self.departed for pod in p.pods}
            running = tuple(replace(r, gang=of_pod[r.name].timed.gang.name,
                                    priority=of_pod[r.name].timed.gang.priority,
                                    run_s=max(0.0, now - of_pod[r.name].start_s))
                            if r.name in of_pod else r for r in running)
        if factor is not None or self.estimate_end or self.learned_kind:
            running = tuple(replace(r, remaining_s=self.remaining(r.name, now))
                            for r in running)
        return Snapshot(
            nodes=self.scenario.nodes,
            gangs=gangs,
            running=running,
            tenants=self.scenario.tenants,
            policy=self.shown,
        )

    def estimate(self, timed: TimedGang) -> float | None:
        """The run time ``timed``'s user declares (``TimedConfig.estimate_factor``), the same
        for the gang every time it starts; None: no estimates."""
        factor = self.config.estimate_factor
        if factor is None:
            return None
        sigma = self.config.estimate_sigma
        z = 0.0
        if sigma:
            rng = np.random.default_rng([self.config.seed, zlib.crc32(timed.gang.name.encode())])
            z = float(rng.standard_normal())
        return factor * timed.duration_s * math.exp(sigma * z)

    def remaining(self, pod: str, now: float) -> float | None:
        """A running pod's expected end from ``now``, as the controller reads it: its
        deadline (0 once past: it is being ended), else its declared estimate, else the run
        time learned for its kind (each None once overrun: unknown, never 0, which would read
        as leaving), else unknown."""
        deadline = self.deadline_end.get(pod)
        if deadline is not None:
            return max(0.0, deadline - now)
        estimate = self.estimate_end.get(pod)
        if estimate is not None:
            return estimate - now if estimate > now else None
        learned = self.learned_kind.get(pod)
        if learned is not None:
            runs = self.history.estimate(learned[0])
            if runs is not None and learned[1] + runs > now:
                return learned[1] + runs - now
        return None

    def overruns_on(self, nodes: tuple[str, ...], now: float) -> bool:
        """Whether a pod running on ``nodes`` with an expected end (what a reservation there
        is planned by) will run past it: the replay knows each run's true end."""
        on = frozenset(nodes)
        for name, p in self.placed.items():
            if name in self.departed:
                continue
            for pod in p.pods:
                if pod.node not in on:
                    continue
                left = self.remaining(pod.name, now)
                if left is not None and p.end_s > now + left + self.config.window_s:
                    return True
        return False

    def forget_ends(self, placed: _Placed) -> None:
        for pod in placed.pods:
            self.deadline_end.pop(pod.name, None)
            self.estimate_end.pop(pod.name, None)
            self.learned_kind.pop(pod.name, None)

    def record(self, snapshot: Snapshot, *, now: float) -> Snapshot:
        """The controller's records (:class:`solver.records.Records`) applied to ``snapshot``,
        as its batch cycle applies them."""
        return self.records.apply(snapshot, now)

    def solve(self, solve: SolveFn, snapshot: Snapshot) -> Plan:
        t0 = time.perf_counter()
        plan = solve(snapshot)
        self.solve_seconds += time.perf_counter() - t0
        self.solves += 1
        self.fallbacks += int(plan.stats.fallback)
        self.backfilled += int(plan.stats.detail.get("backfilled", 0))
        return plan

    def check_plan(self, snapshot: Snapshot, plan: Plan, *, now: float) -> None:
        """Raise :class:`SimulationError` if the checker rejects ``plan``."""
        violations = check(snapshot, plan)
        if violations:
            lines = "; ".join(str(v) for v in violations[:5])
            raise SimulationError(
                f"{self.config.name} at t={now:g}s: the checker rejects the plan "
                f"({len(violations)} violation(s)): {lines}"
            )

    def evict(self, plan: Plan, *, now: float) -> None:
        """The gangs ``plan`` reclaims stop at ``now`` (their pods gone at once, as with a
        grace period of 0) and go back to their queues in arrival order, their run so far
        lost; the gangs they made room for start in the same window."""
        for e in plan.evictions:
            p = self.placed.pop(e.gang)
            self.cluster.stop(p)
            self.forget_ends(p)
            self.reclaimed += 1
            self.reclaim_lost_gpu_s += (now - p.start_s) * p.timed.gang.gpu_demand_milli / MILLI
            queue = self.queues[p.timed.gang.tenant]
            queue.append(p.timed)
            ordered = sorted(queue, key=lambda a: a.arrival_s)
            queue.clear()
            queue.extend(ordered)
            self.cluster.enqueue(p.timed)

    def start(self, pending: list[TimedGang], plan: Plan, *, now: float) -> None:
        """The gangs ``plan`` admits leave their queues and start running at ``now``."""
        by_name = {a.gang.name: a for a in pending}
        for r in plan.reservations:
            self.reserved_at.setdefault(r.gang, now + r.start_in_s)
            if r.gang not in self.overrun_behind and self.overruns_on(r.nodes, now):
                self.overrun_behind.add(r.gang)
        self.note_planning(now, len(plan.reservations),
                           int(plan.stats.detail.get("backfilled", 0)), len(plan.evictions))
        factor = self.config.deadline_factor
        for gp in plan.admitted:
            timed = by_name[gp.gang]
            pods = {pp.pod: (pp.node, pp.gpus) for pp in gp.pods}
            p = _Placed(timed, now, now + timed.duration_s, _running_pods(pods, timed.gang))
            if factor is not None:
                for pod in p.pods:
                    self.deadline_end[pod.name] = now + factor * timed.duration_s
            estimate = self.estimate(timed)
            if estimate is not None:
                for pod in p.pods:
                    self.estimate_end[pod.name] = now + estimate
            if self.history.settings.enabled:
                for req in timed.gang.pods:
                    self.learned_kind[req.name] = (
                        pod_kind(timed.gang.tenant, req.gpu_count), now)
            reserved = self.reserved_at.get(gp.gang)
            if reserved is not None and now > reserved + self.config.window_s:
                self.reserved_late += 1  # a window's rounding is not late
                self.reserved_late_s += now - reserved
                self.reserved_late_overrun += int(gp.gang in self.overrun_behind)
            self.placed[gp.gang] = p
            self.first_start.setdefault(gp.gang, now)
            self.cluster.start(p)
            heapq.heappush(self.departures, (p.end_s, gp.gang))
            self.queues[timed.gang.tenant].remove(timed)

    def note_planning(self, now: float, reserved: int = 0, backfilled: int = 0,
                      reclaimed: int = 0) -> None:
        """What the window ending at ``now`` planned (nothing, when no gang waited), kept
        when it differs from the window before."""
        step = (reserved, backfilled, reclaimed)
        if step != (self.planning[-1][1:] if self.planning else (0, 0, 0)):
            self.planning.append((now, *step))

    def stop_clock(self) -> float:
        """Run the clock on to ``until_s`` if that is later, and return where it stopped."""
        until = self.config.until_s
        end = self.cluster.now if until is None else max(self.cluster.now, until)
        self.cluster.advance(end)
        return end

    def result(self, *, end: float) -> TimedResult:
        """The replay summed up, once the clock has stopped at ``end``."""
        scenario, config, cluster = self.scenario, self.config, self.cluster
        outcomes = self._outcomes()
        waits = [o.wait_s for o in outcomes if o.wait_s is not None]
        tenants = self._tenant_results(outcomes)
        return TimedResult(
            name=config.name,
            policy=config.policy,
            window_s=config.window_s,
            seed=config.seed,
            end_s=end,
            outcomes=tuple(outcomes),
            wait_percentiles_s=percentiles(waits),
            utilisation=tuple(cluster.series),
            mean_utilisation=_loaded_mean(cluster.series, scenario, end),
            tenants=tuple(tenants),
            jain=jain_index([t.fair_ratio for t in tenants]) if tenants else 1.0,
            slo=cluster.slo_result(),
            energy_kwh=cluster.energy_j / 3.6e6,
            solves=self.solves,
            solve_seconds=self.solve_seconds,
            fallbacks=self.fallbacks,
            reserved_gangs=len(self.reserved_at),
            reserved_late=self.reserved_late,
            reserved_late_s=self.reserved_late_s,
            reserved_late_overrun=self.reserved_late_overrun,
            backfilled=self.backfilled,
            reclaimed=self.reclaimed,
            reclaim_lost_gpu_s=self.reclaim_lost_gpu_s,
            planning=tuple(self.planning),
        )

    def _outcomes(self) -> list[GangOutcome]:
        """One per gang that entered the replay, in arrival order."""
        waiting = {a.gang.name for q in self.queues.values() for a in q}
        outcomes = []
        for a in self.scenario.arrivals:
            name = a.gang.name
            p = self.placed.get(name)
            if p is not None:
                state = "departed" if name in self.departed else "running"
                outcomes.append(GangOutcome(name, a.gang.tenant, a.arrival_s, p.start_s,
                                            p.end_s, state, self.first_start.get(name)))
            elif name in waiting:
                outcomes.append(GangOutcome(name, a.gang.tenant, a.arrival_s, None, None,
                                            "waiting", self.first_start.get(name)))
            # gangs arriving after `until` never entered the replay and are not reported
        return outcomes

    def _tenant_results(self, outcomes: list[GangOutcome]) -> list[TenantResult]:
        """Each tenant's GPU time and fair share over the arrival period, and its waits."""
        cluster = self.cluster
        weights = {t.name: t.weight for t in self.scenario.tenants}
        if cluster.cutoff <= 0:  # everything arrived at once: judge the whole replay
            cluster.loaded_milli_s = dict(cluster.tenant_milli_s)
            cluster.loaded_fair_milli_s = dict(cluster.fair_milli_s)
            cluster.loaded_pooled_fair_milli_s = dict(cluster.pooled_fair_milli_s)
        cluster.freeze_fairness()  # the clock stopped (--until) before the last arrival
        loaded = cluster.loaded_milli_s or {}
        loaded_fair = cluster.loaded_fair_milli_s or {}
        loaded_pooled = cluster.loaded_pooled_fair_milli_s or {}
        gpu_seconds = {t: milli_s / MILLI for t, milli_s in loaded.items()}
        shares: list[TenantShare] = tenant_shares(gpu_seconds, weights)
        tenants = []
        for s in shares:
            mine = [o for o in outcomes if o.tenant == s.tenant]
            w = [o.wait_s for o in mine if o.wait_s is not None]
            pct = percentiles(w, (50, 90))
            tenants.append(
                TenantResult(
                    tenant=s.tenant,
                    weight=weights[s.tenant],
                    gangs=len(mine),
                    placed=len(w),
                    gpu_seconds=s.gpu_seconds,
                    share=s.share,
                    entitled=s.entitled,
                    fair_gpu_seconds=loaded_fair.get(s.tenant, 0.0) / MILLI,
                    wait_p50_s=pct["p50"],
                    wait_p90_s=pct["p90"],
                    pooled_fair_gpu_seconds=loaded_pooled.get(s.tenant, 0.0) / MILLI,
                )
            )
        return tenants


def _loaded_mean(series: list[tuple[float, float]], scenario: Scenario, end: float) -> float:
    """Mean allocated fraction from 0 to the last arrival (the whole replay if that is 0):
    the drain after the last arrival says nothing about a policy."""
    last = scenario.arrivals[-1].arrival_s if scenario.arrivals else 0.0
    horizon = min(last, end) if last > 0 else end
    return time_weighted_mean([p for p in series if p[0] <= horizon], horizon)
