"""The controller's Prometheus metrics, on a registry of their own (tests get a fresh one).

Names and labels are what config/dashboards/berth.json plots; change both together.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PHASE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.pending_gangs = Gauge("berth_pending_gangs", "Gangs waiting behind Berth's gate",
                                   ["tenant", "state"], registry=r)
        self.pending_gpus = Gauge("berth_pending_gpus", "GPUs the waiting complete gangs ask for",
                                  ["tenant"], registry=r)
        self.oldest_wait = Gauge("berth_oldest_wait_seconds",
                                 "How long the longest-waiting complete gang has waited",
                                 ["tenant"], registry=r)
        self.cycles = Counter("berth_cycles", "Batch cycles run", registry=r)
        self.phase_seconds = Histogram("berth_cycle_phase_seconds", "Time per cycle phase",
                                       ["phase"], buckets=PHASE_BUCKETS, registry=r)
        self.solver_status = Counter("berth_solver_status", "Plans by solver status",
                                     ["solver", "status"], registry=r)
        self.solver_gap = Gauge("berth_solver_gap", "Relative gap between objective and bound "
                                "of the last plan", registry=r)
        self.solver_seconds = Gauge("berth_solver_seconds", "Wall time of the last solve",
                                    registry=r)
        self.reservations = Gauge("berth_reservations", "Gangs the last plan holds capacity "
                                  "for (docs/reservations.md)", registry=r)
        self.reservation_slip = Histogram(
            "berth_reservation_slip_seconds", "How much later than its first planned start a "
            "reserved gang was released (0: on time or early; docs/reservations.md)",
            buckets=LATENCY_BUCKETS, registry=r)
        self.reservations_late = Counter(
            "berth_reservations_late", "Reserved gangs released more than a batch window after "
            "their first planned start: a pod where they were to start ran past its expected "
            "end, or gangs ahead in the queue took the capacity (docs/reservations.md)",
            registry=r)
        self.backfilled = Counter("berth_backfilled_gangs", "Gangs placed by the backfill solve: "
                                  "known to end before a reserved start", registry=r)
        self.reclaimed_gangs = Counter(
            "berth_reclaimed_gangs", "Gangs evicted whole for a tenant reclaiming its quota "
            "(tenant: the one that reclaims; victim_tenant: the one that borrowed; "
            "docs/reclaim.md)", ["tenant", "victim_tenant"], registry=r)
        self.reclaim_refused = Counter(
            "berth_reclaim_refused", "Planned reclaims not carried out (a PodDisruptionBudget "
            "or another refusal of the Eviction API; the gang keeps running)",
            ["tenant", "victim_tenant"], registry=r)
        self.release_latency = Histogram(
            "berth_release_latency_seconds", "Time from pod creation to Berth's release",
            ["tenant", "qos_class", "path"], buckets=LATENCY_BUCKETS, registry=r)
        self.releases = Counter("berth_releases", "Gangs released", ["tenant", "path"],
                                registry=r)
        self.release_failures = Counter("berth_release_failures", "Gang releases that failed",
                                        ["step"], registry=r)
        self.plans_rejected = Counter("berth_plans_rejected", "Plans the checker refused",
                                      registry=r)
        self.gang_timeouts = Counter("berth_gang_timeouts", "Gangs whose pods never all arrived",
                                     ["tenant"], registry=r)
        self.write_limit = Gauge(
            "berth_api_write_limit", "Pod writes and Events the controller may have in flight "
            "now: fewer while the API server answers slowly, below 1 (a pause after each write) "
            "during a burst of pod creations (pacing.py)", registry=r)
        self.released_unbound = Gauge(
            "berth_released_unbound_pods", "Pods Berth released that their scheduler has not "
            "bound yet; while fewer than 100, a burst of pod creations does not pause Berth's "
            "writes (pacing.py)", registry=r)
        self.write_limit_cuts = Counter(
            "berth_api_write_limit_cuts", "Times the controller halved its writes in flight "
            "because the API server answered slowly or asked it to wait (429/503/504): how "
            "often the server's load slowed Berth's releases (pacing.py)", registry=r)
        self.never_admitted = Gauge(
            "berth_queue_will_not_admit_gangs", "Gangs whose release backend's queue will "
            "not admit them as its objects stand (Kueue: a Workload preempted and not requeued, "
            "or deactivated; reason QueueWillNotAdmit, queued.py): they wait until a person "
            "acts", registry=r)
        self.leader = Gauge("berth_leader", "1 while this replica holds the lease", registry=r)
        self.records = Counter(
            "berth_records", "The leader's saved records (fair share over time, learned "
            "workload; ConfigMap berth-records): restored, absent, refused (not a valid form: "
            "fresh records instead), read_failed, saved, save_failed", ["event"], registry=r)
        self.inventory = Gauge("berth_inventory_objects", "Objects in the inventory", ["kind"],
                               registry=r)
