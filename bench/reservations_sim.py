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

The Kueue-like and Volcano-like baselines (``kueue``, ``volcano``: models of those systems'
queueing, solver/baselines/kueue.py and volcano.py, not the systems) run in the same replays.
``--quotas`` adds each workload once more as e2e/bench_compare.py sets up the real Kueue,
Volcano and Berth: every tenant's quota is its weight's part of the cluster's GPUs (largest
remainder), borrowing without limit, reclaim on (Kueue's reclaimWithinCohort: Any; the policy's
minimum run time before a reclaim, 300 s), with the rows ``QUOTA_ROWS``.

``--estimates`` runs instead the rows ``ESTIMATE_ROWS``: users who declare expected run times
(``berth.dev/expected-runtime``) and no deadline. As the controller reads them
(admission/controller/runtimes.py), an estimate plans when running pods end (reservations) and
lets nothing backfill; an overrun estimate reads as unknown. ``cpsat-estimates``: exact;
``cpsat-estimates-noisy``: each the true run time times ``exp(z)``, ``z`` standard normal drawn
from the seed and the gang (off by 2.7x either way at one standard deviation);
``cpsat-estimates-short``: half the true run time (optimistic users: every estimate overruns).

``--learned`` runs instead the rows ``LEARNED_ROWS``: nothing declared, and run times learned
from finished pods (policy ``solver.learnedRuntimes``, solver/history.py: per tenant and GPU
count, the scenarios naming no owner kinds) planning when running pods end, as the controller
does when the policy turns it on; ``--learned-min N`` pods of a kind before an estimate.

``--keep`` runs instead the rows ``KEEP_ROWS``: the engine with the policy's
``solver.reservations.keep`` (``cpsat-keep``: a gang given a reservation keeps its place
ahead of the queue until it starts, and its start is planned exactly, docs/reservations.md)
against the default that plans afresh every window, and best-fit; and an experiment that no
policy turns on, ``cpsat-exact (experiment)``: the default with every reservation's start
planned exactly, as keep's are, rather than on a spread of at most 32 running pods' ends.

    python3 bench/reservations_sim.py [--seeds 0,1,2,3,4] [--lists default,gpushare40,gpuspec20]
                                      [--quotas | --only-quotas | --estimates |
                                       --learned [--learned-min N] | --keep]
                                      [--hold-ahead SECONDS]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from timed_sim import alibaba_slice  # noqa: E402

from solver import reserve  # noqa: E402
from solver.simulate.generate import generate  # noqa: E402
from solver.simulate.timed import TimedConfig, TimedResult, simulate_timed  # noqa: E402
from solver.simulate.timed_scenario import Scenario  # noqa: E402
from solver.types import (  # noqa: E402
    MILLI,
    FairSharing,
    LearnedRuntimes,
    Reclaim,
    TargetWorkload,
)


@dataclass(frozen=True)
class Row:
    label: str
    policy: str
    deadlines: bool
    records: bool = True  # fair sharing over time and the learned target workload
    estimate: float | None = None  # declared run times: this many times the true one
    sigma: float = 0.0  # and log-normal noise of this spread (TimedConfig.estimate_sigma)
    learned: bool = False  # run times learned from finished pods (policy learned_runtimes)
    keep: bool = False  # policy reservations.keep: a reservation keeps its gang's place
    # an experiment, not a policy: every reservation's start planned exactly, as keep's are,
    # without keeping (solver/reserve.py plans the default's on a spread of MAX_STARTS ends)
    exact: bool = False


ROWS = (Row("cpsat", "cpsat", True), Row("cpsat-norecords", "cpsat", True, records=False),
        Row("cpsat-nodeadlines", "cpsat", False),
        Row("bestfit", "bestfit", False),
        # best-fit in Berth's own queue order, deadlines known: short runs first
        # (policy solver.queueing); what the queue's order gives without the engine
        Row("bestfit-deadlines", "bestfit", True), Row("fgd", "fgd", False),
        Row("kueue", "kueue", False), Row("volcano", "volcano", False))
#: The rows of the ``--quotas`` setup (bench_compare.py's quotas, borrowing and reclaim).
QUOTA_ROWS = (Row("cpsat", "cpsat", True), Row("bestfit", "bestfit", False),
              Row("kueue", "kueue", False), Row("volcano", "volcano", False))
#: The rows of ``--estimates``: declared run times (``berth.dev/expected-runtime``) instead of
#: deadlines, exact and noisy, beside deadlines, nothing known, and best-fit.
ESTIMATE_ROWS = (Row("cpsat", "cpsat", True),
                 Row("cpsat-estimates", "cpsat", False, estimate=1.0),
                 Row("cpsat-estimates-noisy", "cpsat", False, estimate=1.0, sigma=1.0),
                 Row("cpsat-estimates-short", "cpsat", False, estimate=0.5),
                 Row("cpsat-nodeadlines", "cpsat", False), Row("bestfit", "bestfit", False))
#: The rows of ``--learned``: nothing declared, run times learned from finished pods (the
#: policy's ``learnedRuntimes``, ``--learned-min`` samples before an estimate) against nothing
#: learned and best-fit.
LEARNED_ROWS = (Row("cpsat-nodeadlines", "cpsat", False),
                Row("cpsat-learned", "cpsat", False, learned=True),
                Row("bestfit", "bestfit", False))
#: The rows of ``--keep``: reservations kept until their gangs start, against the default
#: (planned afresh every window) and best-fit.
KEEP_ROWS = (Row("cpsat", "cpsat", True), Row("cpsat-keep", "cpsat", True, keep=True),
             Row("bestfit", "bestfit", False),
             Row("cpsat-exact (experiment)", "cpsat", True, exact=True))


def split_by_weight(total: int, weights: dict[str, float]) -> dict[str, int]:
    """``total`` split by weight, rounded by largest remainder (ties: the earlier tenant), the
    rule e2e/bench_compare.py gives the real systems' quotas by."""
    w = sum(weights.values())
    exact = {t: total * x / w for t, x in weights.items()}
    out = {t: int(v) for t, v in exact.items()}
    order = sorted(weights, key=lambda t: (-(exact[t] - out[t]), list(weights).index(t)))
    for t in order[: total - sum(out.values())]:
        out[t] += 1
    return out


def with_quotas(scenario: Scenario) -> Scenario:
    """The scenario as bench_compare.py sets up every system: quotas by weight, borrowing
    without limit, reclaim on (the policy's default minimum run time)."""
    gpus = sum(len(n.gpus) for n in scenario.nodes)
    split = split_by_weight(gpus, {t.name: t.weight for t in scenario.tenants})
    tenants = tuple(replace(t, quota_milli=split[t.name] * MILLI, can_borrow=True,
                            borrow_limit_milli=None) for t in scenario.tenants)
    policy = replace(scenario.policy, reclaim=Reclaim(enabled=True))
    return replace(scenario, tenants=tenants, policy=policy)


def with_hold_ahead(scenario: Scenario, seconds: float | None) -> Scenario:
    """The scenario with ``policy.reservations.hold_ahead_s`` set (None: as it is)."""
    if seconds is None:
        return scenario
    rsv = replace(scenario.policy.reservations, hold_ahead_s=seconds)
    return replace(scenario, policy=replace(scenario.policy, reservations=rsv))


def with_keep(scenario: Scenario) -> Scenario:
    """The scenario with ``policy.reservations.keep`` on."""
    rsv = replace(scenario.policy.reservations, keep=True)
    return replace(scenario, policy=replace(scenario.policy, reservations=rsv))


def without_records(scenario: Scenario) -> Scenario:
    """The scenario with the controller's records turned off (docs/fair-sharing.md): fair
    share judged one window at a time, FGD's target workload the window's own pods."""
    policy = replace(scenario.policy, fair_sharing=FairSharing(half_life_s=0.0),
                     target_workload=TargetWorkload(half_life_s=0.0))
    return replace(scenario, policy=policy)


def with_learned(scenario: Scenario, min_samples: int | None) -> Scenario:
    """The scenario with run times learned from finished pods (None: the policy's default
    number of samples before an estimate)."""
    learned = LearnedRuntimes(enabled=True) if min_samples is None else LearnedRuntimes(
        enabled=True, min_samples=min_samples,
        samples=max(min_samples, LearnedRuntimes().samples))
    return replace(scenario, policy=replace(scenario.policy, learned_runtimes=learned))


def figures(r: TimedResult) -> dict[str, float]:
    waits = r.waits_s
    return {"p50": r.wait_percentiles_s["p50"], "p90": r.wait_percentiles_s["p90"],
            "p99": r.wait_percentiles_s["p99"],
            "mean": sum(waits) / len(waits) if waits else 0.0,
            "alloc": r.mean_utilisation * 100,
            "min_fair": min((t.fair_ratio for t in r.tenants), default=1.0),
            "min_pooled": min((t.pooled_fair_ratio for t in r.tenants), default=1.0),
            "reserved": r.reserved_gangs, "late": r.reserved_late,
            "late_overrun": r.reserved_late_overrun,
            "backfilled": r.backfilled, "placed": r.placed, "gangs": len(r.outcomes),
            "reclaimed": r.reclaimed}


@contextmanager
def exact_starts(on: bool) -> Iterator[None]:
    """The ``exact`` rows' experiment: every reservation's start planned exactly."""
    if not on:
        yield
        return
    planned = reserve._earliest

    def exact(*args: Any, **kwargs: Any) -> Any:
        return planned(*args, **{**kwargs, "exact": True})

    reserve._earliest = exact
    try:
        yield
    finally:
        reserve._earliest = planned


def run(scenario: Scenario, seed: int, factor: float, limit: float,
        rows: tuple[Row, ...] = ROWS, learned_min: int | None = None
        ) -> dict[str, dict[str, float]]:
    out = {}
    for row in rows:
        cfg = TimedConfig(policy=row.policy, seed=seed, time_limit_s=limit,
                          deadline_factor=factor if row.deadlines else None, label=row.label,
                          estimate_factor=row.estimate, estimate_sigma=row.sigma)
        t0 = time.perf_counter()
        seen = scenario if row.records else without_records(scenario)
        if row.learned:
            seen = with_learned(seen, learned_min)
        if row.keep:
            seen = with_keep(seen)
        with exact_starts(row.exact):
            out[row.label] = figures(simulate_timed(seen, cfg))
        print(f"  {row.label:<18} {time.perf_counter() - t0:6.1f} s", file=sys.stderr)
    return out


def against(runs: list[dict[str, dict[str, float]]], other: str) -> str:
    """cpsat against ``other``: the ratios and differences the issue's targets are put in."""
    def med(label: str, key: str) -> float:
        return statistics.median(r[label][key] for r in runs)

    return (f"cpsat against {other}: p99 wait {med('cpsat', 'p99') / med(other, 'p99'):.2f}x, "
            f"mean wait {med('cpsat', 'mean') / med(other, 'mean'):.2f}x, GPU allocated "
            f"{med('cpsat', 'alloc') - med(other, 'alloc'):+.1f} points, worst tenant got/fair "
            f"{med('cpsat', 'min_fair'):.2f} against {med(other, 'min_fair'):.2f}.")


def table(title: str, runs: list[dict[str, dict[str, float]]],
          rows: tuple[Row, ...] = ROWS) -> list[str]:
    def med(label: str, key: str) -> float:
        return statistics.median(r[label][key] for r in runs)

    lines = [f"### {title}", "",
             "| policy | started | wait p50 s | p90 s | p99 s | mean s | GPU alloc % | worst "
             "tenant got/fair | within its models | reserved | late (overrun) | backfilled | "
             "reclaimed |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lb = row.label
        lines.append(
            f"| {lb} | {med(lb, 'placed'):.0f}/{med(lb, 'gangs'):.0f} | {med(lb, 'p50'):.0f} | "
            f"{med(lb, 'p90'):.0f} | {med(lb, 'p99'):.0f} | {med(lb, 'mean'):.0f} | "
            f"{med(lb, 'alloc'):.1f} | {med(lb, 'min_fair'):.2f} | {med(lb, 'min_pooled'):.2f} | "
            f"{med(lb, 'reserved'):.0f} | "
            f"{med(lb, 'late'):.0f} ({med(lb, 'late_overrun'):.0f}) | "
            f"{med(lb, 'backfilled'):.0f} | "
            f"{med(lb, 'reclaimed'):.0f} |")
    labels = {row.label for row in rows}
    lines.append("")
    if labels & {"cpsat-estimates", "cpsat-learned", "cpsat-keep"}:
        best_p99, best_mean = med("bestfit", "p99"), med("bestfit", "mean")
        lines += ["Against best-fit (p99 wait, mean wait, GPU allocated): " + "; ".join(
            f"{row.label} {med(row.label, 'p99') / best_p99:.2f}x, "
            f"{med(row.label, 'mean') / best_mean:.2f}x, "
            f"{med(row.label, 'alloc') - med('bestfit', 'alloc'):+.1f}"
            for row in rows if row.label != "bestfit") + "."]
        if len(runs) > 1:
            per = ", ".join(" / ".join(f"{r[row.label]['p99']:.0f}" for row in rows)
                            for r in runs)
            lines += ["", "p99 per seed (" + " / ".join(row.label for row in rows)
                      + f"): {per}."]
        return [*lines, ""]
    lines += [f"{against(runs, other)}" for other in ("kueue", "volcano", "bestfit-deadlines")
              if other in labels]
    if "cpsat-nodeadlines" not in labels:
        if len(runs) > 1:
            per = ", ".join(" / ".join(f"{r[k]['p99']:.0f}" for k in ("cpsat", "bestfit", "kueue",
                                                                      "volcano")) for r in runs)
            lines += ["", f"p99 per seed (cpsat / bestfit / kueue / volcano): {per}."]
        return [*lines, ""]
    best_p99, best_mean = med("bestfit", "p99"), med("bestfit", "mean")
    lines += [f"cpsat against best-fit: p99 wait {med('cpsat', 'p99') / best_p99:.2f}x "
              f"(target <= 0.5), mean wait {med('cpsat', 'mean') / best_mean:.2f}x (target <= "
              f"0.8), GPU allocated {med('cpsat', 'alloc') - med('bestfit', 'alloc'):+.1f} "
              "points (target >= -0.5); without deadlines: p99 "
              f"{med('cpsat-nodeadlines', 'p99') / best_p99:.2f}x (target < 1)."]
    if len(runs) > 1:
        per = ", ".join(f"{r['cpsat']['p99']:.0f} / {r['cpsat-norecords']['p99']:.0f} / "
                        f"{r['cpsat-nodeadlines']['p99']:.0f} / {r['bestfit']['p99']:.0f} / "
                        f"{r['kueue']['p99']:.0f} / {r['volcano']['p99']:.0f}"
                        for r in runs)
        lines += ["", "p99 per seed (cpsat / cpsat-norecords / cpsat-nodeadlines / bestfit / "
                  f"kueue / volcano): {per}."]
        per = ", ".join(f"{r['cpsat']['alloc']:.1f} / {r['cpsat-norecords']['alloc']:.1f} / "
                        f"{r['bestfit']['alloc']:.1f}" for r in runs)
        lines += ["", f"GPU allocated % per seed (cpsat / cpsat-norecords / bestfit): {per}; "
                  "means " + " / ".join(
                      f"{statistics.fmean(r[k]['alloc'] for r in runs):.1f}"
                      for k in ("cpsat", "cpsat-norecords", "bestfit")) + "."]
        per = ", ".join(f"{r['cpsat']['min_fair']:.2f} / {r['cpsat-norecords']['min_fair']:.2f}"
                        f" / {r['bestfit']['min_fair']:.2f} / {r['kueue']['min_fair']:.2f}"
                        f" / {r['volcano']['min_fair']:.2f}" for r in runs)
        lines += ["", "worst tenant got/fair per seed (cpsat / cpsat-norecords / bestfit / "
                  f"kueue / volcano): {per}."]
    return [*lines, ""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--lists", default="default,gpushare40,gpuspec20")
    ap.add_argument("--factor", type=float, default=1.0)
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--quotas", action="store_true",
                    help="also each workload with bench_compare.py's quotas, borrowing and "
                         "reclaim (rows QUOTA_ROWS)")
    ap.add_argument("--only-quotas", action="store_true",
                    help="only the --quotas tables")
    ap.add_argument("--hold-ahead", type=float, default=None,
                    help="solver.reservations.holdAheadSeconds for every run (default: the "
                         "policy's, 600)")
    ap.add_argument("--estimates", action="store_true",
                    help="only the engine with declared run times instead of deadlines "
                         "(rows ESTIMATE_ROWS)")
    ap.add_argument("--learned", action="store_true",
                    help="only the engine with run times learned from finished pods and "
                         "nothing declared (rows LEARNED_ROWS)")
    ap.add_argument("--keep", action="store_true",
                    help="only the engine with reservations kept until their gangs start "
                         "(policy solver.reservations.keep; rows KEEP_ROWS)")
    ap.add_argument("--learned-min", type=int, default=None,
                    help="with --learned: finished pods of a kind before an estimate "
                         "(default: the policy's)")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    out: list[str] = []
    plain = not (args.only_quotas or args.estimates or args.learned or args.keep)
    quotas = args.quotas or args.only_quotas
    runs, qruns, eruns, lruns, kruns = [], [], [], [], []
    for seed in seeds:
        print(f"generated, seed {seed}", file=sys.stderr)
        generated = with_hold_ahead(generate(seed=seed), args.hold_ahead)
        if plain:
            runs.append(run(generated, seed, args.factor, args.time_limit))
        if args.estimates:
            eruns.append(run(generated, seed, args.factor, args.time_limit, ESTIMATE_ROWS))
        if args.learned:
            lruns.append(run(generated, seed, args.factor, args.time_limit, LEARNED_ROWS,
                             args.learned_min))
        if args.keep:
            kruns.append(run(generated, seed, args.factor, args.time_limit, KEEP_ROWS))
        if quotas:
            qruns.append(run(with_quotas(generated), seed, args.factor, args.time_limit,
                             QUOTA_ROWS))
    if runs:
        out += table(f"Embedded default (generated), medians over seeds {args.seeds}", runs)
    if eruns:
        out += table(f"Embedded default, declared run times, medians over seeds {args.seeds}",
                     eruns, ESTIMATE_ROWS)
    if lruns:
        out += table(f"Embedded default, run times learned, medians over seeds {args.seeds}",
                     lruns, LEARNED_ROWS)
    if kruns:
        out += table(f"Embedded default, reservations kept, medians over seeds {args.seeds}",
                     kruns, KEEP_ROWS)
    if qruns:
        out += table(f"Embedded default with quotas, borrowing and reclaim, medians over seeds "
                     f"{args.seeds}", qruns, QUOTA_ROWS)
    for name in (s for s in args.lists.split(",") if s):
        print(f"openb {name}", file=sys.stderr)
        scenario, speedup = alibaba_slice(60, 1500, 1.3, name)
        scenario = with_hold_ahead(scenario, args.hold_ahead)
        title = f"openb_pod_list_{name}: 60 nodes, 1,500 pods, arrivals x{speedup:.0f}, seed 0"
        if plain:
            out += table(title, [run(scenario, 0, args.factor, args.time_limit)])
        if args.estimates:
            out += table(f"{title}, declared run times",
                         [run(scenario, 0, args.factor, args.time_limit, ESTIMATE_ROWS)],
                         ESTIMATE_ROWS)
        if args.learned:
            out += table(f"{title}, run times learned",
                         [run(scenario, 0, args.factor, args.time_limit, LEARNED_ROWS,
                              args.learned_min)], LEARNED_ROWS)
        if args.keep:
            out += table(f"{title}, reservations kept",
                         [run(scenario, 0, args.factor, args.time_limit, KEEP_ROWS)], KEEP_ROWS)
        if quotas:
            out += table(f"{title}, with quotas, borrowing and reclaim",
                         [run(with_quotas(scenario), 0, args.factor, args.time_limit,
                              QUOTA_ROWS)], QUOTA_ROWS)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
