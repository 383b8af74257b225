"""Gangs are all or nothing, and each pod lands on exactly one node with its GPUs there.

``sum_n place[p, n] == admit[g]`` for every pod p of gang g makes a gang whole or absent; a GPU
pod takes exactly ``gpu_count`` GPUs of the node it is placed on, so a multi-GPU pod's whole
GPUs sit on one node and a sharing pod takes its share of one GPU.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from solver.cpsat.instance import Instance
from solver.cpsat.variables import Term, Vars


def build(inst: Instance, model: cp_model.CpModel, v: Vars) -> list[Term]:
    for gi in range(len(inst.gangs)):
        for pi in inst.gang_pods[gi]:
            nodes = v.pod_nodes.get(pi, [])
            if not nodes:
                model.add(v.admit[gi] == 0)  # a pod with nowhere to go holds its gang back
                continue
            model.add(sum(x for _n, x in nodes) == v.admit[gi])
            count = inst.pods[pi].pod.gpu_count
            if count == 0:
                continue
            for node, x in nodes:
                model.add(sum(u for _i, u in v.pod_gpus[(pi, node)]) == count * x)
    return []
