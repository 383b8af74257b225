"""How low the embedded default's longest waits could go: a lower bound for the timed replay.

The p99 wait over a seed's gangs is set by its few longest waits, and on the embedded default
those are team-a's training gangs, which may run only on the A100 and H100 nodes. This script
bounds, per seed, what any schedule could do for them, even one that knows every arrival and
every run time in advance:

- the *pool*: the GPU models that some gang is restricted to (A100 and H100 here), and the
  gangs whose every pod may run only there;
- a relaxation: the pool's GPUs as one resource (no nodes, no NVLink domains, no CPU or memory),
  every other gang left out (it could run elsewhere and wait 0), integer seconds with arrivals
  rounded down and run times rounded down;
- CP-SAT (a cumulative constraint over the gangs' run intervals) minimises the k-th longest
  wait for k = 1, 2, 3, and the one the p99 rests on: numpy's p99 over n waits lies between the
  sorted waits s[f] and s[f+1] with f = floor(0.99 (n - 1)), so it is at least s[f], the
  (n - f)-th longest.

Every figure is CP-SAT's proven bound (its best bound when the time cap stops it first), less
one second for the rounding, and never below the bound on a later rank (the longest wait is at
least the second longest): no schedule of the real problem waits less. It is a bound, not a
schedule: an online engine that does not know what arrives next may not reach it. Beside it,
the replay's own p99 for cpsat and best-fit (`simulate_timed`, as bench/timed_sim.py runs them).

    python3 bench/timed_bound.py                    # seeds 0-4, rewrites bench/timed_bound.md
    python3 bench/timed_bound.py --seeds 0 --no-write
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ortools.sat.python import cp_model

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from admission.simulate import SimulateError, parse_seeds  # noqa: E402
from solver.simulate.generate import generate  # noqa: E402
from solver.simulate.timed import TimedConfig, simulate_timed  # noqa: E402
from solver.simulate.timed_scenario import Scenario, TimedGang  # noqa: E402
from solver.types import MILLI  # noqa: E402

#: Seconds CP-SAT may take per bound.
TIME_CAP_S = 120.0


@dataclass(frozen=True)
class Pool:
    models: frozenset[str]
    capacity_milli: int
    gangs: tuple[TimedGang, ...]
    all_gangs: int


def pool_of(scenario: Scenario) -> Pool:
    """The models some gang is restricted to, their GPUs, and the gangs that may run only
    there."""
    models: frozenset[str] = frozenset().union(*(
        p.models for a in scenario.arrivals for p in a.gang.pods if p.models))
    inside = tuple(a for a in scenario.arrivals
                   if all(p.models and p.models <= models for p in a.gang.pods))
    capacity = sum(MILLI for n in scenario.nodes for g in n.gpus if g.model in models)
    return Pool(models, capacity, inside, len(scenario.arrivals))


def kth_longest_wait_bound(pool: Pool, k: int, *, time_cap_s: float = TIME_CAP_S
                           ) -> tuple[float, str]:
    """A lower bound on the k-th longest wait (k >= 1) of the pool's gangs over every schedule
    of the relaxation (module docstring), and CP-SAT's status."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if len(pool.gangs) < k:
        return 0.0, "FEWER_GANGS"
    m = cp_model.CpModel()
    horizon = int(max(a.arrival_s for a in pool.gangs)
                  + sum(a.duration_s for a in pool.gangs)) + 1
    intervals, demands, waits = [], [], []
    for a in pool.gangs:
        arrival = math.floor(a.arrival_s)
        run = max(1, math.floor(a.duration_s))
        start = m.new_int_var(arrival, horizon, "start")
        intervals.append(m.new_fixed_size_interval_var(start, run, "run"))
        demands.append(a.gang.gpu_demand_milli)
        waits.append(start - arrival)
    m.add_cumulative(intervals, demands, pool.capacity_milli)
    # z is at least every wait but the k - 1 left out: the k-th longest
    z = m.new_int_var(0, horizon, "z")
    if k == 1:  # no choice to make: CP-SAT proves this one much faster without it
        for w in waits:
            m.add(z >= w)
    else:
        out = [m.new_bool_var("out") for _ in waits]
        for w, o in zip(waits, out, strict=True):
            m.add(z >= w - horizon * o)
        m.add(sum(out) <= k - 1)
    m.minimize(z)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_cap_s
    solver.parameters.num_workers = 2
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return 0.0, solver.status_name(status)
    return max(0.0, solver.best_objective_bound - 1.0), solver.status_name(status)


def monotone(bounds: dict[int, float]) -> dict[int, float]:
    """Bounds by rank (1: the longest wait), each raised to the best bound of any later rank:
    the k-th longest wait is at least the (k+1)-th, so a bound proved for a later rank holds
    for every earlier one (where CP-SAT's time cap left an earlier one weaker)."""
    out: dict[int, float] = {}
    for k in sorted(bounds, reverse=True):
        out[k] = max([bounds[k], *out.values()])
    return out


def p99_rank(n: int) -> int:
    """Which longest wait (1: the longest) numpy's p99 over ``n`` waits is at least."""
    return n - math.floor(0.99 * (n - 1))


def row(seed: int, *, time_cap_s: float = TIME_CAP_S) -> dict[str, object]:
    scenario = generate(seed=seed)
    pool = pool_of(scenario)
    rank = p99_rank(pool.all_gangs)
    bounds = {k: kth_longest_wait_bound(pool, k, time_cap_s=time_cap_s)
              for k in sorted({1, 2, 3, rank})}
    replay = {name: simulate_timed(scenario, TimedConfig(policy=name, settle_s=1.0, seed=seed,
                                                         time_limit_s=1.0))
              for name in ("cpsat", "bestfit")}
    p99 = {name: r.wait_percentiles_s["p99"] for name, r in replay.items()}
    best = monotone({k: b for k, (b, _) in bounds.items()})
    return {"seed": seed, "pool": "+".join(sorted(pool.models)),
            "pool_gpus": pool.capacity_milli // MILLI, "pool_gangs": len(pool.gangs),
            "gangs": pool.all_gangs, "rank": rank, "bounds": best,
            "statuses": sorted({s for _, s in bounds.values()}),
            "cpsat_p99": p99["cpsat"], "bestfit_p99": p99["bestfit"]}


def report(rows: list[dict[str, object]], command: str, wall_s: float) -> str:
    lines = [
        "# A lower bound on the embedded default's longest waits",
        "",
        f"Generated by `{command}` ({wall_s:.0f} s; the method is in the script's docstring). "
        "Every bound holds for any schedule, even one that knows every arrival and run time: "
        "the pool's GPUs as one resource, the other gangs left out. *p99 >=*: the bound on "
        "the longest wait numpy's p99 over the seed's gangs is at least. Beside them the "
        "replay's p99 (bench/timed_sim.py's setup, one run) and the target of the "
        "planning-over-time issue (0.5x best-fit's p99).",
        "",
        "| seed | pool (GPUs) | gangs in the pool / all | longest wait >= s | 2nd >= s "
        "| 3rd >= s | p99 >= s (k-th longest) | cpsat p99 s | best-fit p99 s "
        "| 0.5x best-fit s | CP-SAT |",
        "|" + "---|" * 11,
    ]
    for r in rows:
        b = r["bounds"]
        assert isinstance(b, dict)
        lines.append(
            f"| {r['seed']} | {r['pool']} ({r['pool_gpus']}) | {r['pool_gangs']} / "
            f"{r['gangs']} | {b[1]:.0f} | {b[2]:.0f} | {b[3]:.0f} | {b[r['rank']]:.0f} "
            f"({r['rank']}) | {r['cpsat_p99']:.0f} | {r['bestfit_p99']:.0f} "
            f"| {0.5 * float(r['bestfit_p99']):.0f} | {', '.join(r['statuses'])} |")  # type: ignore[arg-type]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--time-cap", type=float, default=TIME_CAP_S,
                    help="seconds CP-SAT may take per bound (its best bound stands after)")
    ap.add_argument("--no-write", action="store_true", help="print; leave the markdown alone")
    args = ap.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)  # what berth simulate accepts, with its messages
    except SimulateError as exc:
        ap.error(str(exc))
    if not 0 < args.time_cap <= 3600:
        ap.error(f"--time-cap: must be in (0, 3600] seconds, got {args.time_cap:g}")
    start = time.perf_counter()
    rows = [row(s, time_cap_s=args.time_cap) for s in seeds]
    command = "python3 bench/timed_bound.py" + (f" --seeds {args.seeds}"
                                                 if args.seeds != "0,1,2,3,4" else "")
    text = report(rows, command, time.perf_counter() - start)
    print(text)
    if not args.no_write:
        (REPO / "bench" / "timed_bound.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
