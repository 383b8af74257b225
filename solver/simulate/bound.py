"""An offline upper bound on the allocation ratio of the FGD protocol (a linear relaxation).

Whatever a policy does, the pods it has placed when the arrived demand reaches a given level
are a subset of the pods arrived so far that fits the cluster. Relaxing "fits" to aggregate
capacity per *kind* of node (same GPU model, GPU count, CPU and memory) and letting pods be
split fractionally gives a linear programme whose optimum bounds every policy's allocation:

    maximise   sum_{c,t} gpu_c * x[c, t]
    subject to sum_t x[c, t] <= count_c                       (pods of class c that arrived)
               sum_c gpu_c x[c, t] <= n_t * gpus_t * 1000      (per node kind t: GPU,
               sum_c cpu_c x[c, t] <= n_t * cpu_t               CPU and memory)
               sum_c mem_c x[c, t] <= n_t * mem_t
               x[c, t] = 0 unless a pod of class c may run on kind t at all
                            (GPU model allowed, at least gpu_count GPUs)
               x >= 0

Pod classes group equal requests. It ignores that a node's resources come in separate GPUs
and nodes, which is exactly the fragmentation the policies fight, so the gap between a policy
and the bound is at most the fragmentation it leaves behind.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ortools.linear_solver import pywraplp

from solver.simulate.timed_scenario import TracePod
from solver.types import MILLI, Node


def allocation_bound_milli(nodes: Sequence[Node], arrived: Sequence[TracePod]) -> float:
    """The LP bound (milli-GPU) on what can be allocated of ``arrived`` on ``nodes``."""
    kinds = Counter((n.gpus[0].model if n.gpus else "", len(n.gpus), n.cpu_milli, n.memory_mib)
                    for n in nodes)
    classes = Counter((p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.models)
                      for p in arrived if p.num_gpu > 0)
    lp = pywraplp.Solver.CreateSolver("GLOP")
    if lp is None:  # pragma: no cover - GLOP ships with OR-Tools
        raise RuntimeError("OR-Tools GLOP solver is not available")
    x: dict[tuple[int, int], pywraplp.Variable] = {}
    class_list = list(classes.items())
    kind_list = list(kinds.items())
    for c, ((_, _, k, _, models), _count) in enumerate(class_list):
        for t, ((model, gpus, _, _), _n) in enumerate(kind_list):
            if gpus >= k and (not models or model in models):
                x[(c, t)] = lp.NumVar(0.0, lp.infinity(), f"x{c}_{t}")
    for c, (_, count) in enumerate(class_list):
        lp.Add(sum(v for (cc, _), v in x.items() if cc == c) <= count)
    for t, ((_, gpus, cpu, mem), n) in enumerate(kind_list):
        here = [(class_list[c][0], v) for (c, tt), v in x.items() if tt == t]
        if not here:
            continue
        lp.Add(sum(k * milli * v for (_, _, k, milli, _), v in here) <= n * gpus * MILLI)
        lp.Add(sum(cpu_c * v for (cpu_c, _, _, _, _), v in here) <= n * cpu)
        lp.Add(sum(mem_c * v for (_, mem_c, _, _, _), v in here) <= n * mem)
    lp.Maximize(sum(class_list[c][0][2] * class_list[c][0][3] * v for (c, _), v in x.items()))
    status = lp.Solve()
    if status != pywraplp.Solver.OPTIMAL:  # pragma: no cover - the LP is always feasible (0)
        raise RuntimeError(f"the bound's LP ended with status {status}")
    return float(lp.Objective().Value())
