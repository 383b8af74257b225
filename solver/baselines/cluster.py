"""Free capacity as numpy arrays, updated in place as greedy policies place pods.

The greedy baselines are called once per pod by the trace simulator (thousands of pods on a
1,213-node cluster), so rebuilding a snapshot per pod is out of the question. A
:class:`ClusterArrays` holds what :func:`solver.state.free_capacity` computes, one row per node
and one column per GPU slot, and changes only the row of the node a pod lands on. Every change
is journalled so that a gang can be undone as a whole.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solver.checker import gpu_memory_demand, sharing_problem
from solver.eligibility import node_allows
from solver.fragmentation import FragTable, typical_pods
from solver.interference import profile_for, resolve_profiles
from solver.state import free_capacity
from solver.types import MILLI, PodRequest, Snapshot, TypicalPod

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


@dataclass(slots=True)
class Saved:
    """A node's row before a pod was applied to it (one journal entry)."""

    node: int
    cpu: int
    mem: int
    gfree: IntArray
    gmem: IntArray
    classes: dict[int, list[str | None]]


class ClusterArrays:
    """Free CPU, memory and per-GPU capacity of every node of a snapshot.

    ``gfree[n, s]`` is the free milli-GPU of GPU slot s of node n (0 for slots the node lacks,
    see ``gexists``); ``gindex[n, s]`` is that GPU's ``index`` in the snapshot.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.nodes = snapshot.nodes
        n = len(self.nodes)
        g = max([len(node.gpus) for node in self.nodes] + [1])
        self.models: list[str] = sorted({gpu.model for node in self.nodes for gpu in node.gpus})
        model_id = {m: i for i, m in enumerate(self.models)}
        free = free_capacity(snapshot)
        self.cpu: IntArray = np.zeros(n, dtype=np.int64)
        self.mem: IntArray = np.zeros(n, dtype=np.int64)
        self.gfree: IntArray = np.zeros((n, g), dtype=np.int64)
        self.gmem: IntArray = np.zeros((n, g), dtype=np.int64)
        self.gmem_total: IntArray = np.zeros((n, g), dtype=np.int64)
        self.gexists: BoolArray = np.zeros((n, g), dtype=np.bool_)
        self.gindex: IntArray = np.full((n, g), -1, dtype=np.int64)
        self.gmodel: IntArray = np.full((n, g), -1, dtype=np.int64)
        self.node_model: IntArray = np.full(n, len(self.models), dtype=np.int64)
        self.gpu_count: IntArray = np.zeros(n, dtype=np.int64)
        self.row_of = {node.name: i for i, node in enumerate(self.nodes)}
        # classes[(n, s)]: QoS classes of the pods on that GPU (only GPUs that hold pods)
        self.classes: dict[tuple[int, int], list[str | None]] = {}
        for i, node in enumerate(self.nodes):
            f = free[node.name]
            self.cpu[i], self.mem[i] = f.cpu_milli, f.memory_mib
            self.gpu_count[i] = len(node.gpus)
            if node.gpus:
                self.node_model[i] = model_id[node.gpus[0].model]
            for s, gpu in enumerate(node.gpus):
                self.gexists[i, s] = True
                self.gindex[i, s] = gpu.index
                self.gmodel[i, s] = model_id[gpu.model]
                self.gfree[i, s] = f.gpu_milli[gpu.index]
                self.gmem[i, s] = f.gpu_memory_mib[gpu.index]
                self.gmem_total[i, s] = gpu.memory_mib
                if f.gpu_classes.get(gpu.index):
                    self.classes[(i, s)] = list(f.gpu_classes[gpu.index])
        for r in snapshot.running:  # pods without a class still count as neighbours
            i = self.row_of[r.node]
            for share in r.gpus:
                s = self._slot(i, share.index)
                if r.qos_class is None:
                    self.classes.setdefault((i, s), []).append(None)
        self._profiles = resolve_profiles(snapshot.policy.qos_classes)
        self.constrained_slots: set[tuple[int, int]] = set()
        for i, s in list(self.classes):
            self._track_class(i, s)
        self.max_cpu = max(1, int(max((nd.cpu_milli for nd in self.nodes), default=1)))
        self.max_gpu = max(MILLI, int(self.gpu_count.max(initial=0)) * MILLI)
        self._eligible: dict[Hashable, BoolArray] = {}
        self._model_ok: dict[frozenset[str], BoolArray] = {}
        # state_id[n]: nodes with equal ids have equal free capacity, models and GPU memory,
        # so a policy may score one of them for all (ids are never reused)
        self.state_id: IntArray = np.zeros(n, dtype=np.int64)
        self._state_ids: dict[bytes, int] = {}
        for i in range(n):
            self._refresh_state(i)
        self.frag: FragTable | None = None
        self._journal: list[Saved] | None = None
        self._cnt: IntArray | None = None
        self._usable: IntArray | None = None
        self._total: IntArray | None = None
        self.node_frag: FloatArray | None = None

    # ----------------------------------------------------------------------------------------
    # What a pod may use
    # ----------------------------------------------------------------------------------------

    def _slot(self, row: int, index: int) -> int:
        return int(np.nonzero(self.gindex[row] == index)[0][0])

    def eligible(self, pod: PodRequest) -> BoolArray:
        """Nodes the pod may use at all (:func:`solver.eligibility.node_allows`), cached per
        distinct scheduling constraints."""
        key = (
            tuple(sorted(pod.node_selector.items())),
            pod.affinity,
            pod.tolerations,
            pod.models,
            pod.gpu_count > 0,
        )
        mask = self._eligible.get(key)
        if mask is None:
            mask = np.array([node_allows(pod, nd) for nd in self.nodes], dtype=np.bool_)
            self._eligible[key] = mask
        return mask

    def model_ok(self, models: frozenset[str]) -> BoolArray:
        """GPU slots of an allowed model (every existing slot when ``models`` is empty)."""
        mask = self._model_ok.get(models)
        if mask is None:
            if models:
                ids = [i for i, m in enumerate(self.models) if m in models]
                mask = self.gexists & np.isin(self.gmodel, ids)
            else:
                mask = self.gexists.copy()
            self._model_ok[models] = mask
        return mask

    def gpu_mem_need(self, pod: PodRequest) -> IntArray:
        """GPU memory the pod takes on each slot (proportional unless it names an amount)."""
        if pod.gpu_memory_mib > 0:
            return np.full(self.gfree.shape, pod.gpu_memory_mib, dtype=np.int64)
        return self.gmem_total * pod.gpu_milli // MILLI

    def node_fits(self, pod: PodRequest) -> BoolArray:
        """Nodes with room for the pod's CPU and memory that it may use."""
        ok: BoolArray = self.eligible(pod) & (self.cpu >= pod.cpu_milli) & (
            self.mem >= pod.memory_mib)
        return ok

    def gpu_fits(self, pod: PodRequest, nodes: BoolArray) -> BoolArray:
        """GPU slots that could take one of the pod's GPUs: allowed model, enough free milli
        (whole GPUs for multi-GPU and whole-GPU pods), enough GPU memory, and no interference
        ban with the pods already there."""
        need = self.gpu_mem_need(pod)
        ok: BoolArray = (
            self.model_ok(pod.models) & nodes[:, None] & (self.gfree >= pod.gpu_milli)
            & (self.gmem >= need)
        )
        if pod.gpu_memory_mib > 0:
            ok &= self.gmem_total > 0
        if pod.shares_gpu and self.classes:
            self._drop_interfering(pod, ok)
        return ok

    def _drop_interfering(self, pod: PodRequest, ok: BoolArray) -> None:
        # Only a constrained class (exclusive, banning, latency-sensitive) can make sharing
        # illegal, so an unconstrained pod need only look at GPUs holding a constrained one.
        if self._constrained(pod.qos_class):
            slots: Iterable[tuple[int, int]] = list(self.classes)
        else:
            slots = list(self.constrained_slots)
        for i, s in slots:
            held = self.classes.get((i, s))
            if ok[i, s] and held and sharing_problem(self.snapshot.policy,
                                                     [*held, pod.qos_class]) is not None:
                ok[i, s] = False

    def _constrained(self, qos_class: str | None) -> bool:
        p = profile_for(qos_class, self._profiles)
        return p.exclusive or bool(p.no_share_with) or p.latency_sensitive

    def _track_class(self, row: int, slot: int) -> None:
        held = self.classes.get((row, slot), [])
        if any(self._constrained(c) for c in held):
            self.constrained_slots.add((row, slot))
        else:
            self.constrained_slots.discard((row, slot))

    # ----------------------------------------------------------------------------------------
    # Changing the state
    # ----------------------------------------------------------------------------------------

    def apply(self, row: int, pod: PodRequest, slots: list[int]) -> Saved:
        """Take the pod's resources on node ``row`` and GPU ``slots``; returns the undo entry."""
        saved = Saved(row, int(self.cpu[row]), int(self.mem[row]), self.gfree[row].copy(),
                       self.gmem[row].copy(),
                       {s: list(self.classes.get((row, s), [])) for s in slots})
        self.cpu[row] -= pod.cpu_milli
        self.mem[row] -= pod.memory_mib
        for s in slots:
            self.gfree[row, s] -= pod.gpu_milli
            gpu = self.nodes[row].gpus[s]
            self.gmem[row, s] -= gpu_memory_demand(pod, gpu, pod.gpu_milli)
            self.classes.setdefault((row, s), []).append(pod.qos_class)
            self._track_class(row, s)
        self._refresh_state(row)
        self._refresh_frag(row)
        if self._journal is not None:
            self._journal.append(saved)
        return saved

    def checkpoint(self) -> list[Saved]:
        """A journal to hand to :meth:`rollback`: every ``apply`` from now on is recorded."""
        self._journal = []
        return self._journal

    def rollback(self) -> None:
        """Undo every ``apply`` since :meth:`checkpoint`, newest first."""
        journal, self._journal = self._journal, None
        for saved in reversed(journal or []):
            self.undo(saved)

    def _refresh_state(self, row: int) -> None:
        key = np.concatenate([self.cpu[row : row + 1], self.mem[row : row + 1],
                              self.node_model[row : row + 1], self.gfree[row], self.gmem[row],
                              self.gmodel[row]]).tobytes()
        self.state_id[row] = self._state_ids.setdefault(key, len(self._state_ids))

    def undo(self, saved: Saved) -> None:
        row = saved.node
        self.cpu[row], self.mem[row] = saved.cpu, saved.mem
        self.gfree[row], self.gmem[row] = saved.gfree, saved.gmem
        for s, held in saved.classes.items():
            if held:
                self.classes[(row, s)] = held
            else:
                self.classes.pop((row, s), None)
            self._track_class(row, s)
        self._refresh_state(row)
        self._refresh_frag(row)

    # ----------------------------------------------------------------------------------------
    # Fragmentation (FGD), built on first use
    # ----------------------------------------------------------------------------------------

    def fragmentation(self) -> FragTable:
        """The compiled target workload: the policy's ``typical_pods``, else the shapes of the
        pending and running pods of the snapshot."""
        if self.frag is None:
            workload = self.snapshot.policy.typical_pods or _workload_of(self.snapshot)
            self.frag = FragTable(workload, self.models)
            self._cnt, self._usable, self._total = self.frag.stats(self.gfree)
            self.node_frag = self.frag.expected(self._cnt, self._usable, self._total,
                                                self.node_model, self.cpu)
        return self.frag

    def frag_stats(self) -> tuple[IntArray, IntArray, IntArray, FloatArray]:
        self.fragmentation()
        assert self._cnt is not None and self._usable is not None
        assert self._total is not None and self.node_frag is not None
        return self._cnt, self._usable, self._total, self.node_frag

    def _refresh_frag(self, row: int) -> None:
        if self.frag is None:
            return
        assert self._cnt is not None and self._usable is not None
        assert self._total is not None and self.node_frag is not None
        cnt, usable, total = self.frag.stats(self.gfree[row : row + 1])
        self._cnt[row], self._usable[row], self._total[row] = cnt[0], usable[0], total[0]
        self.node_frag[row] = self.frag.expected(cnt, usable, total,
                                                 self.node_model[row : row + 1],
                                                 self.cpu[row : row + 1])[0]


def _workload_of(snapshot: Snapshot) -> tuple[TypicalPod, ...]:
    pods = [p for g in snapshot.gangs for p in g.pods]
    for r in snapshot.running:
        milli = max((s.milli for s in r.gpus), default=0)
        pods.append(PodRequest(name=r.name, cpu_milli=r.cpu_milli, gpu_count=len(r.gpus),
                               gpu_milli=milli if len(r.gpus) <= 1 else MILLI))
    return typical_pods(pods)
