#!/usr/bin/env python3
"""The FGD-protocol replay of one pod list and seed through ``solver.api.solve``, called as the
controller calls it (``solver="cpsat"``, the time limit, the seed), windows of 128 arrivals,
100 % arrival; weights given as name=value override the defaults.

Usage: python3 bench/controller_replay.py stay=0.3 default 42 1.0
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.simulate.fgd import cpsat_window_solver
from admission.simulate.tracefiles import read_nodes, read_pods
from solver.plan import Plan
from solver.simulate.protocol import replay
from solver.types import Snapshot

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "alibaba-gpu-v2023"


def main(variant: str, pod_list: str, seed: int, time_limit: float) -> None:
    nodes = read_nodes(DATA / "openb_node_list_gpu_node.csv")
    pods = read_pods(DATA / f"openb_pod_list_{pod_list}.csv")
    kw = {k: float(v) for k, v in (x.split("=") for x in variant.split(",") if "=" in x)}
    stats: dict[str, int] = {}
    controller = cpsat_window_solver(time_limit, objective="controller")  # solver.api.solve

    def window(snap: Snapshot, seed: int) -> Plan:
        if kw:
            w = dataclasses.replace(snap.policy.weights, **kw)
            snap = dataclasses.replace(snap, policy=dataclasses.replace(snap.policy, weights=w))
        plan = controller(snap, seed)
        for k in plan.stats.detail:
            if k.startswith("fallback") or k == "wall_capped":
                stats[k] = stats.get(k, 0) + 1
        stats[plan.stats.status] = stats.get(plan.stats.status, 0) + 1
        return plan

    t = time.time()
    r = replay(nodes, pods, policy="cpsat", seed=seed, arrival=1.0, window=128,
               solve_window=window)
    print(json.dumps({"variant": variant, "list": pod_list, "seed": seed,
                      "time_limit": time_limit,
                      "unallocated_pct_at_100": round(100 - r.alloc_pct_at(100.0), 3),
                      "seconds": round(time.time() - t), "windows": stats}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
