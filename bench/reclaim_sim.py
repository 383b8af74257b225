"""Reclaim in the timed replay: Berth's engine (``solver.api.solve``, deadlines = run times as in
bench/reservations_sim.py's ``cpsat`` row) on the embedded default's generated workload, three
ways:

- ``cpsat``: tenants without quotas (the embedded default as it ships: fairness only through
  the objective's fairness term);
- ``cpsat-quota``: every tenant's quota is its weighted share of the cluster's GPUs
  (capacity x weight / sum of weights, Kueue's nominal quota), borrowing of idle quota without
  limit, reclaim off: what is lent stays lent until the borrower's gang ends;
- ``cpsat-reclaim``: the same quotas with ``solver.reclaim`` on (``minRuntimeSeconds`` 300,
  ``maxGangsPerWindow`` 4): a tenant waiting within its quota evicts borrowed gangs, which go
  back to their queue and start over;
- ``cpsat-preempt``: tenants without quotas (as ``cpsat``) and preemption within a tenant on
  (``solver.reclaim.preemptWithinTenant``, the same minimum run time and bound): a waiting gang
  evicts its own tenant's running gangs of lower priority (the generated workload's batch
  gangs have priority 1, every other gang 0).

Prints one markdown table (medians over seeds) and each tenant's got/fair ratio per seed. The
issue's target: every tenant >= 0.95 of its weighted fair share while backlogged.

    python3 bench/reclaim_sim.py [--seeds 0,1,2,3,4] [--time-limit 1.0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from solver.simulate.generate import generate  # noqa: E402
from solver.simulate.timed import TimedConfig, TimedResult, simulate_timed  # noqa: E402
from solver.simulate.timed_scenario import Scenario  # noqa: E402
from solver.types import MILLI, Reclaim  # noqa: E402

ROWS = ("cpsat", "cpsat-quota", "cpsat-reclaim", "cpsat-preempt")


def with_quotas(scenario: Scenario, reclaim: bool) -> Scenario:
    capacity = scenario.gpu_capacity_milli
    total = sum(t.weight for t in scenario.tenants)
    tenants = tuple(replace(t, quota_milli=int(capacity * t.weight / total) // MILLI * MILLI,
                            can_borrow=True, borrow_limit_milli=None)
                    for t in scenario.tenants)
    policy = replace(scenario.policy, reclaim=Reclaim(enabled=reclaim, min_run_s=300.0,
                                                      max_gangs=4))
    return replace(scenario, tenants=tenants, policy=policy)


def with_preemption(scenario: Scenario) -> Scenario:
    """The scenario as it ships (no quotas) with preemption within a tenant on."""
    policy = replace(scenario.policy, reclaim=Reclaim(enabled=False, min_run_s=300.0,
                                                      max_gangs=4, preempt_within_tenant=True))
    return replace(scenario, policy=policy)


def figures(r: TimedResult) -> dict[str, float]:
    waits = r.waits_s
    out = {"p50": r.wait_percentiles_s["p50"], "p90": r.wait_percentiles_s["p90"],
           "p99": r.wait_percentiles_s["p99"],
           "mean": sum(waits) / len(waits) if waits else 0.0,
           "alloc": r.mean_utilisation * 100,
           "min_fair": min((t.fair_ratio for t in r.tenants), default=1.0),
           "reclaimed": r.reclaimed, "lost_gpu_h": r.reclaim_lost_gpu_s / 3600,
           "placed": r.placed, "gangs": len(r.outcomes)}
    for t in r.tenants:
        out[f"fair:{t.tenant}"] = t.fair_ratio
    return out


def run(base: Scenario, seed: int, limit: float) -> dict[str, dict[str, float]]:
    scenarios = {"cpsat": base, "cpsat-quota": with_quotas(base, False),
                 "cpsat-reclaim": with_quotas(base, True), "cpsat-preempt": with_preemption(base)}
    out = {}
    for label in ROWS:
        cfg = TimedConfig(policy="cpsat", seed=seed, time_limit_s=limit, deadline_factor=1.0,
                          label=label)
        t0 = time.perf_counter()
        out[label] = figures(simulate_timed(scenarios[label], cfg))
        print(f"  {label:<14} {time.perf_counter() - t0:6.1f} s", file=sys.stderr)
    return out


def table(seeds: str, runs: list[dict[str, dict[str, float]]]) -> list[str]:
    def med(label: str, key: str) -> float:
        return statistics.median(r[label][key] for r in runs)

    lines = [f"### Embedded default (generated), medians over seeds {seeds}", "",
             "| engine | started | wait p50 s | p90 s | p99 s | mean s | GPU alloc % | worst "
             "tenant got/fair | reclaimed gangs | GPU-h lost |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for lb in ROWS:
        lines.append(
            f"| {lb} | {med(lb, 'placed'):.0f}/{med(lb, 'gangs'):.0f} | {med(lb, 'p50'):.0f} | "
            f"{med(lb, 'p90'):.0f} | {med(lb, 'p99'):.0f} | {med(lb, 'mean'):.0f} | "
            f"{med(lb, 'alloc'):.1f} | {med(lb, 'min_fair'):.2f} | {med(lb, 'reclaimed'):.0f} | "
            f"{med(lb, 'lost_gpu_h'):.1f} |")
    lines += ["", "Each tenant's got/fair per seed:", ""]
    for lb in ROWS:
        per = []
        for r in runs:
            ratios = sorted((k.split(":", 1)[1], v) for k, v in r[lb].items()
                            if k.startswith("fair:"))
            per.append(" ".join(f"{t} {v:.2f}" for t, v in ratios))
        lines.append(f"- {lb}: " + "; ".join(per))
    return [*lines, ""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--time-limit", type=float, default=1.0)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    runs = []
    for seed in seeds:
        print(f"generated, seed {seed}", file=sys.stderr)
        runs.append(run(generate(seed=seed), seed, args.time_limit))
    print("\n".join(table(args.seeds, runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
