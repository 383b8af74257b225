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

A second, tighter relaxation (:func:`p99_node_bound`) keeps the pool's nodes: each pod on one
node with room for its GPUs, a gang's pods starting together (so a gang of two 8-GPU pods needs
two whole nodes at once). Over it CP-SAT minimises numpy's p99 itself (the weighted sum of the
two ranks it interpolates between), and the table gives both its proven bound and the best
schedule of that relaxation it found: the second is not a schedule of the real problem (no
NVLink domains, CPU, memory or other gangs), but no online engine, which does not know what
arrives next, should expect to do better than it.

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


def kth_longest(m: cp_model.CpModel, waits: list[cp_model.LinearExprT], k: int, horizon: int,
                lowest: int = 0) -> cp_model.IntVar:
    """A variable at least every wait but the k - 1 left out: at the minimum, the k-th longest
    (``lowest``: a bound on it already proved)."""
    z = m.new_int_var(lowest, horizon, f"z{k}")
    if k == 1:  # no choice to make: CP-SAT proves this one much faster without it
        for w in waits:
            m.add(z >= w)
    else:
        out = [m.new_bool_var("out") for _ in waits]
        for w, o in zip(waits, out, strict=True):
            m.add(z >= w - horizon * o)
        m.add(sum(out) <= k - 1)
    return z


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
    z = kth_longest(m, waits, k, horizon)
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


def p99_weights(n: int) -> tuple[int, int]:
    """numpy's p99 over ``n`` waits is ``(1 - f) x`` the :func:`p99_rank`-th longest plus
    ``f x`` the one before it (``f`` the fractional part of ``0.99 (n - 1)``): both weights in
    thousandths, rounded down, so that a sum weighted by them never exceeds the p99."""
    pos = 0.99 * (n - 1)
    frac = pos - math.floor(pos)
    return math.floor(1000 * (1 - frac)), math.floor(1000 * frac)


def p99_node_bound(scenario: Scenario, pool: Pool, lower: dict[int, float], *,
                   time_cap_s: float = TIME_CAP_S) -> tuple[float, float | None, str]:
    """A lower bound on numpy's p99 wait over every gang of ``scenario``, on a tighter
    relaxation than :func:`kth_longest_wait_bound`'s: the pool's gangs on the pool's *nodes*,
    each pod on one node whose models it may use and with room for its GPUs (a node's GPUs one
    resource: no NVLink domains, no CPU or memory), a gang's pods starting together, every
    other gang waiting 0. The p99 is the weighted sum of two ranks (:func:`p99_weights`);
    ``lower`` (rank -> bound) seeds CP-SAT with bounds already proved. Returns the bound, the
    p99 of the best schedule of the relaxation CP-SAT found (an upper bound on the relaxation's
    optimum, not a schedule of the real problem; None when none was found) and the status."""
    rank = p99_rank(pool.all_gangs)
    if len(pool.gangs) < rank:
        return 0.0, 0.0, "FEWER_GANGS"
    w_rank, w_before = p99_weights(pool.all_gangs)
    nodes = [n for n in scenario.nodes if any(g.model in pool.models for g in n.gpus)]
    room = {n.name: sum(MILLI for g in n.gpus if g.model in pool.models) for n in nodes}
    m = cp_model.CpModel()
    horizon = int(max(a.arrival_s for a in pool.gangs)
                  + sum(a.duration_s for a in pool.gangs)) + 1
    on_node: dict[str, tuple[list[cp_model.IntervalVar], list[int]]] = {
        n.name: ([], []) for n in nodes}
    waits = []
    for a in pool.gangs:
        arrival = math.floor(a.arrival_s)
        run = max(1, math.floor(a.duration_s))
        start = m.new_int_var(arrival, horizon, "start")
        waits.append(start - arrival)
        for pod in a.gang.pods:
            demand = pod.gpu_demand_milli
            if not demand:
                continue
            options = []
            for n in nodes:
                if demand > sum(MILLI for g in n.gpus if g.model in pod.models):
                    continue
                x = m.new_bool_var("on")
                options.append(x)
                on_node[n.name][0].append(m.new_optional_fixed_size_interval_var(
                    start, run, x, "pod"))
                on_node[n.name][1].append(demand)
            if not options:
                return 0.0, None, "NO_NODE"
            m.add_exactly_one(options)
    for n in nodes:
        m.add_cumulative(on_node[n.name][0], on_node[n.name][1], room[n.name])
    z = {k: kth_longest(m, waits, k, horizon, math.floor(lower.get(k, 0.0)))
         for k in ((rank, rank - 1) if rank > 1 else (rank,))}
    m.minimize(w_rank * z[rank] + w_before * z.get(rank - 1, z[rank]))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_cap_s
    solver.parameters.num_workers = 2
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return 0.0, None, solver.status_name(status)
    # less one second for the rounding of arrivals and run times (as the other bounds)
    bound = max(0.0, solver.best_objective_bound / 1000 - 1.0)
    return bound, solver.objective_value / 1000, solver.status_name(status)


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
    node_bound, node_found, node_status = p99_node_bound(scenario, pool, best,
                                                         time_cap_s=time_cap_s)
    return {"seed": seed, "pool": "+".join(sorted(pool.models)),
            "pool_gpus": pool.capacity_milli // MILLI, "pool_gangs": len(pool.gangs),
            "gangs": pool.all_gangs, "rank": rank, "bounds": best,
            "statuses": sorted({s for _, s in bounds.values()}),
            "cpsat_p99": p99["cpsat"], "bestfit_p99": p99["bestfit"],
            "node_bound": node_bound, "node_found": node_found, "node_status": node_status}


def report(rows: list[dict[str, object]], command: str, wall_s: float) -> str:
    lines = [
        "# A lower bound on the embedded default's longest waits",
        "",
        f"Generated by `{command}` ({wall_s:.0f} s; the method is in the script's docstring). "
        "Every bound holds for any schedule, even one that knows every arrival and run time: "
        "the pool's GPUs as one resource, the other gangs left out. *p99 >=*: the bound on "
        "the longest wait numpy's p99 over the seed's gangs is at least. Beside them the "
        "replay's p99 (bench/timed_sim.py's setup, one run) and the target of the "
        "planning-over-time issue (0.5x best-fit's p99). *p99 >= s (nodes)*: the bound of the "
        "tighter relaxation that keeps the pool's nodes (gangs of whole-node pods need whole "
        "nodes); *best relaxed schedule*: the p99 of the best schedule of that relaxation "
        "CP-SAT found in its time cap (not a schedule of the real problem; what a "
        "clairvoyant schedule of the pool alone reaches).",
        "",
        "| seed | pool (GPUs) | gangs in the pool / all | longest wait >= s | 2nd >= s "
        "| 3rd >= s | p99 >= s (k-th longest) | cpsat p99 s | best-fit p99 s "
        "| 0.5x best-fit s | CP-SAT | p99 >= s (nodes) | best relaxed schedule p99 s "
        "| CP-SAT (nodes) |",
        "|" + "---|" * 14,
    ]
    for r in rows:
        b = r["bounds"]
        assert isinstance(b, dict)
        lines.append(
            f"| {r['seed']} | {r['pool']} ({r['pool_gpus']}) | {r['pool_gangs']} / "
            f"{r['gangs']} | {b[1]:.0f} | {b[2]:.0f} | {b[3]:.0f} | {b[r['rank']]:.0f} "
            f"({r['rank']}) | {r['cpsat_p99']:.0f} | {r['bestfit_p99']:.0f} "
            f"| {0.5 * float(r['bestfit_p99']):.0f} | {', '.join(r['statuses'])} "  # type: ignore[arg-type]
            f"| {r['node_bound']:.0f} | {_found(r['node_found'])} | {r['node_status']} |")
    return "\n".join(lines) + "\n"


def _found(p99: object) -> str:
    return "-" if p99 is None else f"{float(p99):.0f}"  # type: ignore[arg-type]


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
