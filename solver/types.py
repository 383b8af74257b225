"""Problem types of the batch placement problem.

Everything the solver knows arrives in one immutable :class:`Snapshot`: the nodes with their
GPUs and topology, what already runs there, the tenants, the pending gangs and the policy knobs.
Every type validates itself on construction and raises :class:`ProblemError` naming the field,
so a bad snapshot fails where it is built, never deep inside a model.

Units: CPU in milli-cores, memory in MiB, GPU shares in milli-GPU (1000 = one whole GPU).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

MILLI = 1000

# Bounds on what the solver takes. The CP-SAT model works in 64-bit integers; these keep every
# coefficient and domain it derives from a snapshot well inside them (and the demand term is
# scaled down as a whole when a window's values would sum past
# :data:`solver.cpsat.instance.DEMAND_TERM_LIMIT`), so no snapshot makes the model invalid. A
# value beyond a bound is refused where its type is built; the controller holds what users may
# set (priority) to them before it builds a gang.
MAX_PRIORITY = 1_000_000_000  # |priority|: Kubernetes' highest user PriorityClass value
MAX_WEIGHT = 1_000.0  # each objective weight (the policy's are around 1)
MAX_TENANT_WEIGHT = 1_000_000.0  # a tenant's fair-share weight
MAX_QUOTA_MILLI = 10**12  # quotas and borrowing limits: a billion GPUs
MAX_WAIT_SECONDS = 100 * 365 * 86_400.0  # a century
MAX_WATTS = 100_000.0  # per GPU model
MAX_GPUS_PER_POD = 65_536
MAX_CPU_MILLI = 2**40  # per node or pod: a billion cores
MAX_MEMORY_MIB = 2**40  # per node, pod or GPU: an exbibyte


class ProblemError(ValueError):
    """A snapshot field holds a value the solver cannot accept; ``path`` names the field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def _require(ok: bool, path: str, message: str) -> None:
    if not ok:
        raise ProblemError(path, message)


def _non_negative(value: float, path: str) -> None:
    _require(value >= 0, path, f"must be >= 0, got {value}")


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _within(value: float, lo: float, hi: float, path: str) -> None:
    """``lo <= value <= hi``, and finite (NaN and infinities are refused)."""
    _require(isinstance(value, int) or math.isfinite(value), path,
             f"must be a finite number, got {value}")
    _require(value >= lo, path, f"must be >= {_num(lo)}, got {value}")
    _require(value <= hi, path, f"must be <= {_num(hi)}, got {value}")


def _amount(value: float, hi: float, path: str) -> None:
    _within(value, 0, hi, path)


# --------------------------------------------------------------------------------------------
# Cluster
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute

    def __post_init__(self) -> None:
        _require(bool(self.key), "taint.key", "must not be empty")
        _require(
            self.effect in ("NoSchedule", "PreferNoSchedule", "NoExecute"),
            "taint.effect",
            f"must be NoSchedule, PreferNoSchedule or NoExecute, got {self.effect!r}",
        )


@dataclass(frozen=True, slots=True)
class MigSlice:
    """One MIG instance carved out of a GPU; ``milli`` is its share of the GPU's compute."""

    profile: str  # e.g. "1g.10gb"
    milli: int
    memory_mib: int
    used: bool = False

    def __post_init__(self) -> None:
        _require(0 < self.milli <= MILLI, "mig.milli", f"must be in (0, 1000], got {self.milli}")
        _amount(self.memory_mib, MAX_MEMORY_MIB, "mig.memory_mib")


@dataclass(frozen=True, slots=True)
class GPU:
    """One physical GPU. ``nvlink_domain`` groups GPUs that talk over NVLink (None: PCIe only)."""

    index: int
    model: str
    memory_mib: int = 0
    nvlink_domain: str | None = None
    mig: tuple[MigSlice, ...] = ()

    def __post_init__(self) -> None:
        _non_negative(self.index, "gpu.index")
        _require(bool(self.model), "gpu.model", "must name the GPU model")
        _amount(self.memory_mib, MAX_MEMORY_MIB, "gpu.memory_mib")


@dataclass(frozen=True, slots=True)
class Node:
    """A node as the scheduler sees it: allocatable capacity, labels, taints and health.

    ``topology`` maps a topology level (``"rack"``, ``"block"``, ...) to the domain the node is
    in; the level ``"node"`` is implicit and the GPU level ``"nvlink"`` comes from each GPU.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: tuple[GPU, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    topology: Mapping[str, str] = field(default_factory=dict)
    schedulable: bool = True  # False when cordoned
    ready: bool = True

    def __post_init__(self) -> None:
        _require(bool(self.name), "node.name", "must not be empty")
        _amount(self.cpu_milli, MAX_CPU_MILLI, f"nodes[{self.name}].cpu_milli")
        _amount(self.memory_mib, MAX_MEMORY_MIB, f"nodes[{self.name}].memory_mib")
        seen: set[int] = set()
        for g in self.gpus:
            _require(
                g.index not in seen,
                f"nodes[{self.name}].gpus[{g.index}].index",
                "GPU indexes must be unique on a node",
            )
            seen.add(g.index)

    @property
    def usable(self) -> bool:
        return self.schedulable and self.ready


# --------------------------------------------------------------------------------------------
# What runs and what waits
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuShare:
    """``milli`` thousandths of GPU ``index`` on the pod's node."""

    index: int
    milli: int

    def __post_init__(self) -> None:
        _require(
            0 < self.milli <= MILLI, "gpu_share.milli", f"must be in (0, 1000], got {self.milli}"
        )


@dataclass(frozen=True, slots=True)
class Running:
    """A pod that already holds resources (placed by Berth or by anything else)."""

    name: str
    node: str
    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: tuple[GpuShare, ...] = ()
    tenant: str | None = None
    qos_class: str | None = None
    # seconds until it is expected to end (None: unknown); what reservations plan with: an
    # enforced bound, or an estimate where none is known (never a gang's backfill eligibility,
    # which is Gang.runtime_s). 0: it is leaving now (being deleted or evicted, or past its own
    # deadline): reclaim counts its capacity as freed. An estimate overrun is None, never 0.
    remaining_s: float | None = None
    # the gang Berth placed it with (None: not a gang Berth placed, never reclaimed), its
    # priority, and how long it has run (None: not started): what reclaim chooses victims by
    # (solver/reclaim.py)
    gang: str | None = None
    priority: int = 0
    run_s: float | None = None

    def __post_init__(self) -> None:
        _amount(self.cpu_milli, MAX_CPU_MILLI, f"running[{self.name}].cpu_milli")
        _amount(self.memory_mib, MAX_MEMORY_MIB, f"running[{self.name}].memory_mib")
        if self.remaining_s is not None:
            _amount(self.remaining_s, MAX_WAIT_SECONDS, f"running[{self.name}].remaining_s")
        _within(self.priority, -MAX_PRIORITY, MAX_PRIORITY, f"running[{self.name}].priority")
        if self.run_s is not None:
            _amount(self.run_s, MAX_WAIT_SECONDS, f"running[{self.name}].run_s")
        if self.gang is not None:
            _require(bool(self.gang), f"running[{self.name}].gang", "must not be empty")


class TopologyMode(StrEnum):
    REQUIRED = "required"
    PREFERRED = "preferred"


@dataclass(frozen=True, slots=True)
class TopologyRequirement:
    """Keep a gang inside one domain of ``level`` (``nvlink``, ``node``, ``rack``, ...)."""

    level: str
    mode: TopologyMode = TopologyMode.PREFERRED


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # empty with operator Exists tolerates everything
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty matches every effect

    def __post_init__(self) -> None:
        _require(
            self.operator in ("Equal", "Exists"),
            "toleration.operator",
            f"must be Equal or Exists, got {self.operator!r}",
        )


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _require(
            self.operator in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"),
            "match_expressions.operator",
            f"must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt, got {self.operator!r}",
        )


@dataclass(frozen=True, slots=True)
class PodRequest:
    """One pod of a gang.

    GPU demand is one of: ``gpu_count`` whole GPUs (``gpu_milli == 1000``), or a share of one
    GPU (``gpu_count == 1`` and ``gpu_milli < 1000``), optionally with ``gpu_memory_mib``.
    Where it may go: ``models`` (empty: any), ``node_selector``, ``affinity`` (required node
    affinity: a list of terms ORed, each a list of requirements ANDed), ``tolerations``.
    """

    name: str
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_count: int = 0
    gpu_milli: int = 0
    gpu_memory_mib: int = 0
    models: frozenset[str] = frozenset()
    qos_class: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    def __post_init__(self) -> None:
        p = f"pods[{self.name}]"
        _require(bool(self.name), "pod.name", "must not be empty")
        _amount(self.cpu_milli, MAX_CPU_MILLI, f"{p}.cpu_milli")
        _amount(self.memory_mib, MAX_MEMORY_MIB, f"{p}.memory_mib")
        _amount(self.gpu_count, MAX_GPUS_PER_POD, f"{p}.gpu_count")
        _amount(self.gpu_memory_mib, MAX_MEMORY_MIB, f"{p}.gpu_memory_mib")
        if self.gpu_count == 0:
            _require(self.gpu_milli == 0, f"{p}.gpu_milli", "must be 0 when gpu_count is 0")
        else:
            _require(
                0 < self.gpu_milli <= MILLI,
                f"{p}.gpu_milli",
                f"must be in (0, 1000] when the pod asks for GPUs, got {self.gpu_milli}",
            )
            _require(
                self.gpu_count == 1 or self.gpu_milli == MILLI,
                f"{p}.gpu_milli",
                "a pod with several GPUs takes them whole: set gpu_milli to 1000",
            )

    @property
    def gpu_demand_milli(self) -> int:
        """Total GPU demand in milli-GPU."""
        return self.gpu_count * self.gpu_milli

    @property
    def shares_gpu(self) -> bool:
        return self.gpu_count == 1 and self.gpu_milli < MILLI


@dataclass(frozen=True, slots=True)
class Gang:
    """Pods admitted together or not at all."""

    name: str
    tenant: str
    pods: tuple[PodRequest, ...]
    priority: int = 0
    wait_seconds: float = 0.0
    topology: TopologyRequirement | None = None
    # the most it runs once started, enforced (a deadline; None: unbounded): only a gang
    # known to end in time may backfill capacity reserved for another (solver/reserve.py)
    runtime_s: float | None = None
    # held a reservation in an earlier window and has not started since: with
    # ``policy.reservations.keep`` it keeps its place ahead of the queue (solver/queue.py). Set
    # from Berth's own plans (the controller's memory, the replay's), never from the pod.
    reserved: bool = False

    def __post_init__(self) -> None:
        p = f"gangs[{self.name}]"
        _require(bool(self.name), "gang.name", "must not be empty")
        _require(bool(self.tenant), f"{p}.tenant", "must name a tenant")
        _require(len(self.pods) > 0, f"{p}.pods", "a gang needs at least one pod")
        _within(self.priority, -MAX_PRIORITY, MAX_PRIORITY, f"{p}.priority")
        _amount(self.wait_seconds, MAX_WAIT_SECONDS, f"{p}.wait_seconds")
        if self.runtime_s is not None:
            _require(self.runtime_s > 0, f"{p}.runtime_s", f"must be > 0, got {self.runtime_s}")
            _amount(self.runtime_s, MAX_WAIT_SECONDS, f"{p}.runtime_s")
        names = [pod.name for pod in self.pods]
        _require(len(set(names)) == len(names), f"{p}.pods", "pod names must be unique")

    @property
    def gpu_demand_milli(self) -> int:
        return sum(p.gpu_demand_milli for p in self.pods)


# --------------------------------------------------------------------------------------------
# Tenants and policy
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant's GPU quota (milli-GPU; None: unlimited), fair-share weight and borrowing.

    ``borrow_limit_milli`` caps how much idle quota of other tenants it may use beyond its own
    (None: no cap when ``can_borrow``).

    ``past_held_milli`` and ``past_fair_milli``: the GPU milli the tenant held and the fair
    share it was due (weighted max-min over the tenants' demand), each averaged over the
    recent past with the policy's half-life (:mod:`solver.fairshare`); both 0: no history.
    Only the controller's own records feed them, never anything a tenant writes.
    """

    name: str
    quota_milli: int | None = None
    weight: float = 1.0
    can_borrow: bool = True
    borrow_limit_milli: int | None = None
    past_held_milli: float = 0.0
    past_fair_milli: float = 0.0

    def __post_init__(self) -> None:
        p = f"tenants[{self.name}]"
        if self.quota_milli is not None:
            _amount(self.quota_milli, MAX_QUOTA_MILLI, f"{p}.quota_milli")
        _require(self.weight > 0, f"{p}.weight", f"must be > 0, got {self.weight}")
        _within(self.weight, 0, MAX_TENANT_WEIGHT, f"{p}.weight")
        if self.borrow_limit_milli is not None:
            _amount(self.borrow_limit_milli, MAX_QUOTA_MILLI, f"{p}.borrow_limit_milli")
        _amount(self.past_held_milli, MAX_QUOTA_MILLI, f"{p}.past_held_milli")
        _amount(self.past_fair_milli, MAX_QUOTA_MILLI, f"{p}.past_fair_milli")


@dataclass(frozen=True, slots=True)
class QoSProfile:
    """Solo profile of a QoS class on one GPU, the interference model's input.

    ``sm`` and ``membw``: fraction of the GPU's SMs and memory bandwidth used alone (0..1).
    Latency-sensitive classes carry their solo latency and SLO (milliseconds).
    ``exclusive``: never share a GPU with another pod.
    ``no_share_with``: classes it may not share a GPU with.
    """

    name: str
    sm: float = 0.5
    membw: float = 0.5
    memory_mib: int = 0
    latency_sensitive: bool = False
    solo_latency_ms: float | None = None
    slo_ms: float | None = None
    exclusive: bool = False
    no_share_with: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        p = f"qos_classes[{self.name}]"
        _require(0 <= self.sm <= 1, f"{p}.sm", f"must be in [0, 1], got {self.sm}")
        _require(0 <= self.membw <= 1, f"{p}.membw", f"must be in [0, 1], got {self.membw}")
        if self.latency_sensitive:
            _require(
                self.solo_latency_ms is not None and self.solo_latency_ms > 0,
                f"{p}.solo_latency_ms",
                "a latency-sensitive class needs its solo latency (> 0)",
            )
            _require(
                self.slo_ms is not None
                and self.solo_latency_ms is not None
                and self.slo_ms >= self.solo_latency_ms,
                f"{p}.slo_ms",
                "a latency-sensitive class needs an SLO >= its solo latency",
            )


@dataclass(frozen=True, slots=True)
class Weights:
    """Objective weights; the policy's ``solver.weights`` section."""

    demand: float = 1.0  # admitted priority-weighted GPU demand
    aging_per_hour: float = 0.5  # priority gained per hour waited
    fragmentation: float = 0.2
    topology: float = 0.1
    fairness: float = 0.3
    energy: float = 0.05
    interference: float = 0.1
    stay: float = 0.3  # per milli-GPU of a pod left where the order search placed it

    def __post_init__(self) -> None:
        for name in ("demand", "aging_per_hour", "fragmentation", "topology", "fairness",
                     "energy", "interference", "stay"):
            _amount(getattr(self, name), MAX_WEIGHT, f"solver.weights.{name}")


@dataclass(frozen=True, slots=True)
class TypicalPod:
    """One kind of pod in the workload the cluster expects, for the fragmentation measure.

    FGD (Weng et al., ATC'23) measures a node's fragmentation against a target workload: the
    pod shapes that make up most of the demand, each with its share of pods (``weight``; the
    weights need not sum to 1). ``gpu_milli`` is per GPU, as in :class:`PodRequest`.
    """

    cpu_milli: int = 0
    gpu_count: int = 0
    gpu_milli: int = 0
    models: frozenset[str] = frozenset()
    weight: float = 1.0

    def __post_init__(self) -> None:
        _amount(self.cpu_milli, MAX_CPU_MILLI, "typical_pods.cpu_milli")
        _amount(self.gpu_count, MAX_GPUS_PER_POD, "typical_pods.gpu_count")
        _require(
            0 <= self.gpu_milli <= MILLI,
            "typical_pods.gpu_milli",
            f"must be in [0, 1000], got {self.gpu_milli}",
        )
        _require(
            (self.gpu_count == 0) == (self.gpu_milli == 0),
            "typical_pods.gpu_milli",
            "must be > 0 exactly when gpu_count is > 0",
        )
        _require(self.weight > 0, "typical_pods.weight", f"must be > 0, got {self.weight}")
        _within(self.weight, 0, MAX_TENANT_WEIGHT, "typical_pods.weight")


@dataclass(frozen=True, slots=True)
class Reservations:
    """When a gang that cannot fit gets capacity reserved for its earliest start
    (solver/reserve.py): at most ``max_gangs`` per window (0: never), for gangs waiting at
    least ``after_s``, starting at most ``horizon_s`` ahead; what is free of it is held from
    ``hold_ahead_s`` before that start (until then it is planned and shown, not held). With
    ``keep``, a gang that was given a reservation keeps its place ahead of the queue until it
    starts (:attr:`Gang.reserved`; :func:`solver.queue.queue_order`): later arrivals of no
    higher declared priority cannot push its start back; off, every window plans afresh."""

    max_gangs: int = 1
    after_s: float = 300.0
    horizon_s: float = 6 * 3600.0
    hold_ahead_s: float = 600.0
    keep: bool = False

    def __post_init__(self) -> None:
        _within(self.max_gangs, 0, 64, "policy.reservations.max_gangs")
        _amount(self.after_s, MAX_WAIT_SECONDS, "policy.reservations.after_s")
        _amount(self.horizon_s, MAX_WAIT_SECONDS, "policy.reservations.horizon_s")
        _amount(self.hold_ahead_s, MAX_WAIT_SECONDS, "policy.reservations.hold_ahead_s")


@dataclass(frozen=True, slots=True)
class Reclaim:
    """When a tenant waiting within its own quota takes GPUs back from tenants running on
    borrowed quota (solver/reclaim.py): only if ``enabled``; and, if ``preempt_within_tenant``,
    when a waiting gang evicts running gangs of lower priority of its own tenant. Either way
    only gangs that have run at least ``min_run_s``, at most ``max_gangs`` evicted per
    window."""

    enabled: bool = False
    min_run_s: float = 300.0
    max_gangs: int = 4
    preempt_within_tenant: bool = False

    def __post_init__(self) -> None:
        _amount(self.min_run_s, MAX_WAIT_SECONDS, "policy.reclaim.min_run_s")
        _within(self.max_gangs, 0, 1024, "policy.reclaim.max_gangs")


@dataclass(frozen=True, slots=True)
class Queueing:
    """What orders the queue beyond priority, aging and fair share, and what the window's
    packing may not change of that order (solver/queue.py, docs/queueing.md).

    ``short_run_bonus``: priority points a gang with an enforced run-time limit
    (:attr:`Gang.runtime_s`: a deadline, never a declared estimate) gains: in full for a limit
    of 0 s, falling linearly to none at ``short_run_s`` and beyond (short runs first, as a
    batch system's backfill favours jobs with short wall-time limits; 0: off).
    ``keep_order_after_s``: a gang that has waited at least this long and that best-fit in queue
    order starts in this window is started: the order search and CP-SAT may add gangs and
    choose nodes, never leave it waiting for a better packing (None: off)."""

    short_run_bonus: float = 1.0
    short_run_s: float = 3600.0
    keep_order_after_s: float | None = 30.0

    def __post_init__(self) -> None:
        _amount(self.short_run_bonus, MAX_WEIGHT, "policy.queueing.short_run_bonus")
        _within(self.short_run_s, 1.0, MAX_WAIT_SECONDS, "policy.queueing.short_run_s")
        if self.keep_order_after_s is not None:
            _amount(self.keep_order_after_s, MAX_WAIT_SECONDS,
                    "policy.queueing.keep_order_after_s")


@dataclass(frozen=True, slots=True)
class FairSharing:
    """Fair share judged over time (solver/fairshare.py): each tenant's held GPU time and its
    fair share are averaged with a half-life of ``half_life_s`` (0: off, one window is judged
    alone), and a tenant that got less than its share is moved up the queue by up to
    ``boost`` priority points (at a deficit of 100 %; in proportion below)."""

    half_life_s: float = 3600.0
    boost: float = 2.0

    def __post_init__(self) -> None:
        _amount(self.half_life_s, MAX_WAIT_SECONDS, "policy.fair_sharing.half_life_s")
        _amount(self.boost, MAX_WEIGHT, "policy.fair_sharing.boost")

    @property
    def enabled(self) -> bool:
        return self.half_life_s > 0 and self.boost > 0


@dataclass(frozen=True, slots=True)
class TargetWorkload:
    """Where FGD's target workload comes from when ``typical_pods`` names none: the shapes of
    the pods that arrived, averaged with a half-life of ``half_life_s`` (solver/workload.py;
    kept by the controller and the timed replay); 0: the window's own pods."""

    half_life_s: float = 86_400.0

    def __post_init__(self) -> None:
        _amount(self.half_life_s, MAX_WAIT_SECONDS, "policy.target_workload.half_life_s")


@dataclass(frozen=True, slots=True)
class LearnedRuntimes:
    """Run times learned from finished pods (solver/history.py): where a running pod has no
    bound and declares no estimate, its expected end is the median run time of the last
    ``samples`` pods of its kind that finished (its tenant, its owner's kind, its GPU count),
    once ``min_samples`` have; kept by the controller and the timed replay. An estimate: it
    plans when capacity frees, never lets a gang backfill. Off unless ``enabled``."""

    enabled: bool = False
    min_samples: int = 3
    samples: int = 20

    def __post_init__(self) -> None:
        _within(self.min_samples, 1, MAX_LEARNED_SAMPLES, "policy.learned_runtimes.min_samples")
        _within(self.samples, 1, MAX_LEARNED_SAMPLES, "policy.learned_runtimes.samples")
        _require(self.min_samples <= self.samples, "policy.learned_runtimes.min_samples",
                 f"must be <= samples ({self.samples}), got {self.min_samples}")


#: The most finished pods remembered per kind of pod (and the most needed before an estimate).
MAX_LEARNED_SAMPLES = 1000


@dataclass(frozen=True, slots=True)
class SolverPolicy:
    """The knobs of the policy YAML that the solver reads."""

    weights: Weights = field(default_factory=Weights)
    topology_levels: tuple[str, ...] = ("nvlink", "node", "rack", "block")
    qos_classes: tuple[QoSProfile, ...] = ()
    idle_watts: Mapping[str, float] = field(default_factory=dict)  # per GPU model
    active_watts: Mapping[str, float] = field(default_factory=dict)  # per GPU model
    # the target workload of the fragmentation measure; empty: derived from the snapshot's pods
    typical_pods: tuple[TypicalPod, ...] = ()
    reservations: Reservations = field(default_factory=Reservations)
    reclaim: Reclaim = field(default_factory=Reclaim)
    fair_sharing: FairSharing = field(default_factory=FairSharing)
    target_workload: TargetWorkload = field(default_factory=TargetWorkload)
    learned_runtimes: LearnedRuntimes = field(default_factory=LearnedRuntimes)
    queueing: Queueing = field(default_factory=Queueing)

    def __post_init__(self) -> None:
        for kind, watts in (("idle_watts", self.idle_watts), ("active_watts", self.active_watts)):
            for model, w in watts.items():
                _amount(w, MAX_WATTS, f"policy.{kind}[{model}]")

    def qos(self, name: str | None) -> QoSProfile | None:
        if name is None:
            return None
        for q in self.qos_classes:
            if q.name == name:
                return q
        return None


# --------------------------------------------------------------------------------------------
# The snapshot
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one batch decision sees. Built once per window, never mutated."""

    nodes: tuple[Node, ...]
    gangs: tuple[Gang, ...] = ()
    running: tuple[Running, ...] = ()
    tenants: tuple[Tenant, ...] = ()
    policy: SolverPolicy = field(default_factory=SolverPolicy)

    def __post_init__(self) -> None:
        node_names = [n.name for n in self.nodes]
        _require(len(set(node_names)) == len(node_names), "nodes", "node names must be unique")
        gang_names = [g.name for g in self.gangs]
        _require(len(set(gang_names)) == len(gang_names), "gangs", "gang names must be unique")
        by_name = {n.name: n for n in self.nodes}
        for r in self.running:
            node = by_name.get(r.node)
            _require(node is not None, f"running[{r.name}].node", f"unknown node {r.node!r}")
            assert node is not None
            indexes = {g.index for g in node.gpus}
            for s in r.gpus:
                _require(
                    s.index in indexes,
                    f"running[{r.name}].gpus",
                    f"node {r.node} has no GPU {s.index}",
                )
        tenant_names = {t.name for t in self.tenants}
        if self.tenants:
            for g in self.gangs:
                _require(
                    g.tenant in tenant_names,
                    f"gangs[{g.name}].tenant",
                    f"unknown tenant {g.tenant!r}; declare it under tenants",
                )

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def tenant(self, name: str) -> Tenant:
        for t in self.tenants:
            if t.name == name:
                return t
        return Tenant(name=name)

    @property
    def gpu_capacity_milli(self) -> int:
        return sum(len(n.gpus) for n in self.nodes) * MILLI
