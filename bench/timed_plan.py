"""Experiment: planning the GPU-model pool over time with one schedule per window.

**An experiment, not what `berth serve` runs.** The engine's reservations (solver/reserve.py)
plan one gang at a time: the first that cannot fit gets the earliest start at which it would,
by best-fit, and everything else is decided by the window's solve of what fits now. On the
embedded default that leaves cpsat's p99 wait at 0.91x best-fit's (bench/timed_sim.md) against
the planning-over-time issue's 0.5x. This script tries the other way round, outside the
engine, to learn whether it is worth building in:

1. **Who is planned**: the gangs whose every GPU pod may run only on the models some gang is
   restricted to (the *pool*: A100 and H100 on the embedded default), with a known run time
   (``Gang.runtime_s``, the deadline the replay gives every gang).
2. **The schedule**: one CP-SAT model per window over the pool's nodes in steps of ``UNIT_S``:
   each planned gang a start (all its pods at once), each pod one node with room for it, each
   node's GPUs a cumulative resource, the running pods there fixed until their expected ends.
   Minimised: ``WAIT_WEIGHT`` x the longest wait any planned gang will have had at its start,
   plus the sum of the starts.
3. **What the window does with it**: a planned gang the schedule starts now goes to the
   engine pinned to its planned nodes (through a node label only this experiment sets); one it
   starts later is left out of the window; in the ``+hold600`` contenders, the free whole GPUs
   a later gang will use, if it starts within 600 s, are held by stand-in pods (as the
   engine's own reservations hold, with solver/reserve.py's ``HOLD_PREFIX`` pods). The engine
   (``solver.api.solve``, cpsat, as the replay calls it) places everything else as before.

Every replay is bench/timed_sim.py's (`simulate_timed`, 5 s windows settling after 1 s, a 1 s
solver limit, deadlines equal to run times), over more seeds than its five because one seed's
p99 rests on its two or three longest waits and moves by a fifth with any change. Reported per
policy: the geometric mean over seeds of p99 and mean wait as a ratio to best-fit's in the same
seed, GPU allocated against best-fit's, the worst tenant's share of its fair share, and the
medians over seeds 0-4 (the issue's seeds).

    python3 bench/timed_plan.py                       # seeds 0-15, rewrites bench/timed_plan.md
    python3 bench/timed_plan.py --seeds 0,1 --no-write
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from ortools.sat.python import cp_model

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from admission.simulate import SimulateError, parse_seeds  # noqa: E402
from solver.plan import Plan  # noqa: E402
from solver.queue import queue_order  # noqa: E402
from solver.reserve import HOLD_PREFIX  # noqa: E402
from solver.simulate.generate import generate  # noqa: E402
from solver.simulate.timed import TimedConfig, default_solve, simulate_timed  # noqa: E402
from solver.simulate.timed_scenario import Scenario  # noqa: E402
from solver.types import MILLI, Gang, GpuShare, Node, Running, Snapshot  # noqa: E402

#: The node label this experiment pins planned pods with (its value: the node's name).
PIN_LABEL = "bench.berth.dev/planned-node"
#: Seconds per step of the schedule.
UNIT_S = 10
#: Weight of the longest wait against the sum of the starts.
WAIT_WEIGHT = 10
#: CP-SAT's time limit for one window's schedule (beside the engine's own 1 s).
SCHEDULE_LIMIT_S = 0.3


@dataclass(frozen=True, slots=True)
class Planned:
    """One planned gang: seconds from now to its start, and each GPU pod's node."""

    start_s: int
    nodes: dict[str, str]


def pool_models(snapshot: Snapshot) -> frozenset[str]:
    """The GPU models some pending gang's pods are restricted to."""
    return frozenset().union(*(p.models for g in snapshot.gangs for p in g.pods if p.models))


def planned_gangs(snapshot: Snapshot, models: frozenset[str]) -> list[Gang]:
    """The gangs the schedule plans: a known run time, every GPU pod restricted to ``models``."""
    out = []
    for g in snapshot.gangs:
        gpu = [p for p in g.pods if p.gpu_count or p.gpu_milli]
        if g.runtime_s is not None and gpu and all(p.models and p.models <= models
                                                   for p in gpu):
            out.append(g)
    return out


def schedule(snapshot: Snapshot, *, time_limit_s: float = SCHEDULE_LIMIT_S,
             ranked: bool = False) -> dict[str, Planned] | None:
    """The window's schedule of the pool (module docstring, step 2), or None when nothing is
    planned or CP-SAT finds no schedule in time. ``ranked``: each start weighted by the gang's
    place in the queue (:func:`solver.queue.queue_order`, the fair-share boost included; the
    first of n planned gangs n times, the last once) instead of all alike."""
    models = pool_models(snapshot)
    gangs = planned_gangs(snapshot, models)
    if not gangs:
        return None
    pool = [n for n in snapshot.nodes if n.gpus and n.gpus[0].model in models]
    names = {n.name for n in pool}
    running = [r for r in snapshot.running if r.node in names and r.gpus]
    steps = lambda s: max(1, math.ceil(s / UNIT_S))  # noqa: E731
    horizon = (sum(steps(g.runtime_s or 0.0) for g in gangs)
               + max([steps(r.remaining_s or 0.0) for r in running], default=0) + 1)
    m = cp_model.CpModel()
    per_node: dict[str, tuple[list[cp_model.IntervalVar], list[int]]] = {
        n.name: ([], []) for n in pool}
    for r in running:
        end = horizon if r.remaining_s is None else steps(r.remaining_s)
        per_node[r.node][0].append(m.new_fixed_size_interval_var(0, end, "running"))
        per_node[r.node][1].append(sum(s.milli for s in r.gpus))
    longest = m.new_int_var(0, 10**7, "longest")
    starts, choices = {}, {}
    order = [g.name for g in queue_order(snapshot) if g in gangs]
    weight = {name: (len(order) - i if ranked else 1) for i, name in enumerate(order)}
    for g in gangs:
        run = steps(g.runtime_s or 0.0)
        start = m.new_int_var(0, horizon, "start")
        starts[g.name] = start
        m.add(longest >= start + int(g.wait_seconds // UNIT_S))
        for p in g.pods:
            demand = p.gpu_demand_milli
            if not demand:
                continue
            options = []
            for n in pool:
                if demand > len(n.gpus) * MILLI or n.gpus[0].model not in p.models:
                    continue
                x = m.new_bool_var("on")
                options.append((n.name, x))
                per_node[n.name][0].append(m.new_optional_fixed_size_interval_var(
                    start, run, x, "pod"))
                per_node[n.name][1].append(demand)
            if not options:
                return None
            m.add_exactly_one(x for _, x in options)
            choices[(g.name, p.name)] = options
    for n in pool:
        m.add_cumulative(per_node[n.name][0], per_node[n.name][1], len(n.gpus) * MILLI)
    m.minimize(WAIT_WEIGHT * longest + sum(weight[n] * s for n, s in starts.items()))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    if solver.solve(m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    out = {}
    for g in gangs:
        nodes = {pod: n for (gang, pod), options in choices.items() if gang == g.name
                 for n, x in options if solver.value(x)}
        out[g.name] = Planned(int(solver.value(starts[g.name])) * UNIT_S, nodes)
    return out


def apply(snapshot: Snapshot, plan: dict[str, Planned] | None, hold_s: float | None
          ) -> Snapshot:
    """The snapshot the engine solves (module docstring, step 3)."""
    if plan is None:
        return snapshot
    free = {n.name: {g.index: MILLI for g in n.gpus} for n in snapshot.nodes}
    for r in snapshot.running:
        for s in r.gpus:
            free[r.node][s.index] -= s.milli
    gangs, later = [], []
    for g in snapshot.gangs:
        p = plan.get(g.name)
        if p is None:
            gangs.append(g)
        elif p.start_s > 0:
            later.append((p.start_s, g, p))
        else:
            gangs.append(replace(g, pods=tuple(
                replace(pod, node_selector={**pod.node_selector, PIN_LABEL: p.nodes[pod.name]})
                if pod.name in p.nodes else pod for pod in g.pods)))
            for pod in g.pods:  # what the gangs starting now will take is not held
                need = 0 if pod.shares_gpu else pod.gpu_count
                node = free.get(p.nodes.get(pod.name, ""), {})
                for i in sorted(node):
                    if need and node[i] == MILLI:
                        node[i], need = -1, need - 1
    holds: list[Running] = []
    for start, g, p in sorted(later, key=lambda t: t[0]):
        if hold_s is None or start > hold_s:
            continue
        for pod in g.pods:
            node = p.nodes.get(pod.name)
            need = 0 if pod.shares_gpu else pod.gpu_count
            if node is None or not need:
                continue
            got = []
            for i in sorted(free[node]):
                if free[node][i] == MILLI and len(got) < need:
                    got.append(GpuShare(i, MILLI))
                    free[node][i] = 0
            if got:
                holds.append(Running(name=f"{HOLD_PREFIX}{g.name}/{pod.name}", node=node,
                                     gpus=tuple(got)))
    return replace(snapshot, gangs=tuple(gangs), running=(*snapshot.running, *holds))


def labelled(scenario: Scenario) -> Scenario:
    """The scenario with every node carrying :data:`PIN_LABEL` (its own name)."""
    def label(n: Node) -> Node:
        return replace(n, labels={**n.labels, PIN_LABEL: n.name})
    return replace(scenario, nodes=tuple(label(n) for n in scenario.nodes))


@dataclass(frozen=True, slots=True)
class Contender:
    label: str
    policy: str
    plan: bool = False
    hold_s: float | None = None
    ranked: bool = False


CONTENDERS = (
    Contender("bestfit", "bestfit"),
    Contender("cpsat", "cpsat"),
    Contender("cpsat+schedule", "cpsat", plan=True),
    Contender("cpsat+schedule+hold600", "cpsat", plan=True, hold_s=600.0),
    Contender("cpsat+ranked+hold600", "cpsat", plan=True, hold_s=600.0, ranked=True),
)


def replay(args: tuple[int, Contender]) -> dict[str, float]:
    seed, c = args
    scenario = labelled(generate(seed=seed))
    config = TimedConfig(policy=c.policy, window_s=5.0, settle_s=1.0, time_limit_s=1.0,
                         seed=seed, deadline_factor=1.0)
    engine = default_solve(config)
    spent = [0.0, 0]

    def solve(snapshot: Snapshot) -> Plan:
        if not c.plan:
            return engine(snapshot)
        t0 = time.perf_counter()
        planned = schedule(snapshot, ranked=c.ranked)
        spent[0] += time.perf_counter() - t0
        spent[1] += 1
        return engine(apply(snapshot, planned, c.hold_s))

    result = simulate_timed(scenario, config, solve=solve)
    s = result.summary()
    waits = result.waits_s
    return {"seed": seed, "p99": s["wait_s"]["p99"], "mean": sum(waits) / len(waits),
            "alloc": 100 * s["mean_utilisation"],
            "worst": min(t["fair_ratio"] for t in s["tenants"]),
            "placed": s["placed"], "gangs": s["gangs"],
            "schedule_ms": 1000 * spent[0] / max(1, spent[1])}


def geomean(xs: list[float]) -> float:
    return math.exp(statistics.mean(math.log(x) for x in xs)) if xs else float("nan")


def summary(rows: dict[str, list[dict[str, float]]]) -> list[str]:
    base = {r["seed"]: r for r in rows["bestfit"]}
    lines = ["| policy | p99 / best-fit (geo. mean) | mean / best-fit (geo. mean) | GPU allocated "
             "- best-fit (mean, points) | worst tenant got/fair (median; lowest) | seeds 0-4: "
             "p99 s | mean s | allocated % | worst tenant | schedule ms a window |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, rs in rows.items():
        # a seed where best-fit waits almost nothing has no ratio worth taking
        p99 = geomean([r["p99"] / base[r["seed"]]["p99"] for r in rs
                       if base[r["seed"]]["p99"] >= 100])
        mean = geomean([r["mean"] / base[r["seed"]]["mean"] for r in rs
                        if base[r["seed"]]["mean"] >= 5])
        alloc = statistics.mean(r["alloc"] - base[r["seed"]]["alloc"] for r in rs)
        first = [r for r in rs if r["seed"] <= 4]
        med = lambda k, rr=first: statistics.median(r[k] for r in rr) if rr else float("nan")  # noqa: E731
        lines.append(
            f"| {label} | {p99:.2f} | {mean:.2f} | {alloc:+.1f} | "
            f"{statistics.median(r['worst'] for r in rs):.2f}; {min(r['worst'] for r in rs):.2f} "
            f"| {med('p99'):.0f} | {med('mean'):.0f} | {med('alloc'):.1f} | {med('worst'):.2f} "
            f"| {statistics.mean(r['schedule_ms'] for r in rs):.0f} |")
    return lines


def per_seed(rows: dict[str, list[dict[str, float]]]) -> list[str]:
    labels = list(rows)
    lines = ["| seed | " + " | ".join(f"{lb} p99 / mean / worst" for lb in labels) + " |",
             "|---|" + "---:|" * len(labels)]
    seeds = sorted({r["seed"] for rs in rows.values() for r in rs})
    by = {lb: {r["seed"]: r for r in rs} for lb, rs in rows.items()}
    for s in seeds:
        cells = [f"{by[lb][s]['p99']:.0f} / {by[lb][s]['mean']:.0f} / {by[lb][s]['worst']:.2f}"
                 for lb in labels]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default=",".join(str(s) for s in range(16)))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="contenders by label, comma-separated "
                    "(bestfit always runs: the ratios are to it)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
    except SimulateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t0 = time.time()
    rows: dict[str, list[dict[str, float]]] = {}
    chosen = [c for c in CONTENDERS
              if not args.only or c.label in {"bestfit", *args.only.split(",")}]
    with ProcessPoolExecutor(args.jobs) as pool:
        for c in chosen:
            rows[c.label] = list(pool.map(replay, [(s, c) for s in seeds]))
            stuck = [r["seed"] for r in rows[c.label] if r["placed"] < r["gangs"]]
            if stuck:
                print(f"{c.label}: seeds {stuck} ended with gangs never placed", file=sys.stderr)
                return 1
    took = time.time() - t0
    text = "\n".join([*summary(rows), "", *per_seed(rows)])
    print(text)
    if not args.no_write:
        out = REPO / "bench" / "timed_plan.md"
        head = out.read_text().split("<!-- results -->")[0] if out.exists() else ""
        out.write_text(f"{head}<!-- results -->\n\n`python3 bench/timed_plan.py --seeds "
                       f"{args.seeds}` ({took:.0f} s, {args.jobs} jobs):\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
