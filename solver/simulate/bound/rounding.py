"""The other side of the pattern bound: a real packing read off the pattern LP's solution.

The pattern LP's optimum bounds every policy from above. Choosing whole nodes per pattern
among the patterns it generated (its solution rounded down, improved by CP-SAT for a few
seconds), keeping only the patterns that really fit a node, then placing the pods left over by
best fit, largest first, gives a packing of the arrived pods that an offline placer reaches, so
the best possible allocation lies between the two. When they are close, the bound is the limit
itself and the distance from a policy to it is what the policy leaves on the table.

A pattern really fits when its CPU and memory do and its GPUs can be laid out: whole-GPU pods
on GPUs of their own, sharing pods first-fit by decreasing size on the rest (a layout the
pattern's pricing guarantees exists may still be missed by first-fit; such a pattern is left
out, which only lowers the packing).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from solver.baselines import ClusterArrays, GangPlacer
from solver.names import SolverName
from solver.plan import GangPlacement, Plan, PodPlacement, SolveStats
from solver.simulate.bound.pricing import NodeKind, PodClass
from solver.simulate.bound.pricing_cpsat import fits
from solver.simulate.timed_scenario import TracePod
from solver.simulate.trace import pod_request
from solver.types import MILLI, Gang, GpuShare, Node, Snapshot

TENANT = "trace"


@dataclass(frozen=True, slots=True)
class NodeFill:
    """``copies`` nodes of kind ``kind`` (an index), filled alike: ``layout`` lists, per pod,
    its class index and the GPU slots (0 .. gpus - 1 of the node) it takes."""

    kind: int
    copies: int
    layout: tuple[tuple[int, tuple[int, ...]], ...]


def layout(kind: NodeKind, classes: Sequence[PodClass], pattern: dict[int, int]
           ) -> tuple[tuple[int, tuple[int, ...]], ...] | None:
    """Pods of ``pattern`` on GPU slots of one node of ``kind``, or None if none is found."""
    if not fits(kind, classes, pattern):
        return None
    out: list[tuple[int, tuple[int, ...]]] = []
    slot = 0
    for i, k in sorted(pattern.items()):
        if classes[i].whole:
            for _ in range(k):
                n = classes[i].gpu_count
                out.append((i, tuple(range(slot, slot + n))))
                slot += n
    if slot > kind.gpus:
        return None
    free = [MILLI] * (kind.gpus - slot)
    shares = sorted(((i, classes[i].gpu_milli) for i, k in pattern.items()
                     if not classes[i].whole for _ in range(k)), key=lambda s: -s[1])
    for i, milli in shares:
        s = next((s for s, left in enumerate(free) if left >= milli), None)
        if s is None:
            return None
        free[s] -= milli
        out.append((i, (slot + s,)))
    return tuple(out)


def round_down(kinds: Sequence[NodeKind], classes: Sequence[PodClass],
               columns: Sequence[tuple[int, dict[int, int], float]], *,
               time_limit_s: float = 0.0) -> list[NodeFill]:
    """Whole nodes per pattern from the LP's patterns (kind, pattern, LP value), keeping only
    patterns that really fit. First each pattern's LP value rounded down; then, given
    ``time_limit_s``, CP-SAT looks for a better integer choice among all the patterns (the
    rounded one as its hint), within the arrived pods and the nodes of each kind."""
    usable = [(t, placed, value) for t, pattern, value in columns
              if (placed := layout(kinds[t], classes, pattern)) is not None]
    floor = [math.floor(value + 1e-9) for _, _, value in usable]
    copies = _best_integer(kinds, classes, usable, floor, time_limit_s) if time_limit_s > 0 \
        else floor
    fills = [NodeFill(t, n, placed) for (t, placed, _), n in zip(usable, copies, strict=True)
             if n > 0]
    return _within_counts(kinds, classes, fills)


def _best_integer(kinds: Sequence[NodeKind], classes: Sequence[PodClass],
                  usable: Sequence[tuple[int, tuple[tuple[int, tuple[int, ...]], ...], float]],
                  hint: Sequence[int], time_limit_s: float) -> list[int]:
    """The most GPU demand by whole nodes per pattern (the pattern LP with integers)."""
    model = cp_model.CpModel()
    # y[j]: nodes that take pattern j
    y = [model.new_int_var(0, kinds[t].count, f"y{j}") for j, (t, _, _) in enumerate(usable)]
    for t, kind in enumerate(kinds):
        model.add(sum(y[j] for j, (tt, _, _) in enumerate(usable) if tt == t) <= kind.count)
    uses: dict[int, list[tuple[int, int]]] = {}
    for j, (_, placed, _) in enumerate(usable):
        for i, n in Counter(i for i, _ in placed).items():
            uses.setdefault(i, []).append((j, n))
    for i, terms in uses.items():
        model.add(sum(n * y[j] for j, n in terms) <= classes[i].count)
    model.maximize(sum(classes[i].demand_milli * y[j] for j, (_, placed, _) in enumerate(usable)
                       for i, _ in placed))
    for var, h in zip(y, hint, strict=True):
        model.add_hint(var, h)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1
    if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return list(hint)
    return [int(solver.value(v)) for v in y]


def _within_counts(kinds: Sequence[NodeKind], classes: Sequence[PodClass],
                   fills: list[NodeFill]) -> list[NodeFill]:
    """Guard against the LP's round-off: trim copies until no class or kind is overused."""
    used = [0] * len(classes)
    nodes = [0] * len(kinds)
    out = []
    for f in fills:
        per = [0] * len(classes)
        for i, _ in f.layout:
            per[i] += 1
        copies = min([f.copies, kinds[f.kind].count - nodes[f.kind]]
                     + [(classes[i].count - used[i]) // n for i, n in enumerate(per) if n])
        if copies <= 0:
            continue
        nodes[f.kind] += copies
        for i, n in enumerate(per):
            used[i] += n * copies
        out.append(NodeFill(f.kind, copies, f.layout))
    return out


def packing(nodes: Sequence[Node], arrived: Sequence[TracePod], kinds: Sequence[NodeKind],
            classes: Sequence[PodClass], fills: Sequence[NodeFill]) -> Plan:
    """The rounded fills laid on real nodes and pods, then the GPU pods left over placed by
    best fit, largest first. Each pod is its own gang, named after it, as in the replay."""
    state = ClusterArrays(Snapshot(nodes=tuple(nodes)))
    by_kind: dict[tuple[frozenset[str], int, int, int], list[int]] = {}
    for r, n in enumerate(state.nodes):
        if n.gpus:
            by_kind.setdefault(_kind_key(n), []).append(r)
    by_class: dict[tuple[int, int, int, int, frozenset[str]], list[TracePod]] = {}
    for p in arrived:
        if p.num_gpu:
            by_class.setdefault(_class_key(p), []).append(p)
    rows = {t: by_kind.get(_key(k), []) for t, k in enumerate(kinds)}
    waiting = {i: by_class.get(_ckey(c), []) for i, c in enumerate(classes)}
    admitted: list[GangPlacement] = []
    for f in fills:
        for _ in range(f.copies):
            row = rows[f.kind].pop(0)
            node = state.nodes[row]
            for i, slots in f.layout:
                tp = waiting[i].pop(0)
                state.apply(row, pod_request(tp), list(slots))
                shares = tuple(GpuShare(node.gpus[s].index, tp.gpu_milli) for s in slots)
                admitted.append(GangPlacement(tp.name, (PodPlacement(tp.name, node.name,
                                                                     shares),)))
    placer = GangPlacer(state, SolverName.BESTFIT, np.random.default_rng(0))
    left = sorted((p for ps in waiting.values() for p in ps),
                  key=lambda p: (-p.num_gpu * p.gpu_milli, -p.cpu_milli, p.name))
    for tp in left:
        got = placer.place(Gang(name=tp.name, tenant=TENANT, pods=(pod_request(tp),)))
        if not isinstance(got, str):
            admitted.append(got)
    return Plan(admitted=tuple(admitted), deferred=(),
                stats=SolveStats(solver="pattern-lp-rounded", status="GREEDY",
                                 wall_seconds=0.0))


def _kind_key(n: Node) -> tuple[frozenset[str], int, int, int]:
    return (frozenset(g.model for g in n.gpus), len(n.gpus), n.cpu_milli, n.memory_mib)


def _key(k: NodeKind) -> tuple[frozenset[str], int, int, int]:
    return (k.models, k.gpus, k.cpu_milli, k.memory_mib)


def _class_key(p: TracePod) -> tuple[int, int, int, int, frozenset[str]]:
    return (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.models)


def _ckey(c: PodClass) -> tuple[int, int, int, int, frozenset[str]]:
    return (c.cpu_milli, c.memory_mib, c.gpu_count, c.gpu_milli, c.models)
