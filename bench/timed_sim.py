"""Timed replay benchmark: every policy on Berth's generated multi-tenant workload, and
interference-aware against interference-oblivious placement; optionally a timed replay of a
slice of an Alibaba openb pod list.

Regenerate bench/timed_sim.md and its figures with:

    python3 bench/timed_sim.py                 # generated workload, seeds 0,1,2
    python3 bench/timed_sim.py --alibaba       # plus a slice of openb_pod_list_default.csv

The Alibaba data is read from ``<repo>/../shared/data`` (override with BERTH_DATA_DIR).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from admission.simulate import (  # noqa: E402
    DEFAULT_CONTENDERS,
    DEFAULT_SETTLE_S,
    Contender,
    timed_figure,
)
from solver.simulate.generate import generate  # noqa: E402
from solver.simulate.timed import TimedConfig, TimedResult, simulate_timed  # noqa: E402
from solver.simulate.timed_scenario import (  # noqa: E402
    Scenario,
    middle_slice,
    scenario_from_trace,
    speedup_for_load,
)

OUT = REPO / "bench"


def data_dir() -> Path:
    env = os.environ.get("BERTH_DATA_DIR")
    return Path(env) if env else REPO / ".." / "shared" / "data"


def run(scenario: Scenario, contenders: Sequence[Contender], *, seed: int, window_s: float,
        time_limit_s: float, settle_s: float = DEFAULT_SETTLE_S,
        until_s: float | None = None) -> list[tuple[TimedResult, float]]:
    out = []
    for c in contenders:
        cfg = TimedConfig(policy=c.policy, interference_aware=c.interference_aware,
                          window_s=window_s, settle_s=settle_s or None,
                          time_limit_s=time_limit_s, seed=seed,
                          until_s=until_s, deadline_factor=1.0 if c.deadlines else None,
                          label=c.name)
        t0 = time.perf_counter()
        r = simulate_timed(scenario, cfg)
        out.append((r, time.perf_counter() - t0))
        print(f"  {r.name:<18} {out[-1][1]:6.1f} s", file=sys.stderr)
    return out


def med(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def summary_rows(runs: dict[str, list[tuple[TimedResult, float]]]) -> list[str]:
    rows = [
        "| policy | started | wait p50 s | wait p90 s | wait p99 s | GPU allocated % | Jain "
        "| worst got / fair (within its models) | SLO met % | LS pods always met "
        "| ban-miss pod-h | latency-miss pod-h "
        "| LS latency ms | slowdown | energy kWh | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rs in runs.items():
        res = [r for r, _ in rs]
        rows.append(
            f"| {name} | {med([r.placed for r in res]):.0f}"
            f"/{med([len(r.outcomes) for r in res]):.0f}"
            f" | {med([r.wait_percentiles_s['p50'] for r in res]):.0f}"
            f" | {med([r.wait_percentiles_s['p90'] for r in res]):.0f}"
            f" | {med([r.wait_percentiles_s['p99'] for r in res]):.0f}"
            f" | {med([r.mean_utilisation * 100 for r in res]):.1f}"
            f" | {med([r.jain for r in res]):.3f}"
            f" | {med([min(t.fair_ratio for t in r.tenants) for r in res]):.2f}"
            f" ({med([min(t.pooled_fair_ratio for t in r.tenants) for r in res]):.2f})"
            f" | {med([r.slo.attainment * 100 for r in res]):.1f}"
            f" | {med([r.slo.pods_always_met / max(1, r.slo.pods) * 100 for r in res]):.0f} %"
            f" | {med([r.slo.ban_miss_s / 3600 for r in res]):.2f}"
            f" | {med([r.slo.latency_miss_s / 3600 for r in res]):.2f}"
            f" | {med([r.slo.mean_latency_ms for r in res]):.1f}"
            f" | {med([r.slo.mean_slowdown for r in res]):.3f}"
            f" | {med([r.energy_kwh for r in res]):.1f}"
            f" | {med([w for _, w in rs]):.1f} |"
        )
    return rows


def co_location_findings(runs: dict[str, list[tuple[TimedResult, float]]]) -> list[str]:
    """One sentence per pair, computed from the runs (nothing here is typed in by hand)."""
    out = []
    for policy in ("cpsat", "bestfit"):
        aware = [r for r, _ in runs.get(policy, [])]
        blind = [r for r, _ in runs.get(f"{policy}-oblivious", [])]
        if not aware or not blind:
            continue
        out.append(
            f"- {policy}: SLO met {med([r.slo.attainment * 100 for r in aware]):.1f} % "
            f"aware against {med([r.slo.attainment * 100 for r in blind]):.1f} % oblivious; "
            f"GPU allocated {med([r.mean_utilisation * 100 for r in aware]):.1f} % against "
            f"{med([r.mean_utilisation * 100 for r in blind]):.1f} %; mean slowdown of "
            f"shared-GPU pods {med([r.slo.mean_slowdown for r in aware]):.3f} against "
            f"{med([r.slo.mean_slowdown for r in blind]):.3f}; wait p90 "
            f"{med([r.wait_percentiles_s['p90'] for r in aware]):.0f} s against "
            f"{med([r.wait_percentiles_s['p90'] for r in blind]):.0f} s."
        )
    return out


def same_placements_note(results: Sequence[TimedResult], a: str, b: str) -> list[str]:
    """Say so when two policies placed every gang alike (computed, not typed in)."""
    by = {r.name: r for r in results}
    if a not in by or b not in by or by[a].outcomes != by[b].outcomes:
        return []
    blind = by[b].slo
    if blind.ban_miss_s == 0 and blind.latency_miss_s == 0:
        return [f"{b} started every gang where and when {a} did, and judged with the real "
                "profiles none of its co-locations broke a ban or an SLO: in this slice the "
                "checker had nothing to refuse (training pods take whole GPUs here).", ""]
    return [f"{b} started every gang where and when {a} did.", ""]


def tenant_rows(results: Sequence[TimedResult]) -> list[str]:
    rows = ["| policy | tenant | weight share | GPU-time share | GPU h | fair GPU h | got / fair "
            "| fair GPU h within its models | got / fair within | wait p50 s | wait p90 s |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for t in r.tenants:
            rows.append(f"| {r.name} | {t.tenant} | {t.entitled:.2f} | {t.share:.2f} | "
                        f"{t.gpu_seconds / 3600:.1f} | {t.fair_gpu_seconds / 3600:.1f} | "
                        f"{t.fair_ratio:.2f} | {t.pooled_fair_gpu_seconds / 3600:.1f} | "
                        f"{t.pooled_fair_ratio:.2f} | {t.wait_p50_s:.0f} | {t.wait_p90_s:.0f} |")
    return rows


def alibaba_slice(nodes_n: int, pods_n: int, load: float, pod_list: str = "default"
                  ) -> tuple[Scenario, float]:
    """The first ``nodes_n`` GPU nodes and ``pods_n`` consecutive pods by creation time from
    the middle of the trace (its early months are nearly empty), times shifted to start at 0,
    with arrivals sped up so that the offered GPU load is ``load`` x the slice's capacity.
    ``pod_list``: which openb pod list (``openb_pod_list_<pod_list>.csv``)."""
    from admission.simulate import read_nodes, read_pods

    d = data_dir() / "alibaba-gpu-v2023"
    nodes = read_nodes(d / "openb_node_list_gpu_node.csv")
    pods = read_pods(d / f"openb_pod_list_{pod_list}.csv")
    if all(p.creation_time == 0 and p.deletion_time == 0 for p in pods):
        raise SystemExit(f"openb_pod_list_{pod_list}.csv has no creation and deletion times: a "
                         "timed replay cannot be made of it")
    pods = middle_slice(pods, pods_n)
    nodes = nodes[:nodes_n]
    speedup = speedup_for_load(pods, sum(len(n.gpus) for n in nodes), load)
    return scenario_from_trace(nodes, pods, tenants=4, speedup=speedup), speedup


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--window-s", type=float, default=5.0)
    ap.add_argument("--settle-s", type=float, default=DEFAULT_SETTLE_S,
                    help="batch.settleSeconds (default the policy's; 0: only at the window)")
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--alibaba", action="store_true")
    ap.add_argument("--alibaba-nodes", type=int, default=60)
    ap.add_argument("--alibaba-pods", type=int, default=1500)
    ap.add_argument("--alibaba-load", type=float, default=1.3)
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]

    runs: dict[str, list[tuple[TimedResult, float]]] = {c.name: [] for c in DEFAULT_CONTENDERS}
    first: list[TimedResult] = []
    scen0 = generate(seed=seeds[0])
    for seed in seeds:
        print(f"seed {seed}", file=sys.stderr)
        sc = generate(seed=seed)
        out = run(sc, DEFAULT_CONTENDERS, seed=seed, window_s=args.window_s,
                  settle_s=args.settle_s,
                  time_limit_s=args.time_limit)
        for r, wall in out:
            runs[r.name].append((r, wall))
        if seed == seeds[0]:
            first = [r for r, _ in out]
    fig = timed_figure(first, title=f"Generated workload, seed {seeds[0]}, "
                                    f"window {args.window_s:g} s")
    fig.savefig(OUT / "timed_sim_generated.png", dpi=100)

    gpus = sum(len(n.gpus) for n in scen0.nodes)
    lines = [
        "# Timed replay: policies on a multi-tenant workload",
        "",
        f"Regenerate: `python3 bench/timed_sim.py --seeds {args.seeds}"
        + (" --alibaba" if args.alibaba else "") + "`"
        f" (seeds {args.seeds}, {args.window_s:g} s batch windows"
        + (f" settling after {args.settle_s:g} s" if args.settle_s else "")
        + ", solver time limit "
        f"{args.time_limit:g} s per window). Machine: {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}; shared with other work, "
        "so wall times are indicative only.",
        "",
        "## Generated workload (`berth simulate` with no arguments)",
        "",
        f"Berth's generator (`solver/simulate/generate.py`): {len(scen0.nodes)} nodes / "
        f"{gpus} GPUs "
        "(H100 x8 one NVLink domain, A100 x8 two domains of four, L4 x4 and T4 x2 PCIe; 2 racks, "
        "1 block); three tenants (team-a weight 2: training gangs, fine-tuning, batch inference;"
        " team-b weight 1: online inference; team-c weight 1: notebooks, best-effort, some of "
        "everything); offered load 1.5x capacity over 45 minutes, then the queue drains. "
        f"Gangs per seed: {', '.join(str(len(generate(seed=s).arrivals)) for s in seeds)}.",
        "",
        "Medians over seeds. *started*: gangs placed / arrived (the replay runs until all "
        "leave). *GPU allocated*: time-weighted mean of allocated GPU share from 0 to the last "
        "arrival. *Jain*: Jain's index over each tenant's GPU time divided by its weighted "
        "max-min fair share of the cluster given its demand. *worst got / fair*: the "
        "tenant with the smallest GPU time over that fair share; in brackets the same within "
        "the GPU models its gangs may use (solver.fairshare.pooled_max_min: a tenant whose "
        "training asks for H100 or A100 is not owed the L4s). Every policy runs with the "
        "controller's records (docs/fair-sharing.md: fair share over time, the learned target "
        "workload), as `berth serve` does. *kueue* and *volcano*: the Kueue-like and Volcano-like "
        "baselines, models of those systems' queueing (docs/baselines.md), not the systems. "
        "*SLO met*: share of "
        "latency-sensitive pod-time whose predicted latency (solver/interference.py) is within "
        "the SLO and with no banned neighbour on its GPU. *LS latency*: mean predicted latency of "
        "latency-sensitive pods (solo 20 ms, SLO 40 ms); *slowdown*: mean predicted slowdown "
        "of every pod on a fractional GPU share, both pod-time weighted. *-oblivious* "
        "policies were shown a "
        "policy in which every QoS class is idle, bans nothing and the interference weight is "
        "zero, and are judged with the real profiles.",
        "",
        *summary_rows(runs),
        "",
        f"![generated workload, seed {seeds[0]}](timed_sim_generated.png)",
        "",
        f"### Tenants (seed {seeds[0]})",
        "",
        *tenant_rows(first),
        "",
        "## Interference-aware against interference-oblivious packing",
        "",
        "Same runs, the rows that matter for co-location (medians over seeds):",
        "",
        *co_location_findings(runs),
        "",
        *[r for r in summary_rows({k: v for k, v in runs.items()
                                   if k in ("cpsat", "cpsat-oblivious", "bestfit",
                                            "bestfit-oblivious")})],
        "",
    ]
    if args.alibaba:
        print("alibaba slice", file=sys.stderr)
        sc, speedup = alibaba_slice(args.alibaba_nodes, args.alibaba_pods, args.alibaba_load)
        contenders = (Contender("cpsat"), Contender("cpsat", deadlines=False),
                      Contender("bestfit"), Contender("bestfit", interference_aware=False),
                      Contender("fgd"),
                      Contender("firstfit"), Contender("random"),
                      Contender("kueue"), Contender("volcano"))
        last = sc.arrivals[-1].arrival_s
        out = run(sc, contenders, seed=seeds[0], window_s=args.window_s,
                  settle_s=args.settle_s, time_limit_s=args.time_limit, until_s=3 * last)
        res = [r for r, _ in out]
        fig = timed_figure(res, title="openb_pod_list_default.csv slice, timed")
        fig.savefig(OUT / "timed_sim_alibaba.png", dpi=100)
        span_days = last * speedup / 86400
        lines += [
            "## A timed replay of an Alibaba openb slice",
            "",
            f"The first {args.alibaba_nodes} nodes of `openb_node_list_gpu_node.csv` "
            f"({sum(len(n.gpus) for n in sc.nodes)} GPUs) and {args.alibaba_pods} consecutive "
            "pods of `openb_pod_list_default.csv` by creation time from the middle of the list "
            f"(recorded over {span_days:.1f} days). Each pod runs deletion - creation seconds "
            f"once placed; arrivals are sped up {speedup:.0f}x (`--speedup`) so that the "
            f"GPU-time offered within the arrival period is {args.alibaba_load:g}x the slice's "
            f"capacity (at recorded speed this trace keeps only a few dozen GPUs busy, and "
            f"nothing would queue). Arrivals then span {last:.0f} s; the clock stops at "
            f"{3 * last:.0f} s (*started* counts gangs placed by then). Tenants: CRC-32 of the "
            "pod name into four of weight 1; LS pods sharing a GPU are online inference, BE "
            "pods best-effort, multi-GPU pods training.",
            "",
            *summary_rows({r.name: [(r, w)] for r, w in out}),
            "",
            *same_placements_note(res, "bestfit", "bestfit-oblivious"),
            "![alibaba slice](timed_sim_alibaba.png)",
            "",
        ]
    (OUT / "timed_sim.md").write_text("\n".join(lines))
    print(f"wrote {OUT / 'timed_sim.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
