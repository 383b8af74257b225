"""FGD's choice for many pods on one changing state, rescoring only the nodes that changed.

:func:`solver.baselines.policies.fgd` scores every node that fits a pod: about 0.5 ms a pod
on the openb cluster's 1,213 nodes, most of it numpy overhead spent on nodes nothing has
touched. A window's pods come in few shapes, and a placement changes one node, so this cache
keeps, per pod shape, each node's FGD score and the GPU slots it could take, together with the
node's ``state_id`` when it was scored. Asked again, it rescores only the nodes whose
``state_id`` changed since (a placement, an undo, a rolled-back pass): the order search's
passes over one window then cost a few rows each instead of the cluster.

The choice is exactly :func:`~solver.baselines.policies.fgd`'s (same scores, same ties by
``state.tie_rank``, same GPU slots; tests/solver/test_fgd_cache.py compares them on generated
snapshots). A node's ``state_id`` covers its free CPU, memory, GPU shares, GPU memory and
models; it does not cover the QoS classes of the pods on its GPUs, so a GPU share is scored
without the cache whenever interference could matter (a constrained class on the cluster or in
the pod), and the caller passes no domain restriction (required topology goes the long way).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from solver.baselines.cluster import BoolArray, ClusterArrays, IntArray
from solver.baselines.policies import Choice, _fgd_share, _fgd_whole, fgd_deltas, fgd_scores
from solver.types import PodRequest


@dataclass(slots=True)
class _Scores:
    sid: IntArray  # state_id of each node when it was scored
    row: IntArray  # best score per node (-1: the pod does not fit there)
    slot: IntArray | None  # per GPU slot, for GPU shares (-1: the slot cannot take it)
    gpus: BoolArray | None  # slots that can take one of its GPUs, for whole-GPU pods


def shape_of(pod: PodRequest) -> Hashable:
    """What decides where a pod may go and how FGD scores it (the name does not)."""
    return (pod.cpu_milli, pod.memory_mib, pod.gpu_count, pod.gpu_milli, pod.gpu_memory_mib,
            pod.models, tuple(sorted(pod.node_selector.items())), pod.affinity,
            pod.tolerations, pod.qos_class)


class FgdCache:
    """FGD's choices on ``state``, cached per pod shape (see the module docstring)."""

    def __init__(self, state: ClusterArrays) -> None:
        self.state = state
        self._by_shape: dict[Hashable, _Scores] = {}

    def applies(self, pod: PodRequest) -> bool:
        """False when interference rules could depend on what the node ids do not record."""
        st = self.state
        return not (pod.shares_gpu and (st.constrained_slots or st.is_constrained(pod.qos_class)))

    def choose(self, pod: PodRequest,
               prefer: Callable[[BoolArray], BoolArray] | None = None) -> Choice | None:
        """FGD's node and GPU slots for ``pod`` on the state as it is now, or None.
        ``prefer``: given the nodes that fit, those to choose among (FGD's choice within
        them)."""
        st = self.state
        key = shape_of(pod)
        e = self._by_shape.get(key)
        if e is None:
            n, g = st.gfree.shape
            share = pod.gpu_count > 0 and pod.shares_gpu
            e = _Scores(sid=st.state_id.copy(), row=np.full(n, -1, dtype=np.int64),
                        slot=np.full((n, g), -1, dtype=np.int64) if share else None,
                        gpus=(np.zeros((n, g), dtype=np.bool_)
                              if pod.gpu_count > 0 and not share else None))
            self._by_shape[key] = e
            self._score_all(pod, e)
        else:
            dirty = np.flatnonzero(e.sid != st.state_id)
            if dirty.size:
                self._score(pod, e, dirty)
        scores = e.row
        if prefer is not None:
            fit = scores >= 0
            scores = np.where(prefer(fit), scores, -1)
        best_score = int(scores.max(initial=-1))
        if best_score < 0:
            return None
        best = np.flatnonzero(scores == best_score)
        row = int(best[np.argmin(st.tie_rank[best])])
        if e.slot is not None:
            return row, [int(np.argmax(e.slot[row]))]
        if e.gpus is not None:
            return row, [int(s) for s in np.flatnonzero(e.gpus[row])[: pod.gpu_count]]
        return row, []

    def _score_all(self, pod: PodRequest, e: _Scores) -> None:
        """Score every node, as :func:`~solver.baselines.policies.fgd` does (nodes in equal
        states scored once)."""
        st = self.state
        fit = st.node_fits(pod)
        gpus = None
        if pod.gpu_count > 0:
            gpus = st.gpu_fits(pod, fit)
            fit = gpus.sum(axis=1) >= pod.gpu_count
        rows, delta = fgd_deltas(st, pod, fit, gpus)
        if rows.size == 0:
            return
        score = fgd_scores(st, delta)
        if e.slot is not None:
            e.slot[rows] = score
            e.row[rows] = score.max(axis=1)
        else:
            e.row[rows] = score
        if e.gpus is not None:
            assert gpus is not None
            e.gpus[:] = gpus

    def _score(self, pod: PodRequest, e: _Scores, rows: IntArray) -> None:
        """Rescore ``rows`` (the same filters as :meth:`ClusterArrays.node_fits` and
        :meth:`ClusterArrays.gpu_fits`, then FGD's scores)."""
        st = self.state
        e.sid[rows] = st.state_id[rows]
        fit = st.rows_node_fit(pod, rows)
        e.row[rows] = -1
        if pod.gpu_count == 0:
            ok_rows = rows[fit]
            if ok_rows.size:
                e.row[ok_rows] = fgd_scores(st, np.round(_fgd_whole(st, pod, ok_rows), 6))
            return
        gpus = st.rows_gpu_fit(pod, rows, fit)
        fit = gpus.sum(axis=1) >= pod.gpu_count
        ok_rows = rows[fit]
        if e.slot is not None:
            e.slot[rows] = -1
            if ok_rows.size:
                score = fgd_scores(st, np.round(_fgd_share(st, pod, ok_rows, gpus[fit]), 6))
                e.slot[ok_rows] = score
                e.row[ok_rows] = score.max(axis=1)
            return
        assert e.gpus is not None
        e.gpus[rows] = gpus
        if ok_rows.size:
            e.row[ok_rows] = fgd_scores(st, np.round(_fgd_whole(st, pod, ok_rows), 6))
