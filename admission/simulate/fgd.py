"""The FGD paper's protocol over a set of seeds: the driver behind ``berth simulate --mode fgd``
and the benchmark in bench/trace_replay.py.

The protocol itself is pure (:mod:`solver.simulate.protocol`); this module runs it once per
seed with a progress bar, summarises the seeds into one report, prints it as a table, and writes
the JSON and the plot, so that the command and the benchmark produce the same files.

The report (and the JSON written from it) holds ``policy``, ``window``, ``seeds``,
``unallocated_pct_at_100`` (median over seeds of 100 minus the allocation ratio when the
arrived demand reaches 100 % of capacity), ``alloc_pct_by_arrival`` (arrived demand in whole
percent -> median allocation ratio %), ``wall_seconds`` and per-seed details.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from admission.simulate.errors import SimulateError
from admission.simulate.outputs import check_outputs, save_figure, write_text
from admission.simulate.tracefiles import read_nodes, read_pods

#: Seeds are 32-bit (CP-SAT's ``random_seed``); each one is a whole replay.
MAX_SEED = 2**31 - 1
MAX_SEEDS = 100
#: Most pods one replay draws (about five minutes of greedy placement on 1,000 nodes).
MAX_DRAWN_PODS = 1_000_000


def parse_seeds(text: str) -> list[int]:
    """``42,43,44`` -> ``[42, 43, 44]``; blanks between commas are skipped. Each seed is a
    whole number in ``0..MAX_SEED``, at most ``MAX_SEEDS`` of them."""
    seeds = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        shown = part if len(part) <= 24 else part[:21] + "..."
        try:
            seed = int(part) if len(part) <= 24 else None
        except ValueError:
            seed = None
        if seed is None:
            raise SimulateError(f"--seeds: {shown!r} is not a whole number; "
                                "write them like 42,43,44")
        if not 0 <= seed <= MAX_SEED:
            raise SimulateError(f"--seeds: {shown} is out of range; each seed is a whole "
                                f"number in 0..{MAX_SEED}")
        seeds.append(seed)
        if len(seeds) > MAX_SEEDS:
            raise SimulateError(f"--seeds: more than {MAX_SEEDS} seeds; each is a whole replay, "
                                "give fewer")
    if not seeds:
        raise SimulateError("--seeds: give at least one seed, like 42,43,44")
    return seeds


def drawn_pods(nodes: list[Any], pods: list[Any], arrival: float) -> int:
    """About how many pods the protocol draws to reach ``arrival`` x the GPU capacity."""
    capacity = sum(len(n.gpus) for n in nodes) * 1000
    demand = sum(p.num_gpu * p.gpu_milli for p in pods)
    target = arrival * capacity
    if demand <= 0 or demand >= target:
        return len(pods)
    return int(len(pods) * target / demand) + 1


def replay_fgd(*, nodes_file: str, pods_file: str, policy: str, window: int,
               seeds: list[int], arrival: float, time_limit: float, objective: str,
               orders: int | None, json_path: Path | None,
               plot_path: Path | None) -> dict[str, Any]:
    """Read the node and pod lists, run the protocol for every seed, print the table and
    write the JSON and the plot where asked; returns the report. The files are named as the
    user gave them, which is how the report records them."""
    check_outputs(json_path=json_path, plot_path=plot_path, inputs=(nodes_file, pods_file))
    nodes = read_nodes(Path(nodes_file))
    pods = read_pods(Path(pods_file))
    if not any(n.gpus for n in nodes):
        raise SimulateError(f"{nodes_file}: no node has a GPU; the protocol needs GPU nodes")
    drawn = drawn_pods(nodes, pods, arrival)
    if drawn > MAX_DRAWN_PODS:
        raise SimulateError(f"--arrival: {arrival:g} x the GPU capacity of {nodes_file} takes "
                            f"about {drawn} pods of {pods_file}, more than {MAX_DRAWN_PODS}; "
                            "lower --arrival or use a smaller node list")
    report = simulate_fgd(nodes, pods, policy=policy, window=window, seeds=seeds,
                          arrival=arrival, time_limit=time_limit,
                          objective=objective, orders=orders)
    report["nodes_file"], report["pods_file"] = nodes_file, pods_file
    print_table(report)
    if json_path is not None:
        _write(json_path, json.dumps(report, indent=1) + "\n")
    if plot_path is not None:
        plot_curves({policy: report}, plot_path,
                    title=f"{Path(pods_file).stem}: allocation ratio vs arrived demand")
    return report


def simulate_fgd(nodes: list[Any], pods: list[Any], *, policy: str, window: int,
                 seeds: list[int], arrival: float, time_limit: float,
                 objective: str = "controller", orders: int | None = None) -> dict[str, Any]:
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
        # the replay-only packing solver is an experiment: the controller never runs it
        "experiment": policy == "cpsat" and objective == "packing",
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


def cpsat_window_solver(time_limit: float, objective: str = "controller",
                        orders: int | None = None) -> Any:
    """Each window through CP-SAT. ``controller`` (the default): :func:`solver.api.solve` as
    the controller calls it (``solver="cpsat"``, the time limit, the seed), the engine
    ``berth serve`` runs. ``packing``: an experiment the controller never runs, the replay's
    own window solver (``orders`` FGD passes, then a packing model;
    :func:`solver.simulate.window.solve_packing`) where the window is what the protocol
    makes (:func:`solver.simulate.window.in_scope`), else the controller's engine."""
    if objective not in ("controller", "packing"):
        raise ValueError(f"objective must be 'controller' or 'packing', got {objective!r}")
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


def print_table(report: dict[str, Any]) -> None:
    """One row per seed and the median, on stdout."""
    from rich.console import Console
    from rich.table import Table

    engine = ""
    if report.get("objective"):
        engine = ("; EXPERIMENT: the replay-only packing solver, not what berth serve runs"
                  if report.get("experiment") else "; the controller's engine")
    table = Table(title=f"{report['policy']} (window {report['window']}, "
                        f"arrival {report['arrival']}x capacity{engine})")
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
        save_figure(fig, out, dpi=120)
    finally:
        plt.close(fig)


def _write(path: Path, text: str) -> None:
    write_text(path, text)
    print(f"wrote {path}", file=sys.stderr)
