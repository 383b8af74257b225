"""Does a waiting gang fit in what is free now, and if not, how far off is it: "needs 8 free
GPUs of model X in one rack: the largest free block now is 4". Pure.

Whether it fits is the solver's own answer: the gang alone, with quotas left out, placed by
best-fit on the free capacity (:func:`solver.api.solve`), and the solver's deferral reason
when it does not fit. The sizes quoted are counted here from the same snapshot: per node
(after its filters: :func:`solver.eligibility.node_allows`), whole free GPUs of an allowed
model, or the most free milli-GPU on one GPU for a share; per topology domain when the gang
requires one.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, replace

from solver.api import solve
from solver.eligibility import node_allows, why_not
from solver.names import SolverName
from solver.rules import topology_domain
from solver.types import MILLI, Gang, Node, PodRequest, Snapshot, TopologyMode


@dataclass(frozen=True, slots=True)
class Fit:
    fits: bool  # placed whole by best-fit on the free capacity, quotas aside
    solver_says: str | None  # the solver's deferral reason when it does not fit
    lines: list[str]  # what it needs against what is free, one shape of pod per line


def _free(snapshot: Snapshot) -> tuple[dict[tuple[str, int], int], dict[str, tuple[int, int]]]:
    """Free milli per (node, GPU index) and free (CPU milli, MiB) per node."""
    gpu: dict[tuple[str, int], int] = {}
    cpu: dict[str, list[int]] = {}
    for n in snapshot.nodes:
        cpu[n.name] = [n.cpu_milli, n.memory_mib]
        for g in n.gpus:
            gpu[(n.name, g.index)] = MILLI
    for r in snapshot.running:
        if r.node in cpu:
            cpu[r.node][0] -= r.cpu_milli
            cpu[r.node][1] -= r.memory_mib
        for s in r.gpus:
            if (r.node, s.index) in gpu:
                gpu[(r.node, s.index)] -= s.milli
    return gpu, {k: (v[0], v[1]) for k, v in cpu.items()}


def _shape(p: PodRequest) -> tuple[object, ...]:
    """Pods of a gang that ask for the same thing in the same places are described once."""
    return (p.gpu_count, p.gpu_milli, p.gpu_memory_mib, p.models, p.cpu_milli, p.memory_mib,
            p.qos_class, tuple(sorted(p.node_selector.items())), p.affinity, p.tolerations)


def _models(pod: PodRequest) -> str:
    return "/".join(sorted(pod.models)) if pod.models else "any model"


def _what(pod: PodRequest, n: int) -> str:
    pods = f"{n} pod{'s' if n != 1 else ''} x "
    if pod.gpu_milli < MILLI:
        return f"{pods}{pod.gpu_milli} milli-GPU of one GPU ({_models(pod)})"
    return f"{pods}{pod.gpu_count} free GPU{'s' if pod.gpu_count != 1 else ''} " \
           f"({_models(pod)}) on one node"


def _room(pod: PodRequest, node: Node, gpu_free: dict[tuple[str, int], int]) -> int:
    """Whole free GPUs (a whole-GPU pod) or the most free milli on one GPU (a share) that
    ``pod`` may use on ``node``."""
    frees = [max(0, gpu_free[(node.name, g.index)]) for g in node.gpus
             if not pod.models or g.model in pod.models]
    if pod.gpu_milli < MILLI:
        return max(frees, default=0)
    return sum(1 for f in frees if f >= MILLI)


def _fits_count(room: int, pod: PodRequest) -> int:
    if pod.gpu_milli < MILLI:
        return 1 if room >= pod.gpu_milli else 0
    return room // pod.gpu_count if pod.gpu_count else 0


def analyse(snapshot: Snapshot, gang: Gang) -> Fit:
    alone = replace(snapshot, gangs=(gang,), tenants=())
    plan = solve(alone, solver=SolverName.BESTFIT, time_limit=1.0)
    fits = gang.name in plan.admitted_names
    says = next((d.reason for d in plan.deferred if d.gang == gang.name), None)
    gpu_free, cpu_free = _free(snapshot)
    shapes: Counter[tuple[object, ...]] = Counter()
    first: dict[tuple[object, ...], PodRequest] = {}
    for p in gang.pods:
        key = _shape(p)
        shapes[key] += 1
        first.setdefault(key, p)
    req = gang.topology
    lines: list[str] = []
    for shape, n in shapes.items():
        pod = first[shape]
        if pod.gpu_count == 0:
            continue
        allowed = [node for node in snapshot.nodes if node_allows(pod, node)]
        if not allowed:
            why = Counter(why_not(pod, node) or "no room" for node in snapshot.nodes)
            ruled = "; ".join(f"{w}: {k} node{'s' if k != 1 else ''}"
                              for w, k in why.most_common(3))
            lines.append(f"needs {_what(pod, n)}: no node may run it at all ("
                         + (ruled or "the cluster has no nodes") + "); it can start only "
                         "once such a node exists or the pod asks for something a node has")
            continue
        rooms = {node.name: _room(pod, node, gpu_free) for node in allowed}
        short_cpu = [name for name, r in rooms.items() if _fits_count(r, pod) and (
            cpu_free[name][0] < pod.cpu_milli or cpu_free[name][1] < pod.memory_mib)]
        best_node, best = max(rooms.items(), key=lambda kv: (kv[1], kv[0]))
        unit = "milli-GPU free on one GPU" if pod.gpu_milli < MILLI else "free GPUs"
        ok = sum(1 for r in rooms.values() if _fits_count(r, pod))
        if best == 0:
            line = (f"needs {_what(pod, n)}: none of the {len(allowed)} nodes it may use has "
                    f"a free GPU{' share' if pod.gpu_milli < MILLI else ''} now")
        else:
            line = (f"needs {_what(pod, n)}: the largest free block on a node it may use is "
                    f"{best} {unit} ({best_node}); {ok} of {len(allowed)} such nodes have "
                    "room for one pod")
        if short_cpu:
            line += (f"; {len(short_cpu)} of them lack the CPU or memory "
                     f"({pod.cpu_milli}m CPU, {pod.memory_mib} MiB)")
        lines.append(line)
        if req is not None and req.mode is TopologyMode.REQUIRED and req.level != "node":
            per_domain: defaultdict[str, int] = defaultdict(int)
            for node in allowed:
                if req.level == "nvlink":
                    doms: defaultdict[str, int] = defaultdict(int)
                    for g in node.gpus:
                        dom = topology_domain(node, g, "nvlink")
                        if dom and (not pod.models or g.model in pod.models) and \
                                gpu_free[(node.name, g.index)] >= MILLI:
                            doms[dom] += 1
                    for dom, k in doms.items():
                        per_domain[dom] += _fits_count(k, pod) if pod.gpu_milli == MILLI \
                            else 0
                    continue
                dom = topology_domain(node, None, req.level)
                if dom is not None:
                    per_domain[dom] += _fits_count(rooms[node.name], pod)
            if per_domain:
                dom, k = max(per_domain.items(), key=lambda kv: (kv[1], kv[0]))
                lines.append(f"all {n} in one {req.level}: at most {k} such pod"
                             f"{'s' if k != 1 else ''} fit in one {req.level} now ({dom})")
            else:
                lines.append(f"all {n} in one {req.level}: no node it may use has a "
                             f"{req.level} label")
    return Fit(fits=fits, solver_says=says, lines=lines)
