"""Where one pod goes under each greedy policy: first-fit, best-fit, random and FGD.

Each policy receives the nodes and GPU slots that can take the pod (already filtered for
eligibility, capacity, models, GPU memory and interference by :mod:`solver.baselines.cluster`)
and returns a node row and the GPU slots to use, or None. Ties go to the lowest node row and
GPU slot, so a policy is deterministic for a given snapshot (random: for a given seed).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from solver.baselines.cluster import BoolArray, ClusterArrays, FloatArray
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


def fgd(state: ClusterArrays, pod: PodRequest, nodes: BoolArray,
        slots: BoolArray | None, rng: np.random.Generator) -> Choice | None:
    """Fragmentation gradient descent: the node and GPU whose use increases the node's expected
    fragmentation against the target workload the least (:mod:`solver.fragmentation`)."""
    rows = np.flatnonzero(nodes)
    if rows.size == 0:
        return None
    table = state.fragmentation()
    cnt, usable, total, now = state.frag_stats()
    model = state.node_model[rows]
    cpu_after = state.cpu[rows] - pod.cpu_milli
    d = table.d
    if slots is None or not pod.shares_gpu:
        k = pod.gpu_count
        # k whole GPUs go from MILLI to 0 (nothing changes on the GPUs of a CPU-only pod)
        d_cnt = k * ((d <= 0).astype(np.int64) - (d <= MILLI).astype(np.int64))
        d_use = -MILLI * k * (d <= MILLI).astype(np.int64)
        after = table.expected(cnt[rows] + d_cnt, usable[rows] + d_use,
                               total[rows] - MILLI * k, model, cpu_after)
        delta: FloatArray = after - now[rows]
        row = int(rows[int(np.argmin(delta))])
        return row, ([] if slots is None else _lowest_slots(slots, row, k))
    # A GPU share: one candidate per (node, GPU slot); the slot's free a becomes a - milli.
    ok = slots[rows]
    a = state.gfree[rows]
    b = a - pod.gpu_milli
    a3, b3 = a[..., None], b[..., None]
    cnt2 = cnt[rows][:, None, :] + (b3 >= d).astype(np.int64) - (a3 >= d).astype(np.int64)
    use2 = usable[rows][:, None, :] + b3 * (b3 >= d) - a3 * (a3 >= d)
    tot2 = (total[rows] - pod.gpu_milli)[:, None]
    shape = a.shape
    after2 = table.expected(cnt2, use2, np.broadcast_to(tot2, shape),
                            np.broadcast_to(model[:, None], shape),
                            np.broadcast_to(cpu_after[:, None], shape))
    delta2 = np.where(ok, after2 - now[rows][:, None], np.inf)
    flat = int(np.argmin(delta2))
    r, s = divmod(flat, shape[1])
    return int(rows[r]), [s]


POLICIES: dict[str, Policy] = {
    "firstfit": first_fit,
    "bestfit": best_fit,
    "random": random_fit,
    "fgd": fgd,
}
