"""Berth's own synthetic cluster and workload, for the embedded default and for tests.

Why a generator of our own: the Alibaba traces have one tenant, no gangs, no topology and no
latency SLOs, so they cannot show what a batch admission controller does for a multi-tenant
cluster. The generator makes a cluster with several GPU models, NVLink domains, racks and
blocks, and a workload of several tenants mixing whole-GPU training gangs with topology
requirements, fractional inference pods of different QoS classes and notebooks, each with an
arrival time and a run time.

Everything is a pure function of its spec and seed: the same seed gives the same scenario on
every machine (``random.Random`` with an integer seed is stable across Python versions for the
calls used here).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from solver.simulate.timed_scenario import Scenario, TimedGang
from solver.types import (
    GPU,
    MILLI,
    Gang,
    Node,
    PodRequest,
    ProblemError,
    SolverPolicy,
    Taint,
    Tenant,
    Toleration,
    TopologyMode,
    TopologyRequirement,
)

# --------------------------------------------------------------------------------------------
# Cluster
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeShape:
    """A kind of node: ``gpus`` GPUs of ``model``; ``nvlink_size`` GPUs per NVLink domain
    (0: PCIe only). Power figures are per GPU: idle and at full load (board power)."""

    model: str
    gpus: int
    nvlink_size: int
    gpu_memory_mib: int
    cpu_milli: int
    memory_mib: int
    idle_watts: float
    active_watts: float


H100 = NodeShape("H100", 8, 8, 81_920, 192_000, 2_048_000, 70.0, 700.0)
A100 = NodeShape("A100", 8, 4, 81_920, 128_000, 1_024_000, 50.0, 400.0)
L4 = NodeShape("L4", 4, 0, 23_034, 64_000, 256_000, 16.0, 72.0)
T4 = NodeShape("T4", 2, 0, 15_360, 32_000, 128_000, 10.0, 70.0)

#: Models that carry training work; the rest serve inference and notebooks.
TRAINING_MODELS = frozenset({"H100", "A100"})


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """``racks`` racks of ``nodes_per_rack`` nodes, ``racks_per_block`` racks to a block.

    ``mix`` gives the shapes and their proportions; big training nodes fill the first racks so
    that a rack-bound gang has somewhere to go. ``tainted`` nodes carry ``dedicated=<tenant>``
    for the first tenant (only that tenant's pods tolerate it); ``cordoned`` nodes take nothing.
    """

    racks: int = 2
    nodes_per_rack: int = 4
    racks_per_block: int = 2
    mix: tuple[tuple[NodeShape, float], ...] = ((H100, 1.0), (A100, 2.0), (L4, 2.0), (T4, 1.0))
    tainted: int = 0
    cordoned: int = 0
    dedicated_tenant: str = "team-a"

    def __post_init__(self) -> None:
        for name in ("racks", "nodes_per_rack", "racks_per_block"):
            if getattr(self, name) < 1:
                raise ProblemError(f"cluster.{name}", f"must be >= 1, got {getattr(self, name)}")
        if not self.mix or any(w <= 0 for _, w in self.mix):
            raise ProblemError("cluster.mix", "needs at least one shape, all weights > 0")
        total = self.racks * self.nodes_per_rack
        if self.tainted < 0 or self.cordoned < 0 or self.tainted + self.cordoned > total:
            raise ProblemError(
                "cluster.tainted", f"tainted + cordoned must be within [0, {total}] nodes"
            )

    @property
    def node_count(self) -> int:
        return self.racks * self.nodes_per_rack


def _apportion(weights: Sequence[float], total: int) -> list[int]:
    """Largest-remainder split of ``total`` in proportion to ``weights``, every part >= 1 while
    ``total`` allows, so a small cluster still holds every shape."""
    wsum = sum(weights)
    raw = [w * total / wsum for w in weights]
    counts = [math.floor(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: (counts[i] - raw[i], i)):
        if sum(counts) >= total:
            break
        counts[i] += 1
    for i, c in enumerate(counts):  # lift empty shapes by taking from the largest
        if c == 0 and total >= len(counts):
            j = max(range(len(counts)), key=lambda k: counts[k])
            counts[j] -= 1
            counts[i] = 1
    return counts


def generate_cluster(spec: ClusterSpec, *, seed: int = 0) -> tuple[Node, ...]:
    """The nodes of ``spec``; ``seed`` picks which nodes are tainted or cordoned."""
    shapes = [s for s, _ in spec.mix]
    counts = _apportion([w for _, w in spec.mix], spec.node_count)
    ordered = [s for s, c in zip(shapes, counts, strict=True) for _ in range(c)]
    rng = random.Random(seed)
    picked = rng.sample(range(spec.node_count), spec.tainted + spec.cordoned)
    tainted = set(picked[: spec.tainted])
    cordoned = set(picked[spec.tainted :])
    nodes = []
    for i, shape in enumerate(ordered):
        rack = i // spec.nodes_per_rack
        name = f"node-{i:03d}"
        gpus = tuple(
            GPU(
                index=g,
                model=shape.model,
                memory_mib=shape.gpu_memory_mib,
                nvlink_domain=f"{name}-nvl{g // shape.nvlink_size}" if shape.nvlink_size else None,
            )
            for g in range(shape.gpus)
        )
        taints = (
            (Taint(key="dedicated", value=spec.dedicated_tenant),) if i in tainted else ()
        )
        nodes.append(
            Node(
                name=name,
                cpu_milli=shape.cpu_milli,
                memory_mib=shape.memory_mib,
                gpus=gpus,
                labels={
                    "nvidia.com/gpu.product": shape.model,
                    "nvidia.com/gpu.count": str(shape.gpus),
                },
                taints=taints,
                topology={
                    "rack": f"rack-{rack}",
                    "block": f"block-{rack // spec.racks_per_block}",
                },
                schedulable=i not in cordoned,
            )
        )
    return tuple(nodes)


def energy_policy(spec: ClusterSpec, base: SolverPolicy | None = None) -> SolverPolicy:
    """``base`` with the idle and active watts of every GPU model in ``spec``."""
    base = base or SolverPolicy()
    shapes = [s for s, _ in spec.mix]
    return SolverPolicy(
        weights=base.weights,
        topology_levels=base.topology_levels,
        qos_classes=base.qos_classes,
        idle_watts={**{s.model: s.idle_watts for s in shapes}, **base.idle_watts},
        active_watts={**{s.model: s.active_watts for s in shapes}, **base.active_watts},
    )


# --------------------------------------------------------------------------------------------
# Workload
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobKind:
    """A kind of gang: its QoS class, shapes (pods x GPUs per pod, or a GPU share), priority,
    median run time (log-normal, spread ``sigma``) and where it may run."""

    name: str
    qos_class: str
    # (pods, gpus per pod, milli per GPU): whole GPUs have milli 1000
    shapes: tuple[tuple[int, int, int], ...]
    median_s: float
    sigma: float = 0.6
    priority: int = 0
    models: frozenset[str] = frozenset()

    @property
    def mean_gpu_milli(self) -> float:
        return sum(p * g * m for p, g, m in self.shapes) / len(self.shapes)

    @property
    def mean_duration_s(self) -> float:
        return self.median_s * math.exp(self.sigma * self.sigma / 2)


TRAINING = JobKind(
    "train",
    "training",
    shapes=((1, 1, MILLI), (1, 2, MILLI), (1, 4, MILLI), (1, 8, MILLI), (2, 4, MILLI),
            (2, 8, MILLI)),
    median_s=900.0,
    models=TRAINING_MODELS,
)
# Small fine-tuning and debugging runs that take a share of one GPU of any model: training
# work that may land next to serving, which the shipped QoS classes forbid.
FINETUNE = JobKind(
    "tune", "training", shapes=((1, 1, 500), (1, 1, 500), (1, 1, MILLI)), median_s=900.0,
)
LATENCY_INFERENCE = JobKind(
    "serve", "latency-inference", shapes=((1, 1, 250), (1, 1, 300), (1, 1, 500)),
    median_s=900.0, priority=2,
)
BATCH_INFERENCE = JobKind(
    "batch", "batch-inference", shapes=((1, 1, 250), (1, 1, 400), (1, 1, 500), (1, 1, MILLI)),
    median_s=600.0, priority=1,
)
NOTEBOOK = JobKind(
    "nb", "interactive", shapes=((1, 1, 100), (1, 1, 200), (1, 1, 250)), median_s=1200.0,
    priority=1,
)
BEST_EFFORT = JobKind(
    "scav", "best-effort", shapes=((1, 1, 200), (1, 1, 300), (1, 1, 500)), median_s=600.0,
)


@dataclass(frozen=True, slots=True)
class TenantSpec:
    """A tenant, its fair-share weight and the relative rate of each kind of gang it submits."""

    name: str
    weight: float = 1.0
    mix: tuple[tuple[JobKind, float], ...] = ()

    def __post_init__(self) -> None:
        if self.weight <= 0:
            raise ProblemError(f"tenants[{self.name}].weight", f"must be > 0, got {self.weight}")
        if any(r < 0 for _, r in self.mix):
            raise ProblemError(f"tenants[{self.name}].mix", "rates must be >= 0")


DEFAULT_TENANTS = (
    TenantSpec("team-a", 2.0, ((TRAINING, 3.0), (FINETUNE, 2.0), (BATCH_INFERENCE, 1.0))),
    TenantSpec("team-b", 1.0, ((LATENCY_INFERENCE, 5.0), (BATCH_INFERENCE, 2.0),
                               (FINETUNE, 1.0))),
    TenantSpec("team-c", 1.0, ((NOTEBOOK, 3.0), (BEST_EFFORT, 3.0), (LATENCY_INFERENCE, 1.0),
                               (FINETUNE, 1.0), (TRAINING, 0.5))),
)


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """Gangs arriving over ``horizon_s`` seconds as Poisson streams, one per tenant and kind.

    ``load`` is the offered GPU demand (arrival rate x mean GPUs x mean run time) as a multiple
    of the cluster's GPU capacity: above 1 queues build up and fairness starts to matter.
    """

    tenants: tuple[TenantSpec, ...] = DEFAULT_TENANTS
    horizon_s: float = 2700.0
    load: float = 1.5
    cpu_milli_per_gpu: int = 8_000
    memory_mib_per_gpu: int = 32_768
    tolerate_dedicated: bool = True

    def __post_init__(self) -> None:
        if not self.tenants:
            raise ProblemError("workload.tenants", "needs at least one tenant")
        if self.horizon_s <= 0:
            raise ProblemError("workload.horizon_s", f"must be > 0, got {self.horizon_s}")
        if self.load <= 0:
            raise ProblemError("workload.load", f"must be > 0, got {self.load}")
        names = [t.name for t in self.tenants]
        if len(set(names)) != len(names):
            raise ProblemError("workload.tenants", "tenant names must be unique")


def _topology(kind: JobKind, pods: int, gpus: int) -> TopologyRequirement | None:
    """Training wants fast links: a gang of several pods stays in one rack, a single pod of up
    to four GPUs on one NVLink domain; an eight-GPU pod prefers (but does not need) one."""
    if kind.qos_class != "training":
        return None
    if pods > 1:
        return TopologyRequirement("rack", TopologyMode.REQUIRED)
    if 1 < gpus <= 4:
        return TopologyRequirement("nvlink", TopologyMode.REQUIRED)
    if gpus > 4:
        return TopologyRequirement("nvlink", TopologyMode.PREFERRED)
    return None


def _gang(
    spec: WorkloadSpec, tenant: TenantSpec, kind: JobKind, index: int, rng: random.Random,
    dedicated: str | None,
) -> Gang:
    pods, gpus, milli = kind.shapes[rng.randrange(len(kind.shapes))]
    name = f"{tenant.name}-{kind.name}-{index:04d}"
    share = gpus * milli / MILLI
    tolerations = (
        (Toleration(key="dedicated", value=tenant.name),) if dedicated == tenant.name else ()
    )
    requests = tuple(
        PodRequest(
            name=f"{name}-{j}",
            cpu_milli=max(500, round(spec.cpu_milli_per_gpu * share)),
            memory_mib=max(1024, round(spec.memory_mib_per_gpu * share)),
            gpu_count=gpus,
            gpu_milli=milli,
            models=kind.models,
            qos_class=kind.qos_class,
            tolerations=tolerations,
        )
        for j in range(pods)
    )
    return Gang(
        name=name,
        tenant=tenant.name,
        pods=requests,
        priority=kind.priority,
        topology=_topology(kind, pods, gpus),
    )


def generate_workload(
    spec: WorkloadSpec, capacity_gpus: int, *, seed: int = 0, dedicated: str | None = None
) -> tuple[TimedGang, ...]:
    """Arrivals for a cluster of ``capacity_gpus`` GPUs, in time order. ``dedicated`` names the
    tenant whose pods tolerate the ``dedicated`` taint (see :class:`ClusterSpec`)."""
    if capacity_gpus <= 0:
        raise ProblemError("capacity_gpus", f"must be > 0, got {capacity_gpus}")
    # Scale the relative rates so the offered load matches spec.load.
    offered = sum(
        rate * kind.mean_gpu_milli / MILLI * kind.mean_duration_s
        for t in spec.tenants
        for kind, rate in t.mix
    )
    if offered <= 0:
        return ()
    per_second = spec.load * capacity_gpus / offered
    rng = random.Random(seed)
    arrivals: list[TimedGang] = []
    for tenant in spec.tenants:
        for kind, rate in tenant.mix:
            lam = rate * per_second
            if lam <= 0:
                continue
            t = rng.expovariate(lam)
            index = 0
            while t < spec.horizon_s:
                gang = _gang(spec, tenant, kind, index, rng, dedicated)
                median = kind.median_s
                duration = rng.lognormvariate(math.log(median), kind.sigma)
                duration = min(max(duration, median / 10), median * 10)
                arrivals.append(TimedGang(gang, float(math.floor(t)), float(round(duration))))
                index += 1
                t += rng.expovariate(lam)
    arrivals.sort(key=lambda a: (a.arrival_s, a.gang.name))
    return tuple(arrivals)


@dataclass(frozen=True, slots=True)
class GeneratorSpec:
    """The whole generated scenario: cluster, workload and the policy they run under."""

    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    policy: SolverPolicy = field(default_factory=SolverPolicy)


def generate(spec: GeneratorSpec | None = None, *, seed: int = 0) -> Scenario:
    """A complete scenario for the timed replay; the same ``seed`` gives the same scenario."""
    spec = spec or GeneratorSpec()
    nodes = generate_cluster(spec.cluster, seed=seed)
    capacity = sum(len(n.gpus) for n in nodes if n.usable)
    dedicated = spec.cluster.dedicated_tenant if spec.cluster.tainted else None
    arrivals = generate_workload(spec.workload, capacity, seed=seed, dedicated=dedicated)
    tenants = tuple(Tenant(name=t.name, weight=t.weight) for t in spec.workload.tenants)
    return Scenario(
        nodes=nodes,
        tenants=tenants,
        arrivals=arrivals,
        policy=energy_policy(spec.cluster, spec.policy),
    )
