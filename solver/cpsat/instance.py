"""The data one CP-SAT solve works on, derived once from a snapshot.

The model modules never look at the raw snapshot: they read an :class:`Instance`, which holds
the free capacity (from :mod:`solver.state`), the pods of the window with their gang and QoS
profile, the value of each gang, and the candidate nodes and GPUs each pod may use. Building the
candidate lists here (see :mod:`solver.cpsat.candidates`) is what keeps the model small.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from solver.checker import topology_domain
from solver.cpsat.qos import QosRules
from solver.plan import Plan
from solver.state import FreeState, free_capacity
from solver.types import GPU, MILLI, Gang, Node, PodRequest, Snapshot, SolverPolicy, Weights

# Gangs that ask for no GPU still carry a small value so that they are admitted when they fit.
CPU_ONLY_POD_VALUE_MILLI = 10
# Objective units per milli-GPU of priority-1 demand (float weights keep two decimals).
OBJECTIVE_SCALE = 100


def priority_weight(gang: Gang, weights: Weights) -> float:
    """How much one milli-GPU of this gang is worth: priority plus aging, never below 1.

    Aging adds ``aging_per_hour`` per hour waited, so a low-priority gang eventually outranks a
    fresh high-priority one and nothing starves.
    """
    return 1.0 + max(0, gang.priority) + weights.aging_per_hour * gang.wait_seconds / 3600.0


def gang_demand_milli(gang: Gang) -> int:
    """GPU demand used for value and quota; CPU-only gangs count a token amount per pod."""
    demand = gang.gpu_demand_milli
    return demand if demand > 0 else CPU_ONLY_POD_VALUE_MILLI * len(gang.pods)


def weighted_demand(gang: Gang, weights: Weights) -> float:
    """Priority-weighted GPU demand of a gang (the quantity CP-SAT must not lose to greedy)."""
    return gang.gpu_demand_milli * priority_weight(gang, weights)


def plan_weighted_demand(snapshot: Snapshot, plan: Plan) -> float:
    by_name = {g.name: g for g in snapshot.gangs}
    w = snapshot.policy.weights
    return sum(weighted_demand(by_name[a.gang], w) for a in plan.admitted if a.gang in by_name)


@dataclass(frozen=True, slots=True)
class PodRef:
    """One pod of the window: ``gang`` indexes :attr:`Instance.gangs`."""

    gang: int
    pod: PodRequest


@dataclass(frozen=True, slots=True)
class Candidate:
    """Pod may run on ``node``; ``gpus`` are the GPU indexes there it may take a share of."""

    node: str
    gpus: tuple[int, ...] = ()


@dataclass(slots=True)
class Instance:
    snapshot: Snapshot
    free: FreeState
    gangs: tuple[Gang, ...]
    pods: list[PodRef]
    gang_pods: list[list[int]]  # gang index -> pod indexes
    candidates: list[list[Candidate]]  # pod index -> where it may go
    nodes: dict[str, Node]  # every node of the snapshot by name
    gpus: dict[tuple[str, int], GPU] = field(default_factory=dict)
    qos: QosRules = field(default_factory=lambda: QosRules(SolverPolicy()))

    @property
    def weights(self) -> Weights:
        return self.snapshot.policy.weights

    def gang_value(self, g: int) -> int:
        """Objective value of admitting gang ``g`` (milli-GPU x priority weight x demand weight)."""
        gang = self.gangs[g]
        value = self.weights.demand * gang_demand_milli(gang) * priority_weight(gang, self.weights)
        return round(OBJECTIVE_SCALE * value)

    def domain(self, level: str, node: str, gpu: int | None = None) -> str | None:
        """The domain at ``level`` holding ``node`` (and GPU ``gpu`` for the nvlink level),
        as the checker defines it (:func:`solver.checker.topology_domain`); None: in none."""
        return topology_domain(
            self.nodes[node], self.gpus[(node, gpu)] if gpu is not None else None, level
        )

    def gpu_free_milli(self, node: str, gpu: int) -> int:
        return self.free[node].gpu_milli[gpu]

    def gpu_idle(self, node: str, gpu: int) -> bool:
        """No running pod holds any of this GPU (activating it costs power)."""
        f = self.free[node]
        return f.gpu_milli[gpu] >= MILLI and not f.gpu_classes.get(gpu)


def make_instance(
    snapshot: Snapshot,
    *,
    hint: Plan | None = None,
    per_class_window: int = 4,
    max_classes_per_pod: int = 8,
    free: FreeState | None = None,
) -> Instance:
    """Derive the solve's data: free capacity, pods, and filtered candidates per pod."""
    from solver.cpsat.candidates import build_candidates

    free = free if free is not None else free_capacity(snapshot)
    gangs = snapshot.gangs
    pods: list[PodRef] = []
    gang_pods: list[list[int]] = []
    for gi, gang in enumerate(gangs):
        idx: list[int] = []
        for pod in gang.pods:
            idx.append(len(pods))
            pods.append(PodRef(gi, pod))
        gang_pods.append(idx)
    nodes = {n.name: n for n in snapshot.nodes}
    gpus = {(n.name, g.index): g for n in snapshot.nodes for g in n.gpus}
    inst = Instance(snapshot, free, gangs, pods, gang_pods, [], nodes, gpus,
                    QosRules(snapshot.policy))
    inst.candidates = build_candidates(
        inst, hint=hint, per_class_window=per_class_window, max_classes_per_pod=max_classes_per_pod
    )
    return inst
