"""The data one CP-SAT solve works on, derived once from a snapshot.

The model modules never look at the raw snapshot: they read an :class:`Instance`, which holds
the free capacity (the baselines' :class:`~solver.baselines.ClusterArrays`, so the model, the
greedy policies and the checker agree on what is free), the pods of the window with their gang,
the value of each gang, and the candidate nodes and GPUs each pod may use. Building the
candidate lists here (see :mod:`solver.cpsat.candidates`) is what keeps the model small.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from solver.baselines import ClusterArrays
from solver.cpsat.qos import QosRules
from solver.fairshare import boosts
from solver.plan import Plan
from solver.queue import gang_boost
from solver.rules import topology_domain
from solver.types import GPU, MILLI, Gang, PodRequest, Snapshot, Weights

IntArray = npt.NDArray[np.int64]

# Gangs that ask for no GPU still carry a small value so that they are admitted when they fit.
CPU_ONLY_POD_VALUE_MILLI = 10
# Objective units per milli-GPU of priority-1 demand (float weights keep two decimals).
OBJECTIVE_SCALE = 100
# Most objective units the demand term may reach (every gang admitted): the gangs' values are
# scaled down alike when a window's would sum past it (extreme priorities, weights, waits), so
# the model's objective stays far inside CP-SAT's 64-bit integers and the model valid; the
# order of the gangs' values is kept, only precision among the smallest is lost.
DEMAND_TERM_LIMIT = 2**52
# Nodes offered to each pod outside topology-constrained gangs (8 admits as much as 12 on the
# openb windows of bench/solve_scale.py at four-fifths of the model-building time).
PER_POD_NODES = 8


def priority_weight(gang: Gang, weights: Weights, boost: float = 0.0) -> float:
    """How much one milli-GPU of this gang is worth: priority plus aging plus ``boost``
    (its tenant's fair-share boost and its short-run bonus, :func:`solver.queue.gang_boost`,
    >= 0), never below 1.

    Aging adds ``aging_per_hour`` per hour waited, so a low-priority gang eventually outranks a
    fresh high-priority one and nothing starves.
    """
    return (1.0 + max(0, gang.priority) + weights.aging_per_hour * gang.wait_seconds / 3600.0
            + max(0.0, boost))


def gang_demand_milli(gang: Gang) -> int:
    """GPU demand used for the gang's value; CPU-only gangs count a token amount per pod."""
    demand = gang.gpu_demand_milli
    return demand if demand > 0 else CPU_ONLY_POD_VALUE_MILLI * len(gang.pods)


def weighted_demand(gang: Gang, weights: Weights, boost: float = 0.0) -> float:
    """Priority-weighted GPU demand of a gang (the quantity CP-SAT must not lose to greedy)."""
    return gang.gpu_demand_milli * priority_weight(gang, weights, boost)


def plan_weighted_demand(snapshot: Snapshot, plan: Plan) -> float:
    by_name = {g.name: g for g in snapshot.gangs}
    w = snapshot.policy.weights
    boost = boosts(snapshot)
    queueing = snapshot.policy.queueing
    return sum(weighted_demand(by_name[a.gang], w, gang_boost(by_name[a.gang], boost, queueing))
               for a in plan.admitted if a.gang in by_name)


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


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """What the running pods of each tenant hold (pods without a tenant are not counted)."""

    gpu_milli: dict[str, int]
    cpu_milli: dict[str, int]
    memory_mib: dict[str, int]


@dataclass(slots=True)
class Instance:
    snapshot: Snapshot
    arrays: ClusterArrays
    gangs: tuple[Gang, ...]
    pods: list[PodRef]
    gang_pods: list[list[int]]  # gang index -> pod indexes
    qos: QosRules
    candidates: list[list[Candidate]] = field(default_factory=list)  # pod -> where it may go
    _slots: dict[str, dict[int, int]] = field(default_factory=dict)
    _domains: dict[str, IntArray] = field(default_factory=dict)
    _by_tenant: TenantUsage | None = None
    _values: list[int] | None = None
    hint: Plan | None = None  # the plan the model starts from (the order search's)

    @property
    def weights(self) -> Weights:
        return self.snapshot.policy.weights

    def gang_value(self, g: int) -> int:
        """Objective value of admitting gang ``g`` (milli-GPU x priority weight x demand
        weight), scaled with every other gang's when they would sum past
        :data:`DEMAND_TERM_LIMIT`."""
        if self._values is None:
            w = self.weights
            boost = boosts(self.snapshot)
            queueing = self.snapshot.policy.queueing
            raw = [OBJECTIVE_SCALE * w.demand * gang_demand_milli(gang)
                   * priority_weight(gang, w, gang_boost(gang, boost, queueing))
                   for gang in self.gangs]
            total = sum(raw)
            scale = DEMAND_TERM_LIMIT / total if total > DEMAND_TERM_LIMIT else 1.0
            self._values = [round(x * scale) for x in raw]
        return self._values[g]

    def running_by_tenant(self) -> TenantUsage:
        """Per-tenant usage of the running pods, summed once per solve (quota and fairness
        both need it; ``gpu_milli`` equals :func:`solver.rules.quota_usage_milli`)."""
        if self._by_tenant is None:
            gpu: dict[str, int] = defaultdict(int)
            cpu: dict[str, int] = defaultdict(int)
            mem: dict[str, int] = defaultdict(int)
            for r in self.snapshot.running:
                t = r.tenant
                if t is not None:
                    milli = 0
                    for s in r.gpus:
                        milli += s.milli
                    gpu[t] += milli
                    cpu[t] += r.cpu_milli
                    mem[t] += r.memory_mib
            self._by_tenant = TenantUsage(dict(gpu), dict(cpu), dict(mem))
        return self._by_tenant

    # --- free capacity, by node name and GPU index -------------------------------------------

    def _at(self, node: str, gpu: int) -> tuple[int, int]:
        row = self.arrays.row_of[node]
        slots = self._slots.get(node)
        if slots is None:
            slots = {g.index: s for s, g in enumerate(self.snapshot.nodes[row].gpus)}
            self._slots[node] = slots
        return row, slots[gpu]

    def cpu_free(self, node: str) -> int:
        return int(self.arrays.cpu[self.arrays.row_of[node]])

    def memory_free(self, node: str) -> int:
        return int(self.arrays.mem[self.arrays.row_of[node]])

    def gpu(self, node: str, gpu: int) -> GPU:
        row, slot = self._at(node, gpu)
        return self.snapshot.nodes[row].gpus[slot]

    def gpu_free(self, node: str, gpu: int) -> int:
        return int(self.arrays.gfree[self._at(node, gpu)])

    def gpu_memory_free(self, node: str, gpu: int) -> int:
        return int(self.arrays.gmem[self._at(node, gpu)])

    def gpu_classes(self, node: str, gpu: int) -> list[str | None]:
        """QoS classes of the running pods on the GPU (None for a pod without a class)."""
        return list(self.arrays.classes.get(self._at(node, gpu), []))

    def gpu_idle(self, node: str, gpu: int) -> bool:
        """No running pod holds any of this GPU (activating it costs power)."""
        return self.gpu_free(node, gpu) >= MILLI and not self.gpu_classes(node, gpu)

    # --- topology ------------------------------------------------------------------------------

    def domain(self, level: str, node: str, gpu: int | None = None) -> str | None:
        """The domain at ``level`` holding ``node`` (and GPU ``gpu`` for the nvlink level),
        as the rules define it (:func:`solver.rules.topology_domain`); None: in none."""
        n = self.snapshot.nodes[self.arrays.row_of[node]]
        return topology_domain(n, self.gpu(node, gpu) if gpu is not None else None, level)

    def domain_ids(self, level: str, gpus: npt.NDArray[np.bool_]) -> IntArray:
        """Integer domain ids: per GPU slot (shape nodes x slots) for ``nvlink``, else per node
        (shape nodes x 1); -1 where there is none. ``gpus`` limits the nvlink work to slots
        that matter."""
        key = level
        cached = self._domains.get(key)
        if cached is not None and level != "nvlink":
            return cached
        nodes = self.snapshot.nodes
        names: dict[str, int] = {}
        if level == "nvlink":
            out = np.full(self.arrays.gfree.shape, -1, dtype=np.int64)
            for row, slot in zip(*np.nonzero(gpus), strict=True):
                n = nodes[row]
                d = topology_domain(n, n.gpus[slot], level)
                if d is not None:
                    out[row, slot] = names.setdefault(d, len(names))
            return out
        out = np.full((len(nodes), 1), -1, dtype=np.int64)
        for row, n in enumerate(nodes):
            d = topology_domain(n, None, level)
            if d is not None:
                out[row, 0] = names.setdefault(d, len(names))
        self._domains[key] = out
        return out


def make_instance(
    snapshot: Snapshot,
    *,
    hint: Plan | None = None,
    per_pod_nodes: int = PER_POD_NODES,
    arrays: ClusterArrays | None = None,
) -> Instance:
    """Derive the solve's data: free capacity, pods, and filtered candidates per pod."""
    from solver.cpsat.candidates import build_candidates

    pods: list[PodRef] = []
    gang_pods: list[list[int]] = []
    for gi, gang in enumerate(snapshot.gangs):
        idx: list[int] = []
        for pod in gang.pods:
            idx.append(len(pods))
            pods.append(PodRef(gi, pod))
        gang_pods.append(idx)
    inst = Instance(snapshot, arrays if arrays is not None else ClusterArrays(snapshot),
                    snapshot.gangs, pods, gang_pods, QosRules(snapshot.policy))
    inst.candidates = build_candidates(inst, hint=hint, per_pod_nodes=per_pod_nodes)
    inst.hint = hint
    return inst
