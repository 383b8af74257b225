"""Free capacity as numpy arrays, updated in place as greedy policies place pods.

The greedy baselines are called once per pod by the trace simulator (thousands of pods on a
1,213-node cluster), so rebuilding a snapshot per pod is out of the question. A
:class:`ClusterArrays` holds what :func:`solver.state.free_capacity` computes, one row per node
and one column per GPU slot, and changes only the row of the node a pod lands on. Every change
is journalled so that a gang can be undone as a whole.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from itertools import chain, repeat
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from solver.eligibility import node_allows
from solver.fragmentation import FragTable, typical_pods
from solver.interference import profile_for, resolve_profiles
from solver.plan import GangPlacement
from solver.rules import gpu_memory_demand, quota_usage_milli, sharing_problem
from solver.types import MILLI, Gang, PodRequest, Snapshot, TypicalPod

if TYPE_CHECKING:
    from solver.baselines.fgdcache import FgdCache

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
        # Vectorised: one pass over the running pods in Python (they are objects), everything
        # per node or per GPU in numpy. Equal to :func:`solver.state.free_capacity` (see
        # tests/solver/test_cpsat_cluster_arrays.py), about ten times faster on large clusters.
        self.snapshot = snapshot
        self.nodes = nodes = snapshot.nodes
        n = len(nodes)
        counts = [len(node.gpus) for node in nodes]
        g = max([*counts, 1])
        self.models: list[str] = sorted({gpu.model for node in nodes for gpu in node.gpus})
        model_id = {m: i for i, m in enumerate(self.models)}
        self.gpu_count: IntArray = np.array(counts, dtype=np.int64).reshape(n)
        self.gexists: BoolArray = np.arange(g)[None, :] < self.gpu_count[:, None]
        flat = [gpu for node in nodes for gpu in node.gpus]  # row-major, as np.nonzero(gexists)
        self.gindex: IntArray = np.full((n, g), -1, dtype=np.int64)
        self.gmodel: IntArray = np.full((n, g), -1, dtype=np.int64)
        self.gmem_total: IntArray = np.zeros((n, g), dtype=np.int64)
        self.gindex[self.gexists] = np.fromiter((gpu.index for gpu in flat), np.int64, len(flat))
        self.gmodel[self.gexists] = np.fromiter((model_id[gpu.model] for gpu in flat), np.int64,
                                                len(flat))
        self.gmem_total[self.gexists] = np.fromiter((gpu.memory_mib for gpu in flat), np.int64,
                                                    len(flat))
        self.node_model: IntArray = np.where(self.gpu_count > 0, self.gmodel[:, 0],
                                             len(self.models)).astype(np.int64)
        self.row_of = {node.name: i for i, node in enumerate(nodes)}
        self.cpu: IntArray = np.fromiter((nd.cpu_milli for nd in nodes), np.int64, n)
        self.mem: IntArray = np.fromiter((nd.memory_mib for nd in nodes), np.int64, n)
        self.gfree: IntArray = np.where(self.gexists, MILLI, 0).astype(np.int64)
        self.gmem: IntArray = self.gmem_total.copy()
        # classes[(n, s)]: QoS classes of the pods on that GPU (only GPUs that hold pods);
        # named classes first, then None for each pod without a class (a busy neighbour)
        self.classes: dict[tuple[int, int], list[str | None]] = {}
        self._subtract_running(snapshot)
        self._profiles = resolve_profiles(snapshot.policy.qos_classes)
        constrained = {c for held in self.classes.values() for c in held}
        constrained = {c for c in constrained if self._constrained(c)}
        self.constrained_slots: set[tuple[int, int]] = {
            key for key, held in self.classes.items() if not constrained.isdisjoint(held)
        } if constrained else set()
        self.max_cpu = max(1, int(max((nd.cpu_milli for nd in nodes), default=1)))
        self.max_gpu = max(MILLI, int(self.gpu_count.max(initial=0)) * MILLI)
        self._eligible: dict[Hashable, BoolArray] = {}
        self._model_ok: dict[frozenset[str], BoolArray] = {}
        # state_id[n]: nodes with equal ids have equal free capacity, models and GPU memory,
        # so a policy may score one of them for all (ids are never reused)
        self.state_id: IntArray = np.zeros(n, dtype=np.int64)
        self._state_ids: dict[bytes, int] = {}
        keys = np.ascontiguousarray(np.concatenate(
            [self.cpu[:, None], self.mem[:, None], self.node_model[:, None], self.gfree,
             self.gmem, self.gmodel], axis=1))
        width = keys.shape[1] * keys.itemsize
        raw = keys.tobytes()
        ids = self._state_ids
        for i in range(n):
            self.state_id[i] = ids.setdefault(raw[i * width:(i + 1) * width], len(ids))
        self.frag: FragTable | None = None
        self._workload: tuple[TypicalPod, ...] | None = None
        # tie_rank[n]: where node n stands when policies score nodes equal (lowest first);
        # snapshot order until a placer draws a seeded order (see GangPlacer)
        self.tie_rank: IntArray = np.arange(n, dtype=np.int64)
        self._journal: list[Saved] | None = None
        self._cnt: IntArray | None = None
        self._usable: IntArray | None = None
        self._total: IntArray | None = None
        self.node_frag: FloatArray | None = None
        # each state_id's row of frag_stats, so that undoing a placement costs no rescoring
        self._frag_rows: dict[int, tuple[IntArray, IntArray, int, float]] = {}
        self._fgd: FgdCache | None = None
        self._quota_used: dict[str, int] | None = None
        # topology domains by level, and each domain's rows and GPU slots (see greedy.py):
        # functions of the layout, shared by copies
        self.domain_cache: dict[Hashable, object] = {}

    def quota_used(self) -> dict[str, int]:
        """:func:`solver.rules.quota_usage_milli` of the snapshot (running pods only), computed
        once and shared by copies; callers must not change it."""
        if self._quota_used is None:
            self._quota_used = quota_usage_milli(self.snapshot)
        return self._quota_used

    def _subtract_running(self, snapshot: Snapshot) -> None:
        """Take every running pod's CPU, memory and GPU shares off the free arrays (GPU memory
        in proportion to the share, as :func:`solver.state.free_capacity` counts it)."""
        g = self.gfree.shape[1]
        # GPU index -> slot: the slot itself on nodes whose GPUs are indexed 0..k-1 in order
        plain: list[bool] = ((self.gindex == np.arange(g)[None, :]) | ~self.gexists).all(
            axis=1).tolist()
        count: list[int] = self.gpu_count.tolist()
        slot_maps: dict[int, dict[int, int]] = {}
        rows: list[int] = []
        cpu: list[int] = []
        mem: list[int] = []
        srow: list[int] = []
        sidx: list[int] = []
        smilli: list[int] = []
        unnamed: list[tuple[int, int]] = []
        classes = self.classes
        row_of = self.row_of
        for r in snapshot.running:
            i = row_of[r.node]
            rows.append(i)
            cpu.append(r.cpu_milli)
            mem.append(r.memory_mib)
            if not r.gpus:
                continue
            for share in r.gpus:
                if plain[i] and 0 <= share.index < count[i]:
                    s = share.index
                else:
                    m = slot_maps.get(i)
                    if m is None:
                        m = slot_maps[i] = {gpu.index: k for k, gpu in
                                            enumerate(self.nodes[i].gpus)}
                    s = m[share.index]  # KeyError like free_capacity for an unknown GPU
                srow.append(i)
                sidx.append(s)
                smilli.append(share.milli)
                if r.qos_class:
                    classes.setdefault((i, s), []).append(r.qos_class)
                elif r.qos_class is None:
                    unnamed.append((i, s))
        for key in unnamed:
            classes.setdefault(key, []).append(None)
        if rows:
            r_ = np.array(rows, dtype=np.int64)
            np.subtract.at(self.cpu, r_, np.array(cpu, dtype=np.int64))
            np.subtract.at(self.mem, r_, np.array(mem, dtype=np.int64))
        if srow:
            at = (np.array(srow, dtype=np.int64), np.array(sidx, dtype=np.int64))
            milli = np.array(smilli, dtype=np.int64)
            np.subtract.at(self.gfree, at, milli)
            np.subtract.at(self.gmem, at, self.gmem_total[at] * milli // MILLI)

    def copy(self) -> ClusterArrays:
        """An independent copy of the free state (e.g. for a greedy pass that places into it),
        sharing what never changes: the snapshot, the GPU layout and the eligibility caches.
        No journal is carried over."""
        c = object.__new__(ClusterArrays)
        c.snapshot, c.nodes, c.models = self.snapshot, self.nodes, self.models
        c.gpu_count, c.gexists, c.gindex = self.gpu_count, self.gexists, self.gindex
        c.gmodel, c.gmem_total, c.node_model = self.gmodel, self.gmem_total, self.node_model
        c.row_of, c._profiles = self.row_of, self._profiles
        c.max_cpu, c.max_gpu = self.max_cpu, self.max_gpu
        c._eligible, c._model_ok = self._eligible, self._model_ok  # pure functions of layout
        c._quota_used = self._quota_used  # a function of the snapshot
        c.domain_cache = self.domain_cache  # a function of the layout
        c.cpu, c.mem = self.cpu.copy(), self.mem.copy()
        c.gfree, c.gmem = self.gfree.copy(), self.gmem.copy()
        c.classes = {k: list(v) for k, v in self.classes.items()}
        c.constrained_slots = set(self.constrained_slots)
        c.state_id, c._state_ids = self.state_id.copy(), dict(self._state_ids)
        c.frag, c._journal, c._workload = self.frag, None, self._workload
        c.tie_rank = self.tie_rank
        c._cnt = None if self._cnt is None else self._cnt.copy()
        c._usable = None if self._usable is None else self._usable.copy()
        c._total = None if self._total is None else self._total.copy()
        c.node_frag = None if self.node_frag is None else self.node_frag.copy()
        c._frag_rows, c._fgd = {}, None  # state ids of copies may differ from here on
        return c

    def fgd_cache(self) -> FgdCache:
        """FGD's choices on this state, cached per pod shape (:mod:`solver.baselines.fgdcache`);
        one per state, kept across placers."""
        if self._fgd is None:
            from solver.baselines.fgdcache import FgdCache

            self._fgd = FgdCache(self)
        return self._fgd

    # ----------------------------------------------------------------------------------------
    # What a pod may use
    # ----------------------------------------------------------------------------------------

    def slot_of(self, row: int, index: int) -> int:
        """The column of node ``row``'s GPU whose device index is ``index``."""
        return int(np.flatnonzero(self.gindex[row] == index)[0])

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

    def rows_node_fit(self, pod: PodRequest, rows: IntArray) -> BoolArray:
        """:meth:`node_fits` of ``rows`` only (one entry per row)."""
        sub: BoolArray = self.eligible(pod)[rows] & (self.cpu[rows] >= pod.cpu_milli) & (
            self.mem[rows] >= pod.memory_mib)
        return sub

    def rows_gpu_fit(self, pod: PodRequest, rows: IntArray, fit: BoolArray) -> BoolArray:
        """:meth:`gpu_fits` of ``rows`` only, given their :meth:`rows_node_fit` ``fit``,
        without the interference bans (one row of GPU slots per row)."""
        if pod.gpu_memory_mib > 0:
            need = np.full((rows.size, self.gfree.shape[1]), pod.gpu_memory_mib, dtype=np.int64)
        else:
            need = self.gmem_total[rows] * pod.gpu_milli // MILLI
        ok: BoolArray = (self.model_ok(pod.models)[rows] & fit[:, None]
                         & (self.gfree[rows] >= pod.gpu_milli) & (self.gmem[rows] >= need))
        if pod.gpu_memory_mib > 0:
            ok &= self.gmem_total[rows] > 0
        return ok

    def fits_on(self, pod: PodRequest, rows: IntArray) -> tuple[BoolArray, BoolArray | None]:
        """:meth:`node_fits` and, for a GPU pod, :meth:`gpu_fits` of those nodes, computed for
        ``rows`` only (False elsewhere): the same masks as the whole-cluster calls restricted
        to ``rows``, at the cost of ``rows`` instead of the cluster (a gang tried domain by
        domain)."""
        sub = self.rows_node_fit(pod, rows)
        fit: BoolArray = np.zeros(len(self.nodes), dtype=np.bool_)
        fit[rows] = sub
        if pod.gpu_count == 0:
            return fit, None
        ok_sub = self.rows_gpu_fit(pod, rows, sub)
        ok: BoolArray = np.zeros(self.gfree.shape, dtype=np.bool_)
        ok[rows] = ok_sub
        if pod.shares_gpu and self.classes:
            self._drop_interfering(pod, ok)
        return fit, ok

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

    def is_constrained(self, qos_class: str | None) -> bool:
        """Whether pods of ``qos_class`` restrict who may share a GPU with them."""
        return self._constrained(qos_class)

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

    def apply_gang(self, gang: Gang, placement: GangPlacement) -> None:
        """Take the resources of ``placement`` (``gang``'s pods on their nodes and GPUs)."""
        pods = {p.name: p for p in gang.pods}
        for pp in placement.pods:
            row = self.row_of[pp.node]
            self.apply(row, pods[pp.pod], [self.slot_of(row, g.index) for g in pp.gpus])

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
            self.frag = FragTable(self.target_workload(), self.models)
            self._cnt, self._usable, self._total = self.frag.stats(self.gfree)
            self.node_frag = self.frag.expected(self._cnt, self._usable, self._total,
                                                self.node_model, self.cpu)
        return self.frag

    def target_workload(self) -> tuple[TypicalPod, ...]:
        """The workload FGD measures against: the policy's ``typical_pods``, else the shapes of
        the pending and running pods of the snapshot (computed once)."""
        if self._workload is None:
            self._workload = tuple(self.snapshot.policy.typical_pods
                                   or _workload_of(self.snapshot))
        return self._workload

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
        sid = int(self.state_id[row])  # the frag row is a function of the node's state
        known = self._frag_rows.get(sid)
        if known is None:
            cnt, usable, total = self.frag.stats(self.gfree[row : row + 1])
            frag = float(self.frag.expected(cnt, usable, total, self.node_model[row : row + 1],
                                            self.cpu[row : row + 1])[0])
            known = (cnt[0], usable[0], int(total[0]), frag)
            self._frag_rows[sid] = known
        self._cnt[row], self._usable[row], self._total[row], self.node_frag[row] = known


def _workload_of(snapshot: Snapshot) -> tuple[TypicalPod, ...]:
    """The typical shapes of the pending and running pods. A running pod counts as a pod of its
    CPU and GPUs; one pod object is built per distinct shape and counted as often as it occurs
    (one per running pod cost ~30 ms on the openb cluster)."""
    running: Counter[tuple[int, int, int]] = Counter()
    for r in snapshot.running:
        k = len(r.gpus)
        running[(r.cpu_milli, k, 0 if k == 0 else MILLI if k > 1 else r.gpus[0].milli)] += 1
    shapes = [(PodRequest(name="running", cpu_milli=cpu, gpu_count=k, gpu_milli=milli), n)
              for (cpu, k, milli), n in running.items()]
    pods = chain((p for g in snapshot.gangs for p in g.pods),
                 chain.from_iterable(repeat(pod, n) for pod, n in shapes))
    return typical_pods(pods)
