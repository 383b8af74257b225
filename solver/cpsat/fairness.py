"""Fairness across tenants: raise the smallest weighted dominant share (DRF-like).

Each tenant's dominant share is the largest of its GPU, CPU and memory use, each expressed in
milli-GPU equivalents of the cluster (CPU use x GPU capacity / CPU capacity, and so on), divided
by the tenant's weight relative to the mean. The model maximises the minimum over tenants with
pending gangs, so a window that leaves one tenant far behind scores lower.
"""

from __future__ import annotations

from collections import defaultdict

from ortools.sat.python import cp_model

from solver.cpsat.instance import Instance
from solver.cpsat.variables import Term, Vars, scaled

WEIGHT_SCALE = 1000


def build(inst: Instance, model: cp_model.CpModel, v: Vars) -> list[Term]:
    if inst.weights.fairness <= 0:
        return []
    snap = inst.snapshot
    tenant_gangs: dict[str, list[int]] = defaultdict(list)
    for gi, gang in enumerate(inst.gangs):
        tenant_gangs[gang.tenant].append(gi)
    if len(tenant_gangs) < 2:
        return []
    gcap = snap.gpu_capacity_milli
    ccap = sum(n.cpu_milli for n in snap.nodes)
    mcap = sum(n.memory_mib for n in snap.nodes)
    base = gcap or ccap
    if base <= 0:
        return []
    cpu_k = base / ccap if ccap else 0.0
    mem_k = base / mcap if mcap else 0.0
    usage = inst.running_by_tenant()
    run_gpu, run_cpu, run_mem = usage.gpu_milli, usage.cpu_milli, usage.memory_mib
    weights = {t: snap.tenant(t).weight for t in tenant_gangs}
    mean_w = sum(weights.values()) / len(weights)
    exprs_of: dict[str, list[tuple[int, list[int]]]] = {}
    top = 1
    for t, gis in sorted(tenant_gangs.items()):
        cpu = [round(sum(p.cpu_milli for p in inst.gangs[g].pods) * cpu_k) for g in gis]
        mem = [round(sum(p.memory_mib for p in inst.gangs[g].pods) * mem_k) for g in gis]
        gpu = [inst.gangs[g].gpu_demand_milli for g in gis]
        exprs_of[t] = [(run_gpu.get(t, 0), gpu), (round(run_cpu.get(t, 0) * cpu_k), cpu),
                       (round(run_mem.get(t, 0) * mem_k), mem)]
        top = max([top] + [c + sum(xs) for c, xs in exprs_of[t]])
    # low: the smallest weighted dominant share over tenants with pending gangs (milli-GPU eq.)
    w_of = {t: max(1, round(WEIGHT_SCALE * weights[t] / mean_w)) for t in tenant_gangs}
    low = model.new_int_var(0, WEIGHT_SCALE * top // min(w_of.values()) + 1, "fair_low")
    for t, gis in sorted(tenant_gangs.items()):
        exprs = [c + sum(x * v.admit[g] for x, g in zip(xs, gis, strict=True))
                 for c, xs in exprs_of[t]]
        # dom[t]: tenant t's dominant share after this window
        dom = model.new_int_var(0, top, f"dom[{t}]")
        model.add_max_equality(dom, exprs)
        model.add(w_of[t] * low <= WEIGHT_SCALE * dom)
    return [("fairness", scaled(inst.weights.fairness) * low)]
