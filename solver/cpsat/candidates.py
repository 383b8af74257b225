"""Candidate filtering and symmetry: which nodes and GPUs each pod is offered in the model.

Filtering is vectorised over the whole cluster with the baselines' free-capacity arrays
(:class:`solver.baselines.ClusterArrays`, the same eligibility, GPU-fit and interference rules
the greedy policies and the checker use). Per distinct pod shape, the nodes that can host it are
ranked best-fit first (smallest leftover on the GPUs it would take, then least free capacity,
then node order); each pod of that shape is offered a short window of this ranking. Windows of
successive pods of a shape slide along it by the capacity they would use, so pods that all
want the same kind of node still see enough distinct nodes, while the model stays a few
thousand variables wide.

Symmetry: nodes in identical states rank next to each other and ties break by node order, so
among interchangeable nodes only the first few are ever offered; the rest could only produce
equivalent plans.

Gangs with a topology requirement are offered whole domains instead (the same nodes for every
pod of the gang): the few best-fitting domains that can hold the gang. Nodes of the greedy hint
are always offered, so the hint is a solution of the model.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from solver.cpsat.instance import Candidate, Instance
from solver.plan import Plan
from solver.types import MILLI, PodRequest, TopologyMode

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

# Domains offered to a gang with a required topology (preferred: four times as many).
DOMAINS_PER_GANG = 3
# Most nodes offered per domain to a topology-constrained gang.
DOMAIN_NODE_CAP = 24


@dataclass(slots=True)
class Fit:
    """Where one pod shape fits: ``gok[n, s]`` GPU slot s of node n may take one of its GPUs;
    ``ranked`` the nodes that can host it, best fit first; ``cap[n]`` how many such pods node n
    holds."""

    gok: BoolArray
    ok: BoolArray
    ranked: IntArray
    cap: IntArray


FitFn = Callable[[PodRequest], Fit]


def pod_key(pod: PodRequest) -> Hashable:
    return (pod.cpu_milli, pod.memory_mib, pod.gpu_count, pod.gpu_milli, pod.gpu_memory_mib,
            pod.models, pod.qos_class, tuple(sorted(pod.node_selector.items())), pod.affinity,
            pod.tolerations)


def fit(inst: Instance, pod: PodRequest) -> Fit:
    a = inst.arrays
    nodes_ok = a.node_fits(pod)
    if pod.gpu_count == 0:
        gok = np.zeros(a.gfree.shape, dtype=np.bool_)
        ok = nodes_ok
        primary = a.cpu - pod.cpu_milli
        cap = a.cpu // max(1, pod.cpu_milli)
    else:
        gok = a.gpu_fits(pod, nodes_ok)
        cnt = gok.sum(axis=1)
        ok = nodes_ok & (cnt >= pod.gpu_count)
        left = np.where(gok, a.gfree - pod.gpu_milli, MILLI + 1)
        if pod.gpu_count == 1:
            primary = left.min(axis=1)
            cap = np.where(gok, a.gfree // pod.gpu_milli, 0).sum(axis=1)
        else:
            primary = cnt - pod.gpu_count
            cap = cnt // pod.gpu_count
        if pod.cpu_milli:
            cap = np.minimum(cap, a.cpu // pod.cpu_milli)
    idx = np.nonzero(ok)[0]
    total = a.gfree.sum(axis=1)
    ranked = idx[np.lexsort((idx, total[idx], primary[idx]))]
    return Fit(gok, ok, ranked.astype(np.int64), np.maximum(cap, 1).astype(np.int64))


def build_candidates(
    inst: Instance, *, hint: Plan | None, per_pod_nodes: int
) -> list[list[Candidate]]:
    fits: dict[Hashable, Fit] = {}

    def fit_of(pod: PodRequest) -> Fit:
        k = pod_key(pod)
        if k not in fits:
            fits[k] = fit(inst, pod)
        return fits[k]

    out: list[list[Candidate]] = [[] for _ in inst.pods]
    position: dict[Hashable, float] = {}
    for gi, gang in enumerate(inst.gangs):
        if gang.topology is not None:
            _domain_candidates(inst, gi, fit_of, out)
            continue
        for pi in inst.gang_pods[gi]:
            pod = inst.pods[pi].pod
            f = fit_of(pod)
            if len(f.ranked) == 0:
                continue
            k = pod_key(pod)
            start = int(position.get(k, 0.0))
            start = max(0, min(start, len(f.ranked) - per_pod_nodes))
            rows = f.ranked[start:start + per_pod_nodes]
            out[pi] = [_candidate(inst, f, int(r)) for r in rows]
            position[k] = position.get(k, 0.0) + 1.0 / float(f.cap[f.ranked[start]])
    if hint is not None:
        _add_hint(inst, hint, fit_of, out)
    return out


def _candidate(inst: Instance, f: Fit, row: int) -> Candidate:
    a = inst.arrays
    slots = np.nonzero(f.gok[row])[0]
    return Candidate(inst.snapshot.nodes[row].name, tuple(int(a.gindex[row, s]) for s in slots))


def _domain_candidates(
    inst: Instance, gi: int, fit_of: FitFn, out: list[list[Candidate]]
) -> None:
    """Offer every pod of gang ``gi`` the nodes of its best few domains."""
    gang = inst.gangs[gi]
    req = gang.topology
    assert req is not None
    a = inst.arrays
    pods = [(pi, fit_of(inst.pods[pi].pod)) for pi in inst.gang_pods[gi]]
    n = len(inst.snapshot.nodes)
    hosts = np.zeros(n, dtype=np.bool_)
    gpu_any = np.zeros(a.gfree.shape, dtype=np.bool_)
    for _pi, f in pods:
        hosts[f.ranked] = True
        gpu_any |= f.gok
    dom_of = inst.domain_ids(req.level, gpu_any)
    room = np.where(gpu_any, np.maximum(a.gfree, 0), 0)
    if req.level == "nvlink":
        keys = dom_of[gpu_any]
        weights = room[gpu_any]
    else:
        rows = np.nonzero(hosts & (dom_of[:, 0] >= 0))[0]
        keys = dom_of[rows, 0]
        weights = room[rows].sum(axis=1)
    if len(keys) == 0:
        return
    per_dom = np.bincount(keys, weights=weights)
    present = np.unique(keys)
    demand = gang.gpu_demand_milli
    required = req.mode is TopologyMode.REQUIRED
    if required:
        present = present[per_dom[present] >= demand]
    # smallest domains that hold the gang first (best fit); preferred also takes the rest
    order = present[np.lexsort((present, per_dom[present], per_dom[present] < demand))]
    chosen = order[: DOMAINS_PER_GANG if required else DOMAINS_PER_GANG * 4]
    for pi, f in pods:
        picked: list[int] = []
        for d in chosen:
            in_dom = (dom_of == d).any(axis=1) if req.level == "nvlink" else dom_of[:, 0] == d
            ranked = f.ranked[in_dom[f.ranked]]
            picked.extend(int(r) for r in ranked[:DOMAIN_NODE_CAP])
        seen: set[int] = set()
        for r in picked:
            if r not in seen:
                seen.add(r)
                out[pi].append(_candidate(inst, f, r))


def _add_hint(
    inst: Instance, hint: Plan, fit_of: FitFn, out: list[list[Candidate]]
) -> None:
    by_key = {(inst.gangs[inst.pods[pi].gang].name, inst.pods[pi].pod.name): pi
              for pi in range(len(inst.pods))}
    row_of = inst.arrays.row_of
    for gp in hint.admitted:
        for pp in gp.pods:
            pi = by_key.get((gp.gang, pp.pod))
            if pi is None or pp.node not in row_of:
                continue
            if any(c.node == pp.node for c in out[pi]):
                continue
            f = fit_of(inst.pods[pi].pod)
            row = row_of[pp.node]
            if f.ok[row]:
                out[pi].append(_candidate(inst, f, row))

