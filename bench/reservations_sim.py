"""Reservations and backfill in the timed replay: Berth's engine with every gang's deadline
known (``cpsat``: what reservations plan with) against the same engine told no deadline
(``cpsat-nodeadlines``: only what fits now), the same engine without the controller's records
(``cpsat-norecords``: fair share judged one window at a time and FGD's target workload the
window's own pods, docs/fair-sharing.md) and the greedy baselines, on the embedded default's
generated workload (seeds) and on slices of three openb pod lists (default, gpushare40,
gpuspec20; the multigpu lists carry no creation or deletion times, so no timed replay can be
made of them; bench/timed_sim.py's slicing: the first 60 GPU nodes, 1,500 consecutive pods from
the middle of the trace, arrivals sped up to 1.3x the slice's capacity, 4 tenants hashed from
the pod names).

Every gang's deadline is its run time in the ``cpsat`` rows (``TimedConfig.deadline_factor``
1.0; ``--factor 2`` for deadlines of twice the run time): the best case of users who declare
``activeDeadlineSeconds`` exactly. Prints one markdown table per workload (medians over seeds
for the generated one) and the ratios the planning-over-time issue sets targets on (p99 and
mean wait against best-fit's). Results: bench/reservations_sim.md.

    python3 bench/reservations_sim.py [--seeds 0,1,2,3,4] [--lists default,gpushare40,gpuspec20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from timed_sim import alibaba_slice  # noqa: E402

from solver.simulate.generate import generate  # noqa: E402
from solver.simulate.timed import TimedConfig, TimedResult, simulate_timed  # noqa: E402
from solver.simulate.timed_scenario import Scenario  # noqa: E402
from solver.types import FairSharing, TargetWorkload  # noqa: E402


@dataclass(frozen=True)
class Row:
    label: str
    policy: str
    deadlines: bool
    records: bool = True  # fair sharing over time and the learned target workload


ROWS = (Row("cpsat", "cpsat", True), Row("cpsat-norecords", "cpsat", True, records=False),
        Row("cpsat-nodeadlines", "cpsat", False),
        Row("bestfit", "bestfit", False), Row("fgd", "fgd", False))


def without_records(scenario: Scenario) -> Scenario:
    """The scenario with the controller's records turned off (docs/fair-sharing.md): fair
    share judged one window at a time, FGD's target workload the window's own pods."""
    policy = replace(scenario.policy, fair_sharing=FairSharing(half_life_s=0.0),
                     target_workload=TargetWorkload(half_life_s=0.0))
    return replace(scenario, policy=policy)


def figures(r: TimedResult) -> dict[str, float]:
    waits = r.waits_s
    return {"p50": r.wait_percentiles_s["p50"], "p90": r.wait_percentiles_s["p90"],
            "p99": r.wait_percentiles_s["p99"],
            "mean": sum(waits) / len(waits) if waits else 0.0,
            "alloc": r.mean_utilisation * 100,
            "min_fair": min((t.fair_ratio for t in r.tenants), default=1.0),
            "min_pooled": min((t.pooled_fair_ratio for t in r.tenants), default=1.0),
            "reserved": r.reserved_gangs, "late": r.reserved_late,
            "backfilled": r.backfilled, "placed": r.placed, "gangs": len(r.outcomes)}


def run(scenario: Scenario, seed: int, factor: float, limit: float) -> dict[str, dict[str, float]]:
    out = {}
    for row in ROWS:
        cfg = TimedConfig(policy=row.policy, seed=seed, time_limit_s=limit,
                          deadline_factor=factor if row.deadlines else None, label=row.label)
        t0 = time.perf_counter()
        seen = scenario if row.records else without_records(scenario)
        out[row.label] = figures(simulate_timed(seen, cfg))
        print(f"  {row.label:<18} {time.perf_counter() - t0:6.1f} s", file=sys.stderr)
    return out


def table(title: str, runs: list[dict[str, dict[str, float]]]) -> list[str]:
    def med(label: str, key: str) -> float:
        return statistics.median(r[label][key] for r in runs)

    lines = [f"### {title}", "",
             "| policy | started | wait p50 s | p90 s | p99 s | mean s | GPU alloc % | worst "
             "tenant got/fair | within its models | reserved | late | backfilled |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in ROWS:
        lb = row.label
        lines.append(
            f"| {lb} | {med(lb, 'placed'):.0f}/{med(lb, 'gangs'):.0f} | {med(lb, 'p50'):.0f} | "
            f"{med(lb, 'p90'):.0f} | {med(lb, 'p99'):.0f} | {med(lb, 'mean'):.0f} | "
            f"{med(lb, 'alloc'):.1f} | {med(lb, 'min_fair'):.2f} | {med(lb, 'min_pooled'):.2f} | "
            f"{med(lb, 'reserved'):.0f} | "
            f"{med(lb, 'late'):.0f} | {med(lb, 'backfilled'):.0f} |")
    best_p99, best_mean = med("bestfit", "p99"), med("bestfit", "mean")
    lines += ["", f"cpsat against best-fit: p99 wait {med('cpsat', 'p99') / best_p99:.2f}x "
              f"(target <= 0.5), mean wait {med('cpsat', 'mean') / best_mean:.2f}x (target <= "
              f"0.8), GPU allocated {med('cpsat', 'alloc') - med('bestfit', 'alloc'):+.1f} "
              "points (target >= -0.5); without deadlines: p99 "
              f"{med('cpsat-nodeadlines', 'p99') / best_p99:.2f}x (target < 1)."]
    if len(runs) > 1:
        per = ", ".join(f"{r['cpsat']['p99']:.0f} / {r['cpsat-norecords']['p99']:.0f} / "
                        f"{r['cpsat-nodeadlines']['p99']:.0f} / {r['bestfit']['p99']:.0f}"
                        for r in runs)
        lines += ["", "p99 per seed (cpsat / cpsat-norecords / cpsat-nodeadlines / bestfit): "
                  f"{per}."]
        per = ", ".join(f"{r['cpsat']['alloc']:.1f} / {r['cpsat-norecords']['alloc']:.1f} / "
                        f"{r['bestfit']['alloc']:.1f}" for r in runs)
        lines += ["", f"GPU allocated % per seed (cpsat / cpsat-norecords / bestfit): {per}; "
                  "means " + " / ".join(
                      f"{statistics.fmean(r[k]['alloc'] for r in runs):.1f}"
                      for k in ("cpsat", "cpsat-norecords", "bestfit")) + "."]
        per = ", ".join(f"{r['cpsat']['min_fair']:.2f} / {r['cpsat-norecords']['min_fair']:.2f}"
                        f" / {r['bestfit']['min_fair']:.2f}" for r in runs)
        lines += ["", f"worst tenant got/fair per seed (cpsat / cpsat-norecords / bestfit): "
                  f"{per}."]
    return [*lines, ""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--lists", default="default,gpushare40,gpuspec20")
    ap.add_argument("--factor", type=float, default=1.0)
    ap.add_argument("--time-limit", type=float, default=1.0)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    out: list[str] = []
    runs = []
    for seed in seeds:
        print(f"generated, seed {seed}", file=sys.stderr)
        runs.append(run(generate(seed=seed), seed, args.factor, args.time_limit))
    if runs:
        out += table(f"Embedded default (generated), medians over seeds {args.seeds}", runs)
    for name in (s for s in args.lists.split(",") if s):
        print(f"openb {name}", file=sys.stderr)
        scenario, speedup = alibaba_slice(60, 1500, 1.3, name)
        out += table(f"openb_pod_list_{name}: 60 nodes, 1,500 pods, arrivals x{speedup:.0f}, "
                     "seed 0", [run(scenario, 0, args.factor, args.time_limit)])
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
