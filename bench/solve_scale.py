"""Scale benchmark for ``solver.api.solve`` (CP-SAT): latency on the openb cluster and the
curve of solve time against cluster size and window size; partitioned vs unpartitioned
quality on a 10,000-node / 80,000-GPU cluster.

    python bench/solve_scale.py                 # everything (about 5 minutes on 2 cores)
    python bench/solve_scale.py --skip-big      # openb latency and the curves only

Reads the openb trace from ``$BERTH_DATA_DIR`` (default ``<repo>/../shared/data``). Results and
the conditions they were measured under are in bench/solve_scale.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale_data import big_snapshot, openb_snapshot
from solver.api import solve
from solver.baselines import place
from solver.checker import check
from solver.cpsat.instance import plan_weighted_demand
from solver.cpsat.model import score_plan
from solver.plan import Plan
from solver.types import Snapshot


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


CPU: list[float] = []  # process CPU seconds of each run(): the wall time on an idle machine


def run(s: Snapshot, **kw: object) -> tuple[float, Plan]:
    t, c = time.perf_counter(), time.process_time()
    plan = solve(s, **kw)  # type: ignore[arg-type]
    wall = time.perf_counter() - t
    CPU.append(time.process_time() - c)
    bad = check(s, plan)
    assert not bad, [str(v) for v in bad]
    return wall, plan


def openb_latency(windows: int, time_limit: float, workers: int) -> None:
    base = openb_snapshot(64, seed=0)
    walls, parts = [], {"greedy_seconds": [], "build_seconds": [], "cpsat_seconds": []}
    CPU.clear()
    fallback = gain = 0
    for w in range(1, windows + 1):
        s = openb_snapshot(64, seed=w, running=base.running)
        wall, plan = run(s, time_limit=time_limit, workers=workers)
        walls.append(wall)
        for k in parts:
            parts[k].append(plan.stats.detail.get(k, 0.0))
        fallback += plan.stats.fallback
        gain += plan_weighted_demand(s, plan) > plan_weighted_demand(s, place(s, "bestfit"))
    print(f"openb 64-pod windows x{windows}, time_limit={time_limit}s, workers={workers}: "
          f"p50 {statistics.median(walls) * 1000:.0f} ms, p95 {pct(walls, 0.95) * 1000:.0f} ms, "
          f"max {max(walls) * 1000:.0f} ms; CPU time p50 {statistics.median(CPU) * 1000:.0f} "
          f"ms, p95 {pct(CPU, 0.95) * 1000:.0f} ms; median greedy "
          f"{statistics.median(parts['greedy_seconds']) * 1000:.0f} ms, build "
          f"{statistics.median(parts['build_seconds']) * 1000:.0f} ms, CP-SAT "
          f"{statistics.median(parts['cpsat_seconds']) * 1000:.0f} ms; greedy fallback "
          f"{fallback}/{windows}; more priority-weighted demand than best-fit in {gain}/{windows}")


def window_curve(sizes: list[int]) -> None:
    base = openb_snapshot(64, seed=0)
    for n in sizes:
        walls = [run(openb_snapshot(n, seed=r, running=base.running), time_limit=1.0,
                     workers=2)[0] for r in (1, 2, 3)]
        print(f"  openb window {n:5d} pods: median {statistics.median(walls) * 1000:6.0f} ms")


def cluster_curve(sizes: list[int]) -> None:
    for n in sizes:
        s = big_snapshot(64, nodes=n, seed=1)
        wall, plan = run(s, time_limit=1.0, workers=2, processes=True)
        print(f"  generated {n:6d} nodes / {8 * n:6d} GPUs, 64 pods: {wall * 1000:6.0f} ms "
              f"(partitions {plan.stats.detail.get('partitions', 1):.0f}, "
              f"status {plan.stats.status})")


def big(pods: int, nodes: int) -> None:
    s = big_snapshot(pods, nodes=nodes, seed=0)
    wall_p, part = run(s, time_limit=2.0, workers=2, processes=True)
    print(f"{nodes} nodes / {8 * nodes} GPUs, {pods} pods, partitioned (auto, 2 processes, "
          f"limit 2 s): wall {wall_p:.2f} s, status {part.stats.status}, partitions "
          f"{part.stats.detail.get('partitions', 1):.0f}, admitted {len(part.admitted)}/"
          f"{len(s.gangs)} gangs")
    wall_u, whole = run(s, time_limit=60.0, workers=2, partitions=1)
    print(f"  unpartitioned (limit 60 s): wall {wall_u:.1f} s, status {whole.stats.status}, "
          f"admitted {len(whole.admitted)}/{len(s.gangs)} gangs")
    sp, sw = score_plan(s, part), score_plan(s, whole)
    greedy = score_plan(s, place(s, "bestfit"))
    assert sp.objective is not None and sw.objective is not None
    assert greedy.objective is not None
    print(f"  objective on the whole model: partitioned {sp.objective:.1f}, unpartitioned "
          f"{sw.objective:.1f} (ratio {sp.objective / sw.objective:.4f}), best-fit "
          f"{greedy.objective:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=20)
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--only-big", action="store_true")
    ap.add_argument("--only-latency", action="store_true")
    args = ap.parse_args()
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} (1 min) at start")
    if args.only_big:
        big(1000, 10_000)
        return
    for limit, workers in ((0.25, 2), (1.0, 2), (1.0, 1)):
        openb_latency(args.windows, limit, workers=workers)
    if args.only_latency:
        return
    print("solve time against window size (openb cluster, 80% full, limit 1 s):")
    window_curve([16, 64, 256])
    print("solve time against cluster size (generated, 97% full, 64-pod window, limit 1 s):")
    cluster_curve([1000, 2500, 5000] + ([] if args.skip_big else [10000]))
    if not args.skip_big:
        big(1000, 10_000)
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) at end")


if __name__ == "__main__":
    main()
