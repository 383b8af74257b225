"""Fairness across tenants: raise the smallest weighted dominant share (DRF-like).

Each tenant's dominant share is the largest of its GPU, CPU and memory use, each expressed in
milli-GPU equivalents of the cluster (CPU use x GPU capacity / CPU capacity, and so on), divided
by the tenant's weight relative to the mean. The model maximises the minimum over tenants with
pending gangs, so a window that leaves one tenant far behind scores lower.

:func:`plan_fairness` computes the same term for any plan (the greedy hint, say), so that a
plan is compared with CP-SAT's on what the model trades demand against, not on demand alone.
"""

from __future__ import annotations

from collections import defaultdict

from ortools.sat.python import cp_model

from solver.cpsat.instance import Instance
from solver.cpsat.variables import Term, Vars, scaled
from solver.plan import Plan
from solver.types import Snapshot

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


def plan_fairness(snap: Snapshot, plan: Plan) -> float:
    """The fairness term's value for ``plan``: ``weights.fairness`` x the smallest weighted
    dominant share after it, over tenants with pending gangs (milli-GPU equivalents, the unit
    of the demand term), with the model's roundings. 0 when the model would have no term.
    Used by the tests only, as the oracle the model's term is held to."""
    fairness = snap.policy.weights.fairness
    pending: dict[str, list[str]] = defaultdict(list)
    for gang in snap.gangs:
        pending[gang.tenant].append(gang.name)
    if fairness <= 0 or len(pending) < 2:
        return 0.0
    gcap = snap.gpu_capacity_milli
    ccap = sum(n.cpu_milli for n in snap.nodes)
    mcap = sum(n.memory_mib for n in snap.nodes)
    base = gcap or ccap
    if base <= 0:
        return 0.0
    cpu_k = base / ccap if ccap else 0.0
    mem_k = base / mcap if mcap else 0.0
    run_gpu: dict[str, int] = defaultdict(int)
    run_cpu: dict[str, int] = defaultdict(int)
    run_mem: dict[str, int] = defaultdict(int)
    for r in snap.running:
        if r.tenant is not None:
            run_gpu[r.tenant] += sum(s.milli for s in r.gpus)
            run_cpu[r.tenant] += r.cpu_milli
            run_mem[r.tenant] += r.memory_mib
    admitted = plan.admitted_names
    by_name = {g.name: g for g in snap.gangs}
    weights = {t: snap.tenant(t).weight for t in pending}
    mean_w = sum(weights.values()) / len(weights)
    low: int | None = None
    for t, names in pending.items():
        gangs = [by_name[n] for n in names if n in admitted]
        gpu = run_gpu[t] + sum(g.gpu_demand_milli for g in gangs)
        cpu = round(run_cpu[t] * cpu_k) + sum(
            round(sum(p.cpu_milli for p in g.pods) * cpu_k) for g in gangs)
        mem = round(run_mem[t] * mem_k) + sum(
            round(sum(p.memory_mib for p in g.pods) * mem_k) for g in gangs)
        w = max(1, round(WEIGHT_SCALE * weights[t] / mean_w))
        share = WEIGHT_SCALE * max(gpu, cpu, mem) // w  # the model's largest low with w*low <= ..
        low = share if low is None else min(low, share)
    return fairness * (low or 0)
