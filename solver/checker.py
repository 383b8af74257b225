"""The one feasibility checker: every plan from every policy is judged here.

CP-SAT, the greedy baselines, the simulator and the live controller all call :func:`check`
before trusting a plan, so a bug in any model shows up as a violation instead of an
overcommitted GPU. The checker re-derives everything from the snapshot and never trusts the
plan's own bookkeeping. The rule definitions it shares with the solvers (:mod:`solver.rules`:
GPU memory demand, topology domains, quota, sharing) are stated once, so that a solver and its
judge mean the same rule; no solver imports this module.

Rules (each a :class:`Kind`):

- ``unknown``: the plan names a gang, pod or node the snapshot does not hold.
- ``gang``: a gang admitted twice, admitted and deferred at once, or admitted with some of its
  pods missing (whole gangs or nothing).
- ``pod``: a pod placed more than once within its gang.
- ``gpus``: a pod's GPU shares do not match its request: a CPU-only pod holding GPUs, a
  sharing pod not holding exactly one share of ``gpu_milli`` on one GPU, a multi-GPU pod not
  holding ``gpu_count`` whole, distinct GPUs of its node, or a GPU index the node lacks.
- ``node``: the pod may not use the node at all (:func:`solver.eligibility.why_not`: cordoned,
  not ready, selector, affinity, taints, no GPU / no GPU of an allowed model).
- ``model``: a GPU the pod holds is not of an allowed model.
- ``capacity``: after the running pods and the plan, a node's CPU or memory, a GPU's milli
  units, or a GPU's memory is over-committed. Only resources the plan touches are judged, so
  an already overcommitted node the plan leaves alone is not the plan's fault.
- ``topology``: a gang with a *required* topology spans more than one domain of its level
  (see :func:`solver.rules.topology_domain`).
- ``quota``: the tenant rule of :func:`solver.rules.quota_problems`.
- ``reclaim``: an eviction (:attr:`solver.plan.Plan.evictions`) the reclaim rule does not
  allow: reclaim off or more gangs than ``policy.reclaim.max_gangs``; a gang not running, not
  placed by Berth, evicted twice or not whole (every running pod of the gang, no other); a
  gang that has not run ``policy.reclaim.min_run_s`` (a pod not started counts as not run);
  a victim of the reclaiming tenant itself, or of a tenant not over its quota before its last
  eviction (usage after the plan, less every gang evicted from it but the largest, must
  exceed its quota: some order takes each gang while its tenant still borrows); a reclaiming
  gang that is not pending, is not admitted by the same plan, or takes its tenant over its
  own quota (usage after the plan). A preemption (:attr:`solver.plan.Eviction.preempt`)
  instead: preemption within a tenant off; a victim of another tenant than the gang it makes
  room for, or whose priority is not lower than that gang's. The plan's admissions are judged
  (capacity, quota, interference) on what runs once the evicted pods are gone.
- ``interference``: pods share a GPU although a QoS class forbids it
  (:attr:`QoSProfile.exclusive`, :attr:`QoSProfile.no_share_with`, in either direction), or a
  latency-sensitive pod's predicted latency there exceeds its SLO
  (:func:`solver.rules.sharing_problem`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from enum import StrEnum

from solver.eligibility import why_not
from solver.plan import GangPlacement, Plan
from solver.rules import (
    gpu_memory_demand,
    plan_quota_problems,
    quota_usage_milli,
    sharing_problem,
    topology_domain,
)
from solver.state import FreeState, node_free
from solver.types import GPU, MILLI, Gang, GpuShare, Node, PodRequest, Snapshot, TopologyMode


class Kind(StrEnum):
    UNKNOWN = "unknown"
    GANG = "gang"
    POD = "pod"
    GPUS = "gpus"
    NODE = "node"
    MODEL = "model"
    CAPACITY = "capacity"
    TOPOLOGY = "topology"
    QUOTA = "quota"
    RECLAIM = "reclaim"
    INTERFERENCE = "interference"


@dataclass(frozen=True, slots=True)
class Violation:
    kind: Kind
    message: str
    gang: str | None = None

    def __str__(self) -> str:
        return f"[{self.kind.value}] {self.message}"


class InfeasiblePlan(AssertionError):
    """A plan broke at least one hard rule; ``violations`` lists every one of them."""

    def __init__(self, violations: list[Violation]) -> None:
        lines = "\n  ".join(str(v) for v in violations)
        super().__init__(f"plan breaks {len(violations)} rule(s):\n  {lines}")
        self.violations = violations


def quota_violations(snapshot: Snapshot, plan: Plan) -> list[Violation]:
    """:func:`solver.rules.plan_quota_problems`, as violations."""
    return [Violation(Kind.QUOTA, m) for m in plan_quota_problems(snapshot, plan)]


# --------------------------------------------------------------------------------------------
# The checker
# --------------------------------------------------------------------------------------------


def check(snapshot: Snapshot, plan: Plan) -> list[Violation]:
    """Every hard rule ``plan`` breaks on ``snapshot``; an empty list means feasible. A plan
    with evictions is judged as a whole: the evictions by the reclaim rule on ``snapshot``,
    the admissions on what runs once the evicted pods are gone."""
    out: list[Violation] = []
    if plan.evictions:
        out += _eviction_violations(snapshot, plan, {g.name: g for g in snapshot.gangs})
        gone = {p for e in plan.evictions for p in e.pods}
        snapshot = replace(snapshot, running=tuple(r for r in snapshot.running
                                                    if r.name not in gone))
    nodes = {n.name: n for n in snapshot.nodes}
    gangs = {g.name: g for g in snapshot.gangs}
    out += _gang_violations(plan, gangs)
    admitted = [gp for gp in plan.admitted if gp.gang in gangs]
    seen: set[str] = set()
    unique: list[GangPlacement] = []
    for gp in admitted:
        if gp.gang not in seen:
            seen.add(gp.gang)
            unique.append(gp)
    for gp in unique:
        out += _placement_violations(gangs[gp.gang], gp, nodes)
    out += _capacity_violations(snapshot, unique, gangs, nodes)
    out += _interference_violations(snapshot, unique, gangs, nodes)
    out += quota_violations(snapshot, plan)
    return out


def assert_feasible(snapshot: Snapshot, plan: Plan) -> None:
    """Raise :class:`InfeasiblePlan` listing every violation, if there is any."""
    violations = check(snapshot, plan)
    if violations:
        raise InfeasiblePlan(violations)


def _gang_violations(plan: Plan, gangs: dict[str, Gang]) -> list[Violation]:
    out: list[Violation] = []
    counts: dict[str, int] = defaultdict(int)
    for gp in plan.admitted:
        counts[gp.gang] += 1
        if gp.gang not in gangs:
            out.append(Violation(Kind.UNKNOWN, f"admitted gang {gp.gang} is not pending",
                                 gp.gang))
    for name, c in counts.items():
        if c > 1:
            out.append(Violation(Kind.GANG, f"gang {name} is admitted {c} times", name))
    for d in plan.deferred:
        if d.gang in counts:
            out.append(Violation(Kind.GANG, f"gang {d.gang} is both admitted and deferred",
                                 d.gang))
    return out


def _placement_violations(
    gang: Gang, gp: GangPlacement, nodes: dict[str, Node]
) -> list[Violation]:
    out: list[Violation] = []
    pods = {p.name: p for p in gang.pods}
    placed: dict[str, int] = defaultdict(int)
    domains: set[str | None] = set()
    required = gang.topology is not None and gang.topology.mode == TopologyMode.REQUIRED
    level = gang.topology.level if gang.topology is not None and required else None
    for pp in gp.pods:
        where = f"gang {gang.name} pod {pp.pod}"
        pod = pods.get(pp.pod)
        if pod is None:
            out.append(Violation(Kind.UNKNOWN, f"{where}: no such pod in the gang", gang.name))
            continue
        placed[pp.pod] += 1
        node = nodes.get(pp.node)
        if node is None:
            out.append(Violation(Kind.UNKNOWN, f"{where}: unknown node {pp.node}", gang.name))
            continue
        reason = why_not(pod, node)
        if reason is not None:
            out.append(Violation(Kind.NODE, f"{where} may not run on {node.name}: {reason}",
                                 gang.name))
        gpus_by_index = {g.index: g for g in node.gpus}
        out += _share_violations(gang.name, where, pod, pp.gpus, node, gpus_by_index)
        if level is not None:
            held = [gpus_by_index[s.index] for s in pp.gpus if s.index in gpus_by_index]
            if level == "nvlink":
                domains.update(topology_domain(node, g, level) for g in held)
            else:
                domains.add(topology_domain(node, None, level))
    for name, c in placed.items():
        if c > 1:
            out.append(Violation(Kind.POD, f"gang {gang.name} pod {name} is placed {c} times",
                                 gang.name))
    missing = sorted(set(pods) - set(placed))
    if missing:
        out.append(Violation(Kind.GANG, f"gang {gang.name} is admitted without pods "
                             f"{', '.join(missing)} (whole gangs or nothing)", gang.name))
    if level is not None and (len(domains) > 1 or None in domains):
        shown = ", ".join(sorted(str(d) for d in domains))
        out.append(Violation(Kind.TOPOLOGY, f"gang {gang.name} requires one {level} domain "
                             f"but spans {shown}", gang.name))
    return out


def _share_violations(
    gang: str,
    where: str,
    pod: PodRequest,
    held: tuple[GpuShare, ...],
    node: Node,
    gpus_by_index: dict[int, GPU],
) -> list[Violation]:
    out: list[Violation] = []
    if pod.gpu_count == 0:
        if held:
            out.append(Violation(Kind.GPUS, f"{where} asks for no GPU but holds {len(held)}",
                                 gang))
        return out
    indexes = [s.index for s in held]
    if len(held) != pod.gpu_count or len(set(indexes)) != len(indexes):
        out.append(Violation(Kind.GPUS, f"{where} needs {pod.gpu_count} distinct GPU(s) on one "
                             f"node but holds GPUs {indexes}", gang))
    for s in held:
        if s.milli != pod.gpu_milli:
            out.append(Violation(Kind.GPUS, f"{where} holds {s.milli} milli of GPU {s.index}, "
                                 f"asked for {pod.gpu_milli}", gang))
        gpu = gpus_by_index.get(s.index)
        if gpu is None:
            out.append(Violation(Kind.GPUS, f"{where}: node {node.name} has no GPU {s.index}",
                                 gang))
        elif pod.models and gpu.model not in pod.models:
            out.append(Violation(Kind.MODEL, f"{where} holds GPU {s.index} of model "
                                 f"{gpu.model}, allowed: {', '.join(sorted(pod.models))}", gang))
    return out


def _free_on(snapshot: Snapshot, names: set[str], nodes: dict[str, Node]) -> FreeState:
    """:func:`solver.state.free_capacity` restricted to the nodes ``names`` (the ones a plan
    places pods on): the same derivation from the snapshot, without the rest of the cluster."""
    free = {name: node_free(nodes[name]) for name in names}
    mem_per_gpu = {name: {g.index: g.memory_mib for g in nodes[name].gpus} for name in names}
    for r in snapshot.running:
        f = free.get(r.node)
        if f is None:
            continue
        f.cpu_milli -= r.cpu_milli
        f.memory_mib -= r.memory_mib
        for sh in r.gpus:
            f.gpu_milli[sh.index] -= sh.milli
            f.gpu_memory_mib[sh.index] -= mem_per_gpu[r.node][sh.index] * sh.milli // MILLI
    return free


def _capacity_violations(
    snapshot: Snapshot,
    admitted: list[GangPlacement],
    gangs: dict[str, Gang],
    nodes: dict[str, Node],
) -> list[Violation]:
    free = _free_on(snapshot, {pp.node for gp in admitted for pp in gp.pods if pp.node in nodes},
                    nodes)
    touched_nodes: set[str] = set()
    touched_gpus: set[tuple[str, int]] = set()
    mem_asked: set[tuple[str, int]] = set()
    for gp in admitted:
        pods = {p.name: p for p in gangs[gp.gang].pods}
        for pp in gp.pods:
            pod, node = pods.get(pp.pod), nodes.get(pp.node)
            if pod is None or node is None:
                continue
            f = free[node.name]
            f.cpu_milli -= pod.cpu_milli
            f.memory_mib -= pod.memory_mib
            touched_nodes.add(node.name)
            gpus = {g.index: g for g in node.gpus}
            for s in pp.gpus:
                gpu = gpus.get(s.index)
                if gpu is None:
                    continue
                f.gpu_milli[s.index] -= s.milli
                f.gpu_memory_mib[s.index] -= gpu_memory_demand(pod, gpu, s.milli)
                touched_gpus.add((node.name, s.index))
                if pod.gpu_memory_mib > 0:
                    mem_asked.add((node.name, s.index))
    out: list[Violation] = []
    for name in sorted(touched_nodes):
        f = free[name]
        if f.cpu_milli < 0:
            out.append(Violation(Kind.CAPACITY, f"node {name}: CPU over-committed by "
                                 f"{-f.cpu_milli} milli-cores"))
        if f.memory_mib < 0:
            out.append(Violation(Kind.CAPACITY, f"node {name}: memory over-committed by "
                                 f"{-f.memory_mib} MiB"))
    for name, index in sorted(touched_gpus):
        f = free[name]
        if f.gpu_milli[index] < 0:
            out.append(Violation(Kind.CAPACITY, f"node {name} GPU {index}: over-committed by "
                                 f"{-f.gpu_milli[index]} milli-GPU"))
        gpu_mem = next(g.memory_mib for g in nodes[name].gpus if g.index == index)
        if gpu_mem == 0 and (name, index) in mem_asked:
            out.append(Violation(Kind.CAPACITY, f"node {name} GPU {index}: a pod asks for GPU "
                                 "memory but the GPU's memory is not known"))
        elif gpu_mem > 0 and f.gpu_memory_mib[index] < 0:
            out.append(Violation(Kind.CAPACITY, f"node {name} GPU {index}: GPU memory "
                                 f"over-committed by {-f.gpu_memory_mib[index]} MiB"))
    return out


def _interference_violations(
    snapshot: Snapshot,
    admitted: list[GangPlacement],
    gangs: dict[str, Gang],
    nodes: dict[str, Node],
) -> list[Violation]:
    # on_gpu[(node, index)]: QoS class of every holder; touched: GPUs the plan adds pods to
    on_gpu: dict[tuple[str, int], list[str | None]] = defaultdict(list)
    touched: set[tuple[str, int]] = set()
    # only GPUs the plan touches are judged, so only their holders are gathered
    plan_nodes = {pp.node for gp in admitted for pp in gp.pods}
    for r in snapshot.running:
        if r.node not in plan_nodes:
            continue
        for s in r.gpus:
            on_gpu[(r.node, s.index)].append(r.qos_class)
    for gp in admitted:
        pods = {p.name: p for p in gangs[gp.gang].pods}
        for pp in gp.pods:
            pod = pods.get(pp.pod)
            if pod is None or pp.node not in nodes:
                continue
            for s in pp.gpus:
                on_gpu[(pp.node, s.index)].append(pod.qos_class)
                touched.add((pp.node, s.index))
    out: list[Violation] = []
    for key in sorted(touched):
        why = sharing_problem(snapshot.policy, on_gpu[key])
        if why is not None:
            out.append(Violation(Kind.INTERFERENCE, f"node {key[0]} GPU {key[1]} holds classes "
                                 f"{sorted(str(c) for c in on_gpu[key])}: {why}"))
    return out


def _eviction_violations(snapshot: Snapshot, plan: Plan,
                         gangs: dict[str, Gang]) -> list[Violation]:
    rules = snapshot.policy.reclaim
    out: list[Violation] = []

    def bad(message: str, gang: str | None = None) -> None:
        out.append(Violation(Kind.RECLAIM, message, gang))

    reclaimed = [e for e in plan.evictions if not e.preempt]
    if reclaimed and not rules.enabled:
        bad(f"the plan evicts {len(reclaimed)} gang(s) for other tenants but reclaim is off")
    preempted = len(plan.evictions) - len(reclaimed)
    if preempted and not rules.preempt_within_tenant:
        bad(f"the plan preempts {preempted} gang(s) but preemption within a tenant is off")
    if len(plan.evictions) > rules.max_gangs:
        bad(f"the plan evicts {len(plan.evictions)} gangs, more than "
            f"policy.reclaim.max_gangs ({rules.max_gangs})")
    pods_of: dict[str, list[str]] = defaultdict(list)
    tenant_of: dict[str, set[str | None]] = defaultdict(set)
    run_of: dict[str, list[float | None]] = defaultdict(list)
    milli_of: dict[str, int] = defaultdict(int)
    priority_of: dict[str, int] = {}
    for r in snapshot.running:
        if r.gang is not None:
            pods_of[r.gang].append(r.name)
            tenant_of[r.gang].add(r.tenant)
            run_of[r.gang].append(r.run_s)
            milli_of[r.gang] += sum(s.milli for s in r.gpus)
            priority_of[r.gang] = max(priority_of.get(r.gang, r.priority), r.priority)
    quotas = {t.name: t.quota_milli for t in snapshot.tenants}
    used = quota_usage_milli(snapshot, plan)
    admitted = plan.admitted_names
    seen: set[str] = set()
    evicted: dict[str, list[int]] = defaultdict(list)  # victim tenant -> milli of each gang
    wants: dict[str, set[str]] = defaultdict(set)  # reclaiming tenant -> its gangs
    for e in plan.evictions:
        g = e.gang
        if g in seen:
            bad(f"gang {g} is evicted twice", g)
            continue
        seen.add(g)
        if g not in pods_of:
            bad(f"evicted gang {g} is not a running gang Berth placed", g)
            continue
        if tenant_of[g] != {e.tenant}:
            bad(f"evicted gang {g} is of tenant(s) "
                f"{', '.join(sorted(str(t) for t in tenant_of[g]))}, not {e.tenant}", g)
            continue
        if sorted(e.pods) != sorted(pods_of[g]):
            bad(f"gang {g} is evicted with pods {', '.join(sorted(e.pods))} but runs pods "
                f"{', '.join(sorted(pods_of[g]))} (whole gangs or nothing)", g)
        runs = run_of[g]
        if any(x is None or x < rules.min_run_s for x in runs):
            shortest = min((x for x in runs if x is not None), default=None)
            ran = "a pod has not started" if None in runs else f"it has run {shortest:g} s"
            bad(f"gang {g} is evicted before policy.reclaim.min_run_s "
                f"({rules.min_run_s:g} s): {ran}", g)
        want = gangs.get(e.for_gang)
        if e.preempt:
            if e.tenant != e.for_tenant:
                bad(f"gang {g} of tenant {e.tenant} is preempted for {e.for_gang} of tenant "
                    f"{e.for_tenant} (preemption stays within a tenant)", g)
            elif want is not None and priority_of[g] >= want.priority:
                bad(f"gang {g} (priority {priority_of[g]}) is preempted for {e.for_gang}, "
                    f"whose priority {want.priority} is not higher", g)
        elif e.tenant == e.for_tenant:
            bad(f"gang {g} is evicted for a gang of its own tenant {e.tenant}", g)
        if want is None or want.tenant != e.for_tenant:
            bad(f"gang {g} is evicted for {e.for_gang} of tenant {e.for_tenant}, which is not "
                "a pending gang of that tenant", g)
        elif e.for_gang not in admitted:
            bad(f"gang {g} is evicted for {e.for_gang}, which the plan does not admit (an "
                "eviction must make room for a gang placed by the same plan)", g)
        elif not e.preempt:
            wants[e.for_tenant].add(e.for_gang)
        if not e.preempt:  # only borrowed quota is reclaimed; a preemption takes none back
            evicted[e.tenant].append(milli_of[g])
    for tenant, sizes in sorted(evicted.items()):
        quota = quotas.get(tenant)
        before_last = used.get(tenant, 0) - (sum(sizes) - max(sizes))
        if quota is None or before_last <= quota:
            bad(f"tenant {tenant} loses {len(sizes)} gang(s) to reclaim but uses "
                f"{before_last} milli-GPU before its last eviction, not over its quota of "
                f"{quota} (only borrowed quota is reclaimed)")
    for tenant, names in sorted(wants.items()):
        quota = quotas.get(tenant)
        total = used.get(tenant, 0)  # the plan admits its gangs: they are counted
        if quota is None or total > quota:
            bad(f"tenant {tenant} reclaims for gangs {', '.join(sorted(names))} but would use "
                f"{total} milli-GPU with them, over its own quota of {quota}")
    return out
