"""Capacity: milli-GPU and GPU memory per GPU, CPU and memory per node, after what runs.

A whole-GPU pod takes 1000 milli of each GPU it uses, so "whole GPUs only" needs no
constraint of its own: a GPU that is partly used cannot hold it. GPU memory is counted for
every pod on a GPU where some candidate pod states its memory (a pod that does not counts its
share of the GPU's memory, as running pods do in :mod:`solver.state`). Sums that cannot exceed
their bound are not emitted.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from solver.cpsat.instance import Instance
from solver.cpsat.variables import Term, Vars
from solver.rules import gpu_memory_demand


def build(inst: Instance, model: cp_model.CpModel, v: Vars) -> list[Term]:
    for (node, i), uses in v.on_gpu.items():
        pods = [(inst.pods[pi].pod, u) for pi, u in uses]
        free = inst.gpu_free(node, i)
        if sum(p.gpu_milli for p, _u in pods) > free:
            model.add(sum(p.gpu_milli * u for p, u in pods) <= free)
        if any(p.gpu_memory_mib for p, _u in pods):
            gpu = inst.gpu(node, i)
            need = [(gpu_memory_demand(p, gpu, p.gpu_milli), u) for p, u in pods]
            free_mem = inst.gpu_memory_free(node, i)
            if sum(m for m, _u in need) > free_mem:
                model.add(sum(m * u for m, u in need) <= free_mem)
    for node, pis in v.on_node.items():
        cpu, mem = inst.cpu_free(node), inst.memory_free(node)
        refs = [(inst.pods[pi].pod, v.place[(pi, node)]) for pi in pis]
        if sum(p.cpu_milli for p, _x in refs) > cpu:
            model.add(sum(p.cpu_milli * x for p, x in refs) <= cpu)
        if sum(p.memory_mib for p, _x in refs) > mem:
            model.add(sum(p.memory_mib * x for p, x in refs) <= mem)
    return []
