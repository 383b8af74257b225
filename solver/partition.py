"""POP-style partitioning (Narayanan et al., SOSP'21): split a large cluster and its window
into sub-problems, solve them in parallel, and merge the plans.

Why it works: with many interchangeable nodes, a random-looking split where every part holds a
proportional mix of node kinds and of pending gangs loses little, and each sub-model is small
enough for CP-SAT to solve in a fraction of the time. How parts are formed:

* nodes: the highest topology level present (block, zone, then rack) is kept whole, so a gang
  that needs one such domain still finds it inside a part; groups are sorted by their kind of
  GPUs and dealt to the part with the fewest GPUs so far, so every part gets a similar mix;
* gangs: a gang the greedy hint placed inside one part goes to that part (so each sub-problem
  contains its share of the hint and never does worse than it); the others are dealt to the
  part with the most free GPU capacity left that has a GPU model they accept;
* quotas: each part gets, per tenant, what the hint already uses there plus an equal share of
  the tenant's quota the hint leaves unused, and no borrowing, so the merged plan stays within
  every quota; fairness is balanced within each part.

Sub-problems run in threads (CP-SAT releases the GIL while it searches); this module does no
I/O.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from solver.checker import quota_usage_milli
from solver.cpsat.model import CpsatResult, solve_window
from solver.plan import GangPlacement, Plan
from solver.types import Gang, Node, Running, Snapshot, Tenant, TypicalPod

# Sizes past which a single model gets slow; see bench/solve_scale.md for the curve.
NODES_PER_PART = 2500
PODS_PER_PART = 160
MIN_NODES_PER_PART = 200
GROUP_LEVELS = ("block", "zone", "rack")


def auto_partitions(snapshot: Snapshot) -> int:
    """How many parts to split into: one unless the cluster or the window is large."""
    nodes = len(snapshot.nodes)
    pods = sum(len(g.pods) for g in snapshot.gangs)
    k = max(math.ceil(nodes / NODES_PER_PART), math.ceil(pods / PODS_PER_PART))
    return max(1, min(k, nodes // MIN_NODES_PER_PART))


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
        return tuple(sorted(g.model for n in group for g in n.gpus))

    groups = sorted(_node_groups(snapshot), key=lambda g: (kind(g), g[0].name))
    out: list[list[Node]] = [[] for _ in range(parts)]
    gpus = [0] * parts
    nodes = [0] * parts
    for group in groups:
        j = min(range(parts), key=lambda i: (gpus[i], nodes[i], i))
        out[j].extend(group)
        gpus[j] += sum(len(n.gpus) for n in group)
        nodes[j] += len(group)
    return out


def _assign_gangs(
    snapshot: Snapshot, part_of: dict[str, int], parts: list[list[Node]], hint: Plan
) -> list[list[Gang]]:
    out: list[list[Gang]] = [[] for _ in parts]
    placed = {gp.gang: gp for gp in hint.admitted}
    room = [sum(1000 * len(n.gpus) for n in p) for p in parts]
    for r in snapshot.running:
        room[part_of[r.node]] -= sum(s.milli for s in r.gpus)
    models = [{g.model for n in p for g in n.gpus} for p in parts]
    rest: list[Gang] = []
    for gang in snapshot.gangs:
        gp = placed.get(gang.name)
        homes = {part_of[pp.node] for pp in gp.pods} if gp is not None else set()
        if len(homes) == 1:
            j = homes.pop()
            out[j].append(gang)
            room[j] -= gang.gpu_demand_milli
        else:
            rest.append(gang)
    for gang in sorted(rest, key=lambda g: (-g.gpu_demand_milli, g.name)):
        wanted = set().union(*(p.models for p in gang.pods))
        fits = [j for j in range(len(parts)) if not wanted or wanted & models[j]]
        j = max(fits or range(len(parts)), key=lambda i: (room[i], -i))
        out[j].append(gang)
        room[j] -= gang.gpu_demand_milli
    return out


def _part_tenants(
    snapshot: Snapshot, parts: int, j: int, local_use: dict[str, int], hint_use: dict[str, int]
) -> tuple[Tenant, ...]:
    tenants = []
    for t in snapshot.tenants:
        if t.quota_milli is None:
            tenants.append(t)
            continue
        spare = max(0, t.quota_milli - hint_use.get(t.name, 0)) // parts
        tenants.append(replace(t, quota_milli=local_use.get(t.name, 0) + spare, can_borrow=False,
                               borrow_limit_milli=None))
    return tuple(tenants)


def _typical(snapshot: Snapshot) -> tuple[TypicalPod, ...]:
    """The whole window's pod shapes, so every part measures fragmentation alike."""
    if snapshot.policy.typical_pods:
        return snapshot.policy.typical_pods
    shapes = Counter((p.gpu_count, p.gpu_milli) for g in snapshot.gangs for p in g.pods
                     if p.gpu_count > 0)
    return tuple(TypicalPod(gpu_count=c, gpu_milli=m, weight=float(w))
                 for (c, m), w in sorted(shapes.items()))


def sub_problems(snapshot: Snapshot, parts: int, hint: Plan) -> list[tuple[Snapshot, Plan]]:
    """The parts as snapshots of their own, each with its share of the hint."""
    node_parts = split_nodes(snapshot, parts)
    part_of = {n.name: j for j, p in enumerate(node_parts) for n in p}
    gang_parts = _assign_gangs(snapshot, part_of, node_parts, hint)
    running: list[list[Running]] = [[] for _ in node_parts]
    for r in snapshot.running:
        running[part_of[r.node]].append(r)
    hint_use = quota_usage_milli(snapshot, hint)
    policy = replace(snapshot.policy, typical_pods=_typical(snapshot))
    out = []
    for j, nodes in enumerate(node_parts):
        names = {g.name for g in gang_parts[j]}
        sub_hint = Plan(tuple(gp for gp in hint.admitted if gp.gang in names), (), hint.stats)
        sub = Snapshot(nodes=tuple(nodes), gangs=tuple(gang_parts[j]), running=tuple(running[j]),
                       tenants=snapshot.tenants, policy=policy)
        local_use = quota_usage_milli(sub, sub_hint)
        sub = replace(sub, tenants=_part_tenants(snapshot, parts, j, local_use, hint_use))
        out.append((sub, sub_hint))
    return out


def solve_partitioned(
    snapshot: Snapshot, *, parts: int, hint: Plan, time_limit: float, seed: int, workers: int
) -> CpsatResult:
    """Solve ``parts`` sub-problems in parallel and merge them into one result."""
    t0 = time.perf_counter()
    subs = sub_problems(snapshot, parts, hint)
    split_s = time.perf_counter() - t0
    waves = math.ceil(len(subs) / max(1, workers))
    per_part = max(0.05, (time_limit - split_s) / waves)

    def run(job: tuple[Snapshot, Plan]) -> CpsatResult:
        sub, sub_hint = job
        return solve_window(sub, hint=sub_hint, time_limit=per_part, seed=seed, workers=1)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = list(pool.map(run, subs))
    return merge(results, subs, split_s)


def merge(
    results: list[CpsatResult], subs: list[tuple[Snapshot, Plan]], split_seconds: float
) -> CpsatResult:
    """One result from the parts'; a part without a solution contributes its hint."""
    admitted: list[GangPlacement] = []
    statuses = []
    objective = bound = 0.0
    terms: dict[str, float] = defaultdict(float)
    size: dict[str, float] = defaultdict(float)
    for res, (_sub, sub_hint) in zip(results, subs, strict=True):
        statuses.append(res.status)
        if res.admitted is None:
            admitted.extend(sub_hint.admitted)
            continue
        admitted.extend(res.admitted)
        objective += res.objective or 0.0
        bound += res.bound or 0.0
        for k, val in res.terms.items():
            terms[k] += val
        for k, val in res.size.items():
            size[k] += val
    solved = [s for s in statuses if s in ("OPTIMAL", "FEASIBLE")]
    status = ("OPTIMAL" if len(solved) == len(statuses) and all(s == "OPTIMAL" for s in solved)
              else "FEASIBLE" if solved else statuses[0] if statuses else "UNKNOWN")
    size["parts_without_solution"] = float(len(statuses) - len(solved))
    return CpsatResult(
        status=status,
        admitted=admitted if solved else None,
        objective=objective if solved else None,
        bound=bound if solved else None,
        build_seconds=split_seconds + sum(r.build_seconds for r in results),
        solve_seconds=max((r.solve_seconds for r in results), default=0.0),
        terms=dict(terms),
        size=dict(size),
    )


