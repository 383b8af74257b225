"""Trace-replay benchmark against the FGD paper (ATC'23) on the Alibaba openb pod lists.

One command regenerates bench/trace_replay.md and the JSON files in bench/results/:

    python3 bench/trace_replay.py            # everything (long: about an hour on two cores)
    python3 bench/trace_replay.py --only fidelity,bound
    python3 bench/trace_replay.py --report   # rewrite the markdown from bench/results/*.json

Sections (each writes its JSON through the same code path as ``berth simulate``):

- fidelity: Berth's FGD and best-fit on ``default`` at window 1, seeds 42-51, against the
  published medians (FGD 4.77 %, BestFit 7.09 % unallocated at 100 % arrival);
- lists: FGD and CP-SAT (batch windows) on every pod list with a published FGD median;
- online: CP-SAT with window 1 on ``default``;
- bound: the LP relaxation of :mod:`solver.simulate.bound` at 100 % arrival;
- plot: allocation ratio against arrived demand on ``default`` (the paper's Fig. 9).

The data is read from ``$BERTH_DATA_DIR`` or ``<repo>/../shared/data``; it is never copied.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from admission.commands.simulate import plot_curves, simulate_fgd  # noqa: E402
from admission.tracefiles import read_nodes, read_pods  # noqa: E402

RESULTS = REPO / "bench" / "results"
REPORT = REPO / "bench" / "trace_replay.md"
SEEDS = list(range(42, 52))
#: Published medians at 100 % arrival (allocation ratio %), FGD paper.
PUBLISHED_FGD_ALLOC = {
    "cpu050": 95.00, "cpu100": 95.21, "cpu200": 94.82, "default": 95.23,
    "gpushare40": 93.95, "gpushare60": 91.30, "gpushare80": 89.09, "gpushare100": 86.64,
    "gpuspec10": 94.70, "gpuspec20": 94.69, "multigpu20": 95.53, "multigpu30": 96.39,
}
PUBLISHED_DEFAULT_UNALLOC = {"random": 13.75, "dotprod": 9.45, "clustering": 8.42,
                             "packing": 8.20, "bestfit": 7.09, "fgd": 4.77}
BATCH_WINDOW = 64
TIME_LIMIT = 1.0


def data_dir() -> Path:
    env = os.environ.get("BERTH_DATA_DIR")
    base = Path(env) if env else REPO / ".." / "shared" / "data"
    path = base / "alibaba-gpu-v2023"
    if not (path / "openb_node_list_gpu_node.csv").exists():
        sys.exit(f"trace data not found in {path}: set BERTH_DATA_DIR to the folder that holds "
                 "alibaba-gpu-v2023/")
    return path


def run_one(name: str, pod_list: str, policy: str, window: int, seeds: list[int],
            objective: str = "packing") -> dict[str, Any]:
    out = RESULTS / f"{name}.json"
    d = data_dir()
    nodes = read_nodes(d / "openb_node_list_gpu_node.csv")
    pods = read_pods(d / f"openb_pod_list_{pod_list}.csv")
    t0 = time.perf_counter()
    rep = simulate_fgd(nodes, pods, policy=policy, window=window, seeds=seeds, arrival=1.3,
                       time_limit=TIME_LIMIT, objective=objective)
    rep["pod_list"] = pod_list
    rep["command"] = (f"berth simulate --nodes openb_node_list_gpu_node.csv --pods "
                      f"openb_pod_list_{pod_list}.csv --policy {policy} --window {window} "
                      f"--seeds {','.join(map(str, seeds))}"
                      + (f" --time-limit {TIME_LIMIT}" if policy == "cpsat" else ""))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rep, indent=1) + "\n")
    print(f"{name}: {rep['unallocated_pct_at_100']:.2f}% unallocated "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return rep


def fidelity(seeds: list[int]) -> None:
    for policy in ("fgd", "bestfit"):
        run_one(f"fidelity_{policy}_default", "default", policy, 1, seeds)


def lists(seeds: list[int], which: list[str]) -> None:
    for pod_list in which:
        run_one(f"lists_fgd_{pod_list}", pod_list, "fgd", 1, seeds)
        run_one(f"lists_cpsat_{pod_list}", pod_list, "cpsat", BATCH_WINDOW, seeds)


def online(seeds: list[int]) -> None:
    run_one("online_cpsat_default", "default", "cpsat", 1, seeds)


def bound(seeds: list[int]) -> None:
    import numpy as np

    from solver.simulate.bound import allocation_bound_milli
    from solver.simulate.protocol import arrival_order

    d = data_dir()
    nodes = read_nodes(d / "openb_node_list_gpu_node.csv")
    capacity = sum(len(n.gpus) for n in nodes) * 1000
    out: dict[str, Any] = {"seeds": seeds, "bound_alloc_pct_at_100": {}}
    for pod_list in PUBLISHED_FGD_ALLOC:
        pods = read_pods(d / f"openb_pod_list_{pod_list}.csv")
        values = []
        for s in seeds:
            order = arrival_order(pods, capacity, 1.3, s)
            arrived = np.cumsum([p.num_gpu * p.gpu_milli for p in order])
            i = int(np.searchsorted(arrived, capacity))
            values.append(100.0 * allocation_bound_milli(nodes, order[: i + 1]) / capacity)
        out["bound_alloc_pct_at_100"][pod_list] = round(statistics.median(values), 3)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bound.json").write_text(json.dumps(out, indent=1) + "\n")
    print("bound:", out["bound_alloc_pct_at_100"], flush=True)


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def report() -> None:
    lines = ["# Trace replay against the FGD paper", "",
             "Regenerate: `python3 bench/trace_replay.py` (sections: `--only "
             "fidelity,lists,online,bound`; `--report` rewrites this file from "
             "bench/results/*.json). Protocol: ../shared/data/alibaba-gpu-v2023/README.md, "
             "implemented in solver/simulate/protocol.py. Machine: 2 shared cores.", ""]
    lines += ["## Fidelity (default pod list, window 1, unallocated GPU % at 100 % arrival)", "",
              "| policy | Berth median | published | gap | seeds | per-seed | wall s |",
              "|---|---|---|---|---|---|---|"]
    for policy in ("fgd", "bestfit"):
        rep = load(f"fidelity_{policy}_default")
        if rep is None:
            continue
        got, pub = rep["unallocated_pct_at_100"], PUBLISHED_DEFAULT_UNALLOC[policy]
        per = ", ".join(f"{r['unallocated_pct_at_100']:.2f}" for r in rep["per_seed"])
        lines.append(f"| {policy} | {got:.2f} | {pub:.2f} | {got - pub:+.2f} | "
                     f"{len(rep['seeds'])} | {per} | {rep['wall_seconds']:.0f} |")
    bnd = load("bound") or {"bound_alloc_pct_at_100": {}}
    lines += ["", "## Every pod list (allocation ratio % at 100 % arrival, higher is better)", "",
              f"CP-SAT runs in batch windows of {BATCH_WINDOW} arrivals, {TIME_LIMIT} s per "
              "window, with the replay's packing model (solver/simulate/window.py).", "",
              "| pod list | published FGD | Berth FGD | Berth CP-SAT | CP-SAT - published | "
              "LP bound | CP-SAT s/seed |", "|---|---|---|---|---|---|---|"]
    for pod_list, pub in PUBLISHED_FGD_ALLOC.items():
        f, c = load(f"lists_fgd_{pod_list}"), load(f"lists_cpsat_{pod_list}")
        fv = f"{100 - f['unallocated_pct_at_100']:.2f}" if f else "-"
        cv = f"{100 - c['unallocated_pct_at_100']:.2f}" if c else "-"
        diff = f"{100 - c['unallocated_pct_at_100'] - pub:+.2f}" if c else "-"
        secs = f"{statistics.median(r['wall_seconds'] for r in c['per_seed']):.0f}" if c else "-"
        b = bnd["bound_alloc_pct_at_100"].get(pod_list)
        lines.append(f"| {pod_list} | {pub:.2f} | {fv} | {cv} | {diff} | "
                     f"{'-' if b is None else f'{b:.2f}'} | {secs} |")
    on, fg = load("online_cpsat_default"), load("fidelity_fgd_default")
    if on:
        lines += ["", "## Online (window 1) on default", "",
                  f"CP-SAT window 1: {on['unallocated_pct_at_100']:.2f} % unallocated; Berth "
                  f"FGD: {fg['unallocated_pct_at_100'] if fg else float('nan'):.2f} % "
                  f"(seeds {on['seeds']})."]
    lines += ["", "## Commands", ""]
    for path in sorted(RESULTS.glob("*.json")):
        rep = json.loads(path.read_text())
        if "command" in rep:
            lines.append(f"- `{path.name}`: `{rep['command']}`")
    lines += ["", "![allocation ratio vs arrived demand](results/fig9_default.png)", ""]
    REPORT.write_text("\n".join(lines) + "\n")
    curves = {name: rep for name, rep in (
        ("fgd", load("fidelity_fgd_default")), ("bestfit", load("fidelity_bestfit_default")),
        ("cpsat", load("lists_cpsat_default")), ("cpsat-w1", on)) if rep}
    if curves:
        plot_curves(curves, RESULTS / "fig9_default.png",
                    title="default: allocation ratio vs arrived demand (medians over seeds)",
                    published={"fgd": 4.77, "bestfit": 7.09})
    print(f"wrote {REPORT}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="fidelity,lists,online,bound",
                        help="comma-separated sections")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)),
                        help="seeds for the fidelity section (default 42-51)")
    parser.add_argument("--list-seeds", default="42",
                        help="seeds for the per-list and online sections (default 42)")
    parser.add_argument("--lists", default=",".join(PUBLISHED_FGD_ALLOC),
                        help="pod lists for the lists section (default: all twelve)")
    parser.add_argument("--report", action="store_true", help="only rewrite the markdown")
    args = parser.parse_args()
    if not args.report:
        seeds = [int(s) for s in args.seeds.split(",")]
        list_seeds = [int(s) for s in args.list_seeds.split(",")]
        sections = {"fidelity": lambda: fidelity(seeds),
                    "lists": lambda: lists(list_seeds, args.lists.split(",")),
                    "online": lambda: online(list_seeds), "bound": lambda: bound(list_seeds)}
        for name in args.only.split(","):
            sections[name.strip()]()
    report()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
