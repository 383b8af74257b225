"""What the controller reads from the policy, resolved once per policy version.

The cycle and the release never look at the pydantic policy directly: they take a
:class:`Settings`, which tests build in a line and :func:`from_policy` builds from the file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from admission.backends import BackendName
from admission.controller.pacing import BURST_FLOOR, FEED_PODS, FEED_RATE
from admission.policy import Policy, Sharing, to_solver
from admission.policy.model import DEFAULT_MAX_EXPECTED_RUNTIME
from solver.names import SolverName
from solver.types import SolverPolicy, Tenant

# Concurrent writes of a running controller (BERTH_RELEASE_WRITERS overrides it, to measure):
# see e2e/bench_scale.md for what it buys on the local control plane.
RELEASE_WRITERS = 8


def release_writers() -> int:
    raw = os.environ.get("BERTH_RELEASE_WRITERS", "")
    return max(1, int(raw)) if raw.isdigit() else RELEASE_WRITERS


def write_pacing() -> bool:
    """Whether the writes in flight adapt to the API server's answer times (pacing.py);
    BERTH_WRITE_PACING=off keeps release_writers in flight whatever the server's load, to
    measure what the pacing does."""
    return os.environ.get("BERTH_WRITE_PACING", "").strip().lower() not in ("off", "0", "false")


def write_pacing_floor() -> float:
    """The lowest limit of the pacing during a creation burst: a fraction of one write in
    flight, a pause after each write (pacing.py, ``BURST_FLOOR``); BERTH_WRITE_PACING_FLOOR
    overrides it, to measure (1: never below one write in flight, as before 2026-12-06)."""
    return _env_number("BERTH_WRITE_PACING_FLOOR", BURST_FLOOR,
                       lambda v: math.isfinite(v) and v > 0)


def scheduler_feed() -> int:
    """Released pods not yet bound below which a creation burst does not pause the writes
    (pacing.py, ``FEED_PODS``); BERTH_SCHEDULER_FEED overrides it, to measure (0: a burst
    pauses the writes whatever the scheduler has left, the pacing before this setting)."""
    raw = os.environ.get("BERTH_SCHEDULER_FEED", "").strip()
    return int(raw) if raw.isdigit() else FEED_PODS


def scheduler_feed_rate() -> float:
    """Writes a second while the scheduler is short of released pods (pacing.py,
    ``FEED_RATE``, 0: one write in flight); BERTH_SCHEDULER_FEED_RATE sets it (50:
    kube-scheduler's pace; a number from 0 to 10,000, anything else is the default)."""
    return _env_number("BERTH_SCHEDULER_FEED_RATE", FEED_RATE, lambda v: 0 <= v <= 10_000)


def _env_number(name: str, default: float, ok: Callable[[float], bool]) -> float:
    """The number in environment variable ``name`` where ``ok`` holds of it, else ``default``
    (unset, not a number, or out of bounds)."""
    try:
        value = float(os.environ.get(name, "").strip())
    except ValueError:
        return default
    return value if ok(value) else default


@dataclass(frozen=True, slots=True)
class TenantBounds:
    """What the policy lets a tenant's pods say about themselves (contract 7): the values a
    user may set (gang size, priority, QoS class) are held to these, whatever a pod says."""

    max_gang_size: int | None = None  # limits.maxGangSize
    max_priority: int | None = None  # limits.maxPriority
    allowed_qos_classes: frozenset[str] = frozenset()  # empty: any class of the policy
    default_qos_class: str | None = None


@dataclass(frozen=True, slots=True)
class Settings:
    tenants: tuple[Tenant, ...] = ()
    # namespace -> tenant: the only source of a pod's tenant. A namespace not here is not
    # managed: its pods are never Berth's gangs and hold only what the API server says.
    namespaces: Mapping[str, str] = field(default_factory=dict)
    bounds: Mapping[str, TenantBounds] = field(default_factory=dict)  # tenant -> bounds
    qos_classes: frozenset[str] = frozenset()  # the policy's QoS classes
    # How fractions became resources (the webhook's translation, which the controller reads
    # back to check a pod's demand annotations against its resources).
    sharing: Sharing = field(default_factory=Sharing)
    solver_policy: SolverPolicy = field(default_factory=SolverPolicy)
    # topology level -> node label naming the node's domain (levels other than nvlink, node)
    topology_labels: Mapping[str, str] = field(default_factory=dict)
    window_seconds: float = 10.0
    settle_seconds: float = 0.0  # 0: batches only at the window (the policy's default is 1)
    gang_timeout_seconds: float = 600.0
    fast_path_classes: frozenset[str] = frozenset()
    solver: SolverName = SolverName.CPSAT
    time_limit_seconds: float = 5.0
    seed: int = 0
    backend: BackendName = BackendName.STANDALONE
    queues: Mapping[str, str] = field(default_factory=dict)  # tenant -> backend queue
    # Most pod condition updates and events the controller writes per cycle, so that 10,000
    # waiting pods do not turn one cycle into 10,000 writes; the rest follow in later cycles.
    explain_budget: int = 500
    # A gang waiting without a warning is told so (condition and Event) only from the batch
    # cycle after this many batch cycles have seen it waiting, and Released is said only to
    # pods told they wait: a burst whose gangs are released within a cycle or two writes no
    # explanations at all (cycle.py). 0: every waiting gang at once, every released pod.
    explain_grace_batches: int = 1
    # Pod writes in flight at once during a release and when explaining (each is one round
    # trip to the API server). Gangs are released side by side and each gang's pods written
    # side by side; the protocol's order (every placement of a gang before any of its gates)
    # holds per gang. 1 writes one pod at a time in plan order, which tests that crash at the
    # n-th write rely on; a policy file gets RELEASE_WRITERS.
    release_writers: int = 1
    # Whether fewer than release_writers are in flight while the API server answers slowly
    # (pacing.py: Berth's writes yield to its other clients). Off: always release_writers.
    write_pacing: bool = True
    # the lowest limit during a creation burst (below 1: a pause after each write)
    write_pacing_floor: float = BURST_FLOOR
    scheduler_feed: int = FEED_PODS
    scheduler_feed_rate: float = FEED_RATE
    # A pod Berth released and its scheduler has not bound this long after says so
    # (condition reason NotBound and a Warning Event; see unbound.py).
    bind_grace_seconds: float = 30.0
    # How often the leader saves its records (records.py); policy batch.recordsSaveSeconds.
    records_save_seconds: float = 60.0
    # The longest berth.dev/expected-runtime read (policy admission.maxExpectedRuntimeSeconds,
    # which the webhook held each pod to at CREATE): a policy lowered since caps older pods'.
    max_expected_runtime_seconds: float = float(DEFAULT_MAX_EXPECTED_RUNTIME)

    def tenant(self, name: str) -> Tenant | None:
        for t in self.tenants:
            if t.name == name:
                return t
        return None

    def tenant_of_namespace(self, namespace: str) -> str | None:
        """The tenant that owns ``namespace`` by the policy; None when it is not managed."""
        return self.namespaces.get(namespace)

    def bounds_of(self, tenant: str) -> TenantBounds:
        return self.bounds.get(tenant) or TenantBounds()


def from_policy(policy: Policy) -> Settings:
    solver_policy, tenants = to_solver(policy)
    topo = {lv.name: lv.node_label for lv in policy.topology.levels
            if lv.node_label and lv.name not in ("nvlink", "node")}
    queues = {}
    for t in policy.tenants:
        q = policy.queue_for(t)
        if q:
            queues[t.name] = q
    namespaces = {ns: t.name for t in reversed(policy.tenants) for ns in t.namespaces}
    bounds = {t.name: TenantBounds(
        max_gang_size=t.limits.max_gang_size,
        max_priority=policy.max_priority(t),
        allowed_qos_classes=frozenset(t.allowed_qos_classes),
        default_qos_class=t.default_qos_class) for t in policy.tenants}
    return Settings(
        tenants=tenants,
        namespaces=namespaces,
        bounds=bounds,
        qos_classes=frozenset(q.name for q in policy.qos_classes),
        sharing=policy.sharing,
        solver_policy=solver_policy,
        topology_labels=topo,
        window_seconds=policy.batch.window_seconds,
        settle_seconds=policy.batch.settle_seconds,
        gang_timeout_seconds=policy.batch.gang_timeout_seconds,
        records_save_seconds=policy.batch.records_save_seconds,
        fast_path_classes=frozenset(policy.batch.fast_path_classes),
        time_limit_seconds=policy.solver.time_limit_seconds,
        backend=policy.release.backend,
        queues=queues,
        release_writers=release_writers(),
        write_pacing=write_pacing(),
        write_pacing_floor=write_pacing_floor(), scheduler_feed=scheduler_feed(),
        scheduler_feed_rate=scheduler_feed_rate(),
        max_expected_runtime_seconds=float(policy.admission.max_expected_runtime_seconds),
    )
