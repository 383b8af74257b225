"""One batch cycle: a short, numbered, timed recipe (like Kueue's ``schedule()``).

    0. snapshot   copy the inventory and build the snapshot of complete pending gangs
    1. finish     complete releases already under way (a crash, a failed write)
    2. timeouts   report gangs whose pods never all arrived
    3. solve      in a worker process, with a time limit
    4. check      the one feasibility checker judges the plan; a refused plan releases nothing
                  and evicts nothing
    4b. reclaim   evict the gangs the plan reclaims, whole, through the Eviction API (batch
                  cycle only; :mod:`.reclaim`)
    5. release    write placements, then open the gates, per gang (gangs side by side)
    6. requeue    tell every pod left waiting why (and every released pod its scheduler has not
                  bound), and publish the queue per tenant

What the requeue phase writes is what a burst of pod creations competes with at the API server,
so it writes only what a user needs: a gang is told it waits from the second batch cycle that
passes it over (``Settings.explain_grace_batches``; a gang released by the cycle after its
arrival never waited in any sense a user sees, and its plan is in its annotations), a warning
(a broken or timed-out gang) and a change to what a gang was already told at once, and
``Released`` only to pods that were told they wait, to turn that condition False. A gang that
waits only because it is queued behind the current batch (a backlog larger than one solve
places within its time limit: :data:`solver.cpsat.solve.QUEUED_REASON`) is not told either:
it moves up every cycle, and telling thousands of them would spend the writes the burst needs.

The fast path runs the same recipe, restricted to gangs of latency-critical classes, on arrival
instead of at the window's end, against the capacity the last plans left.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime

from admission.controller import keys, trust
from admission.controller import translate as tr
from admission.controller.explain import Explainer, Why, reasons
from admission.controller.inventory import Inventory
from admission.controller.metrics import Metrics
from admission.controller.queued import QueueCheck
from admission.controller.reclaim import EvictionResult, Evictor
from admission.controller.release import Releaser, ReleaseResult
from admission.controller.runtimes import Learner
from admission.controller.settings import Settings
from admission.controller.snapshot import Built, GangInfo, GangState, Memo, build
from admission.controller.unbound import not_bound
from solver.checker import check
from solver.cpsat.solve import QUEUED_REASON
from solver.plan import Deferred, Plan
from solver.records import Records
from solver.types import MILLI, Snapshot

log = logging.getLogger(__name__)
#: How :func:`.explain.reasons` words a gang only queued behind the current batch.
QUEUED_MESSAGE = f"waiting: {QUEUED_REASON}"

Solve = Callable[[Snapshot], Plan]


@dataclass(slots=True)
class CycleReport:
    number: int
    path: str  # batch | fast
    phases: dict[str, float] = field(default_factory=dict)
    gangs: dict[str, int] = field(default_factory=dict)  # by state
    admitted: int = 0
    released: list[ReleaseResult] = field(default_factory=list)
    finished: list[ReleaseResult] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    why: dict[str, Why] = field(default_factory=dict)
    solver_status: str = ""
    violations: list[str] = field(default_factory=list)
    evictions: list[EvictionResult] = field(default_factory=list)

    @property
    def left_waiting(self) -> bool:
        """Whether complete gangs still wait after this cycle (pending, not admitted)."""
        return self.gangs.get(GangState.PENDING.value, 0) > self.admitted

    def summary(self) -> str:
        phases = " ".join(f"{k}={v * 1000:.0f}ms" for k, v in self.phases.items())
        ok = sum(r.complete for r in self.released)
        return (f"cycle {self.number} ({self.path}): gangs {self.gangs} admitted={self.admitted} "
                f"released={ok} finished={len(self.finished)} solver={self.solver_status} "
                f"{phases}")


class Cycle:
    def __init__(self, *, inventory: Inventory, settings: Settings, releaser: Releaser,
                 explainer: Explainer, solve: Solve, fast_solve: Solve | None = None,
                 evictor: Evictor | None = None,
                 clock: Callable[[], datetime], metrics: Metrics,
                 still_leader: Callable[[], bool] = lambda: True,
                 queue_check: QueueCheck | None = None) -> None:
        self.inventory = inventory
        self.settings = settings
        self.releaser = releaser
        self.explainer = explainer
        self.evictor = evictor
        # reads Kueue's Workloads for gangs that wait for Kueue long (queued.py)
        self.queue_check = queue_check
        self.solve = solve
        self.fast_solve = fast_solve or solve
        self.clock = clock
        self.metrics = metrics
        # Asked before every gang's writes: a replica that lost the Lease mid-cycle (a long
        # solve, a partition) stops writing before the new leader could plan the same GPUs.
        self.still_leader = still_leader
        self.number = 0
        self._timed_out: set[str] = set()  # gangs already reported, so one event each
        self._memo = Memo()  # translations of unchanged pods and nodes, across cycles
        # The batch cycle that first saw each waiting gang; a gang is told it waits from the
        # next batch cycle on (see the module's docstring).
        self._first_seen: dict[str, int] = {}
        # Each reserved gang's first planned start (epoch seconds), until it is released: how
        # late reservations start (berth_reservation_slip_seconds). Kept by this replica only.
        self._planned_start: dict[str, float] = {}
        self._batches = 0
        # What the leader remembers across windows (solver/records.py): each tenant's held
        # GPUs and fair share over time, and the learned target workload. The controller saves
        # it and a new leader reads it back (records.py).
        self.records = Records()
        # Run times learned from the pods Berth released that finished (runtimes.Learner, fed
        # by the controller's pod watch): an estimate for the running pods that have no other.
        self.learner = Learner(settings.solver_policy.learned_runtimes)

    @contextmanager
    def _phase(self, report: CycleReport, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            took = time.perf_counter() - start
            report.phases[name] = took
            self.metrics.phase_seconds.labels(f"{report.path}:{name}").observe(took)

    # ------------------------------------------------------------------ the recipe
    def run(self, *, fast: bool = False) -> CycleReport:
        self.number += 1
        if not fast:
            self._batches += 1
        report = CycleReport(self.number, "fast" if fast else "batch")
        now = self.clock()

        # 0. Snapshot: a consistent copy, then the pending gangs (fast path: its classes only).
        with self._phase(report, "snapshot"):
            built = build(self.inventory.view(), self.settings, now, self._memo,
                          only=self._fast_gang if fast else None, learner=self.learner)
            # a batch cycle's snapshot holds every pending gang: only it is recorded
            seen = self.records.apply(built.snapshot, now.timestamp(), observe=not fast)
            seen = self._with_reserved(seen)
            if seen is not built.snapshot:
                built = replace(built, snapshot=seen)
            report.gangs = _count_states(built)

        # 1. Finish releases that were under way.
        with self._phase(report, "finish"):
            finishing = built.by_state(GangState.FINISHING)
            report.finished = self.releaser.finish_all(finishing, self.still_leader)
            for result in report.finished:
                self._account(result, built.gangs[result.gang], report.path)

        # 2. Gangs whose pods never all arrived.
        if not fast:
            with self._phase(report, "timeouts"):
                report.timed_out = self._timeouts(built, now)

        # 3. Solve, off this thread's interpreter (a worker process), with a time limit.
        with self._phase(report, "solve"):
            plan = (self.fast_solve if fast else self.solve)(built.snapshot)
            report.solver_status = plan.stats.status
            self._solver_metrics(plan)

        # 4. Check: never release a plan the checker refuses.
        with self._phase(report, "check"):
            violations = check(built.snapshot, plan) if plan.admitted or plan.evictions else []
            report.violations = [str(v) for v in violations]
            rejected = None
            if violations:
                self.metrics.plans_rejected.inc()
                log.error("cycle %d: plan refused by the checker: %s", self.number,
                          "; ".join(report.violations[:5]))
                rejected = "the plan failed the feasibility check; retrying next window"
                plan = replace(plan, admitted=(), evictions=())
            report.admitted = len(plan.admitted)

        # 4b. Reclaim: the gangs the plan takes back, evicted whole (never on the fast path).
        if plan.evictions:
            with self._phase(report, "reclaim"):
                if fast or self.evictor is None:  # no evictions: nor the gangs they were for
                    plan = replace(_without_unfreed(plan, []), evictions=())
                else:
                    report.evictions = self.evictor.evict_all(plan.evictions, self.still_leader)
                    plan = _without_unfreed(plan, report.evictions)

        # 5. Release: placements first, gates only once every pod of a gang carries its plan.
        with self._phase(report, "release"):
            plan_id = f"{now.strftime('%Y%m%dT%H%M%S')}-{report.path}-{self.number}"
            jobs = [(built.expect(built.gangs[gp.gang], self.settings, now), gp)
                    for gp in plan.admitted]
            report.released = self.releaser.release_all(jobs, plan_id, self.still_leader)
            if len(report.released) < len(jobs):
                log.warning("cycle %d: lost the lease; %d admitted gangs left unreleased",
                            self.number, len(jobs) - len(report.released))
            for result in report.released:
                self._account(result, built.gangs[result.gang], report.path)
            self._reservation_slips(built, plan, report, now)

        # 6. Requeue: every pod left waiting says why; the queue per tenant is published.
        with self._phase(report, "requeue"):
            report.why = reasons(built, plan, self.settings.gang_timeout_seconds, now, rejected)
            if self.queue_check is not None and not fast:
                self.metrics.never_admitted.set(self.queue_check.amend(
                    built, report.why, self.settings.backend, now))
            self._explain(built, report)
            if not fast:
                self._queue_metrics(built, plan)

        self.metrics.cycles.inc()
        log.info("%s", report.summary())
        return report

    # ------------------------------------------------------------------ phase helpers
    def _fast_gang(self, info: GangInfo) -> bool:
        classes = self.settings.fast_path_classes
        return info.state in (GangState.PENDING, GangState.FINISHING) and bool(info.gated) and all(
            trust.qos_of(p, self.settings, info.tenant) in classes for p in info.gated)

    def _timeouts(self, built: Built, now: datetime) -> list[str]:
        out = []
        limit = self.settings.gang_timeout_seconds
        for info in built.by_state(GangState.INCOMPLETE):
            age = (now - info.first_created).total_seconds() if info.first_created else 0.0
            if age > limit and info.key not in self._timed_out:
                self._timed_out.add(info.key)
                self.metrics.gang_timeouts.labels(info.tenant).inc()
                log.warning("gang %s: %d of %d pods after %.0fs", info.key, len(info.pods),
                            info.size, age)
                out.append(info.key)
        live = set(built.gangs)
        self._timed_out &= live
        return out

    def _account(self, result: ReleaseResult, info: GangInfo, path: str) -> None:
        if result.error:
            step = "placement" if result.opened == 0 and not result.released_pods else "gate"
            self.metrics.release_failures.labels(step).inc()
            log.warning("release of %s: %s", info.key, result.error)
        if result.complete:
            self.metrics.releases.labels(info.tenant, path).inc()
        now = result.done_at or self.clock()
        for pod in result.released_pods:
            created = tr.created_at(pod)
            if created is not None:
                self.metrics.release_latency.labels(
                    info.tenant, trust.qos_of(pod, self.settings, info.tenant) or "", path
                ).observe(max(0.0, (now - created).total_seconds()))

    def _to_tell(self, built: Built, report: CycleReport) -> dict[str, Why]:
        """The waiting gangs to tell why: warnings at once, the rest from the second batch
        cycle that sees them waiting."""
        if report.path == "batch":
            live = set(report.why)
            self._first_seen = {k: n for k, n in self._first_seen.items() if k in live}
            for key in live:
                self._first_seen.setdefault(key, self._batches)
        grace = self.settings.explain_grace_batches
        # A gang already told keeps what it says true at once (after a restart too); one only
        # queued behind this batch is not told while a grace applies (the module docstring).
        return {key: why for key, why in report.why.items()
                if why.warning or any(_told_to_wait(p) for p in built.gangs[key].gated)
                or (self._batches - self._first_seen.get(key, self._batches) >= grace
                    and not (grace and why.message.startswith(QUEUED_MESSAGE)))}

    def _explain(self, built: Built, report: CycleReport) -> None:
        todo: list[tuple[tr.Obj, Why]] = []
        released_pods = [p for r in report.released + report.finished for p in r.released_pods]
        for pod in released_pods:
            # Only a pod told it waits needs telling otherwise: for the others the plan in
            # their annotations (berth explain) and their scheduler's events say it.
            if (_told_to_wait(self.inventory.pod(tr.pod_key(pod)) or pod)
                    or not self.settings.explain_grace_batches):
                todo.append((pod, Why("Released", "released by Berth to its placement",
                                      waiting=False)))
        # Released earlier, and still not bound by its scheduler: a refusal Berth reports.
        if report.path != "fast":
            # Only pods Berth really released (a managed namespace, its plan believed): a pod
            # that wrote Berth's annotations on itself is not Berth's to talk to.
            ours = [p for p in self.inventory.view().pods.values()
                    if trust.planned_shares(p, self.settings, built.dra) is not None]
            todo.extend(not_bound(ours, self.clock(), self.settings.bind_grace_seconds))
        # Waiting pods, the head of each queue first, so the budget goes where users look.
        tell = self._to_tell(built, report)
        for key, why in sorted(tell.items(), key=lambda kv: kv[1].message):
            for pod in built.gangs[key].gated:
                current = self.inventory.pod(tr.pod_key(pod)) or pod
                if tr.has_berth_gate(current):
                    todo.append((current, why))
        self.explainer.tell(todo, self.settings.explain_budget)

    def _solver_metrics(self, plan: Plan) -> None:
        s = plan.stats
        self.metrics.solver_status.labels(s.solver, s.status).inc()
        self.metrics.solver_seconds.set(s.wall_seconds)
        self.metrics.reservations.set(len(plan.reservations))
        self.metrics.backfilled.inc(int(s.detail.get("backfilled", 0)))
        if s.objective is not None and s.bound is not None:
            denom = max(abs(s.objective), abs(s.bound), 1e-9)
            self.metrics.solver_gap.set(abs(s.bound - s.objective) / denom)

    def _with_reserved(self, snapshot: Snapshot) -> Snapshot:
        """With ``solver.reservations.keep``, the gangs an earlier plan of this replica reserved
        and that have not started marked so (:attr:`solver.types.Gang.reserved`): they keep
        their place ahead of the queue. Only Berth's own plans set it, never a pod; a new
        leader starts with none and re-plans (docs/reservations.md)."""
        if not snapshot.policy.reservations.keep or not self._planned_start:
            return snapshot
        if not any(g.name in self._planned_start for g in snapshot.gangs):
            return snapshot
        return replace(snapshot, gangs=tuple(
            replace(g, reserved=True) if g.name in self._planned_start else g
            for g in snapshot.gangs))

    def _reservation_slips(self, built: Built, plan: Plan, report: CycleReport,
                           now: datetime) -> None:
        """Remember each reservation's first planned start; when its gang is released, how
        much later than that it was (a window's rounding is not late)."""
        t = now.timestamp()
        for r in plan.reservations:
            self._planned_start.setdefault(r.gang, t + r.start_in_s)
        for result in [*report.finished, *report.released]:
            planned = self._planned_start.pop(result.gang, None)
            if planned is None:
                continue
            slip = max(0.0, t - planned)
            self.metrics.reservation_slip.observe(slip)
            if slip > self.settings.window_seconds:
                self.metrics.reservations_late.inc()
        if report.path == "batch":  # a fast cycle's snapshot holds only its own classes
            for gang in [g for g in self._planned_start if g not in built.gangs]:
                del self._planned_start[gang]  # deleted, or timed out, before it started

    def _queue_metrics(self, built: Built, plan: Plan) -> None:
        admitted = plan.admitted_names
        gangs: dict[tuple[str, str], int] = defaultdict(int)
        milli: dict[str, int] = defaultdict(int)
        oldest: dict[str, float] = defaultdict(float)
        for info in built.gangs.values():
            if info.key in admitted:
                continue
            gangs[(info.tenant, info.state)] += 1
            if info.gang is not None:
                milli[info.tenant] += info.gang.gpu_demand_milli
                oldest[info.tenant] = max(oldest[info.tenant], info.gang.wait_seconds)
        self.metrics.pending_gangs.clear()
        self.metrics.pending_gpus.clear()
        self.metrics.oldest_wait.clear()
        for tenant, wait in oldest.items():
            self.metrics.oldest_wait.labels(tenant).set(wait)
        if oldest:
            log.info("requeued: %s", ", ".join(
                f"{t} {sum(n for (tt, _), n in gangs.items() if tt == t)} gangs "
                f"(longest wait {w:.0f}s)" for t, w in sorted(oldest.items())))
        for (tenant, state), n in gangs.items():
            self.metrics.pending_gangs.labels(tenant, state).set(n)
        for tenant, m in milli.items():
            self.metrics.pending_gpus.labels(tenant).set(m / MILLI)


def _without_unfreed(plan: Plan, results: list[EvictionResult]) -> Plan:
    """``plan`` less the gangs reclaim made room for whose evictions were not all carried out
    (a PodDisruptionBudget, a lost lease): they would be released onto GPUs still held."""
    done = {r.gang for r in results if r.complete}
    unfreed = {e.for_gang for e in plan.evictions if e.gang not in done}
    if not unfreed:
        return plan
    refused = {e.for_gang: r.refused for e in plan.evictions for r in results
               if r.gang == e.gang and r.refused}
    deferred = [*plan.deferred, *(
        Deferred(g, f"reclaim: an eviction to make room for it was not carried out "
                    f"({refused.get(g) or 'not attempted'}); planned again next window")
        for g in sorted(unfreed))]
    return replace(plan, admitted=tuple(gp for gp in plan.admitted if gp.gang not in unfreed),
                   deferred=tuple(deferred))


def _told_to_wait(pod: tr.Obj) -> bool:
    """Whether the pod carries Berth's Waiting condition, status True."""
    return (tr.pod_condition(pod, keys.CONDITION_WAITING) or {}).get("status") == "True"


def _count_states(built: Built) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for g in built.gangs.values():
        out[g.state.value] += 1  # plain names: the report's summary prints this dict
    return dict(out)
