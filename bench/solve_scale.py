"""Scale benchmark for ``solver.api.solve`` (CP-SAT): latency on the openb cluster and the
curve of solve time against cluster size and window size; partitioned vs unpartitioned
quality on a 10,000-node / 80,000-GPU cluster.

    python bench/solve_scale.py                 # everything (about 3 minutes on 2 cores)
    python bench/solve_scale.py --skip-big      # openb latency and the curves only
    python bench/solve_scale.py --only-pace     # the pace burst's windows only

Reads the openb trace from ``$BERTH_DATA_DIR`` (default ``<repo>/../shared/data``). Results and
the conditions they were measured under are in bench/solve_scale.md.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale_data import big_snapshot, openb_snapshot, pace_snapshot
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


CPU: list[float] = []  # CPU seconds of each run(), this process and its forked workers


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def run(s: Snapshot, **kw: object) -> tuple[float, Plan]:
    t, c = time.perf_counter(), cpu_seconds()
    plan = solve(s, **kw)  # type: ignore[arg-type]
    wall = time.perf_counter() - t
    CPU.append(cpu_seconds() - c)
    bad = check(s, plan)
    assert not bad, [str(v) for v in bad]
    return wall, plan


def openb_latency(windows: int, time_limit: float, workers: int) -> None:
    base = openb_snapshot(64, seed=0)
    keys = ("state_seconds", "greedy_seconds", "build_seconds", "cpsat_seconds",
            "check_seconds")
    walls: list[float] = []
    parts: dict[str, list[float]] = {k: [] for k in keys}
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
    med = {k: statistics.median(v) * 1000 for k, v in parts.items()}
    print(f"openb 64-pod windows x{windows}, time_limit={time_limit}s, workers={workers} "
          f"({load()}): p50 {statistics.median(walls) * 1000:.0f} ms, p95 "
          f"{pct(walls, 0.95) * 1000:.0f} ms, max {max(walls) * 1000:.0f} ms; CPU time p50 "
          f"{statistics.median(CPU) * 1000:.0f} ms, p95 {pct(CPU, 0.95) * 1000:.0f} ms; median "
          f"state {med['state_seconds']:.0f} ms, greedy {med['greedy_seconds']:.0f} ms, build "
          f"{med['build_seconds']:.0f} ms, CP-SAT {med['cpsat_seconds']:.0f} ms, check "
          f"{med['check_seconds']:.0f} ms; greedy fallback {fallback}/{windows}; more "
          f"priority-weighted demand than best-fit in {gain}/{windows}")


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


def big(pods: int, nodes: int, repeats: int, unpartitioned: bool) -> None:
    s = big_snapshot(pods, nodes=nodes, seed=0)
    CPU.clear()
    runs = []
    for _ in range(repeats):
        wall, plan = run(s, time_limit=2.0, workers=2, processes=True)
        d = plan.stats.detail
        runs.append((wall, plan))
        print(f"{nodes} nodes / {8 * nodes} GPUs, {pods} pods, partitioned (auto, 2 processes, "
              f"limit 2 s, {load()}): wall {wall:.2f} s, CPU {CPU[-1]:.2f} s (all processes), "
              f"status {plan.stats.status}, {d.get('partitions', 1):.0f} parts "
              f"({d.get('parts_fallback', 0):.0f} kept their greedy plan), split "
              f"{d.get('split_seconds', 0):.2f} s, parts {d.get('parts_seconds', 0):.2f} s, merge "
              f"{d.get('merge_seconds', 0):.2f} s, admitted {len(plan.admitted)}/{len(s.gangs)}")
    walls = sorted(w for w, _p in runs)
    print(f"  partitioned: median wall {statistics.median(walls):.2f} s, median CPU "
          f"{statistics.median(CPU):.2f} s over {repeats} runs")
    if not unpartitioned:
        return
    wall_u, whole = run(s, time_limit=60.0, workers=2, partitions=1)
    print(f"  unpartitioned (limit 60 s, {load()}): wall {wall_u:.1f} s, status "
          f"{whole.stats.status}, admitted {len(whole.admitted)}/{len(s.gangs)} gangs")
    greedy = score_plan(s, place(s, "bestfit"))
    sw = score_plan(s, whole)
    assert sw.objective is not None and greedy.objective is not None
    for wall, plan in runs:
        sp = score_plan(s, plan)
        assert sp.objective is not None
        print(f"  objective on the whole model: partitioned ({wall:.2f} s run) "
              f"{sp.objective:.1f}, unpartitioned {sw.objective:.1f} (ratio "
              f"{sp.objective / sw.objective:.4f}), best-fit {greedy.objective:.1f}")


def pace(sizes: list[int], nodes: int, repeats: int) -> None:
    """The pace burst's window as the controller's solver worker gets it (one process, one
    CP-SAT worker, auto partitions, the e2e policy's 2 s limit): one-GPU pods pending on
    ``nodes`` empty 8-GPU nodes."""
    for n in sizes:
        s = pace_snapshot(n, nodes=nodes)
        CPU.clear()
        walls = []
        for _ in range(repeats):
            wall, plan = run(s, time_limit=2.0, seed=0)
            walls.append(wall)
        d = plan.stats.detail
        # the kind of reason (before its first colon), pod names left out
        waiting = Counter(re.sub(r"pod \S+", "pod", x.reason.split(":")[0])
                          for x in plan.deferred)
        print(f"  pace {n:6d} pending on {nodes} nodes x 8 GPUs ({load()}): wall median "
              f"{statistics.median(walls):.2f} s (max {max(walls):.2f}), CPU median "
              f"{statistics.median(CPU):.2f} s, status {plan.stats.status}, model "
              f"{d.get('model_pods', d.get('pods', 0)):.0f} pods (search "
              f"{d.get('greedy_seconds', 0) + d.get('greedy_whole_seconds', 0):.2f} s, build "
              f"{d.get('build_seconds', 0):.2f} s, CP-SAT {d.get('cpsat_seconds', 0):.2f} s), "
              f"placed after it {d.get('after_model_gangs', 0):.0f} gangs in "
              f"{d.get('after_model_seconds', 0):.2f} s, admitted {len(plan.admitted)}, "
              f"waiting {dict(waiting)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=20)
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--only-big", action="store_true")
    ap.add_argument("--only-latency", action="store_true")
    ap.add_argument("--only-pace", action="store_true",
                    help="only the pace burst's windows (1,000 to 10,000 pending one-GPU pods)")
    ap.add_argument("--pace-repeats", type=int, default=3)
    ap.add_argument("--big-repeats", type=int, default=3)
    ap.add_argument("--no-unpartitioned", action="store_true",
                    help="skip the 60 s unpartitioned solve (and the quality ratio)")
    args = ap.parse_args()
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} (1 min) at start")
    if args.only_pace:
        print("pace burst windows (limit 2 s, one process, auto partitions):")
        pace([1000, 3000, 10000], 1000, args.pace_repeats)
        return
    if args.only_big:
        big(1000, 10_000, args.big_repeats, not args.no_unpartitioned)
        return
    for limit, workers in ((0.25, 2), (1.0, 2), (1.0, 1)):
        openb_latency(args.windows, limit, workers=workers)
    if args.only_latency:
        return
    print("solve time against window size (openb cluster, 80% full, limit 1 s):")
    window_curve([16, 64, 256])
    print("solve time against cluster size (generated, 97% full, 64-pod window, limit 1 s):")
    cluster_curve([1000, 2500, 5000] + ([] if args.skip_big else [10000]))
    print("pace burst windows (limit 2 s, one process, auto partitions):")
    pace([1000, 3000, 10000], 1000, args.pace_repeats)
    if not args.skip_big:
        big(1000, 10_000, args.big_repeats, not args.no_unpartitioned)
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) at end")


if __name__ == "__main__":
    main()
