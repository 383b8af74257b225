"""Where one pod goes under each greedy policy: first-fit, best-fit, random and FGD; and the
node scoring of the Kueue-like and Volcano-like baselines (:mod:`solver.baselines.kueue`,
:mod:`solver.baselines.volcano`): kube-scheduler's default least-allocated and Volcano's
binpack (best-fit).

Each policy receives the nodes and GPU slots that can take the pod (already filtered for
eligibility, capacity, models, GPU memory and interference by :mod:`solver.baselines.cluster`)
and returns a node row and the GPU slots to use, or None. Ties go to the lowest node row and
GPU slot, except FGD's, which go to a seeded node order as in the paper's simulator; every
policy is deterministic for a given snapshot and seed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from solver.baselines.cluster import BoolArray, ClusterArrays, FloatArray
from solver.names import SolverName
from solver.types import MILLI, PodRequest

Choice = tuple[int, list[int]]
#: (state, pod, node rows that can take it, GPU slots that can take it, rng) -> choice
Policy = Callable[[ClusterArrays, PodRequest, BoolArray, BoolArray | None, np.random.Generator],
                  Choice | None]


def _lowest_slots(slots: BoolArray, row: int, k: int) -> list[int]:
    return [int(s) for s in np.nonzero(slots[row])[0][:k]]


def first_fit(state: ClusterArrays, pod: PodRequest, nodes: BoolArray,
              slots: BoolArray | None, rng: np.random.Generator) -> Choice | None:
    """The first node in snapshot order that fits; its lowest GPU slots."""
    rows = np.flatnonzero(nodes)
    if rows.size == 0:
        return None
    row = int(rows[0])
    return row, ([] if slots is None else _lowest_slots(slots, row, pod.gpu_count))


def random_fit(state: ClusterArrays, pod: PodRequest, nodes: BoolArray,
               slots: BoolArray | None, rng: np.random.Generator) -> Choice | None:
    """A node drawn uniformly among those that fit; GPU slots drawn uniformly on it."""
    rows = np.flatnonzero(nodes)
    if rows.size == 0:
        return None
    row = int(rows[rng.integers(rows.size)])
    if slots is None:
        return row, []
    free = np.flatnonzero(slots[row])
    picked = rng.choice(free, size=pod.gpu_count, replace=False)
    return row, sorted(int(s) for s in picked)


def best_fit(state: ClusterArrays, pod: PodRequest, nodes: BoolArray,
             slots: BoolArray | None, rng: np.random.Generator) -> Choice | None:
    """The node left with the least resources: ``0.5 * CPU left / largest node CPU +
    0.5 * GPU left / largest node GPU`` after the pod (the FGD paper's BestFit); on it, the
    fullest GPU that still fits a GPU share, or the lowest whole GPUs."""
    rows = np.flatnonzero(nodes)
    if rows.size == 0:
        return None
    gpu_left = np.maximum(state.gfree[rows], 0).sum(axis=1) - pod.gpu_demand_milli
    cpu_left = state.cpu[rows] - pod.cpu_milli
    score = 0.5 * cpu_left / state.max_cpu + 0.5 * gpu_left / state.max_gpu
    row = int(rows[int(np.argmin(score))])
    if slots is None:
        return row, []
    if pod.shares_gpu:
        free = np.where(slots[row], state.gfree[row], MILLI + 1)
        return row, [int(np.argmin(free))]
    return row, _lowest_slots(slots, row, pod.gpu_count)


def least_allocated(state: ClusterArrays, pod: PodRequest, nodes: BoolArray,
                    slots: BoolArray | None, rng: np.random.Generator) -> Choice | None:
    """kube-scheduler's default node score, as a Kueue-admitted pod meets it: NodeResourcesFit
    with the LeastAllocated strategy over CPU and memory (weights 1 and 1: extended resources
    such as GPUs are not scored unless configured), the node left with the most free share
    after the pod wins; ties to the lowest row. GPUs: the lowest free slots (the device plugin's
    choice); a GPU share takes the lowest slot that fits."""
    rows = np.flatnonzero(nodes)
    if rows.size == 0:
        return None
    cpu_total = np.fromiter((state.nodes[r].cpu_milli for r in rows), np.float64, rows.size)
    mem_total = np.fromiter((state.nodes[r].memory_mib for r in rows), np.float64, rows.size)
    cpu_free = (state.cpu[rows] - pod.cpu_milli) / np.maximum(cpu_total, 1.0)
    mem_free = (state.mem[rows] - pod.memory_mib) / np.maximum(mem_total, 1.0)
    row = int(rows[int(np.argmax(0.5 * cpu_free + 0.5 * mem_free))])
    if slots is None:
        return row, []
    return row, _lowest_slots(slots, row, pod.gpu_count)


def fgd_deltas(state: ClusterArrays, pod: PodRequest, nodes: BoolArray,
               slots: BoolArray | None) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """The fragmentation increase of every placement the pod may take: node ``rows`` and, for
    a GPU share, a ``(rows, GPU slots)`` matrix (inf where the slot cannot take it); for other
    pods one value per row. Nodes in the same state are evaluated once."""
    rows = np.flatnonzero(nodes)
    share = slots is not None and pod.shares_gpu
    if rows.size == 0:
        shape = (0, state.gfree.shape[1]) if share else (0,)
        return rows, np.zeros(shape, dtype=np.float64)
    ok = slots[rows] if slots is not None else np.zeros((rows.size, 0), dtype=np.bool_)
    bits = (ok.astype(np.int64) << np.arange(ok.shape[1], dtype=np.int64)).sum(axis=1)
    key = state.state_id[rows] * (1 << ok.shape[1]) + bits
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    urows = rows[first]
    delta_u = (_fgd_share(state, pod, urows, ok[first]) if share
               else _fgd_whole(state, pod, urows))
    out: FloatArray = np.round(delta_u[inverse], 6)
    return rows, out


#: FGD's node score is ``int(SCORE_SCALE * sigmoid(-increase / SCORE_MILLI))`` with the
#: increase in milli-GPU against a target workload whose weights sum to 1, as the paper's
#: simulator computes it. The integer score is coarse (one step is about 40 milli-GPU near
#: zero), so nearly equal placements tie and the tie order decides.
SCORE_SCALE = 100
SCORE_MILLI = 1000.0


def fgd_scores(state: ClusterArrays, delta: FloatArray) -> npt.NDArray[np.int64]:
    """FGD's integer score of each fragmentation increase in ``delta`` (-1 where infinite)."""
    weight = state.fragmentation().total_weight or 1.0
    x = np.where(np.isfinite(delta), delta, 0.0) / (weight * SCORE_MILLI)
    score = np.floor(SCORE_SCALE / (1.0 + np.exp(x))).astype(np.int64)
    out: npt.NDArray[np.int64] = np.where(np.isfinite(delta), score, -1)
    return out


def fgd(state: ClusterArrays, pod: PodRequest, nodes: BoolArray,
        slots: BoolArray | None, rng: np.random.Generator) -> Choice | None:
    """Fragmentation gradient descent: the node and GPU whose use increases the node's expected
    fragmentation against the target workload the least (:mod:`solver.fragmentation`), judged
    by :func:`fgd_scores` as the paper's simulator does.

    A GPU share takes the GPU of the highest score on its node (the lowest GPU among equals,
    fully free ones included); whole GPUs are the lowest free ones. Nodes of equal score go to
    the lowest ``state.tie_rank`` (a seeded order, drawn by the placer).
    """
    rows, delta = fgd_deltas(state, pod, nodes, slots)
    if rows.size == 0:
        return None
    score = fgd_scores(state, delta)
    per_row = score.max(axis=1) if score.ndim == 2 else score
    best = np.flatnonzero(per_row == per_row.max())
    i = int(best[np.argmin(state.tie_rank[rows[best]])])
    row = int(rows[i])
    if slots is None:
        return row, []
    if score.ndim == 2:
        return row, [int(np.argmax(score[i]))]
    return row, _lowest_slots(slots, row, pod.gpu_count)


def _fgd_whole(state: ClusterArrays, pod: PodRequest, rows: npt.NDArray[np.int64]) -> FloatArray:
    """Fragmentation increase of a CPU-only or whole-GPU pod on each of ``rows``: its
    ``gpu_count`` GPUs go from whole to empty (which of them does not matter)."""
    table = state.fragmentation()
    cnt, usable, total, now = state.frag_stats()
    d, k = table.d, pod.gpu_count
    d_cnt = k * ((d <= 0).astype(np.int64) - (d <= MILLI).astype(np.int64))
    d_use = -MILLI * k * (d <= MILLI).astype(np.int64)
    w = table.fit_weights(state.node_model[rows], state.cpu[rows] - pod.cpu_milli)
    after = table.total_weight * (total[rows] - MILLI * k) - (
        ((cnt[rows] + d_cnt) >= table.k) * (usable[rows] + d_use) * w).sum(axis=1)
    out: FloatArray = after - now[rows]
    return out


def _fgd_share(state: ClusterArrays, pod: PodRequest, rows: npt.NDArray[np.int64],
               ok: BoolArray) -> FloatArray:
    """Fragmentation increase of a GPU-share pod on each GPU slot of ``rows`` (inf where the
    slot cannot take it): the slot's free ``a`` becomes ``a - gpu_milli``."""
    table = state.fragmentation()
    cnt, usable, total, now = state.frag_stats()
    d = table.d
    a = state.gfree[rows][..., None]
    b = a - pod.gpu_milli
    cnt2 = cnt[rows][:, None, :] + (b >= d).astype(np.int64) - (a >= d).astype(np.int64)
    use2 = usable[rows][:, None, :] + b * (b >= d) - a * (a >= d)
    w = table.fit_weights(state.node_model[rows], state.cpu[rows] - pod.cpu_milli)[:, None, :]
    after = table.total_weight * (total[rows] - pod.gpu_milli)[:, None] - (
        (cnt2 >= table.k) * use2 * w).sum(axis=2)
    delta: FloatArray = np.where(ok, after - now[rows][:, None], np.inf)
    return delta


POLICIES: dict[str, Policy] = {
    SolverName.FIRSTFIT: first_fit,
    SolverName.BESTFIT: best_fit,
    SolverName.RANDOM: random_fit,
    SolverName.FGD: fgd,
    # the node scoring of the queueing baselines (their gang order is their own)
    SolverName.KUEUE: least_allocated,
    SolverName.VOLCANO: best_fit,
}

#: The baselines that take gangs in Berth's queue order and differ only in where a pod goes.
PLACEMENT_ONLY: tuple[str, ...] = (SolverName.FIRSTFIT, SolverName.BESTFIT, SolverName.RANDOM,
                                   SolverName.FGD)
