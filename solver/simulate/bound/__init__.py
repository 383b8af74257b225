"""An offline upper bound on the allocation ratio of the FGD protocol (a linear relaxation).

Whatever a policy does, the pods it has placed when the arrived demand reaches a given level
are a subset of the pods arrived so far that fits the cluster. Relaxing "fits" to capacity
pooled per *kind* of node (same GPU model, GPU count, CPU and memory), with pods split
fractionally, but keeping the one packing fact that pooling loses most (two shares above half
a GPU never meet on one GPU), gives a linear programme whose optimum bounds every policy:

    maximise   sum_{c,t} gpu_c * x[c, t]
    subject to sum_t x[c, t] <= count_c                 (pods of class c that arrived)
               per node kind t (n_t nodes of gpus_t GPUs, cpu_t, mem_t):
                 whole_t + big_t + small_t / 1000 <= n_t * gpus_t        (GPUs)
                 small_left_t <= sum_{c big} (1000 - milli_c) x[c, t]   (room beside bigs)
                 sum_c cpu_c x[c, t] <= n_t * cpu_t,  same for memory
               where whole_t = sum over whole-GPU classes of gpu_count * x, big_t = number
               of shares above 500 (each holds a GPU of its own), and each small share (at
               most 500) is split between pooled GPUs (small_t) and the room left beside big
               shares (small_left_t);
               x[c, t] = 0 unless class c may run on kind t at all (GPU model, GPU count);
               x >= 0.

A big share's GPU can only take shares that fit beside it, all of them small, so the split is
a relaxation of every real placement. What it ignores (GPUs split across nodes, CPU and memory
across nodes, small shares packing into GPUs) is the fragmentation the policies fight, so the
gap between a policy and the bound is at most what it leaves fragmented.

That pooling reaches 100 % on every openb pod list, so the figure to quote is
:func:`upper_bound_milli`: the smaller of this LP and the pattern bound of
:mod:`solver.simulate.bound.patterns`, which packs node by node and GPU by GPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ortools.linear_solver import pywraplp

from solver.simulate.bound.patterns import pattern_bound
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
    half = MILLI // 2
    class_list = list(classes.items())
    kind_list = list(kinds.items())
    # x[c, t]: pods of class c on node kind t; for small shares split into pooled GPUs (x)
    # and room beside big shares (y)
    x: dict[tuple[int, int], pywraplp.Variable] = {}
    y: dict[tuple[int, int], pywraplp.Variable] = {}
    for c, ((_, _, k, milli, models), _count) in enumerate(class_list):
        for t, ((model, gpus, _, _), _n) in enumerate(kind_list):
            if gpus >= k and (not models or model in models):
                x[(c, t)] = lp.NumVar(0.0, lp.infinity(), f"x{c}_{t}")
                if milli <= half:
                    y[(c, t)] = lp.NumVar(0.0, lp.infinity(), f"y{c}_{t}")
    for c, (_, count) in enumerate(class_list):
        lp.Add(sum(v for (cc, _), v in (*x.items(), *y.items()) if cc == c) <= count)
    for t, ((_, gpus, cpu, mem), n) in enumerate(kind_list):
        here = [(class_list[c][0], v) for (c, tt), v in x.items() if tt == t]
        beside = [(class_list[c][0], v) for (c, tt), v in y.items() if tt == t]
        if not here:
            continue
        whole = [k * v for (_, _, k, milli, _), v in here if milli == MILLI]
        big = [v for (_, _, _, milli, _), v in here if half < milli < MILLI]
        small = [milli * v for (_, _, _, milli, _), v in here if milli <= half]
        lp.Add(sum(whole) + sum(big) + sum(small) * (1.0 / MILLI) <= n * gpus)
        room = [(MILLI - milli) * v for (_, _, _, milli, _), v in here if half < milli < MILLI]
        lp.Add(sum(milli * v for (_, _, _, milli, _), v in beside) <= sum(room))
        both = here + beside
        lp.Add(sum(cpu_c * v for (cpu_c, _, _, _, _), v in both) <= n * cpu)
        lp.Add(sum(mem_c * v for (_, mem_c, _, _, _), v in both) <= n * mem)
    lp.Maximize(sum(class_list[c][0][2] * class_list[c][0][3] * v
                    for (c, _), v in (*x.items(), *y.items())))
    status = lp.Solve()
    if status != pywraplp.Solver.OPTIMAL:  # pragma: no cover - the LP is always feasible (0)
        raise RuntimeError(f"the bound's LP ended with status {status}")
    return float(lp.Objective().Value())


def upper_bound_milli(nodes: Sequence[Node], arrived: Sequence[TracePod], *,
                      time_limit_s: float = 120.0) -> float:
    """The tightest offline bound (milli-GPU) on what any policy can have allocated of
    ``arrived`` on ``nodes``: both bounds are valid, so the smaller one is."""
    pooled = allocation_bound_milli(nodes, arrived)
    pattern = pattern_bound(nodes, arrived, time_limit_s=time_limit_s, pack=False)
    return min(pooled, pattern.bound_milli)
