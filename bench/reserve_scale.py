"""What planning reservations costs a window (solver/reserve.py), beside the solve's own time.

A cluster of N 8-GPU nodes, 95 % of its GPUs held by one-GPU pods with expected ends spread
over two hours, and 300 pending 64-GPU gangs (8 pods of 8 GPUs; none fits now): the case where
every window walks the queue and bisects the expected ends. Prints the median and the worst of
``--rounds`` calls of :func:`solver.reserve.plan_reservations` per size. Results:
bench/reserve.md.

    python3 bench/reserve_scale.py [--sizes 100,300,1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from solver.reserve import plan_reservations
from solver.types import GPU, Gang, GpuShare, Node, PodRequest, Running, Snapshot, Tenant


def snapshot(nodes_n: int, seed: int = 0) -> Snapshot:
    rng = random.Random(seed)
    nodes = tuple(Node(name=f"n{i}", cpu_milli=128_000, memory_mib=1_024_000,
                       gpus=tuple(GPU(j, "A100", 80_000) for j in range(8)))
                  for i in range(nodes_n))
    running = tuple(
        Running(f"r{i}-{j}", n.name, 1000, 1000, (GpuShare(j, 1000),), "t",
                remaining_s=rng.uniform(0, 7200))
        for i, n in enumerate(nodes) for j in range(8) if rng.random() < 0.95)
    gangs = tuple(Gang(f"g{k}", "t", tuple(PodRequest(f"g{k}-{p}", 1000, 1000, 8, 1000)
                                           for p in range(8)), wait_seconds=1000.0 - k)
                  for k in range(300))
    return Snapshot(nodes=nodes, gangs=gangs, running=running, tenants=(Tenant("t"),))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,300,1000")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print("| nodes | GPUs | running pods | pending gangs | median s | worst s | reserved start s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        snap = snapshot(size)
        times, start = [], None
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            held = plan_reservations(snap)
            times.append(time.perf_counter() - t0)
            start = held[0].reservation.start_in_s if held else None
        shown = "-" if start is None else f"{start:.0f}"
        print(f"| {size} | {size * 8} | {len(snap.running)} | {len(snap.gangs)} | "
              f"{statistics.median(times):.3f} | {max(times):.3f} | {shown} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
