"""Exact pricing for the pattern bound: one node's best fill by CP-SAT, CPU and memory exact.

The dynamic programme of :mod:`solver.simulate.bound.pricing` rounds CPU down and leaves memory
to the pooled rows of the pattern LP. Once its column generation has converged, this model
prices the same node with nothing relaxed but the per-node count of each class, so that the
patterns it adds really fit a node and the LP can settle on a lower value.

Its answer is used as an upper bound, so the bound side must never be below the true best:
profits are scaled to integers rounding *up* (``floor(p * SCALE) + 1``) and CP-SAT's proven
objective bound is what is returned, never only its best solution; a call that proves nothing
returns infinity (the caller then keeps the dynamic programme's bound).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from solver.simulate.bound.pricing import NodeKind, PodClass
from solver.types import MILLI

#: Profits are multiplied by this and rounded up (at most 0.001 milli-GPU too much a pod).
SCALE = 1000
#: The search stops once its best pattern is this close (milli-GPU) to its proven bound.
GAP_MILLI = 0.5


@dataclass(frozen=True, slots=True)
class ExactPriced:
    """The best pattern found (class index -> pods), its profit and a proven upper bound on
    every real pattern's profit (milli-GPU)."""

    pattern: dict[int, int]
    profit: float
    upper: float


def price_exact(kind: NodeKind, classes: Sequence[PodClass], profits: Sequence[float], *,
                time_limit_s: float, hint: Mapping[int, int] | None = None) -> ExactPriced:
    """The most profitable pattern that really fits one node of ``kind``."""
    cand = [i for i, c in enumerate(classes) if profits[i] > 0 and kind.admits(c)]
    if not cand:
        return ExactPriced({}, 0.0, 0.0)
    gain = {i: math.floor(profits[i] * SCALE) + 1 for i in cand}
    model = cp_model.CpModel()
    # x[i]: pods of class i on the node
    x = {i: model.new_int_var(0, kind.most(classes[i]), f"x{i}") for i in cand}
    model.add(sum(classes[i].cpu_milli * x[i] for i in cand) <= kind.cpu_milli)
    model.add(sum(classes[i].memory_mib * x[i] for i in cand) <= kind.memory_mib)
    whole = [i for i in cand if classes[i].whole]
    sizes = sorted({classes[i].gpu_milli for i in cand if not classes[i].whole}, reverse=True)
    gpus = range(kind.gpus)
    # held[s]: GPU s is held whole (by a whole- or multi-GPU pod)
    held = [model.new_bool_var(f"held{s}") for s in gpus]
    model.add(sum(classes[i].gpu_count * x[i] for i in whole) <= sum(held))
    # z[q, s]: sharing pods of size q on GPU s
    z = {(q, s): model.new_int_var(0, MILLI // q, f"z{q}_{s}") for q in sizes for s in gpus}
    for q in sizes:
        model.add(sum(z[q, s] for s in gpus) == sum(x[i] for i in cand
                                                     if classes[i].gpu_milli == q))
    loads = [sum(q * z[q, s] for q in sizes) + MILLI * held[s] for s in gpus]
    for s in gpus:
        model.add(loads[s] <= MILLI)
        if s + 1 < kind.gpus:  # GPUs are interchangeable: order them by load
            model.add(loads[s] >= loads[s + 1])
    model.maximize(sum(gain[i] * x[i] for i in cand))
    if hint:
        for i in cand:
            model.add_hint(x[i], hint.get(i, 0))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, time_limit_s)
    solver.parameters.num_workers = 1
    solver.parameters.absolute_gap_limit = GAP_MILLI * SCALE
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return ExactPriced({}, 0.0, math.inf)
    pattern = {i: int(solver.value(x[i])) for i in cand if solver.value(x[i]) > 0}
    profit = sum(profits[i] * k for i, k in pattern.items())
    return ExactPriced(pattern, profit, max(profit, solver.best_objective_bound / SCALE))


def fits(kind: NodeKind, classes: Sequence[PodClass], pattern: Mapping[int, int]) -> bool:
    """Whether ``pattern`` fits one node of ``kind`` by CPU and memory (its GPUs are packed
    exactly by both pricings)."""
    return (sum(classes[i].cpu_milli * k for i, k in pattern.items()) <= kind.cpu_milli
            and sum(classes[i].memory_mib * k for i, k in pattern.items()) <= kind.memory_mib)


