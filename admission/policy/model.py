"""The policy YAML as typed, immutable pydantic models: the cluster admin's one interface.

Field names are camelCase in YAML (Kubernetes style) and snake_case in Python. Every model
forbids unknown keys so a typo is an error, not a silently ignored setting. Checks that
involve one value live here; checks that relate several parts of the file (a tenant naming a
QoS class that does not exist, a namespace claimed twice) live in :mod:`admission.policy.refs`
so that they run even when some other part of the file is malformed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Final, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator
from pydantic.alias_generators import to_camel

from admission.backends import BackendName
from solver.types import MAX_LEARNED_SAMPLES

# A Kubernetes name (RFC 1123 label): namespaces and tenant names.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
Name = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
NonEmpty = Annotated[str, Field(min_length=1)]
Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
Unit = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]

# Every number in the policy is finite and bounded: the webhook and the solver do arithmetic on
# them (milli-GPU, CP-SAT coefficients), and a value like .inf or 1e41 passes a plain ``ge=0``
# but breaks every review or solve that uses it. The bounds are far beyond any real cluster.
MAX_GPUS: Final = 1_000_000  # quota, borrowing
MAX_GPUS_PER_POD: Final = 4096
MAX_GANG_SIZE: Final = 100_000
MAX_MEMORY_MIB: Final = 4 * 1024 * 1024  # 4 TiB on one GPU
MAX_WATTS: Final = 100_000
MAX_WEIGHT: Final = 1_000_000  # fair-share weight
MAX_OBJECTIVE_WEIGHT: Final = 1000
MAX_MS: Final = 86_400_000  # a day, in milliseconds
MAX_SECONDS: Final = 7 * 86_400  # a week
PRIORITY_LIMIT: Final = 1_000_000  # no priority bound may exceed this
DEFAULT_MAX_PRIORITY: Final = 100
MAX_EXPECTED_RUNTIME: Final = 365 * 86_400  # the largest admission.maxExpectedRuntimeSeconds
DEFAULT_MAX_EXPECTED_RUNTIME: Final = 7 * 86_400

Gpus = Annotated[float, Field(ge=0, le=MAX_GPUS, allow_inf_nan=False)]
MiB = Annotated[int, Field(ge=1, le=MAX_MEMORY_MIB, alias="memoryMiB")]
Watts = Annotated[float, Field(ge=0, le=MAX_WATTS, allow_inf_nan=False)]
Millis = Annotated[float, Field(gt=0, le=MAX_MS, allow_inf_nan=False)]
ObjectiveWeight = Annotated[float, Field(ge=0, le=MAX_OBJECTIVE_WEIGHT, allow_inf_nan=False)]
PriorityBound = Annotated[int, Field(ge=0, le=PRIORITY_LIMIT)]

T = TypeVar("T")
API_VERSION: Final = "berth.dev/v1alpha1"


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


# --------------------------------------------------------------------------------------------
# Tenants
# --------------------------------------------------------------------------------------------


class Quota(_Model):
    """GPUs a tenant is guaranteed (whole or fractional GPUs); ``None`` means unlimited."""

    gpus: Gpus | None = None


class Borrowing(_Model):
    """Whether a tenant may use other tenants' idle quota, and how much beyond its own."""

    enabled: bool = True
    limit_gpus: Gpus | None = None


class Limits(_Model):
    """Per-request ceilings; a pod beyond them is refused at admission with the limit named."""

    max_gpus_per_pod: Annotated[int, Field(ge=1, le=MAX_GPUS_PER_POD)] | None = None
    max_gang_size: Annotated[int, Field(ge=1, le=MAX_GANG_SIZE)] | None = None
    # Highest berth.dev/priority a pod of the tenant may ask for (and lowest: its negative);
    # unset: admission.maxPriority. The tenant's own default priority must lie within it.
    max_priority: PriorityBound | None = None


class Queues(_Model):
    """The tenant's queue in each release backend that has queues, under the backend's name
    (used when ``release.backend`` names it)."""

    kueue: NonEmpty | None = None  # a LocalQueue in each of the tenant's namespaces
    volcano: NonEmpty | None = None  # a Volcano Queue

    def of(self, backend: BackendName) -> str | None:
        """The queue under ``backend``'s name; None when unset or the backend has no queues."""
        return getattr(self, backend.value) if backend.value in type(self).model_fields else None


class Tenant(_Model):
    name: Name
    namespaces: Annotated[list[Name], Field(min_length=1)]
    quota: Quota = Quota()
    weight: Annotated[float, Field(gt=0, le=MAX_WEIGHT, allow_inf_nan=False)] = 1.0
    borrowing: Borrowing = Borrowing()
    allowed_models: list[NonEmpty] = []  # empty: any model
    allowed_qos_classes: list[NonEmpty] = []  # empty: any class
    default_qos_class: NonEmpty | None = None
    # default priority of the tenant's gangs, within the tenant's priority bound
    priority: Annotated[int, Field(ge=-PRIORITY_LIMIT, le=PRIORITY_LIMIT)] = 0
    limits: Limits = Limits()
    queues: Queues = Queues()

    @property
    def quota_milli(self) -> int | None:
        return None if self.quota.gpus is None else round(self.quota.gpus * 1000)

    @property
    def ceiling_milli(self) -> int | None:
        """Most milli-GPU the tenant can ever hold at once (quota plus borrowing); None: no cap."""
        if self.quota.gpus is None:
            return None
        own = round(self.quota.gpus * 1000)
        if not self.borrowing.enabled:
            return own
        if self.borrowing.limit_gpus is None:
            return None
        return own + round(self.borrowing.limit_gpus * 1000)


# --------------------------------------------------------------------------------------------
# GPUs, sharing and topology
# --------------------------------------------------------------------------------------------


class GpuModel(_Model):
    """A GPU model as GPU Feature Discovery names it (``nvidia.com/gpu.product``)."""

    name: NonEmpty
    memory_mib: MiB
    idle_watts: Watts = 0.0
    active_watts: Watts = 0.0


class TimeSlicing(_Model):
    """NVIDIA device plugin time-slicing: each GPU is advertised as ``replicas`` slots."""

    resource_name: NonEmpty = "nvidia.com/gpu.shared"
    replicas: Annotated[int, Field(ge=2, le=64)] = 4


class Mps(_Model):
    """NVIDIA device plugin MPS: one slot per pod; the share is enforced by the MPS env."""

    resource_name: NonEmpty = "nvidia.com/gpu.shared"


class MigProfile(_Model):
    name: Annotated[str, Field(pattern=r"^\d+g\.\d+gb(\+me)?$")]  # e.g. 1g.10gb
    fraction: Fraction  # its share of the GPU's compute
    memory_mib: MiB


def _default_mig_profiles() -> list[MigProfile]:
    # A100/H100 80GB, mixed strategy: 7 compute slices per GPU.
    return [
        MigProfile(name="1g.10gb", fraction=1 / 7, memory_mib=9728),
        MigProfile(name="2g.20gb", fraction=2 / 7, memory_mib=19968),
        MigProfile(name="3g.40gb", fraction=3 / 7, memory_mib=40192),
        MigProfile(name="4g.40gb", fraction=4 / 7, memory_mib=40192),
        MigProfile(name="7g.80gb", fraction=1.0, memory_mib=81920),
    ]


class Mig(_Model):
    """MIG with the device plugin's mixed strategy: resources ``nvidia.com/mig-<profile>``."""

    profiles: Annotated[list[MigProfile], Field(min_length=1, max_length=64)] = Field(
        default_factory=_default_mig_profiles
    )


class Sharing(_Model):
    """How a fraction of a GPU reaches the node: the backend and the fractions it may take."""

    backend: Literal["none", "time-slicing", "mps", "mig", "hami"] = "none"
    fraction_grid: Annotated[list[Fraction], Field(min_length=1, max_length=1000)] = [
        0.25, 0.5, 0.75, 1.0]
    time_slicing: TimeSlicing = TimeSlicing()
    mps: Mps = Mps()
    mig: Mig = Field(default_factory=Mig)


class TopologyLevel(_Model):
    """A level of the topology, finest first. ``nvlink`` comes from the GPUs themselves and
    ``node`` from the node name; every other level names the node label that holds it."""

    name: Name
    node_label: NonEmpty | None = None


def _default_levels() -> list[TopologyLevel]:
    return [
        TopologyLevel(name="nvlink"),
        TopologyLevel(name="node", node_label="kubernetes.io/hostname"),
        TopologyLevel(name="rack", node_label="topology.kubernetes.io/rack"),
        TopologyLevel(name="block", node_label="topology.kubernetes.io/block"),
    ]


class Topology(_Model):
    levels: Annotated[list[TopologyLevel], Field(min_length=1)] = Field(
        default_factory=_default_levels
    )


# --------------------------------------------------------------------------------------------
# QoS classes, batching, solver, release, admission
# --------------------------------------------------------------------------------------------


class QoSClass(_Model):
    """A workload class with its solo interference profile on one GPU and, if latency
    sensitive, its solo latency and SLO (milliseconds)."""

    name: Name
    sm: Unit = 0.5
    membw: Unit = 0.5
    memory_mib: Annotated[int, Field(ge=0, le=MAX_MEMORY_MIB, alias="memoryMiB")] = 0
    latency_sensitive: bool = False
    solo_latency_ms: Millis | None = None
    slo_ms: Millis | None = None
    exclusive: bool = False
    no_share_with: list[NonEmpty] = []

    @model_validator(mode="after")
    def _latency(self) -> QoSClass:
        if self.latency_sensitive and (self.solo_latency_ms is None or self.slo_ms is None):
            raise ValueError("a latencySensitive class needs soloLatencyMs and sloMs")
        if (
            self.solo_latency_ms is not None
            and self.slo_ms is not None
            and self.slo_ms < self.solo_latency_ms
        ):
            raise ValueError(
                f"sloMs ({self.slo_ms}) must be >= soloLatencyMs ({self.solo_latency_ms})"
            )
        return self


#: The shortest settle (batch.settleSeconds) other than 0 (off): a batch at most this often.
MIN_SETTLE_SECONDS: Final = 0.1


class Batch(_Model):
    window_seconds: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 10.0
    # A batch runs this long after the last gated pod arrived or capacity was freed, when
    # nothing else arrived meanwhile, instead of waiting out the window (0: off; at or above
    # windowSeconds: no effect). docs/controller.md, "When a batch runs".
    settle_seconds: Annotated[float, Field(ge=0, le=3600, allow_inf_nan=False)] = 1.0
    gang_timeout_seconds: Annotated[float, Field(gt=0, le=MAX_SECONDS,
                                                 allow_inf_nan=False)] = 600.0
    fast_path_classes: list[NonEmpty] = []  # QoS classes placed on arrival
    # how often the leader saves its records (fair share over time, the learned workload)
    records_save_seconds: Annotated[float, Field(ge=1, le=3600, allow_inf_nan=False)] = 60.0

    @model_validator(mode="after")
    def _settle(self) -> Batch:
        if 0 < self.settle_seconds < MIN_SETTLE_SECONDS:
            raise ValueError(f"settleSeconds must be 0 (off) or at least {MIN_SETTLE_SECONDS:g}"
                             f" (a batch at most that often), got {self.settle_seconds:g}")
        return self


class ObjectiveWeights(_Model):
    demand: ObjectiveWeight = 1.0
    aging_per_hour: ObjectiveWeight = 0.5
    fragmentation: ObjectiveWeight = 0.2
    topology: ObjectiveWeight = 0.1
    fairness: ObjectiveWeight = 0.3
    energy: ObjectiveWeight = 0.05
    interference: ObjectiveWeight = 0.1
    stay: ObjectiveWeight = 0.3


class Reservations(_Model):
    max_gangs: Annotated[int, Field(ge=0, le=64)] = 1
    after_seconds: Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)] = 300.0
    horizon_seconds: Annotated[float, Field(ge=0, le=MAX_SECONDS,
                                            allow_inf_nan=False)] = 21600.0
    hold_ahead_seconds: Annotated[float, Field(ge=0, le=MAX_SECONDS,
                                               allow_inf_nan=False)] = 600.0
    keep: bool = False


class Reclaim(_Model):
    enabled: bool = False
    min_runtime_seconds: Annotated[float, Field(ge=0, le=MAX_SECONDS,
                                                allow_inf_nan=False)] = 300.0
    max_gangs_per_window: Annotated[int, Field(ge=0, le=1024)] = 4
    preempt_within_tenant: bool = False


class FairSharing(_Model):
    half_life_seconds: Annotated[float, Field(ge=0, le=MAX_SECONDS,
                                              allow_inf_nan=False)] = 3600.0
    boost: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 2.0


class TargetWorkload(_Model):
    half_life_seconds: Annotated[float, Field(ge=0, le=MAX_SECONDS,
                                              allow_inf_nan=False)] = 86400.0


class LearnedRuntimes(_Model):
    enabled: bool = False
    min_samples: Annotated[int, Field(ge=1, le=MAX_LEARNED_SAMPLES)] = 3
    samples: Annotated[int, Field(ge=1, le=MAX_LEARNED_SAMPLES)] = 20

    @model_validator(mode="after")
    def _enough(self) -> LearnedRuntimes:
        if self.min_samples > self.samples:
            raise ValueError(f"minSamples ({self.min_samples}) must be <= samples "
                             f"({self.samples}): an estimate needs no more finished pods "
                             "than are remembered")
        return self


class Queueing(_Model):
    short_run_bonus: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 1.0
    short_run_seconds: Annotated[float, Field(ge=1, le=MAX_SECONDS,
                                              allow_inf_nan=False)] = 3600.0
    # null: off (the order search and CP-SAT may leave any gang waiting for a better packing)
    keep_order_after_seconds: Annotated[float | None, Field(ge=0, le=MAX_SECONDS,
                                                            allow_inf_nan=False)] = 30.0


class SolverSettings(_Model):
    time_limit_seconds: Annotated[float, Field(gt=0, le=600, allow_inf_nan=False)] = 5.0
    weights: ObjectiveWeights = ObjectiveWeights()
    reservations: Reservations = Reservations()
    reclaim: Reclaim = Reclaim()
    fair_sharing: FairSharing = FairSharing()
    target_workload: TargetWorkload = TargetWorkload()
    learned_runtimes: LearnedRuntimes = LearnedRuntimes()
    queueing: Queueing = Queueing()


class Release(_Model):
    """Where admitted pods go: the default scheduler, Kueue or Volcano (queues per tenant)."""

    backend: BackendName = BackendName.STANDALONE


class Admission(_Model):
    """Webhook behaviour the admin chooses."""

    # A pod that names a tenant other than its namespace's: refuse it, or overwrite the label.
    tenant_mismatch: Literal["refuse", "overwrite"] = "refuse"
    # Refuse gang pods whose size cannot be read from the pod (Volcano/KAI/owner gangs).
    require_gang_size: bool = False
    # Highest berth.dev/priority a pod may ask for (and lowest: its negative), for every
    # tenant without its own limits.maxPriority. Priority weighs a gang against every other
    # tenant's waiting work, so it is bounded like any other value a user may set.
    max_priority: PriorityBound = DEFAULT_MAX_PRIORITY
    # Longest berth.dev/expected-runtime a pod may declare. An estimate only plans when a
    # running pod's capacity frees (never backfill), yet a tenant writes it: bounded like any
    # value a user may set.
    max_expected_runtime_seconds: Annotated[int, Field(ge=60, le=MAX_EXPECTED_RUNTIME)] = \
        DEFAULT_MAX_EXPECTED_RUNTIME


class Policy(_Model):
    """The whole policy file."""

    api_version: Literal["berth.dev/v1alpha1"] = API_VERSION
    kind: Literal["Policy"] = "Policy"
    tenants: Annotated[list[Tenant], Field(min_length=1)]
    gpu_models: list[GpuModel] = []
    sharing: Sharing = Field(default_factory=Sharing)
    topology: Topology = Field(default_factory=Topology)
    qos_classes: list[QoSClass] = []
    batch: Batch = Batch()
    solver: SolverSettings = SolverSettings()
    release: Release = Release()
    admission: Admission = Admission()

    # Look-ups the webhook's hot path needs, computed once per policy version.
    _by_namespace: dict[str, Tenant] = PrivateAttr(default_factory=dict)
    _by_name: dict[str, Tenant] = PrivateAttr(default_factory=dict)
    _generation: str = PrivateAttr(default="")
    _memo: dict[str, object] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: object, /) -> None:
        for t in self.tenants:
            self._by_name.setdefault(t.name, t)
            for ns in t.namespaces:
                self._by_namespace.setdefault(ns, t)

    def tenant_for_namespace(self, namespace: str) -> Tenant | None:
        return self._by_namespace.get(namespace)

    def tenant(self, name: str) -> Tenant | None:
        return self._by_name.get(name)

    def qos_class(self, name: str) -> QoSClass | None:
        for q in self.qos_classes:
            if q.name == name:
                return q
        return None

    @property
    def managed_namespaces(self) -> frozenset[str]:
        return frozenset(self._by_namespace)

    @property
    def generation(self) -> str:
        """Short hash of the file this policy was loaded from ('' when built in code)."""
        return self._generation

    def memo(self, key: str, build: Callable[[Policy], T]) -> T:
        """A value derived from this policy version, built once (e.g. the webhook's look-ups)."""
        if key not in self._memo:
            self._memo[key] = build(self)
        return cast(T, self._memo[key])

    def with_generation(self, generation: str) -> Policy:
        self._generation = generation
        return self

    def max_priority(self, tenant: Tenant) -> int:
        """The highest berth.dev/priority a pod of ``tenant`` may ask for (lowest: minus it)."""
        own = tenant.limits.max_priority
        return self.admission.max_priority if own is None else own

    def queue_for(self, tenant: Tenant) -> str | None:
        """The tenant's queue in the configured release backend (None for one without queues)."""
        return tenant.queues.of(self.release.backend)
