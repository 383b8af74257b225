"""Candidate filtering and symmetry: which nodes and GPUs each pod is offered in the model.

Nodes whose free state, labels, taints and relevant topology are identical are interchangeable
for every constraint and objective term, so they form one class: eligibility and the usable
GPUs are computed once per (pod signature, class), never per node. A pod is then offered a
short window of nodes in each of its best-fitting classes. Windows of successive pods slide
along the class by the capacity they would use, so pods that could all go to one class see
enough distinct nodes, while the model stays a few thousand variables wide.

Gangs with a topology requirement are offered whole domains instead (the same nodes for every
pod of the gang), since a per-pod window could leave no domain that holds all of them. Nodes of
the greedy hint are always offered, so the hint is a solution of the model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable

from solver.cpsat.instance import Candidate, Instance, PodRef
from solver.eligibility import node_allows
from solver.plan import Plan
from solver.types import Node, TopologyMode

UsableFn = Callable[[PodRef, Hashable, int], tuple[int, ...] | None]

# Most nodes offered to one pod of a topology-constrained gang, per domain.
DOMAIN_NODE_CAP = 32
# Domains offered to a gang with a topology requirement.
DOMAINS_PER_GANG = 3


def _node_key(inst: Instance, node: Node, levels: tuple[str, ...]) -> Hashable:
    f = inst.free[node.name]
    gpus = tuple(
        (g.index, g.model, f.gpu_milli[g.index], f.gpu_memory_mib.get(g.index, 0),
         tuple(sorted(f.gpu_classes.get(g.index, ()))), g.nvlink_domain)
        for g in node.gpus
    )
    return (
        node.usable,
        tuple(sorted(node.labels.items())),
        node.taints,
        f.cpu_milli,
        f.memory_mib,
        gpus,
        tuple(node.topology.get(level) for level in levels),
    )


def _pod_key(ref: PodRef) -> Hashable:
    p = ref.pod
    return (p.cpu_milli, p.memory_mib, p.gpu_count, p.gpu_milli, p.gpu_memory_mib,
            tuple(sorted(p.models)), p.qos_class, tuple(sorted(p.node_selector.items())),
            p.affinity, p.tolerations)


def usable_gpus(inst: Instance, ref: PodRef, node: Node) -> tuple[int, ...] | None:
    """GPU indexes on ``node`` that ``ref`` may take a share of; None when the node cannot
    host the pod at all (filters, CPU, memory, too few fitting GPUs)."""
    pod = ref.pod
    if not node_allows(pod, node):
        return None
    f = inst.free[node.name]
    if f.cpu_milli < pod.cpu_milli or f.memory_mib < pod.memory_mib:
        return None
    if pod.gpu_count == 0:
        return ()
    fits = []
    for g in node.gpus:
        if pod.models and g.model not in pod.models:
            continue
        if f.gpu_milli[g.index] < pod.gpu_milli:
            continue
        if pod.gpu_memory_mib and f.gpu_memory_mib.get(g.index, 0) < pod.gpu_memory_mib:
            continue
        if not _qos_fits(inst, ref, node.name, g.index):
            continue
        fits.append(g.index)
    if len(fits) < pod.gpu_count:
        return None
    return tuple(fits)


def _qos_fits(inst: Instance, ref: PodRef, node: str, gpu: int) -> bool:
    """The pod may join what already runs on this GPU (bans and latency SLOs)."""
    running = inst.free[node].gpu_classes.get(gpu, [])
    return not running or inst.qos.allowed([*running, ref.pod.qos_class])


def _fit_score(inst: Instance, ref: PodRef, node: str, gpus: tuple[int, ...]) -> tuple[int, int]:
    """Best fit: smaller leftover on the GPUs it would use first, then fewer free GPUs."""
    f = inst.free[node]
    pod = ref.pod
    if pod.gpu_count == 0:
        return (f.cpu_milli - pod.cpu_milli, 0)
    left = sorted(f.gpu_milli[i] - pod.gpu_milli for i in gpus)[: pod.gpu_count]
    return (sum(left), sum(f.gpu_milli[i] for i in gpus))


def _per_node_capacity(inst: Instance, ref: PodRef, node: str, gpus: tuple[int, ...]) -> int:
    """How many pods like ``ref`` one node of this class holds (at least 1)."""
    f = inst.free[node]
    pod = ref.pod
    caps = []
    if pod.cpu_milli:
        caps.append(f.cpu_milli // pod.cpu_milli)
    if pod.memory_mib:
        caps.append(f.memory_mib // pod.memory_mib)
    if pod.gpu_count:
        if pod.shares_gpu:
            caps.append(sum(f.gpu_milli[i] // pod.gpu_milli for i in gpus))
        else:
            caps.append(len(gpus) // pod.gpu_count)
    return max(1, min(caps) if caps else 1)


def build_candidates(
    inst: Instance, *, hint: Plan | None, per_class_window: int, max_classes_per_pod: int
) -> list[list[Candidate]]:
    snap = inst.snapshot
    levels = tuple(sorted({
        g.topology.level for g in inst.gangs
        if g.topology is not None and g.topology.level not in ("node", "nvlink")
    }))
    classes: dict[Hashable, list[Node]] = defaultdict(list)
    for n in snap.nodes:
        classes[_node_key(inst, n, levels)].append(n)
    class_list = list(classes.values())  # in order of first appearance: deterministic

    # usable[(pod key, class)] -> GPU indexes, or None when the class cannot host the pod
    usable: dict[tuple[Hashable, int], tuple[int, ...] | None] = {}

    def usable_in(ref: PodRef, pkey: Hashable, ci: int) -> tuple[int, ...] | None:
        k = (pkey, ci)
        if k not in usable:
            usable[k] = usable_gpus(inst, ref, class_list[ci][0])
        return usable[k]

    node_class = {n.name: ci for ci, members in enumerate(class_list) for n in members}
    consumed: dict[tuple[Hashable, int], float] = defaultdict(float)
    out: list[list[Candidate]] = [[] for _ in inst.pods]

    for gi, gang in enumerate(inst.gangs):
        if gang.topology is not None:
            _domain_candidates(inst, gi, class_list, node_class, usable_in, out)
            continue
        for pi in inst.gang_pods[gi]:
            ref = inst.pods[pi]
            pkey = _pod_key(ref)
            scored = []
            for ci, members in enumerate(class_list):
                gpus = usable_in(ref, pkey, ci)
                if gpus is None:
                    continue
                scored.append((_fit_score(inst, ref, members[0].name, gpus), ci, gpus))
            scored.sort(key=lambda s: (s[0], s[1]))
            for _score, ci, gpus in scored[:max_classes_per_pod]:
                members = class_list[ci]
                cap = _per_node_capacity(inst, ref, members[0].name, gpus)
                start = int(consumed[(pkey, ci)])
                start = max(0, min(start, len(members) - per_class_window))
                for n in members[start:start + per_class_window]:
                    out[pi].append(Candidate(n.name, gpus))
                consumed[(pkey, ci)] += 1.0 / cap

    if hint is not None:
        _add_hint(inst, hint, node_class, class_list, usable_in, out)
    return out


def _domain_candidates(
    inst: Instance, gi: int, class_list: list[list[Node]], node_class: dict[str, int],
    usable_in: UsableFn, out: list[list[Candidate]],
) -> None:
    """Offer every pod of gang ``gi`` the same nodes: those of its best few domains."""
    gang = inst.gangs[gi]
    assert gang.topology is not None
    level = gang.topology.level
    demand = gang.gpu_demand_milli
    refs = [(pi, inst.pods[pi], _pod_key(inst.pods[pi])) for pi in inst.gang_pods[gi]]
    # per node: the pods it can host and with which GPUs
    per_domain: dict[str, list[tuple[str, dict[int, tuple[int, ...]]]]] = defaultdict(list)
    free_in: dict[str, int] = defaultdict(int)
    for n in inst.snapshot.nodes:
        ci = node_class[n.name]
        hosts: dict[int, tuple[int, ...]] = {}
        for pi, ref, pkey in refs:
            gpus = usable_in(ref, pkey, ci)
            if gpus is not None:
                hosts[pi] = gpus
        if not hosts:
            continue
        all_gpus = sorted({i for g in hosts.values() for i in g})
        if level == "nvlink":
            for i in all_gpus:
                dom = inst.domain("nvlink", n.name, i)
                assert dom is not None
                per_domain[dom].append((n.name, hosts))
                free_in[dom] += inst.free[n.name].gpu_milli[i]
            continue
        dom = inst.domain(level, n.name)
        if dom is None:
            if gang.topology.mode is TopologyMode.REQUIRED:
                continue  # cannot prove the node is in the domain
            dom = f"node:{n.name}"
        per_domain[dom].append((n.name, hosts))
        free_in[dom] += sum(inst.free[n.name].gpu_milli[i] for i in all_gpus)
    fitting = [d for d in per_domain if free_in[d] >= demand]
    if gang.topology.mode is TopologyMode.PREFERRED:
        # preferred at node level: still offer a spread, so it is admitted when no node holds it
        fitting = list(per_domain)
    fitting.sort(key=lambda d: (free_in[d] - demand < 0, free_in[d], d))
    seen: dict[int, set[str]] = defaultdict(set)
    for dom in fitting[: DOMAINS_PER_GANG if gang.topology.mode is TopologyMode.REQUIRED
                       else DOMAINS_PER_GANG * 4]:
        for node, hosts in per_domain[dom][:DOMAIN_NODE_CAP]:
            for pi, gpus in hosts.items():
                if node in seen[pi]:
                    continue
                seen[pi].add(node)
                out[pi].append(Candidate(node, gpus))


def _add_hint(
    inst: Instance, hint: Plan, node_class: dict[str, int], class_list: list[list[Node]],
    usable_in: UsableFn, out: list[list[Candidate]],
) -> None:
    by_key = {(inst.gangs[inst.pods[pi].gang].name, inst.pods[pi].pod.name): pi
              for pi in range(len(inst.pods))}
    for gp in hint.admitted:
        for pp in gp.pods:
            pi = by_key.get((gp.gang, pp.pod))
            if pi is None or pp.node not in node_class:
                continue
            if any(c.node == pp.node for c in out[pi]):
                continue
            ref = inst.pods[pi]
            gpus = usable_in(ref, _pod_key(ref), node_class[pp.node])
            if gpus is not None:
                out[pi].append(Candidate(pp.node, gpus))

