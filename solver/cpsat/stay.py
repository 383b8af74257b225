"""Stay: keep a pod where the order search placed it unless another term gains more.

The hint is the order search's best pass (:mod:`solver.cpsat.search`), which judges the
fragmentation of the whole cluster after the window with FGD's own measure; the model's
fragmentation term is a per-GPU linearisation of it (:mod:`solver.cpsat.fragmentation`) and
mostly ties between placements the search tells apart. Each pod of a hinted gang that CP-SAT
admits but places elsewhere than the hint (for a GPU share, on another GPU) costs ``stay weight
x (its GPU demand + POD_MILLI)``: CP-SAT moves it only to gain more elsewhere (a preferred
topology domain, a GPU that is already awake, less interference, room for another gang).

Leaving a hinted gang out costs nothing: the term is ``value x (placed where hinted - gang
admitted)``, 0 or negative. Until 2026-12-04 it was a reward for every pod left in place,
``value x placed where hinted``, which also paid for keeping the hint's *choice of gangs*: the
order search goes first-come, and at 0.3 x 1,100 = 330 per one-GPU pod the reward outweighed
the most the fairness term gains by giving that GPU to the tenant furthest behind (0.3 x 1,000
at equal weights), so a tenant within its quota waited behind borrowers (e2e/bench_compare.md,
openb: 0.78 of its fair share).
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from solver.cpsat.instance import Instance
from solver.cpsat.variables import Term, Vars, scaled

#: What every pod's stay counts on top of its GPU demand, in milli-GPU: a CPU-only pod takes
#: CPU that decides which GPU pods still fit, so it stays too.
POD_MILLI = 100


def build(inst: Instance, model: cp_model.CpModel, v: Vars) -> list[Term]:
    w = inst.weights.stay
    if w <= 0 or inst.hint is None:
        return []
    gang_index = {g.name: gi for gi, g in enumerate(inst.gangs)}
    terms: list[cp_model.LinearExprT] = []
    for gp in inst.hint.admitted:
        gi = gang_index.get(gp.gang)
        if gi is None:
            continue
        by_name = {inst.pods[pi].pod.name: pi for pi in inst.gang_pods[gi]}
        for pp in gp.pods:
            pi = by_name.get(pp.pod)
            if pi is None:
                continue
            pod = inst.pods[pi].pod
            value = scaled(w * (pod.gpu_demand_milli + POD_MILLI))
            if value <= 0:
                continue
            if pod.shares_gpu and pp.gpus:
                x = v.use.get((pi, pp.node, pp.gpus[0].index))
            else:
                x = v.place.get((pi, pp.node))
            if x is not None:
                # a penalty for moving the pod, none for leaving its gang out: which gangs are
                # admitted is for the demand, aging and fairness terms to decide
                terms.append(value * (x - v.admit[gi]))
    return [("stay", sum(terms))] if terms else []
