"""POP-style partitioning (Narayanan et al., SOSP'21): split a large cluster and its window
into sub-problems, solve them in parallel, and merge the plans.

Why it works: with many interchangeable nodes, a split where every part holds a proportional
mix of node kinds and of pending gangs loses little, and each sub-model is small enough for
CP-SAT to solve in a fraction of the time. How parts are formed:

* nodes: the highest topology level present (block, zone, then rack) is kept whole, so a gang
  that needs one such domain still finds it inside a part; groups are sorted by their kind of
  GPUs and dealt to the part with the fewest GPUs so far, so every part gets a similar mix;
* gangs: largest first, each to the part with the most free GPU capacity left (for its GPU
  models) relative to what has been dealt to it;
* quotas: first each tenant's cap for the whole window is fixed so that borrowing can never
  exceed what lenders leave idle (a lender is capped at its own demand, borrowers share the
  rest of the idle quota in proportion to their excess demand, within their borrow limits);
  each part then gets the tenant's running usage there plus a share of the cap's headroom in
  proportion to the tenant's demand dealt to that part, with no further borrowing. The merged
  plan therefore satisfies every quota, whatever each part decides.

Up to :data:`WHOLE_GREEDY_MAX_NODES` nodes, the whole-cluster best-fit plan is computed once,
before the split: each gang it admits goes to the part that holds its nodes (a gang it spreads
over parts is kept as placed, as running pods of those parts), and each part is hinted with
its share of that plan. Each part runs the
CP-SAT path (model, judge, keep-better, reasons) from that hint, so the merged plan admits
at least the priority-weighted GPU demand of the whole-cluster greedy plan (the floor
:func:`solver.cpsat.solve.plan_value`, additive over parts); a final comparison keeps the
greedy plan should merging ever lose some of it.
Parts run in threads (CP-SAT releases the GIL while searching) or, on request, in forked
processes. This module does no I/O.
"""

from __future__ import annotations

import math
import multiprocessing
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import replace

from solver.baselines import ClusterArrays
from solver.cpsat.reasons import deferrals
from solver.cpsat.search import budget_for, search
from solver.cpsat.solve import Judge, plan_value, solve_cpsat
from solver.names import SolverName
from solver.plan import Deferred, GangPlacement, Plan, SolveStats
from solver.queue import queue_order, quota_reason
from solver.rules import plan_quota_problems, quota_usage_milli
from solver.types import MILLI, Gang, Node, Running, Snapshot, Tenant

# Sizes past which one model gets slow; see bench/solve_scale.md for the curve.
NODES_PER_PART = 2000
PODS_PER_PART = 200
# Once split, parts of ~50 pods: each builds and solves in well under 0.1 s of CPU, so many
# more parts than cores still fit a 2 s budget where 200-pod parts could not, and on the
# 10,000-node benchmark their greedy plans also admit more (bench/solve_scale.md).
PODS_PER_SPLIT_PART = 50
# At 1,000 nodes x 8 GPUs (8 blocks of 128) this allows 8 parts: CP-SAT presolves a part of
# ~200 modelled pods in about a second, where a part of ~650 did not finish presolve in 3 s.
MIN_NODES_PER_PART = 125
GROUP_LEVELS = ("block", "zone", "rack")


def auto_partitions(snapshot: Snapshot) -> int:
    """How many parts to split into: one unless the cluster or the window is large, and never
    more than the node groups a split keeps whole (a cluster of one block cannot be split: its
    parts but one would be empty, and the whole-window greedy plan and trim before the split
    would be spent for nothing; the engine bounds what its model holds instead)."""
    nodes = len(snapshot.nodes)
    pods = sum(len(g.pods) for g in snapshot.gangs)
    k = max(math.ceil(nodes / NODES_PER_PART), math.ceil(pods / PODS_PER_PART))
    if k > 1:
        k = max(k, math.ceil(pods / PODS_PER_SPLIT_PART))
    k = min(k, nodes // MIN_NODES_PER_PART)
    if k > 1:
        k = min(k, len(_node_groups(snapshot)))
    return max(1, k)


def _node_groups(snapshot: Snapshot) -> list[list[Node]]:
    level = next((lv for lv in GROUP_LEVELS if any(lv in n.topology for n in snapshot.nodes)),
                 None)
    if level is None:
        return [[n] for n in snapshot.nodes]
    groups: dict[str, list[Node]] = defaultdict(list)
    for n in snapshot.nodes:
        groups[n.topology.get(level, f"node:{n.name}")].append(n)
    return list(groups.values())


def split_nodes(snapshot: Snapshot, parts: int) -> list[list[Node]]:
    """Deal node groups into ``parts`` parts with a similar mix of GPU kinds."""
    def kind(group: list[Node]) -> tuple[str, ...]:
        return tuple(sorted({g.model for n in group for g in n.gpus}))

    groups = sorted(_node_groups(snapshot), key=lambda g: (kind(g), g[0].name))
    out: list[list[Node]] = [[] for _ in range(parts)]
    gpus = [0] * parts
    nodes = [0] * parts
    for group in groups:
        j = min(range(parts), key=lambda i: (gpus[i], nodes[i], i))
        out[j].extend(group)
        gpus[j] += sum(len(n.gpus) for n in group)
        nodes[j] += len(group)
    return [p for p in out if p]


def _take(room: dict[str, int], wanted: set[str], take: int) -> None:
    """Deal ``take`` milli-GPU out of a part's ``room``, fullest wanted model first; what does
    not fit is still counted (room goes negative), so an oversubscribed window keeps being
    dealt in proportion to the parts' capacity instead of piling onto one part."""
    models = [m for m in sorted(room, key=lambda m: (-room[m], m)) if not wanted or m in wanted]
    for m in models:
        if take <= 0:
            return
        d = min(take, max(0, room[m]))
        room[m] -= d
        take -= d
    if take > 0 and models:
        room[models[0]] -= take


def _assign_gangs(gangs: Sequence[Gang], room: list[dict[str, int]]) -> list[list[Gang]]:
    """Deal gangs to parts; ``room[j][model]``: free milli-GPU of each GPU model in part j."""
    out: list[list[Gang]] = [[] for _ in room]
    for gang in sorted(gangs, key=lambda g: (-g.gpu_demand_milli, g.name)):
        wanted: set[str] = set().union(*(p.models for p in gang.pods))

        def space(j: int, wanted: set[str] = wanted) -> int:
            return sum(v for m, v in room[j].items() if not wanted or m in wanted)

        j = max(range(len(room)), key=lambda i: (space(i), -i))
        out[j].append(gang)
        _take(room[j], wanted, gang.gpu_demand_milli)
    return out


def tenant_caps(snapshot: Snapshot, run: dict[str, int] | None = None) -> dict[str, int]:
    """Most GPU milli each tenant with a quota may use after this window, chosen so that the
    borrowing they allow always fits in what lenders leave idle (``run``: the tenants' running
    usage, :func:`solver.rules.quota_usage_milli`, when already known)."""
    run = quota_usage_milli(snapshot) if run is None else run
    demand: dict[str, int] = defaultdict(int)
    for g in snapshot.gangs:
        demand[g.tenant] += g.gpu_demand_milli
    caps: dict[str, int] = {}
    pool = 0
    wants: dict[str, int] = {}
    for t in snapshot.tenants:
        if t.quota_milli is None:
            continue
        need = run.get(t.name, 0) + demand[t.name]
        if need <= t.quota_milli:
            caps[t.name] = need
            pool += t.quota_milli - need
        else:
            caps[t.name] = max(t.quota_milli, run.get(t.name, 0))
            if t.can_borrow and run.get(t.name, 0) <= t.quota_milli:
                excess = need - t.quota_milli
                if t.borrow_limit_milli is not None:
                    excess = min(excess, t.borrow_limit_milli)
                wants[t.name] = excess
    # tenants already over their quota borrow from the same pool (the checker counts them)
    pool -= sum(max(0, run.get(t.name, 0) - t.quota_milli) for t in snapshot.tenants
                if t.quota_milli is not None)
    pool = max(0, pool)
    total = sum(wants.values())
    for name, want in wants.items():
        caps[name] += min(want, pool * want // total) if total else 0
    return caps


def _part_tenants(
    snapshot: Snapshot, caps: dict[str, int], run: dict[str, int], local_run: dict[str, int],
    local_demand: dict[str, int], demand: dict[str, int],
) -> tuple[Tenant, ...]:
    tenants = []
    for t in snapshot.tenants:
        if t.quota_milli is None:
            tenants.append(t)
            continue
        head = max(0, caps[t.name] - run.get(t.name, 0))
        share = head * local_demand.get(t.name, 0) // demand[t.name] if demand[t.name] else 0
        tenants.append(replace(t, quota_milli=local_run.get(t.name, 0) + share,
                               can_borrow=False, borrow_limit_milli=None))
    return tuple(tenants)


def _pinned(gang: Gang, gp: GangPlacement) -> list[Running]:
    """A placed gang as running pods (for a gang the greedy plan spread over several parts)."""
    pods = {p.name: p for p in gang.pods}
    return [Running(name=f"{gang.name}/{pp.pod}", node=pp.node,
                    cpu_milli=pods[pp.pod].cpu_milli, memory_mib=pods[pp.pod].memory_mib,
                    gpus=pp.gpus, tenant=gang.tenant, qos_class=pods[pp.pod].qos_class)
            for pp in gp.pods]


def sub_problems(snapshot: Snapshot, parts: int, hint: Plan | None = None) -> list[Snapshot]:
    """The parts as snapshots of their own.

    ``hint``: a feasible plan for the whole snapshot (the whole-cluster greedy plan). Each gang
    it admits goes to the part holding its nodes, with quota room for it there, so the hint
    restricted to a part is a feasible plan of that part; a gang it spreads over several parts
    is pinned as running pods in each (see :func:`hint_parts` for both halves). Used by the
    tests only, to look at the parts the solve works on."""
    return _split(snapshot, parts, hint)[0]


def _split(snapshot: Snapshot, parts: int, hint: Plan | None
           ) -> tuple[list[Snapshot], list[GangPlacement], list[Gang]]:
    """The parts, the hint's gangs spread over several parts, and the gangs left out of every
    part's model (see :data:`WINDOW_SLACK`)."""
    node_parts = split_nodes(snapshot, parts)
    part_of: dict[str, int] = {}
    room: list[dict[str, int]] = [defaultdict(int) for _ in node_parts]
    model_of: dict[str, dict[int, str]] = {}
    for j, p in enumerate(node_parts):
        for n in p:
            part_of[n.name] = j
            model_of[n.name] = {gpu.index: gpu.model for gpu in n.gpus}
            for gpu in n.gpus:
                room[j][gpu.model] += MILLI
    gangs = {g.name: g for g in snapshot.gangs}
    gang_parts: list[list[Gang]] = [[] for _ in node_parts]
    spread: list[GangPlacement] = []
    extra: list[Running] = []
    placed: set[str] = set()
    for gp in hint.admitted if hint is not None else ():
        where = {part_of[pp.node] for pp in gp.pods}
        placed.add(gp.gang)
        if len(where) == 1:
            gang_parts[where.pop()].append(gangs[gp.gang])
        else:
            spread.append(gp)
            extra += _pinned(gangs[gp.gang], gp)
    # one pass over the running pods: their part, the GPU room they take, tenants' usage
    running: list[list[Running]] = [[] for _ in node_parts]
    local_run: list[dict[str, int]] = [defaultdict(int) for _ in node_parts]
    run: dict[str, int] = defaultdict(int)
    for r in (*snapshot.running, *extra):
        j = part_of[r.node]
        running[j].append(r)
        if not r.gpus:
            continue
        models = model_of[r.node]
        used = 0
        for sh in r.gpus:
            room[j][models[sh.index]] -= sh.milli
            used += sh.milli
        if r.tenant is not None:
            local_run[j][r.tenant] += used
            run[r.tenant] += used
    free = [sum(max(0, v) for v in r.values()) for r in room]
    # the hint's gangs take their room where the hint put them; the rest are dealt
    hinted: list[dict[str, int]] = [defaultdict(int) for _ in node_parts]
    for j, part_gangs in enumerate(gang_parts):
        for g in part_gangs:
            _take(room[j], set().union(*(p.models for p in g.pods)), g.gpu_demand_milli)
            hinted[j][g.tenant] += g.gpu_demand_milli
    dealt = _assign_gangs([g for g in snapshot.gangs if g.name not in placed], room)
    left_out: list[Gang] = []
    if hint is not None:
        dealt, left_out = _trim(snapshot, gang_parts, dealt, free)
    caps = tenant_caps(snapshot, dict(run))
    hinted_total: dict[str, int] = defaultdict(int)
    for h in hinted:
        for t, v in h.items():
            hinted_total[t] += v
    # quota headroom is shared in proportion to the demand the parts model (left-out gangs
    # cannot use any)
    demand: dict[str, int] = defaultdict(int)
    for part_gangs in dealt:
        for g in part_gangs:
            demand[g.tenant] += g.gpu_demand_milli
    out = []
    for j, nodes in enumerate(node_parts):
        local_demand: dict[str, int] = defaultdict(int)
        for g in dealt[j]:
            local_demand[g.tenant] += g.gpu_demand_milli
        # the part's running usage includes its hinted gangs, so their quota room is kept
        base = {t: local_run[j].get(t, 0) + hinted[j].get(t, 0)
                for t in {*local_run[j], *hinted[j]}}
        whole = {t: run.get(t, 0) + hinted_total.get(t, 0) for t in {*run, *hinted_total}}
        tenants = _part_tenants(snapshot, caps, whole, base, local_demand, demand)
        # snapshot order (the gangs' tie-break in greedy and model) is kept within a part
        mine = {g.name for g in gang_parts[j]} | {g.name for g in dealt[j]}
        out.append(Snapshot(nodes=tuple(nodes),
                            gangs=tuple(g for g in snapshot.gangs if g.name in mine),
                            running=tuple(running[j]), tenants=tenants,
                            policy=snapshot.policy))
    return out, spread, left_out


# A part's model holds the gangs its hint admits plus the next ones in priority order until
# their GPU demand reaches this multiple of the part's free GPUs; the rest cannot all fit, and
# building variables for them is what made a 10,000-pod window overrun its time limit
# (bench/controller_cycle.md). Those left out wait with the same kind of reason as any other.
WINDOW_SLACK = 1.2
# A part's model always holds at least this many pods when it has them (small models solve
# fast, and the slack alone would leave a small part little to choose from).
MIN_MODELLED_PODS = 100


def _trim(snapshot: Snapshot, hinted: list[list[Gang]], dealt: list[list[Gang]],
          free: list[int]) -> tuple[list[list[Gang]], list[Gang]]:
    """Each tenant's gangs in priority order; the next gang kept is always that of the tenant
    with the least demand in the model so far relative to its fair-share weight, so a
    first-come hint that fills a part still leaves the model every tenant to choose from."""
    order = {g.name: i for i, g in enumerate(queue_order(snapshot))}
    weight = {t.name: max(t.weight, 1e-9) for t in snapshot.tenants}
    kept: list[list[Gang]] = []
    left_out: list[Gang] = []
    for j, gangs in enumerate(dealt):
        budget = WINDOW_SLACK * free[j] - sum(g.gpu_demand_milli for g in hinted[j])
        queues: dict[str, list[Gang]] = defaultdict(list)
        for g in sorted(gangs, key=lambda g: order[g.name], reverse=True):
            queues[g.tenant].append(g)  # reversed: pop() takes the tenant's next gang
        modelled: dict[str, int] = defaultdict(int)
        for g in hinted[j]:
            modelled[g.tenant] += g.gpu_demand_milli
        mine: list[Gang] = []
        pods = sum(len(g.pods) for g in hinted[j])
        while queues and (budget > 0 or pods < MIN_MODELLED_PODS):
            t = min(queues, key=lambda t: (modelled[t] / weight.get(t, 1.0),
                                           order[queues[t][-1].name]))
            g = queues[t].pop()
            if not queues[t]:
                del queues[t]
            mine.append(g)
            modelled[t] += g.gpu_demand_milli
            budget -= g.gpu_demand_milli
            pods += len(g.pods)
        left_out += [g for q in queues.values() for g in q]
        kept.append(mine)
    return kept, left_out


def hint_parts(hint: Plan, subs: Sequence[Snapshot]) -> list[Plan]:
    """The whole-cluster ``hint`` restricted to each part (its admitted gangs and the reasons
    of its deferred ones)."""
    out = []
    for sub in subs:
        names = {g.name for g in sub.gangs}
        out.append(Plan(tuple(gp for gp in hint.admitted if gp.gang in names),
                        tuple(d for d in hint.deferred if d.gang in names), hint.stats))
    return out


# Largest cluster for which the whole-cluster greedy plan is computed before the split (0.7 s
# at 1,000 nodes x 8 GPUs, 10,000 pods on a loaded 2-core machine). Its cost grows with gangs
# x nodes (topology domains are searched over the whole cluster), 5.5 s at 10,000 nodes: past
# this size each part computes its own greedy plan in parallel, and the merged plan is only
# guaranteed to admit what the parts' greedy plans admit together.
WHOLE_GREEDY_MAX_NODES = 2000

# Sub-problems (and their hints) handed to forked workers: set just before the pool starts.
_FORK_JOBS: list[tuple[Snapshot, Plan | None]] = []

# Share of the time left after the split that the parts' waves may use; the rest is for
# starting workers, merging and the caller's own checks.
PARTS_SHARE = 0.85


def part_time_limit(sub: Snapshot, per_part: float, deadline: float, seed: int,
                    nominal: float | None = None, hint: Plan | None = None, *,
                    judge: Judge) -> Plan:
    """Solve one part within ``per_part`` seconds, and never past ``deadline`` (a
    ``time.perf_counter`` instant, the same clock in forked workers): a part that starts late
    because an earlier wave overran gets only what is left, down to its greedy plan.
    ``nominal``: the part's share of the time limit that sizes its deterministic search budget
    (default ``per_part``). ``hint``: the part's share of the whole-cluster greedy plan (None:
    the part's own best-fit plan). ``judge``: what each part's CP-SAT plan must satisfy
    (:data:`solver.cpsat.solve.Judge`)."""
    limit = min(per_part, deadline - time.perf_counter())
    return solve_cpsat(sub, time_limit=max(0.01, limit), seed=seed, workers=1, judge=judge,
                       nominal_limit=per_part if nominal is None else nominal, hint=hint)


def _run_forked(j: int, per_part: float, deadline: float, seed: int, nominal: float,
                judge: Judge) -> Plan:
    sub, hint = _FORK_JOBS[j]
    return part_time_limit(sub, per_part, deadline, seed, nominal, hint, judge=judge)


def solve_partitioned(
    snapshot: Snapshot, *, parts: int, time_limit: float, seed: int, workers: int,
    judge: Judge, processes: bool = False,
) -> Plan:
    """Solve the sub-problems ``workers`` at a time and merge them into one plan.

    The whole-cluster best-fit plan is computed first (up to :data:`WHOLE_GREEDY_MAX_NODES`
    nodes; past that each part computes its own); each part is hinted with its share of
    it (so the parts' hints add up to that plan) and keeps the better of its hint and CP-SAT's
    plan, so the merged plan admits at least the priority-weighted demand of the whole-cluster
    greedy plan; should merging lose any of it (quota restated for the whole cluster), the
    greedy plan stands. Each part gets an equal share of the time left after the greedy plan
    and the split, per wave of ``workers`` parts; all parts share one deadline, so the whole
    stays within ``time_limit`` even when a wave overruns (later parts then keep their hints).
    ``judge`` judges each part's CP-SAT plan (:data:`solver.cpsat.solve.Judge`)."""
    global _FORK_JOBS
    t0 = time.perf_counter()
    arrays: ClusterArrays | None = None
    greedy: Plan | None = None
    if len(snapshot.nodes) <= WHOLE_GREEDY_MAX_NODES:
        arrays = ClusterArrays(snapshot)
        passes, moves = budget_for(snapshot, time_limit)
        greedy = search(snapshot, arrays, seed=seed, passes=passes, moves=moves)
    greedy_s = time.perf_counter() - t0
    subs, spread, left_out = _split(snapshot, parts, greedy)
    hints: list[Plan | None] = (list(hint_parts(greedy, subs)) if greedy is not None
                                else [None] * len(subs))
    split_s = time.perf_counter() - t0
    waves = math.ceil(len(subs) / max(1, workers))
    budget = max(0.0, time_limit - split_s) * PARTS_SHARE
    per_part = max(0.05, budget / waves)
    deadline = t0 + split_s + budget
    nominal = max(0.05, time_limit * PARTS_SHARE / waves)  # load-independent: determinism
    pool: Executor
    if processes:
        _FORK_JOBS = list(zip(subs, hints, strict=True))
        pool = ProcessPoolExecutor(max_workers=workers,
                                   mp_context=multiprocessing.get_context("fork"))
        with pool:
            futures = [pool.submit(_run_forked, j, per_part, deadline, seed, nominal, judge)
                       for j in range(len(subs))]
            plans = [f.result() for f in futures]
        _FORK_JOBS = []
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            plans = list(pool.map(
                lambda sh: part_time_limit(sh[0], per_part, deadline, seed, nominal, sh[1],
                                           judge=judge),
                zip(subs, hints, strict=True)))
    t1 = time.perf_counter()
    plan = merge(snapshot, plans, split_s, t1 - t0, spread)
    if left_out:
        # the gangs no part modelled wait beside what the merged plan admits
        names = {g.name for g in left_out}
        free = arrays.copy() if arrays is not None else None
        reasons = [d for d in deferrals(snapshot, plan, free) if d.gang in names]
        plan = replace(plan, deferred=(*plan.deferred, *reasons))
    detail = {**plan.stats.detail, "parts_seconds": t1 - t0 - split_s,
              "greedy_whole_seconds": greedy_s, "spread_gangs": float(len(spread)),
              "left_out_gangs": float(len(left_out))}
    if greedy is not None and (plan_quota_problems(snapshot, plan)
                               or plan_value(snapshot, plan) < plan_value(snapshot, greedy)):
        # never below the greedy plan by the parts' own floor (solver.cpsat.solve.plan_value);
        # a guard: the hints make this rare
        detail["fallback_merged_below_greedy"] = 1.0
        plan = Plan(greedy.admitted, deferrals(snapshot, greedy, arrays),
                    replace(plan.stats, fallback=True))
    detail["merge_seconds"] = time.perf_counter() - t1
    stats = replace(plan.stats, wall_seconds=time.perf_counter() - t0, detail=detail)
    return replace(plan, stats=stats)


def _within_quota(
    snapshot: Snapshot, admitted: list[GangPlacement]
) -> tuple[list[GangPlacement], list[GangPlacement]]:
    """Drop the gangs of tenants that break the quota rule (a tenant that admits nothing is not
    judged). The caps make this a no-op; it guards the invariant that every plan is feasible."""
    tenant_of = {g.name: g.tenant for g in snapshot.gangs}
    dropped: list[GangPlacement] = []
    while True:
        plan = Plan(tuple(admitted), (), SolveStats(SolverName.CPSAT, "MERGED", 0.0))
        if not plan_quota_problems(snapshot, plan):
            return admitted, dropped
        used = quota_usage_milli(snapshot, plan)
        over = {t.name for t in snapshot.tenants
                if t.quota_milli is not None and used.get(t.name, 0) > t.quota_milli}
        dropped += [gp for gp in admitted if tenant_of[gp.gang] in over]
        admitted = [gp for gp in admitted if tenant_of[gp.gang] not in over]


def merge(snapshot: Snapshot, plans: Sequence[Plan], split_s: float, wall: float,
          spread: Sequence[GangPlacement] = ()) -> Plan:
    """One plan from the parts' plans and the gangs pinned across parts (``spread``); quota
    reasons are restated for the whole cluster."""
    admitted: list[GangPlacement] = [*spread, *(gp for p in plans for gp in p.admitted)]
    merged = Plan(tuple(admitted), (), SolveStats(SolverName.CPSAT, "MERGED", wall))
    used = quota_usage_milli(snapshot, merged)
    gangs = {g.name: g for g in snapshot.gangs}
    deferred = []
    for p in plans:
        for d in p.deferred:
            why = d.reason
            if why.startswith("quota:"):
                why = quota_reason(snapshot, gangs[d.gang], used) or (
                    "quota: its tenant's share of the quota in this part of the cluster is used")
            deferred.append(Deferred(d.gang, why))
    statuses = [p.stats.status for p in plans]
    solved = [s for s in statuses if s in ("OPTIMAL", "FEASIBLE")]
    status = ("OPTIMAL" if solved and len(solved) == len(statuses)
              and all(s == "OPTIMAL" for s in solved) else "FEASIBLE" if solved
              else statuses[0] if statuses else "UNKNOWN")
    detail: dict[str, float] = defaultdict(float)
    for p in plans:
        for k, v in p.stats.detail.items():
            detail[k] += v
    detail["partitions"] = float(len(plans))
    detail["split_seconds"] = split_s
    detail["parts_fallback"] = float(sum(p.stats.fallback for p in plans))
    # the parts' objectives add up to the plan's only when every part reports one
    whole = all(p.stats.objective is not None and p.stats.bound is not None for p in plans)
    objective = sum(p.stats.objective or 0.0 for p in plans) if whole else None
    bound = sum(p.stats.bound or 0.0 for p in plans) if whole else None
    admitted, dropped = _within_quota(snapshot, admitted)
    for gp in dropped:
        deferred.append(Deferred(gp.gang, "quota: its tenant's borrowing does not fit in the "
                                 "idle quota of the whole cluster"))
    stats = SolveStats(solver=SolverName.CPSAT, status=status, wall_seconds=wall,
                       objective=objective, bound=bound,
                       fallback=all(p.stats.fallback for p in plans), detail=dict(detail))
    return Plan(tuple(admitted), tuple(deferred), stats)
