"""Fragmentation left behind, in the spirit of FGD (Weng et al., ATC'23), linearised.

FGD calls the free share ``r`` of a GPU fragmented for a task that cannot use it: a task that
needs more than ``r`` of one GPU (whole-GPU tasks need all 1000). Weighted by how common each
task is in the window, ``F(r) = r x P(task needs more than r)`` is the expected milli-GPU a GPU
with ``r`` free wastes. Placing pod p on GPU g changes g's free share from ``f`` to
``f - m_p``; the model charges ``F(f - m_p) - F(f)`` per placement (negative when it fills a
fragment), which is exact when at most one new pod joins a GPU and linear always.
"""

from __future__ import annotations

from bisect import bisect_right

from ortools.sat.python import cp_model

from solver.cpsat.instance import Instance
from solver.cpsat.variables import Term, Vars, scaled


class FragmentTable:
    """``F(r)`` for the per-GPU demands of a window's GPU pods."""

    def __init__(self, demands: list[int]) -> None:
        self.demands = sorted(demands)

    def __call__(self, free: int) -> float:
        if not self.demands or free <= 0:
            return 0.0
        bigger = len(self.demands) - bisect_right(self.demands, free)
        return free * bigger / len(self.demands)


def table(inst: Instance) -> FragmentTable:
    """The policy's typical pods (weights rounded to shares of 100), else the window's pods."""
    typical = inst.snapshot.policy.typical_pods
    if typical:
        total = sum(t.weight for t in typical)
        demands = []
        for t in typical:
            if t.gpu_count > 0:
                per_gpu = t.gpu_milli if t.gpu_count == 1 else 1000
                demands += [per_gpu] * max(1, round(100 * t.weight / total))
        return FragmentTable(demands)
    return FragmentTable([r.pod.gpu_milli for r in inst.pods if r.pod.gpu_count > 0])


def build(inst: Instance, model: cp_model.CpModel, v: Vars) -> list[Term]:
    if inst.weights.fragmentation <= 0:
        return []
    frag = table(inst)
    w = inst.weights.fragmentation
    terms: list[cp_model.LinearExprT] = []
    for (node, i), uses in v.on_gpu.items():
        free = inst.gpu_free(node, i)
        before = frag(free)
        for pi, u in uses:
            delta = scaled(w * (frag(free - inst.pods[pi].pod.gpu_milli) - before))
            if delta:
                terms.append(delta * u)
    return [("fragmentation", -sum(terms))] if terms else []
