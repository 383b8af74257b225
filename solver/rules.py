"""The rules that the solvers obey and the checker judges by, each stated once.

What a pod's GPU memory demand is, which topology domain a placement is in, how much quota a
tenant uses and when that breaks the quota rule, and which pods may not share a GPU: the CP-SAT
model, the greedy baselines and the partitioner build plans by these definitions, and
:mod:`solver.checker` judges plans by the same ones, so a solver and its judge cannot drift
apart on what a rule means. Everything else the checker re-derives on its own, and no solver
imports the checker (an import-linter contract holds both sides to this).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from solver.interference import may_share, profile_for, resolve_profiles, within_slo
from solver.plan import Plan
from solver.types import GPU, MILLI, Node, PodRequest, Snapshot, SolverPolicy, Tenant


def gpu_memory_demand(pod: PodRequest, gpu: GPU, milli: int) -> int:
    """GPU memory (MiB) a pod takes on ``gpu`` for a share of ``milli``.

    An explicit ``gpu_memory_mib`` is per GPU; otherwise memory is taken in proportion to the
    compute share, which is how running pods are accounted in :mod:`solver.state`.
    """
    if pod.gpu_memory_mib > 0:
        return pod.gpu_memory_mib
    return gpu.memory_mib * milli // MILLI


def topology_domain(node: Node, gpu: GPU | None, level: str) -> str | None:
    """The domain of ``level`` that a pod on ``node`` (holding ``gpu``) is in; None: in none.

    ``nvlink``: the GPU's ``nvlink_domain``; a GPU without one is a domain of its own
    (``node/gpu-index``), so a PCIe-only multi-GPU pod spans several domains. A pod without a
    GPU is in no NVLink domain and does not count at that level. ``node``: the node's name.
    Any other level: ``node.topology[level]``; a node without that label is in no domain and
    cannot host a gang that requires the level.
    """
    if level == "nvlink":
        if gpu is None:
            return None
        return gpu.nvlink_domain or f"{node.name}/gpu-{gpu.index}"
    if level == "node":
        return node.name
    return node.topology.get(level)


def quota_usage_milli(snapshot: Snapshot, plan: Plan | None = None) -> dict[str, int]:
    """GPU milli in use per tenant: running pods with a tenant plus, given a plan, its gangs."""
    used: dict[str, int] = defaultdict(int)
    for r in snapshot.running:
        if r.tenant is not None:
            milli = 0
            for s in r.gpus:
                milli += s.milli
            used[r.tenant] += milli
    if plan is not None:
        gangs = {g.name: g for g in snapshot.gangs}
        for gp in plan.admitted:
            gang = gangs.get(gp.gang)
            if gang is not None:
                used[gang.tenant] += gang.gpu_demand_milli
    return dict(used)


def quota_problems(
    tenants: Sequence[Tenant], used: Mapping[str, int], admitting: Iterable[str]
) -> list[str]:
    """The tenant quota rule, in GPU milli units, on usage *after* a plan.

    ``used[t]`` is tenant t's GPU milli after the plan (running pods that name t plus the gangs
    the plan admits for t) and ``quota[t]`` its ``quota_milli`` (None: unlimited, never over).
    ``over[t] = max(0, used[t] - quota[t])`` is what t borrows and
    ``idle[t] = max(0, quota[t] - used[t])`` what it lends. Every tenant t the plan admits
    anything for (``admitting``) must have:

    1. ``over[t] == 0`` unless ``t.can_borrow``;
    2. ``over[t] <= t.borrow_limit_milli`` when that limit is set;
    3. if ``over[t] > 0``: ``sum(over) <= sum(idle)`` over all declared tenants, i.e. all
       borrowing together fits in the quota that others leave idle after the plan.

    Tenants the plan admits nothing for are not judged, so quotas lowered below what already
    runs do not make every plan infeasible. Undeclared tenants have no quota.
    """
    over: dict[str, int] = {}
    idle: dict[str, int] = {}
    for t in tenants:
        if t.quota_milli is None:
            continue
        u = used.get(t.name, 0)
        over[t.name] = max(0, u - t.quota_milli)
        idle[t.name] = max(0, t.quota_milli - u)
    wanted = set(admitting)
    out: list[str] = []
    pool_checked = False
    for t in tenants:
        if t.name not in wanted or over.get(t.name, 0) == 0:
            continue
        o = over[t.name]
        head = (f"tenant {t.name} uses {used.get(t.name, 0)} milli-GPU, over its quota of "
                f"{t.quota_milli}")
        if not t.can_borrow:
            out.append(f"{head} and may not borrow")
        elif t.borrow_limit_milli is not None and o > t.borrow_limit_milli:
            out.append(f"{head}: borrows {o}, above its borrow limit of {t.borrow_limit_milli}")
        if not pool_checked:
            pool_checked = True
            borrowed, lendable = sum(over.values()), sum(idle.values())
            if borrowed > lendable:
                out.append(f"tenants borrow {borrowed} milli-GPU in all but only {lendable} of "
                           "others' quota is idle")
    return out


def plan_quota_problems(snapshot: Snapshot, plan: Plan) -> list[str]:
    """:func:`quota_problems` of the usage after ``plan``, for the tenants it admits gangs for."""
    if not snapshot.tenants:
        return []
    gangs = {g.name: g for g in snapshot.gangs}
    admitting = {gangs[gp.gang].tenant for gp in plan.admitted if gp.gang in gangs}
    used = quota_usage_milli(snapshot, plan)
    return quota_problems(snapshot.tenants, used, admitting)


def sharing_problem(policy: SolverPolicy, classes: Sequence[str | None]) -> str | None:
    """Why pods of ``classes`` may not hold one GPU together (None: they may).

    The classes in force are :func:`solver.interference.resolve_profiles` of the policy's
    ``qos_classes`` (unknown or missing classes count as an ordinary busy neighbour). Two
    members may not meet when either is exclusive or bans the other; every latency-sensitive
    member's predicted latency must stay within its SLO.
    """
    if len(classes) < 2:
        return None
    profiles = resolve_profiles(policy.qos_classes)
    group = [profile_for(c, profiles) for c in classes]
    for i, a in enumerate(group):
        for b in group[i + 1 :]:
            if not may_share(a, b):
                culprit = a if a.exclusive else b if b.exclusive else None
                if culprit is not None:
                    return f"class {culprit.name} is exclusive"
                return f"classes {a.name} and {b.name} may not share a GPU"
    for i, p in enumerate(group):
        if not within_slo(p, [*group[:i], *group[i + 1 :]]):
            return f"class {p.name} would miss its SLO of {p.slo_ms} ms"
    return None
