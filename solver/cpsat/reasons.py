"""Why a gang waits, in words a user can act on.

Checked in order of how fundamental the obstacle is: a pod no node may ever run
(models, selectors, taints), the tenant's quota, a pod that fits nowhere right now, a required
topology domain too small, and finally contention: each pod fits somewhere but not the whole
gang at once beside what this window admitted.
"""

from __future__ import annotations

from collections import Counter

from solver.checker import gpu_memory_demand, quota_usage_milli, topology_domain
from solver.eligibility import node_allows, why_not
from solver.plan import Deferred, Plan
from solver.state import FreeState, NodeFree, free_capacity
from solver.types import MILLI, Gang, Node, PodRequest, Snapshot, TopologyMode


def free_after(snapshot: Snapshot, plan: Plan) -> FreeState:
    """Free capacity once the plan's admitted gangs are placed."""
    free = free_capacity(snapshot)
    gangs = {g.name: g for g in snapshot.gangs}
    nodes = {n.name: n for n in snapshot.nodes}
    for gp in plan.admitted:
        pods = {p.name: p for p in gangs[gp.gang].pods}
        for pp in gp.pods:
            pod, f = pods[pp.pod], free[pp.node]
            f.cpu_milli -= pod.cpu_milli
            f.memory_mib -= pod.memory_mib
            gpus = {g.index: g for g in nodes[pp.node].gpus}
            for s in pp.gpus:
                f.gpu_milli[s.index] -= s.milli
                f.gpu_memory_mib[s.index] -= gpu_memory_demand(pod, gpus[s.index], s.milli)
                f.gpu_classes[s.index].append(pod.qos_class or "")
    return free


def _fits(pod: PodRequest, node: Node, f: NodeFree) -> bool:
    if f.cpu_milli < pod.cpu_milli or f.memory_mib < pod.memory_mib:
        return False
    if pod.gpu_count == 0:
        return True
    ok = sum(
        1 for g in node.gpus
        if (not pod.models or g.model in pod.models) and f.gpu_milli[g.index] >= pod.gpu_milli
        and (not pod.gpu_memory_mib or f.gpu_memory_mib.get(g.index, 0) >= pod.gpu_memory_mib)
    )
    return ok >= pod.gpu_count


def _describe(pod: PodRequest) -> str:
    if pod.gpu_count == 0:
        return f"{pod.cpu_milli}m CPU, {pod.memory_mib} MiB"
    gpu = (f"{pod.gpu_count} GPU" if pod.gpu_milli == MILLI else f"{pod.gpu_milli} milli-GPU")
    return f"{gpu}, {pod.cpu_milli}m CPU, {pod.memory_mib} MiB"


def reason(snapshot: Snapshot, gang: Gang, free: FreeState, used: dict[str, int]) -> str:
    nodes = snapshot.nodes
    models = {g.model for n in nodes for g in n.gpus}
    for pod in gang.pods:
        if any(node_allows(pod, n) for n in nodes):
            continue
        if pod.gpu_count and pod.models and not (pod.models & models):
            return f"no node with GPU model {'/'.join(sorted(pod.models))} (pod {pod.name})"
        why = Counter(why_not(pod, n) or "" for n in nodes).most_common(1)
        common = why[0][0] if why else "the cluster has no nodes"
        return f"no node may run pod {pod.name} (most often: {common})"
    tenant = snapshot.tenant(gang.tenant)
    if tenant.quota_milli is not None and snapshot.tenants and gang.gpu_demand_milli:
        after = used.get(tenant.name, 0) + gang.gpu_demand_milli
        over = after - tenant.quota_milli
        if over > 0:
            idle = sum(max(0, t.quota_milli - used.get(t.name, 0)) for t in snapshot.tenants
                       if t.quota_milli is not None and t.name != tenant.name)
            if not tenant.can_borrow:
                return (f"quota: tenant {tenant.name} would use {after} of its "
                        f"{tenant.quota_milli} milli-GPU and may not borrow")
            if tenant.borrow_limit_milli is not None and over > tenant.borrow_limit_milli:
                return (f"quota: tenant {tenant.name} would borrow {over} milli-GPU, above its "
                        f"limit of {tenant.borrow_limit_milli}")
            if over > idle:
                return (f"quota: tenant {tenant.name} would use {after} of its "
                        f"{tenant.quota_milli} milli-GPU and only {idle} idle quota is left "
                        "to borrow")
    for pod in gang.pods:
        if not any(node_allows(pod, n) and _fits(pod, n, free[n.name]) for n in nodes):
            return f"capacity: no node has room for pod {pod.name} ({_describe(pod)}) now"
    req = gang.topology
    if req is not None and req.mode is TopologyMode.REQUIRED:
        room: Counter[str] = Counter()
        for n in nodes:
            if not n.usable:
                continue
            for g in n.gpus:
                dom = topology_domain(n, g, req.level)
                if dom is not None:
                    room[dom] += max(0, free[n.name].gpu_milli[g.index])
        biggest = max(room.values(), default=0)
        if biggest < gang.gpu_demand_milli:
            return (f"topology domain too small: no {req.level} domain has "
                    f"{gang.gpu_demand_milli} milli-GPU free (largest: {biggest})")
    return ("capacity: each pod fits somewhere, but not the whole gang at once beside the "
            "gangs admitted this window")


def deferrals(snapshot: Snapshot, plan_admitted: Plan) -> tuple[Deferred, ...]:
    """A reason for every gang of the snapshot the plan does not admit."""
    admitted = plan_admitted.admitted_names
    waiting = [g for g in snapshot.gangs if g.name not in admitted]
    if not waiting:
        return ()
    free = free_after(snapshot, plan_admitted)
    used = quota_usage_milli(snapshot, plan_admitted)
    return tuple(Deferred(g.name, reason(snapshot, g, free, used)) for g in waiting)
