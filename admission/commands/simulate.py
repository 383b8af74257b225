"""``berth simulate``: replay a cluster and a pod list through a placement policy.

``--mode fgd`` (the default for CSV input) runs the FGD paper's protocol
(:mod:`solver.simulate.protocol`) for each seed and reports the allocation ratio against the
arrived GPU demand, as the benchmark in bench/trace_replay.py consumes it. ``--mode timed`` and
the no-argument default (Berth's own generated cluster and workload) are run by
:mod:`admission.simulate.timed`, which adds its own options through ``add_arguments`` and takes
over in ``run_timed(args)`` / ``run_default(args)``.

The JSON written by ``--json`` holds ``policy``, ``window``, ``seeds``,
``unallocated_pct_at_100`` (median over seeds of 100 minus the allocation ratio when the
arrived demand reaches 100 % of capacity), ``alloc_pct_by_arrival`` (arrived demand in whole
percent -> median allocation ratio %), ``wall_seconds`` and per-seed details.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from admission.cli import UsageError
from solver.names import SolverName

NAME = "simulate"
HELP = ("Replay a cluster and a pod list through a placement policy (the FGD paper's protocol), "
        "or, without arguments, Berth's embedded default scenario.")
DEFAULT_SEEDS = "42,43,44,45,46,47,48,49,50,51"
#: Default batch window (arrivals) for policies that are not greedy.
DEFAULT_BATCH_WINDOW = 128


def _timed_module() -> ModuleType | None:
    """The timed-mode and default-scenario runner, if this installation has it."""
    try:
        return importlib.import_module("admission.simulate.timed")
    except ModuleNotFoundError as exc:
        if exc.name != "admission.simulate.timed":
            raise
        return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", metavar="NODES.csv", help="node list (sn,cpu_milli,...)")
    parser.add_argument("--pods", metavar="PODS.csv", help="pod list (name,cpu_milli,...)")
    parser.add_argument("--policy", choices=[s.value for s in SolverName], default=None,
                        help="placement policy (default: fgd for CSV input)")
    parser.add_argument("--window", type=int, default=None, metavar="K",
                        help="arrivals per batch window (default: 1 for greedy policies, "
                             f"{DEFAULT_BATCH_WINDOW} for cpsat)")
    parser.add_argument("--seeds", default=None, metavar="S1,S2,...",
                        help=f"shuffle seeds; the median is reported (default: {DEFAULT_SEEDS})")
    parser.add_argument("--arrival", type=float, default=1.3, metavar="X",
                        help="arrived GPU demand to replay, as a multiple of capacity "
                             "(default: 1.3)")
    parser.add_argument("--time-limit", type=float, default=2.0, metavar="S",
                        help="seconds per batch window for cpsat (default: 2.0)")
    parser.add_argument("--objective", choices=("packing", "controller"), default="packing",
                        help="cpsat in --mode fgd: packing = the replay's window solver "
                             "(FGD passes in several orders, then a CP-SAT packing model; "
                             "solver.simulate.window); controller = the controller's full "
                             "model (solver.api.solve)")
    parser.add_argument("--orders", type=int, default=None, metavar="N",
                        help="cpsat packing: FGD passes per window, each in its own order of "
                             "the window's pods; the least fragmented end state is kept "
                             "(default: 16; 1 = FGD in arrival order)")
    parser.add_argument("--json", metavar="OUT.json", help="write the results as JSON")
    parser.add_argument("--plot", metavar="OUT.png",
                        help="plot allocation ratio against arrived demand")
    parser.add_argument("--mode", choices=("fgd", "timed"), default=None,
                        help="fgd: the FGD paper's protocol (default for CSV input); "
                             "timed: arrivals and departures in simulated time")
    timed = _timed_module()
    if timed is not None and hasattr(timed, "add_arguments"):
        timed.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    timed = _timed_module()
    no_input = args.nodes is None and args.pods is None
    if args.mode == "timed" or (no_input and args.mode is None):
        if timed is None:
            raise UsageError("timed mode and the embedded default are not installed; "
                             "give --nodes and --pods for the FGD protocol")
        runner = timed.run_timed if args.mode == "timed" else timed.run_default
        return int(runner(args))
    if args.nodes is None or args.pods is None:
        raise UsageError("--mode fgd needs both --nodes NODES.csv and --pods PODS.csv")
    return run_fgd(args)


def parse_seeds(text: str) -> list[int]:
    seeds = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            seeds.append(int(part))
        except ValueError:
            raise UsageError(f"--seeds: {part!r} is not a whole number; "
                             "write them like 42,43,44") from None
    if not seeds:
        raise UsageError("--seeds: give at least one seed, like 42,43,44")
    return seeds


def run_fgd(args: argparse.Namespace) -> int:
    from admission.simulate.tracefiles import TraceFileError, read_nodes, read_pods

    policy = args.policy or "fgd"
    greedy = policy != "cpsat"
    window = args.window if args.window is not None else (1 if greedy else DEFAULT_BATCH_WINDOW)
    if window < 1:
        raise UsageError(f"--window: must be >= 1, got {window}")
    if not args.arrival > 0:
        raise UsageError(f"--arrival: must be > 0, got {args.arrival}")
    if not args.time_limit > 0:
        raise UsageError(f"--time-limit: must be > 0, got {args.time_limit}")
    if args.orders is not None and args.orders < 1:
        raise UsageError(f"--orders: must be >= 1, got {args.orders}")
    seeds = parse_seeds(args.seeds or DEFAULT_SEEDS)
    try:
        nodes = read_nodes(Path(args.nodes))
        pods = read_pods(Path(args.pods))
    except TraceFileError as exc:
        raise UsageError(str(exc)) from None
    if not any(n.gpus for n in nodes):
        raise UsageError(f"{args.nodes}: no node has a GPU; the protocol needs GPU nodes")
    report = simulate_fgd(nodes, pods, policy=policy, window=window, seeds=seeds,
                          arrival=args.arrival, time_limit=args.time_limit,
                          objective=args.objective, orders=args.orders)
    report["nodes_file"], report["pods_file"] = str(args.nodes), str(args.pods)
    _print_table(report)
    if args.json:
        _write(Path(args.json), json.dumps(report, indent=1) + "\n")
    if args.plot:
        plot_curves({policy: report}, Path(args.plot),
                    title=f"{Path(args.pods).stem}: allocation ratio vs arrived demand")
    return 0


def simulate_fgd(nodes: list[Any], pods: list[Any], *, policy: str, window: int,
                 seeds: list[int], arrival: float, time_limit: float,
                 objective: str = "packing", orders: int | None = None) -> dict[str, Any]:
    """Run the protocol for every seed (with a progress bar on stderr) and summarise."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from solver.simulate.protocol import ReplayResult, WindowSolver, replay
    from solver.simulate.window import ORDERS

    orders = ORDERS if orders is None else orders
    solve_window: WindowSolver | None = None
    if policy == "cpsat":
        solve_window = cpsat_window_solver(time_limit, objective, orders)
    start = time.perf_counter()
    results: list[ReplayResult] = []
    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(),
               TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True,
                  disable=not console.is_terminal) as bar:
        for seed in seeds:
            task = bar.add_task(f"{policy} seed {seed}", total=None)

            def tick(done: int, total: int, task: Any = task) -> None:
                bar.update(task, completed=done, total=total)

            results.append(replay(nodes, pods, policy=policy, seed=seed, arrival=arrival,
                                  window=window, solve_window=solve_window, progress=tick))
            bar.remove_task(task)
    curves = [r.alloc_pct_by_arrival() for r in results]
    top = min(max(c) for c in curves)
    by_arrival = {str(x): round(statistics.median(c[x] for c in curves), 3)
                  for x in range(top + 1)}
    unalloc = [100.0 - r.alloc_pct_at(100.0) for r in results]
    return {
        "policy": policy,
        "objective": objective if policy == "cpsat" else None,
        "orders": orders if policy == "cpsat" and objective == "packing" else None,
        "window": window,
        "seeds": seeds,
        "arrival": arrival,
        "unallocated_pct_at_100": round(statistics.median(unalloc), 3),
        "alloc_pct_by_arrival": by_arrival,
        "wall_seconds": round(time.perf_counter() - start, 2),
        "per_seed": [
            {"seed": r.seed, "unallocated_pct_at_100": round(100.0 - r.alloc_pct_at(100.0), 3),
             "placed": r.placed, "dropped": r.dropped, "wall_seconds": round(r.wall_seconds, 2)}
            for r in results
        ],
    }


def cpsat_window_solver(time_limit: float, objective: str = "packing",
                        orders: int | None = None) -> Any:
    """Each window through CP-SAT: the replay's packing solver (``orders`` FGD passes, then
    the model) where the window is what the protocol makes
    (:func:`solver.simulate.window.in_scope`), else, or with ``objective="controller"``,
    :func:`solver.api.solve` as the controller calls it."""
    from solver.api import solve
    from solver.plan import Plan
    from solver.simulate.window import ORDERS, in_scope, solve_packing
    from solver.types import Snapshot

    passes = ORDERS if orders is None else orders

    def solve_window(snapshot: Snapshot, seed: int) -> Plan:
        if objective == "packing" and in_scope(snapshot):
            return solve_packing(snapshot, time_limit=time_limit, seed=seed,
                                 orders=passes)
        return solve(snapshot, solver="cpsat", time_limit=time_limit, seed=seed)

    return solve_window


def _print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{report['policy']} (window {report['window']}, "
                        f"arrival {report['arrival']}x capacity)")
    table.add_column("seed", justify="right")
    table.add_column("unallocated GPU % at 100% arrival", justify="right")
    table.add_column("placed", justify="right")
    table.add_column("dropped", justify="right")
    table.add_column("seconds", justify="right")
    for row in report["per_seed"]:
        table.add_row(str(row["seed"]), f"{row['unallocated_pct_at_100']:.2f}",
                      str(row["placed"]), str(row["dropped"]), f"{row['wall_seconds']:.1f}")
    table.add_row("median", f"{report['unallocated_pct_at_100']:.2f}", "", "",
                  f"{report['wall_seconds']:.1f} all")
    Console().print(table)


def plot_curves(reports: dict[str, dict[str, Any]], out: Path, *, title: str,
                published: dict[str, float] | None = None) -> None:
    """Allocation ratio against arrived demand per policy, as the FGD paper's Fig. 9;
    ``published``: policy -> published unallocated % at 100 % arrival, drawn as markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, rep in reports.items():
        xs = sorted(int(x) for x in rep["alloc_pct_by_arrival"])
        ys = [rep["alloc_pct_by_arrival"][str(x)] for x in xs]
        ax.plot(xs, ys, label=f"{name} ({rep['unallocated_pct_at_100']:.2f}% unalloc.)")
    for name, value in (published or {}).items():
        ax.scatter([100], [100 - value], marker="x", label=f"published {name}")
    ax.plot([0, 100], [0, 100], color="grey", linewidth=0.5, linestyle=":")
    ax.set_xlabel("arrived GPU demand (% of capacity)")
    ax.set_ylabel("GPU allocation ratio (%)")
    ax.set_xlim(0, 130)
    ax.set_ylim(0, 100)
    ax.axvline(100, color="grey", linewidth=0.5)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=120)
    except OSError as exc:
        raise UsageError(f"{out}: cannot write the plot: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror or exc}") from None
    print(f"wrote {path}", file=sys.stderr)
