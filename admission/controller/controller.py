"""The running controller: watches, leader election and the cycle loop, wired together.

Threads, not an event loop: the ``kubernetes`` client blocks, so each watch runs in a daemon
thread feeding the thread-safe :class:`Inventory`; the lease loop has its own thread; one loop
thread runs cycles (batch at each window, or sooner once arrivals settle: :mod:`.batching`; the
fast path as soon as a fast-path pod arrives), so cycles never overlap and never run on the
webhook's event loop. The solver itself runs in a worker process (:mod:`.solving`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import partial

from admission.backends import backend_named
from admission.controller import translate as tr
from admission.controller import trust
from admission.controller.api import DRA_KINDS, ClusterApi, Json
from admission.controller.batching import BatchTiming, settles_batch
from admission.controller.cycle import Cycle, CycleReport, Solve
from admission.controller.explain import Explainer
from admission.controller.inventory import Inventory
from admission.controller.leader import LeaseElector
from admission.controller.metrics import Metrics
from admission.controller.pacing import PacedApi, WritePace
from admission.controller.queued import QueueCheck
from admission.controller.reclaim import Evictor
from admission.controller.records import RecordStore
from admission.controller.release import Releaser
from admission.controller.settings import Settings
from admission.controller.solving import WorkerSolver
from admission.controller.watch import WatchLoop
from solver.names import SolverName

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


def greedy_solver(name: SolverName = SolverName.BESTFIT) -> Solve:
    """The fast path's solver: a greedy placement in-process (milliseconds, no CP-SAT)."""
    from solver.api import solve

    return lambda snapshot: solve(snapshot, solver=name)


class Controller:
    def __init__(self, *, api: ClusterApi, settings: Settings, identity: str,
                 namespace: str = "berth-system", lease_name: str = "berth-controller",
                 clock: Callable[[], datetime] = utcnow, solve: Solve | None = None,
                 fast_solve: Solve | None = None, metrics: Metrics | None = None,
                 settings_source: Callable[[], Settings] | None = None) -> None:
        self.api = api
        self.settings_source = settings_source  # polled before each cycle (policy reloads)
        self.settings = settings
        self.clock = clock
        self.metrics = metrics or Metrics()
        self.inventory = Inventory()
        self.backend = backend_named(settings.backend)
        self._worker: WorkerSolver | None = None
        if solve is None:
            self._worker = WorkerSolver(solver=settings.solver,
                                        time_limit=settings.time_limit_seconds, seed=settings.seed)
            solve = self._worker
        # Every pod write and Event goes through one adaptive limit (pacing.py); the Lease's
        # renewals time the API server for it.
        self.pace = WritePace(
            settings.release_writers, adaptive=settings.write_pacing,
            floor=settings.write_pacing_floor, on_cut=self.metrics.write_limit_cuts.inc,
            scheduler_short=lambda: (self.inventory.released_unbound()
                                     < self.settings.scheduler_feed),
            feed_rate=settings.scheduler_feed_rate)
        self.metrics.write_limit.set_function(lambda: self.pace.limit)
        self.metrics.released_unbound.set_function(self.inventory.released_unbound)
        for kind in ("nodes", "pods", "jobs"):
            self.metrics.inventory.labels(kind).set_function(partial(self._count, kind))
        writes = PacedApi(api, self.pace)
        self.releaser = Releaser(api=writes, backend=self.backend, record=self._record,
                                 clock=clock, queues=settings.queues,
                                 writers=settings.release_writers,
                                 forget=self.inventory.forget_pod)
        self.explainer = Explainer(api=writes, clock=clock, record=self._record, identity=identity,
                                   writers=settings.release_writers,
                                   forget=self.inventory.forget_pod)
        self.leader_required = False  # set by start(): only a running replica needs the Lease
        self.evictor = Evictor(api=writes, clock=clock, metrics=self.metrics, identity=identity,
                               pod=self.inventory.pod)
        self.cycle = Cycle(inventory=self.inventory, settings=settings, releaser=self.releaser,
                           explainer=self.explainer, evictor=self.evictor, solve=solve,
                           fast_solve=fast_solve or greedy_solver(), clock=clock,
                           metrics=self.metrics, still_leader=self._may_write,
                           queue_check=QueueCheck(api, lambda: self.clock().timestamp()))
        self.records = RecordStore(api=api, namespace=namespace, metrics=self.metrics,
                                   save_seconds=settings.records_save_seconds)
        self.elector = LeaseElector(api=writes, namespace=namespace, name=lease_name,
                                    identity=identity, clock=clock,
                                    on_change=lambda lead: self.metrics.leader.set(int(lead)))
        self.pod_watch = WatchLoop(kind="pods", lister=api.list_pods, watcher=api.watch_pods,
                                   replace=self.on_pod_list, apply=self.on_pod_event)
        self.node_watch = WatchLoop(kind="nodes", lister=api.list_nodes, watcher=api.watch_nodes,
                                    replace=self.inventory.replace_nodes,
                                    apply=self.inventory.apply_node)
        self.job_watch = WatchLoop(kind="jobs", lister=api.list_jobs, watcher=api.watch_jobs,
                                   replace=self.inventory.replace_jobs,
                                   apply=self.inventory.apply_job)
        self.dra_watches = [
            WatchLoop(kind=kind, lister=partial(api.list_dra, kind),
                      watcher=partial(api.watch_dra, kind),
                      replace=partial(self.inventory.replace_dra, kind),
                      apply=partial(self.inventory.apply_dra, kind))
            for kind in DRA_KINDS]
        self._stop = threading.Event()
        # Anything that may move the next cycle earlier sets _wake; why is in the two below.
        self._wake = threading.Event()
        self._fast_due = False  # a fast-path pod arrived
        self._settle_from: float | None = None  # last arrival or freed capacity (monotonic)
        self._settle_first: float | None = None  # the first of them since the last batch
        self._left_waiting = False  # the last batch left complete gangs waiting
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ inventory feed
    def _count(self, kind: str) -> int:
        """How many objects of ``kind`` the inventory holds (a gauge's reading)."""
        return int(self.inventory.counts()[kind])

    def _record(self, obj: tr.Obj) -> None:
        self.inventory.apply_pod("MODIFIED", obj)

    def on_pod_list(self, pods: Sequence[Json]) -> None:
        """A full relist of the pods: learned from where finished, then the inventory."""
        for pod in pods:
            self._learn(pod)
        self.inventory.replace_pods(pods)

    def _learn(self, pod: Json) -> None:
        """A pod Berth released that finished teaches its kind's run time (runtimes.py)."""
        if tr.is_finished(pod):
            self.cycle.learner.observe(pod, trust.tenant_of(pod, self.settings))

    def on_pod_event(self, event: str, pod: Json) -> None:
        self._learn(pod)
        changed = self.inventory.apply_pod(event, pod)
        if event == "ADDED":
            self.pace.arrivals.seen()  # a creation burst lets the writes pause (pacing.py)
        if not changed:
            return
        if event != "DELETED" and self.is_fast_path(pod):
            self._fast_due = True
            self._wake.set()
        elif settles_batch(event, pod, waiting=self._left_waiting):
            now = time.monotonic()
            if self._settle_from is None:
                self._settle_first = now
            self._settle_from = now
            self._wake.set()

    def update_settings(self, settings: Settings) -> None:
        """A new policy version: the next cycle uses it (backend and queues included)."""
        self.settings = settings
        self.backend = backend_named(settings.backend)
        self.cycle.settings = settings
        self.cycle.learner.configure(settings.solver_policy.learned_runtimes)
        self.releaser.backend = self.backend
        self.releaser.queues = settings.queues
        self.records.save_seconds = settings.records_save_seconds
        if self._worker is not None:
            self._worker.solver = settings.solver
            self._worker.time_limit = settings.time_limit_seconds

    def is_fast_path(self, pod: Json) -> bool:
        return tr.has_berth_gate(pod) and (
            trust.qos_of(pod, self.settings) in self.settings.fast_path_classes)

    def relist(self) -> None:
        """Rebuild the inventory from the API server alone (start-up, tests)."""
        self.inventory.replace_nodes(self.api.list_nodes()[0])
        self.on_pod_list(self.api.list_pods()[0])
        self.inventory.replace_jobs(self.api.list_jobs()[0])
        for kind in DRA_KINDS:
            self.inventory.replace_dra(kind, self.api.list_dra(kind)[0])

    # ------------------------------------------------------------------ running
    def run_cycle(self, *, fast: bool = False) -> CycleReport:
        return self.cycle.run(fast=fast)

    def run_batch(self) -> CycleReport:
        """A batch cycle as the leader runs it: the saved records read first in a new term of
        leadership, saved after when due (records.py)."""
        if not self.records.loaded:
            restored = self.records.load()
            if restored is not None:
                self.cycle.records = restored
        report = self.cycle.run()
        self.records.save(self.cycle.records, self._may_write)
        return report

    def _hurry_from(self) -> float | None:
        """The first arrival since the last batch, while a creation burst goes on, nothing
        waits and the scheduler behind Berth is short of released pods: the batch does not
        wait for the burst to end then (batching.py). None otherwise."""
        if self._left_waiting or not self.pace.arrivals.burst() \
                or not self.pace.scheduler_short():
            return None
        return self._settle_first

    def _due(self, timing: BatchTiming, next_batch: float) -> float:
        return timing.due(next_batch, self._settle_from, self.settings.settle_seconds,
                          hurry_from=self._hurry_from())

    def _may_write(self) -> bool:
        return not self.leader_required or self.elector.is_leader

    def start(self) -> None:
        self.leader_required = True
        if self._worker is not None:
            self._worker.warm()  # the first batch does not wait for the worker to start
        targets: list[tuple[str, Callable[[threading.Event], None]]] = [
            ("berth-watch-pods", self.pod_watch.run),
            ("berth-watch-nodes", self.node_watch.run),
            ("berth-watch-jobs", self.job_watch.run),
            *((f"berth-watch-{w.kind}", w.run) for w in self.dra_watches),
            ("berth-lease", self.elector.run),
            ("berth-cycle", self._loop),
        ]
        for name, fn in targets:
            t = threading.Thread(target=fn, args=(self._stop,), name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout)
        if self._worker is not None:
            self._worker.close(kill=True)
        self.releaser.close()
        self.explainer.close()

    def _loop(self, stop: threading.Event) -> None:
        window = self.settings.window_seconds
        next_batch = time.monotonic() + window
        timing = BatchTiming()
        while not stop.is_set():
            due = self._due(timing, next_batch)
            self._wake.wait(timeout=max(0.0, due - time.monotonic()))
            self._wake.clear()
            fast, self._fast_due = self._fast_due, False
            if stop.is_set():
                return
            # Not the Job watch: without it Jobs' deadlines are unknown, which only plans fewer
            # reservations (an unknown end never frees; no gang backfills on a Job's deadline),
            # so a cluster where it cannot list Jobs (RBAC not yet applied) still runs.
            synced = self.pod_watch.synced.is_set() and self.node_watch.synced.is_set() \
                and all(w.synced.is_set() for w in self.dra_watches)
            if not self.elector.is_leader:
                self.records.forget()
            if not (self.elector.is_leader and synced):
                # the first batch as leader sees every arrival
                self._settle_from = self._settle_first = None
                if time.monotonic() >= next_batch:
                    next_batch = time.monotonic() + window
                continue
            try:
                if self.settings_source is not None:
                    fresh = self.settings_source()
                    if fresh is not self.settings:
                        self.update_settings(fresh)
                now = time.monotonic()
                if now >= self._due(timing, next_batch):
                    # a pod that arrives from here on is in this batch's snapshot or sets it
                    # again for the next
                    self._settle_from = self._settle_first = None
                    window = self.settings.window_seconds
                    next_batch = now + window
                    self._left_waiting = self.run_batch().left_waiting
                    timing.ran(now, time.monotonic())
                elif fast:
                    self.run_cycle(fast=True)
            except Exception:  # one bad cycle must not stop the controller
                log.exception("cycle %d failed", self.cycle.number)
