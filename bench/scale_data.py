"""Instances for the scale benchmark: the openb cluster with sampled pod windows, and a
generated 10,000-node / 80,000-GPU cluster with a 1,000-pod window.

The openb trace is read from the shared data folder (``$BERTH_DATA_DIR`` or
``<repo>/../shared/data``); nothing of it is copied into the repository.
"""

from __future__ import annotations

import csv
import os
import random
from pathlib import Path

from solver.simulate.generate import A100, H100, ClusterSpec, generate_cluster
from solver.types import (
    GPU,
    MILLI,
    Gang,
    GpuShare,
    Node,
    PodRequest,
    Running,
    Snapshot,
    SolverPolicy,
    Tenant,
    TopologyMode,
    TopologyRequirement,
)

REPO = Path(__file__).resolve().parent.parent
TENANTS = ("team-a", "team-b", "team-c", "team-d")


def data_dir() -> Path:
    env = os.environ.get("BERTH_DATA_DIR")
    base = Path(env) if env else REPO / ".." / "shared" / "data"
    path = base / "alibaba-gpu-v2023"
    if not path.is_dir():
        raise SystemExit(f"openb trace not found at {path}: set BERTH_DATA_DIR to the folder "
                         "that holds alibaba-gpu-v2023/")
    return path


def _rows(name: str) -> list[dict[str, str]]:
    with (data_dir() / name).open() as f:
        return list(csv.DictReader(f))


def openb_nodes() -> tuple[Node, ...]:
    nodes = []
    for row in _rows("openb_node_list_gpu_node.csv"):
        n = int(row["gpu"])
        gpus = tuple(GPU(i, row["model"]) for i in range(n))
        nodes.append(Node(row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]), gpus,
                          labels={"gpu.model": row["model"]}))
    return tuple(nodes)


def openb_pods() -> list[PodRequest]:
    pods = []
    for row in _rows("openb_pod_list_default.csv"):
        count = int(row["num_gpu"])
        milli = int(row["gpu_milli"]) if count else 0
        models = frozenset(m for m in row["gpu_spec"].split("|") if m)
        pods.append(PodRequest(row["name"], int(row["cpu_milli"]), int(row["memory_mib"]),
                               count, milli, models=models))
    return pods


def _fill(nodes: tuple[Node, ...], pods: list[PodRequest], target: float,
          rng: random.Random) -> tuple[Running, ...]:
    """Running pods sampled from ``pods`` and put first-fit-random onto ``nodes`` until
    ``target`` of the GPU capacity is used (the cluster a window arrives at)."""
    cap = sum(len(n.gpus) for n in nodes) * MILLI
    free = {n.name: [MILLI] * len(n.gpus) for n in nodes}
    cpu = {n.name: n.cpu_milli for n in nodes}
    mem = {n.name: n.memory_mib for n in nodes}
    used = 0
    running = []
    order = list(nodes)
    misses = 0
    while used < target * cap and misses < 200:
        pod = rng.choice(pods)
        if pod.gpu_count == 0:
            continue
        rng.shuffle(order) if len(running) % 64 == 0 else None
        placed = False
        start = rng.randrange(len(order))
        for k in range(len(order)):
            n = order[(start + k) % len(order)]
            if pod.models and n.gpus[0].model not in pod.models:
                continue
            if cpu[n.name] < pod.cpu_milli or mem[n.name] < pod.memory_mib:
                continue
            fits = [i for i, f in enumerate(free[n.name]) if f >= pod.gpu_milli]
            if len(fits) < pod.gpu_count:
                continue
            fits.sort(key=lambda i: free[n.name][i])
            take = fits[: pod.gpu_count]
            for i in take:
                free[n.name][i] -= pod.gpu_milli
            cpu[n.name] -= pod.cpu_milli
            mem[n.name] -= pod.memory_mib
            used += pod.gpu_demand_milli
            running.append(Running(f"run-{len(running)}", n.name, pod.cpu_milli, pod.memory_mib,
                                   tuple(GpuShare(i, pod.gpu_milli) for i in take),
                                   tenant=TENANTS[len(running) % len(TENANTS)]))
            placed = True
            break
        misses = 0 if placed else misses + 1
    return tuple(running)


def openb_snapshot(window: int, *, seed: int, fill: float = 0.8,
                   running: tuple[Running, ...] | None = None) -> Snapshot:
    """A ``window``-pod window of single-pod gangs from the default trace on the openb cluster,
    with ``fill`` of its GPUs already in use by earlier pods of the trace."""
    rng = random.Random(seed)
    nodes = openb_nodes()
    pods = openb_pods()
    if running is None:
        running = _fill(nodes, pods, fill, rng)
    gangs = []
    for k in range(window):
        p = rng.choice(pods)
        gangs.append(Gang(f"w{k}-{p.name}", TENANTS[k % len(TENANTS)], (p,),
                          priority=rng.choice((0, 0, 1, 2)), wait_seconds=rng.uniform(0, 3600)))
    tenants = tuple(Tenant(t, quota_milli=None) for t in TENANTS)
    return Snapshot(nodes, tuple(gangs), running, tenants, SolverPolicy())


def big_cluster(nodes: int = 10_000) -> tuple[Node, ...]:
    spec = ClusterSpec(racks=nodes // 16, nodes_per_rack=16, racks_per_block=8,
                       mix=((H100, 1.0), (A100, 3.0)))
    return generate_cluster(spec, seed=0)


def _big_fill(nodes: tuple[Node, ...], fill: float, rng: random.Random) -> tuple[Running, ...]:
    """Per node, some whole GPUs busy and some shared: ``fill`` of all GPU capacity in use."""
    running = []
    shares = (250, 300, 500, 600, 700)
    for n in nodes:
        whole = sum(1 for _ in n.gpus if rng.random() < fill - 0.05)
        gpus = list(range(len(n.gpus)))
        rng.shuffle(gpus)
        for i in gpus[:whole]:
            running.append(Running(f"r-{n.name}-{i}", n.name, 8000, 65536, (GpuShare(i, MILLI),),
                                   tenant=TENANTS[i % len(TENANTS)]))
        for i in gpus[whole:]:
            if rng.random() < 0.5:
                running.append(Running(f"s-{n.name}-{i}", n.name, 2000, 16384,
                                       (GpuShare(i, rng.choice(shares)),),
                                       tenant=TENANTS[(i + 1) % len(TENANTS)]))
    return tuple(running)


def big_snapshot(pods: int = 1000, *, nodes: int = 10_000, seed: int = 0,
                 fill: float = 0.97) -> Snapshot:
    """``pods`` pending pods in gangs on the generated cluster: shared and whole-GPU singles,
    multi-GPU pods, and 2-pod training gangs that must stay in one rack."""
    rng = random.Random(seed)
    cluster = big_cluster(nodes)
    running = _big_fill(cluster, fill, rng)
    gangs: list[Gang] = []
    made = 0
    while made < pods:
        t = TENANTS[len(gangs) % len(TENANTS)]
        kind = rng.random()
        prio = rng.choice((0, 0, 1, 3))
        wait = rng.uniform(0, 7200)
        name = f"g{len(gangs)}"
        if kind < 0.45:
            p = PodRequest("p", 4000, 16384, 1, rng.choice((100, 250, 300, 500, 700)))
            gangs.append(Gang(name, t, (p,), prio, wait))
            made += 1
        elif kind < 0.75:
            p = PodRequest("p", 8000, 65536, 1, MILLI)
            gangs.append(Gang(name, t, (p,), prio, wait))
            made += 1
        elif kind < 0.92:
            c = rng.choice((2, 4))
            p = PodRequest("p", 16000, 131072, c, MILLI)
            gangs.append(Gang(name, t, (p,), prio, wait))
            made += 1
        elif made + 2 <= pods:
            ps = tuple(PodRequest(f"w{k}", 32000, 262144, 2, MILLI, models=frozenset({"A100"}))
                       for k in range(2))
            gangs.append(Gang(name, t, ps, prio, wait,
                              TopologyRequirement("rack", TopologyMode.REQUIRED)))
            made += 2
    demand = sum(g.gpu_demand_milli for g in gangs)
    tenants = tuple(Tenant(t, quota_milli=None) for t in TENANTS)
    snap = Snapshot(cluster, tuple(gangs), running, tenants, SolverPolicy())
    _ = demand
    return snap


def pace_snapshot(pods: int = 10_000, *, nodes: int = 1000, busy: int = 0) -> Snapshot:
    """The shape of e2e/bench_pace.py's burst as the controller sees it: ``nodes`` nodes of 8
    H100s in racks of 10 (one block), ``busy`` one-GPU pods already running on them (packed from
    the first node on), and ``pods`` pending one-GPU single-pod gangs of two tenants (weights 2
    and 1, no quota), created alternately a millisecond apart."""
    cluster = tuple(
        Node(f"gpu-b0-r{i // 10}-n{i % 10}", 64_000, 512_000,
             tuple(GPU(j, "NVIDIA-H100-80GB-HBM3") for j in range(8)),
             topology={"block": "b0", "rack": f"b0-r{i // 10}"})
        for i in range(nodes))
    running = tuple(Running(f"busy-{k}", cluster[k // 8].name, 100, 128,
                            (GpuShare(k % 8, MILLI),), tenant=("team-a", "team-b")[k % 2])
                    for k in range(min(busy, 8 * nodes)))
    gangs = tuple(Gang(f"pace-{k}", ("team-a", "team-b")[k % 2],
                       (PodRequest(f"pace-{k}", 100, 128, 1, MILLI),),
                       wait_seconds=(pods - k) / 1000)
                  for k in range(pods))
    tenants = (Tenant("team-a", weight=2.0), Tenant("team-b", weight=1.0))
    return Snapshot(cluster, gangs, running, tenants, SolverPolicy())
