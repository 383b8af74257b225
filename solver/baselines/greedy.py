"""Greedy placement of whole gangs, one at a time, as transactions.

A gang is placed pod by pod into a :class:`~solver.baselines.cluster.ClusterArrays`; if any pod
finds no room, every pod already placed is undone (Volcano's Statement: commit or discard). A
gang with a *required* topology is tried inside one domain of its level at a time, the
roomiest-fitting domains first. Tenant quotas are judged before the gang is tried, with the
checker's own rule, by :func:`solver.queue.quota_reason` (which also words the deferral).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from solver.baselines.cluster import BoolArray, ClusterArrays, IntArray, Saved
from solver.baselines.policies import POLICIES, Policy
from solver.baselines.steer import ModelSteer
from solver.eligibility import why_not
from solver.names import SolverName
from solver.plan import GangPlacement, PodPlacement
from solver.queue import quota_reason
from solver.types import Gang, GpuShare, PodRequest, TopologyMode

#: How many domains a gang with a required topology is tried in before it is deferred.
MAX_DOMAIN_TRIES = 32


@dataclass
class GangPlacer:
    """Places gangs into ``state`` with one policy; keeps quota usage across gangs."""

    state: ClusterArrays
    policy_name: str
    rng: np.random.Generator
    used: dict[str, int] = field(default_factory=dict)
    admitting: set[str] = field(default_factory=set)
    #: keep GPU models free for the pods that may run only on them (solver/baselines/steer.py)
    steer: ModelSteer | None = None

    def __post_init__(self) -> None:
        if self.policy_name not in POLICIES:
            raise ValueError(f"unknown greedy policy {self.policy_name!r}; "
                             f"choose one of {', '.join(sorted(POLICIES))}")
        self.policy: Policy = POLICIES[self.policy_name]
        self.used = dict(self.state.quota_used()) | self.used
        if self.policy_name == SolverName.FGD:
            # FGD's scores tie often; ties go to the first node of one seeded order, drawn
            # once, as the paper's simulator names its nodes with a seeded random prefix and
            # gives ties to the smallest name
            self.state.tie_rank = self.rng.permutation(len(self.state.nodes)).astype(np.int64)

    def place(self, gang: Gang) -> GangPlacement | str:
        """Place the whole gang (state updated) or nothing (state untouched, reason returned)."""
        quota = quota_reason(self.state.snapshot, gang, self.used, self.admitting)
        if quota is not None:
            return quota
        pods = sorted(gang.pods, key=lambda p: (-p.gpu_demand_milli, -p.cpu_milli))
        topo = gang.topology
        if topo is None or topo.mode != TopologyMode.REQUIRED:
            placed = self._try(pods, None, None)
            if isinstance(placed, str):
                return placed
        else:
            placed = self._try_domains(gang, pods, topo.level)
            if isinstance(placed, str):
                return placed
        self.used[gang.tenant] = self.used.get(gang.tenant, 0) + gang.gpu_demand_milli
        self.admitting.add(gang.tenant)
        return GangPlacement(gang=gang.name, pods=tuple(self._placement(p, r, s)
                                                        for p, r, s in placed))

    def _placement(self, pod: PodRequest, row: int, slots: list[int]) -> PodPlacement:
        node = self.state.nodes[row]
        return PodPlacement(pod=pod.name, node=node.name, gpus=tuple(
            GpuShare(index=int(self.state.gindex[row, s]), milli=pod.gpu_milli) for s in slots))

    def _try(
        self, pods: list[PodRequest], nodes: BoolArray | None, slots: BoolArray | None,
        rows: IntArray | None = None,
    ) -> list[tuple[PodRequest, int, list[int]]] | str:
        """Place ``pods`` on ``nodes`` (a mask; None: any) and GPU ``slots`` (None: any).
        ``rows``: the node rows of the domain that ``nodes`` or ``slots`` stand for, so that
        only they are scanned (the same choices as a scan of the whole cluster)."""
        st = self.state
        journal: list[Saved] = []
        placed: list[tuple[PodRequest, int, list[int]]] = []
        fast = st.fgd_cache() if self.policy_name == SolverName.FGD else None
        for pod in pods:
            steer = self.steer
            prefer = None if steer is None else (
                lambda fit, pod=pod, steer=steer: steer.prefer(st, pod, fit))
            if fast is not None and nodes is None and slots is None and fast.applies(pod):
                # FGD's own choice, only changed nodes rescored
                choice = fast.choose(pod, prefer)
            elif rows is not None and (slots is None or pod.gpu_count > 0):
                # a CPU-only pod of an NVLink-domain gang may go anywhere: the long way below
                fit, gpus = st.fits_on(pod, rows)
                if gpus is not None:
                    if slots is not None:
                        gpus &= slots
                    fit[rows] = gpus[rows].sum(axis=1) >= pod.gpu_count
                if prefer is not None:
                    fit = prefer(fit)
                choice = self.policy(st, pod, fit, gpus, self.rng)
            else:
                fit = st.node_fits(pod)
                if nodes is not None:
                    fit = fit & nodes
                gpus = None
                if pod.gpu_count > 0:
                    gpus = st.gpu_fits(pod, fit)
                    if slots is not None:
                        gpus &= slots
                    fit = gpus.sum(axis=1) >= pod.gpu_count
                if prefer is not None:
                    fit = prefer(fit)
                choice = self.policy(st, pod, fit, gpus, self.rng)
            if choice is None:
                for saved in reversed(journal):
                    st.undo(saved)
                return self._why(pod)
            row, chosen = choice
            journal.append(st.apply(row, pod, chosen))
            placed.append((pod, row, chosen))
        return placed

    def _try_domains(
        self, gang: Gang, pods: list[PodRequest], level: str
    ) -> list[tuple[PodRequest, int, list[int]]] | str:
        st = self.state
        gpu_dom, node_dom = _domains(st, level)
        free = np.maximum(st.gfree, 0) * st.gexists
        if gpu_dom is not None:
            ids = gpu_dom[st.gexists]
            room = np.bincount(ids, weights=free[st.gexists], minlength=int(ids.max(initial=0)) + 1)
        else:
            assert node_dom is not None
            known = node_dom >= 0
            room = np.bincount(node_dom[known], weights=free.sum(axis=1)[known],
                               minlength=int(node_dom.max(initial=0)) + 1)
        candidates = np.flatnonzero(room >= gang.gpu_demand_milli)
        if self.policy_name == SolverName.RANDOM:
            candidates = self.rng.permutation(candidates)
        elif self.policy_name != SolverName.FIRSTFIT:
            candidates = candidates[np.argsort(room[candidates], kind="stable")]
        for dom in candidates[:MAX_DOMAIN_TRIES]:
            mask, rows = _domain(st, level, int(dom))
            if gpu_dom is not None:
                placed = self._try(pods, None, mask, rows)
            else:
                placed = self._try(pods, mask, None, rows)
            if not isinstance(placed, str):
                return placed
        return f"no single {level} domain has room for the whole gang"

    def _why(self, pod: PodRequest) -> str:
        st = self.state
        if not st.eligible(pod).any():
            reason = why_not(pod, st.nodes[0]) if st.nodes else "the cluster has no node"
            return f"pod {pod.name}: no node allows it (e.g. {reason})"
        return (f"pod {pod.name}: no allowed node has room for {pod.cpu_milli}m CPU, "
                f"{pod.memory_mib} MiB and {pod.gpu_count} x {pod.gpu_milli} milli-GPU")


def _domain(st: ClusterArrays, level: str, dom: int) -> tuple[BoolArray, IntArray]:
    """Domain ``dom`` of ``level``: its mask (GPU slots for ``nvlink``, else nodes) and its
    node rows; cached on the layout."""
    key = ("domain", level, dom)
    known = st.domain_cache.get(key)
    if known is None:
        gpu_dom, node_dom = _domains(st, level)
        if gpu_dom is not None:
            mask = gpu_dom == dom
            known = (mask, np.flatnonzero(mask.any(axis=1)))
        else:
            assert node_dom is not None
            mask = node_dom == dom
            known = (mask, np.flatnonzero(mask))
        st.domain_cache[key] = known
    return known  # type: ignore[return-value]


def _domains(st: ClusterArrays, level: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Domain ids per GPU slot (``nvlink``) or per node (other levels; -1: in none); cached on
    the layout."""
    known = st.domain_cache.get(("ids", level))
    if known is None:
        known = _domain_ids(st, level)
        st.domain_cache[("ids", level)] = known
    return known  # type: ignore[return-value]


def _domain_ids(st: ClusterArrays, level: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    ids: dict[str, int] = {}
    if level == "nvlink":
        gpu_dom = np.full(st.gfree.shape, -1, dtype=np.int64)
        for r, node in enumerate(st.nodes):
            for s, gpu in enumerate(node.gpus):
                key = gpu.nvlink_domain or f"{node.name}/gpu-{gpu.index}"
                gpu_dom[r, s] = ids.setdefault(key, len(ids))
        return gpu_dom, None
    node_dom = np.full(len(st.nodes), -1, dtype=np.int64)
    for r, node in enumerate(st.nodes):
        key2 = node.name if level == "node" else node.topology.get(level)
        if key2 is not None:
            node_dom[r] = ids.setdefault(key2, len(ids))
    return None, node_dom
