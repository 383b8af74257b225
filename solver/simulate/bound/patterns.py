"""A tight offline upper bound on the GPU demand any policy can have placed: the pattern LP.

Whatever a policy does, the pods it has placed when arrived demand reaches a level are a
subset of the pods arrived so far that fits the cluster, node by node. Call a *pattern* a
multiset of pods that fits ONE node of a kind: whole GPUs for whole- and multi-GPU pods, shares
packed GPU by GPU, GPU models, the node's CPU (see :mod:`solver.simulate.bound.pricing` for the
exact rules and the small relaxations that keep the pricing fast). Every real placement gives
each node one pattern, so the integer programme

    maximise   sum_p gpu(p) * lam[p]
    subject to sum_p a[c, p] * lam[p] <= count[c]          (arrived pods of class c)  pi[c]
               sum_{p of kind t} lam[p] <= n[t]           (nodes of kind t)          mu[t]
               sum_{p of kind t} cpu(p) * lam[p] <= n[t] * cpu[t]       (pooled CPU) kappa[t]
               sum_{p of kind t} mem(p) * lam[p] <= n[t] * mem[t]    (pooled memory) nu[t]
               lam >= 0 integer

bounds every policy (the pooled rows hold for any real placement too), and so does its linear
relaxation (the configuration LP). It is solved by column generation: a restricted LP over the
patterns found so far, then for each kind the most profitable pattern at the LP's prices
(``gpu(p) - pi . a[p] - kappa[t] cpu(p) - nu[t] mem(p)``), added while it beats ``mu[t]``.

Validity does not depend on the search converging. For ANY prices ``pi, kappa, nu >= 0``,
pricing out those rows (Lagrange) lets every node take its best pattern on its own:

    bound = sum_c pi[c] count[c]
            + sum_t n[t] (kappa[t] cpu[t] + nu[t] mem[t] + max(0, best profit of a pattern))

with the best profit replaced by the pricing's upper bound (never below it). Each round gives
such a bound; the smallest is reported. When column generation converges it equals the LP
optimum; when it is cut short by the time limit it is still valid, only looser. The arrived
demand, itself a bound, is where the minimum starts.

An optional second phase drops the patterns that break a node's real CPU or memory and prices
nodes exactly with CP-SAT (:mod:`solver.simulate.bound.pricing_cpsat`). It can only lower the
bound; on the openb ``default`` and ``cpu200`` lists (seed 42) it converged to the same value,
and on ``gpushare100`` it left the exact configuration LP within 0.26 points below the relaxed
one after 500 s, so it is off by default.

CPU-only pods are left out: they earn nothing and only take room, so the best packing never
needs them. Node kinds and pod classes group identical nodes and identical pods, so the size of
the LP follows the variety of shapes, not the number of pods.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.linear_solver import pywraplp

from solver.plan import Plan
from solver.simulate.bound.pricing import NodeKind, PodClass, price
from solver.simulate.bound.pricing_cpsat import fits, price_exact
from solver.simulate.bound.rounding import packing, round_down
from solver.simulate.timed_scenario import TracePod
from solver.simulate.trace import pod_request
from solver.types import Node, ProblemError

#: Seconds for one exact (CP-SAT) pricing call.
EXACT_CALL_S = 2.0


@dataclass(frozen=True, slots=True)
class PatternBound:
    """The bound (milli-GPU) and how it was reached."""

    bound_milli: float
    lp_milli: float  # the restricted LP's value at the end (a lower bound on the LP optimum)
    converged: bool  # the bound is the configuration LP's optimum (within ``tolerance``)
    rounds: int
    patterns: int
    seconds: float
    #: A real packing read off the LP's solution and topped up by best fit
    #: (:mod:`solver.simulate.bound.rounding`), each pod its own gang as in the replay: the
    #: best allocation lies between ``packed_milli`` and ``bound_milli``.
    packed_milli: int = 0
    packing: Plan | None = None


def pod_classes(arrived: Sequence[TracePod]) -> list[PodClass]:
    """Arrived GPU pods grouped by (CPU, memory, GPU count, share, models)."""
    counts: Counter[tuple[int, int, int, int, frozenset[str]]] = Counter()
    for p in arrived:
        r = pod_request(p)  # the replay's own validation of a pod's GPU request
        if r.gpu_count > 0:
            counts[(r.cpu_milli, r.memory_mib, r.gpu_count, r.gpu_milli, r.models)] += 1
    return [PodClass(cpu, mem, k, milli, models, n)
            for (cpu, mem, k, milli, models), n in sorted(counts.items(), key=_class_order)]


def node_kinds(nodes: Sequence[Node]) -> list[NodeKind]:
    """GPU nodes grouped by (GPU models, GPU count, CPU, memory). A node with GPUs of several
    models admits a pod allowed on any of them, on all its GPUs (a relaxation)."""
    counts = Counter((frozenset(g.model for g in n.gpus), len(n.gpus), n.cpu_milli,
                      n.memory_mib) for n in nodes if n.gpus)
    return [NodeKind(models, gpus, cpu, mem, n)
            for (models, gpus, cpu, mem), n in sorted(counts.items(), key=_kind_order)]


def pattern_bound(nodes: Sequence[Node], arrived: Sequence[TracePod], *,
                  time_limit_s: float = 60.0, exact_time_s: float = 0.0,
                  round_time_s: float = 10.0, pack: bool = True,
                  tolerance: float = 1e-5) -> PatternBound:
    """An upper bound (milli-GPU) on the GPU demand of ``arrived`` that fits ``nodes`` at once.

    Column generation with the dynamic-programming pricing runs until the bound and the
    restricted LP agree within ``tolerance`` (relative), no pattern improves, or
    ``time_limit_s`` passes (checked between rounds). Then, for up to ``exact_time_s`` more,
    the patterns that break a node's real CPU or memory are dropped and CP-SAT prices each
    node exactly (:mod:`solver.simulate.bound.pricing_cpsat`); this can only lower the bound.
    Last, unless ``pack`` is false, a real packing is read off the patterns (``round_time_s``
    for CP-SAT to choose whole nodes per pattern, see :mod:`solver.simulate.bound.rounding`).
    """
    for name, value in (("time_limit_s", time_limit_s), ("exact_time_s", exact_time_s),
                        ("round_time_s", round_time_s), ("tolerance", tolerance)):
        if not value >= 0:  # also refuses NaN
            raise ProblemError(name, f"must be >= 0, got {value}")
    start = time.perf_counter()
    classes = pod_classes(arrived)
    kinds = node_kinds(nodes)
    master = _Master(classes, kinds)
    for t, kind in enumerate(kinds):  # a first pattern per class: as many as fit alone
        for i, c in enumerate(classes):
            if kind.admits(c):
                master.add(t, {i: kind.most(c)})  # at least one: it admits them
    best = float(sum(c.demand_milli * c.count for c in classes))
    rounds = 0
    lp = 0.0
    exact_until: float | None = None
    while True:
        lp, bound, added = _round(master, classes, kinds, exact_until)
        rounds += 1
        best = min(best, bound)
        now = time.perf_counter()
        done = best - lp <= tolerance * max(1.0, best) or not added
        if exact_until is None and (done or now - start >= time_limit_s):
            if exact_time_s <= 0 or (best - lp <= tolerance * max(1.0, best)
                                     and master.solution_fits()):
                break
            exact_until = now + exact_time_s
            master.drop_unfit()
        elif exact_until is not None and (done or now >= exact_until):
            break
    plan = None
    packed = 0
    if pack:
        fills = round_down(kinds, classes, master.solution(), time_limit_s=round_time_s)
        plan = packing(nodes, arrived, kinds, classes, fills)
        demand = {p.name: p.num_gpu * p.gpu_milli for p in arrived}
        packed = sum(demand[g.gang] for g in plan.admitted)
    return PatternBound(bound_milli=best, lp_milli=lp,
                        converged=best - lp <= tolerance * max(1.0, best), rounds=rounds,
                        patterns=master.size, seconds=time.perf_counter() - start,
                        packed_milli=packed, packing=plan)


def _round(master: _Master, classes: Sequence[PodClass], kinds: Sequence[NodeKind],
           exact_until: float | None) -> tuple[float, float, int]:
    """One round of column generation: the restricted LP's value, the Lagrangian bound of its
    prices, and how many patterns were added. With ``exact_until`` (a perf-counter time),
    CP-SAT also prices each kind until then; the bound takes the smaller of the two prices'
    upper bounds, and only patterns that really fit are added."""
    lp, duals = master.solve()
    bound = sum(duals.pods[i] * c.count for i, c in enumerate(classes))
    added = 0
    for t, kind in enumerate(kinds):
        # profits under the prices of the class rows and the kind's pooled CPU and memory
        profits = [c.demand_milli - duals.pods[i] - duals.cpu[t] * c.cpu_milli
                   - duals.memory[t] * c.memory_mib for i, c in enumerate(classes)]
        got = price(kind, classes, profits)
        upper, pattern, profit = got.profit, got.pattern, got.profit
        left = 0.0 if exact_until is None else exact_until - time.perf_counter()
        if exact_until is not None and not fits(kind, classes, pattern):
            pattern, profit = {}, 0.0
        if left > 0:
            exact = price_exact(kind, classes, profits, time_limit_s=min(EXACT_CALL_S, left),
                                hint=got.pattern)
            upper = min(upper, exact.upper)
            pattern, profit = exact.pattern, exact.profit
        bound += kind.count * (max(0.0, upper) + duals.cpu[t] * kind.cpu_milli
                               + duals.memory[t] * kind.memory_mib)
        if pattern and profit > duals.nodes[t] + 1e-7 * max(1.0, duals.nodes[t]):
            master.add(t, pattern)
            added += 1
    return lp, bound, added


@dataclass(frozen=True, slots=True)
class _Duals:
    """Prices of the pattern LP's rows, all clipped at zero (any non-negative prices give a
    valid bound, so round-off cannot make one invalid)."""

    pods: list[float]  # per class
    nodes: list[float]  # per kind
    cpu: list[float]  # per kind, per milli-CPU
    memory: list[float]  # per kind, per MiB


class _Master:
    """The restricted configuration LP: the patterns found so far, per node kind, and each
    kind's CPU and memory pooled (what the relaxed node of the pricing does not hold)."""

    def __init__(self, classes: Sequence[PodClass], kinds: Sequence[NodeKind]) -> None:
        lp = pywraplp.Solver.CreateSolver("GLOP")
        if lp is None:  # pragma: no cover - GLOP ships with OR-Tools
            raise RuntimeError("OR-Tools GLOP solver is not available")
        self._lp = lp
        self._classes = classes
        # rows: arrived pods per class; nodes, CPU and memory per kind
        self._pods = [lp.Constraint(0.0, float(c.count)) for c in classes]
        self._nodes = [lp.Constraint(0.0, float(k.count)) for k in kinds]
        self._cpu = [lp.Constraint(0.0, float(k.count * k.cpu_milli)) for k in kinds]
        self._memory = [lp.Constraint(0.0, float(k.count * k.memory_mib)) for k in kinds]
        self._objective = lp.Objective()
        self._objective.SetMaximization()
        self._kinds = kinds
        self._seen: set[tuple[int, tuple[tuple[int, int], ...]]] = set()
        self._columns: list[tuple[int, dict[int, int], pywraplp.Variable]] = []
        self.size = 0

    def add(self, kind: int, pattern: dict[int, int]) -> None:
        key = (kind, tuple(sorted(pattern.items())))
        if key in self._seen:
            return
        self._seen.add(key)
        # lam: nodes of this kind that take this pattern
        lam = self._lp.NumVar(0.0, self._lp.infinity(), f"p{self.size}")
        self._columns.append((kind, pattern, lam))
        self.size += 1
        self._nodes[kind].SetCoefficient(lam, 1.0)
        cs = self._classes
        for i, k in pattern.items():
            self._pods[i].SetCoefficient(lam, float(k))
        self._cpu[kind].SetCoefficient(lam, float(sum(cs[i].cpu_milli * k
                                                      for i, k in pattern.items())))
        self._memory[kind].SetCoefficient(lam, float(sum(cs[i].memory_mib * k
                                                         for i, k in pattern.items())))
        self._objective.SetCoefficient(lam, float(sum(cs[i].demand_milli * k
                                                      for i, k in pattern.items())))

    def solution(self) -> list[tuple[int, dict[int, int], float]]:
        """Every pattern with the nodes the last solution gives it: (kind, pattern, nodes)."""
        return [(t, p, lam.solution_value()) for t, p, lam in self._columns]

    def solution_fits(self) -> bool:
        """Whether every pattern the last solution uses fits its node's real CPU and memory
        (then a converged LP is already the exact configuration LP)."""
        return all(fits(self._kinds[t], self._classes, p) for t, p, lam in self._columns
                   if lam.solution_value() > 1e-9)

    def drop_unfit(self) -> None:
        """Keep out the patterns that break their node's real CPU or memory."""
        for t, p, lam in self._columns:
            if not fits(self._kinds[t], self._classes, p):
                lam.SetUb(0.0)

    def solve(self) -> tuple[float, _Duals]:
        """The LP's value and its row prices."""
        status = self._lp.Solve()
        if status != pywraplp.Solver.OPTIMAL:  # pragma: no cover - 0 is always feasible
            raise RuntimeError(f"the pattern LP ended with status {status}")

        def prices(rows: list[pywraplp.Constraint]) -> list[float]:
            return [max(0.0, r.dual_value()) for r in rows]

        return self._objective.Value(), _Duals(prices(self._pods), prices(self._nodes),
                                               prices(self._cpu), prices(self._memory))


def _class_order(item: tuple[tuple[int, int, int, int, frozenset[str]], int]
                 ) -> tuple[int, int, int, int, tuple[str, ...]]:
    (cpu, mem, k, milli, models), _ = item
    return (k, milli, cpu, mem, tuple(sorted(models)))


def _kind_order(item: tuple[tuple[frozenset[str], int, int, int], int]
                ) -> tuple[tuple[str, ...], int, int, int]:
    (models, gpus, cpu, mem), _ = item
    return (tuple(sorted(models)), gpus, cpu, mem)
