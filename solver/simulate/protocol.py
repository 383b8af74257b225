"""The FGD paper's trace-replay protocol (``berth simulate --mode fgd``).

As ../shared/data/alibaba-gpu-v2023/README.md describes the public simulator's protocol:

1. the cluster is the GPU-node list; nothing runs at the start;
2. every pod of the list is used, CPU-only pods included, and nothing departs;
3. pods are sorted by name, then shuffled with the seed;
4. pods are then sampled uniformly with replacement from the list and appended until the
   requested GPU reaches ``arrival`` x capacity (a list asking for more is cut where it gets
   there);
5. each pod is tried once, in order; a pod that does not fit is dropped;
6. after each pod, the GPU in use (milli) and the GPU demand arrived so far (failed pods
   included) are recorded; allocation ratio = used / capacity.

Batch policies see windows of ``window`` consecutive arrivals and place them together; what a
window cannot place is dropped, as in the protocol. The curve still advances pod by pod: a pod
placed by its window counts from its own arrival on. Every window's plan is judged by the same
checker as the live controller's (on the nodes it touches, with what already runs there).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from solver.baselines import NAMES as GREEDY_NAMES
from solver.baselines import ClusterArrays, GangPlacer
from solver.checker import assert_feasible
from solver.fragmentation import typical_pods
from solver.names import SolverName
from solver.plan import GangPlacement, Plan, SolveStats
from solver.simulate.timed_scenario import TracePod
from solver.simulate.trace import pod_request
from solver.types import MILLI, Gang, GpuShare, Node, PodRequest, Running, Snapshot, SolverPolicy

#: Solves one window: (snapshot of the cluster with the window's gangs, seed) -> plan.
WindowSolver = Callable[[Snapshot, int], Plan]
#: Told (pods done, pods in all) now and then.
Progress = Callable[[int, int], None]

TENANT = "trace"


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """One seed of one policy. ``used_milli[i]`` and ``arrived_milli[i]``: after pod i."""

    policy: str
    window: int
    seed: int
    capacity_milli: int
    arrived_milli: np.ndarray
    used_milli: np.ndarray
    placed: int
    dropped: int
    wall_seconds: float
    detail: dict[str, float] = field(default_factory=dict)

    def alloc_pct_at(self, arrived_pct: float) -> float:
        """Allocation ratio (%) when the arrived demand first reaches ``arrived_pct``% of
        capacity (the last point if it never does)."""
        target = arrived_pct / 100.0 * self.capacity_milli
        i = int(np.searchsorted(self.arrived_milli, target, side="left"))
        i = min(i, len(self.used_milli) - 1)
        return 100.0 * float(self.used_milli[i]) / self.capacity_milli

    def alloc_pct_by_arrival(self) -> dict[int, float]:
        """Arrived demand in whole percent -> allocation ratio (%), up to what arrived."""
        top = int(100.0 * float(self.arrived_milli[-1]) / self.capacity_milli)
        return {x: self.alloc_pct_at(x) for x in range(0, top + 1)}


def arrival_order(pods: Sequence[TracePod], capacity_milli: int, arrival: float,
                  seed: int) -> list[TracePod]:
    """Steps 3 and 4: sorted by name, shuffled with ``seed``, then sampled with replacement
    and appended (or cut) until the GPU demand reaches ``arrival`` x capacity. A pod drawn
    again gets ``#n`` appended to its name."""
    rng = random.Random(seed)
    base = sorted(pods, key=lambda p: p.name)
    rng.shuffle(base)
    target = arrival * capacity_milli
    out: list[TracePod] = []
    demand = 0
    for p in base:
        if demand >= target:
            return out
        out.append(p)
        demand += p.num_gpu * p.gpu_milli
    if not any(p.num_gpu for p in base):
        return out
    copies: dict[str, int] = {}
    while demand < target:
        p = base[rng.randrange(len(base))]
        copies[p.name] = copies.get(p.name, 1) + 1
        out.append(TracePod(f"{p.name}#{copies[p.name]}", p.cpu_milli, p.memory_mib, p.num_gpu,
                            p.gpu_milli, p.models, p.qos, p.creation_time, p.deletion_time))
        demand += p.num_gpu * p.gpu_milli
    return out


def replay(
    nodes: Sequence[Node],
    pods: Sequence[TracePod],
    *,
    policy: str,
    seed: int,
    arrival: float = 1.3,
    window: int = 1,
    solve_window: WindowSolver | None = None,
    progress: Progress | None = None,
    solver_policy: SolverPolicy | None = None,
) -> ReplayResult:
    """Run the protocol for one seed. Greedy ``policy`` names (:data:`GREEDY_NAMES`) place pod
    by pod; any other policy needs ``solve_window``, called once per window."""
    start = time.perf_counter()
    requests = [pod_request(p) for p in pods]
    base = solver_policy or SolverPolicy()
    # FGD's target workload: the typical shapes of the whole pod list, as in the paper
    sim_policy = SolverPolicy(
        weights=base.weights, topology_levels=base.topology_levels,
        qos_classes=base.qos_classes, idle_watts=base.idle_watts,
        active_watts=base.active_watts,
        typical_pods=base.typical_pods or typical_pods(requests),
    )
    cluster = Snapshot(nodes=tuple(nodes), policy=sim_policy)
    capacity = cluster.gpu_capacity_milli
    order = arrival_order(pods, capacity, arrival, seed)
    state = ClusterArrays(cluster)
    greedy = policy in GREEDY_NAMES
    if not greedy and solve_window is None:
        raise ValueError(f"policy {policy!r} is not greedy and no window solver was given")
    placer = GangPlacer(state, policy if greedy else SolverName.BESTFIT,
                        np.random.default_rng(seed))
    arrived = np.zeros(len(order), dtype=np.int64)
    used = np.zeros(len(order), dtype=np.int64)
    placed_flags = np.zeros(len(order), dtype=np.bool_)
    solve_s = 0.0
    step = max(1, window)
    for lo in range(0, len(order), step):
        batch = order[lo : lo + step]
        gangs = [Gang(name=p.name, tenant=TENANT, pods=(pod_request(p),)) for p in batch]
        t0 = time.perf_counter()
        if greedy:
            plan = _greedy_window(placer, gangs, policy)
        else:
            assert solve_window is not None
            plan = solve_window(_window_snapshot(state, gangs), seed)
        solve_s += time.perf_counter() - t0
        _check_and_apply(state, gangs, plan, apply=not greedy)
        admitted = plan.admitted_names
        for j, g in enumerate(gangs):
            placed_flags[lo + j] = g.name in admitted
        if progress is not None:
            progress(min(lo + step, len(order)), len(order))
    demand = np.array([p.num_gpu * p.gpu_milli for p in order], dtype=np.int64)
    arrived[:] = np.cumsum(demand)
    used[:] = np.cumsum(demand * placed_flags)
    return ReplayResult(
        policy=policy, window=window, seed=seed, capacity_milli=capacity,
        arrived_milli=arrived, used_milli=used, placed=int(placed_flags.sum()),
        dropped=int((~placed_flags).sum()), wall_seconds=time.perf_counter() - start,
        detail={"solve_seconds": solve_s, "pods": float(len(order))},
    )


def _greedy_window(placer: GangPlacer, gangs: list[Gang], policy: str) -> Plan:
    admitted: list[GangPlacement] = []
    for g in gangs:
        result = placer.place(g)
        if not isinstance(result, str):
            admitted.append(result)
    return Plan(admitted=tuple(admitted), deferred=(),
                stats=SolveStats(solver=policy, status="GREEDY", wall_seconds=0.0))


def _running_of(
    state: ClusterArrays,
    rows: Sequence[int],
    minus: Sequence[tuple[int, PodRequest, list[int]]] = (),
) -> tuple[Running, ...]:
    """What holds the nodes ``rows`` now (less the pods in ``minus``), as one aggregate
    running pod per node: capacity minus free. The protocol has no departures and no QoS
    classes, so the aggregate is exactly what the checker and the solver need."""
    cpu_back: dict[int, int] = {}
    mem_back: dict[int, int] = {}
    gpu_back: dict[tuple[int, int], int] = {}
    for row, pod, slots in minus:
        cpu_back[row] = cpu_back.get(row, 0) + pod.cpu_milli
        mem_back[row] = mem_back.get(row, 0) + pod.memory_mib
        for s in slots:
            gpu_back[(row, s)] = gpu_back.get((row, s), 0) + pod.gpu_milli
    out = []
    for r in rows:
        node = state.nodes[r]
        shares = []
        for s, gpu in enumerate(node.gpus):
            taken = MILLI - int(state.gfree[r, s]) - gpu_back.get((r, s), 0)
            if taken > 0:
                shares.append(GpuShare(index=gpu.index, milli=min(taken, MILLI)))
        cpu = node.cpu_milli - int(state.cpu[r]) - cpu_back.get(r, 0)
        mem = node.memory_mib - int(state.mem[r]) - mem_back.get(r, 0)
        if shares or cpu > 0 or mem > 0:
            out.append(Running(name=f"in-use@{node.name}", node=node.name, cpu_milli=cpu,
                               memory_mib=mem, gpus=tuple(shares), tenant=TENANT))
    return tuple(out)


def _window_snapshot(state: ClusterArrays, gangs: list[Gang]) -> Snapshot:
    """The whole cluster as it stands, with the window's gangs pending."""
    return Snapshot(nodes=state.nodes, gangs=tuple(gangs),
                    running=_running_of(state, range(len(state.nodes))),
                    policy=state.snapshot.policy)


def _check_and_apply(state: ClusterArrays, gangs: list[Gang], plan: Plan, *,
                     apply: bool) -> None:
    """Judge the window's plan with the checker, on the nodes it touches as they were before
    it; then (for batch solvers, whose plan is not yet in ``state``) apply it. Greedy plans
    are already in ``state``, so their pods are taken out of the picture of "before"."""
    if not plan.admitted:
        return
    pods = {g.name: g.pods[0] for g in gangs}
    placed: list[tuple[int, PodRequest, list[int]]] = []
    for gp in plan.admitted:
        for pp in gp.pods:
            row = state.row_of[pp.node]
            slots = [state.slot_of(row, s.index) for s in pp.gpus]
            placed.append((row, pods[gp.gang], slots))
    rows = sorted({row for row, _, _ in placed})
    before = _running_of(state, rows, () if apply else placed)
    local = Snapshot(nodes=tuple(state.nodes[r] for r in rows), gangs=tuple(gangs),
                     running=before, policy=state.snapshot.policy)
    assert_feasible(local, plan)
    if apply:
        for row, pod, slots in placed:
            state.apply(row, pod, slots)
