"""The shell around the timed replay: ``berth simulate`` with no arguments (the embedded
default) and ``berth simulate --mode timed``.

The pure replay lives in :mod:`solver.simulate.timed`; this module picks the scenario (Berth's
generator, or a node list and a pod list with creation and deletion times), runs the policies,
prints the comparison table, and writes the JSON and the plot.

Hooks for the ``berth simulate`` command (admission/commands/simulate.py): :func:`add_arguments`
adds the flags only the timed replay reads (``--window-s``, ``--tenants``, ``--time-scale``,
``--speedup``, ``--until``, ``--max-pending``, ``--compare``); :func:`run_default` serves a
call with no scenario arguments and :func:`run_timed` serves ``--mode timed``. Both take the parsed
``argparse.Namespace`` and read ``--policy``, ``--seeds``, ``--json`` and ``--plot`` from it
when present, and raise :class:`admission.cli.UsageError` on bad input.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from solver.simulate.timed import TimedConfig, TimedResult, simulate_timed

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from solver.simulate.timed_scenario import Scenario

#: Where the no-argument run writes its plot (``out/`` is git-ignored).
DEFAULT_PLOT = Path("out/simulate-default.png")


@dataclass(frozen=True, slots=True)
class Contender:
    """One row of a comparison: a policy, shown the true QoS profiles or blind to them."""

    policy: str
    interference_aware: bool = True

    @property
    def name(self) -> str:
        return self.policy if self.interference_aware else f"{self.policy}-oblivious"


#: The embedded default compares every policy, and the interference-oblivious variants of
#: CP-SAT and best-fit (issue: co-location against interference-oblivious packing).
DEFAULT_CONTENDERS = (
    Contender("cpsat"),
    Contender("cpsat", interference_aware=False),
    Contender("fgd"),
    Contender("bestfit"),
    Contender("bestfit", interference_aware=False),
    Contender("firstfit"),
    Contender("random"),
)


def parse_contenders(text: str) -> tuple[Contender, ...]:
    """``cpsat,bestfit-oblivious,...`` -> contenders; a ``-oblivious`` suffix hides the QoS
    profiles from that policy."""
    out = []
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            continue
        if name.endswith("-oblivious"):
            out.append(Contender(name.removesuffix("-oblivious"), interference_aware=False))
        else:
            out.append(Contender(name))
    return tuple(out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags only the timed replay and the embedded default read (``berth simulate`` defines
    the shared ones: ``--nodes``, ``--pods``, ``--policy``, ``--seeds``, ``--time-limit``,
    ``--json``, ``--plot``, ``--mode``)."""
    g = parser.add_argument_group("timed replay (--mode timed and the embedded default)")
    g.add_argument("--window-s", type=float, default=5.0, metavar="S",
                   help="batch window in simulated seconds (default 5)")
    g.add_argument("--tenants", type=int, default=4, metavar="N",
                   help="tenants a trace's pods are hashed into (default 4)")
    g.add_argument("--time-scale", type=float, default=1.0, metavar="F",
                   help="multiply a trace's times by F (< 1 compresses it; default 1)")
    g.add_argument("--speedup", type=float, default=1.0, metavar="F",
                   help="a trace's pods arrive F times faster, run times unchanged: F times "
                   "the offered load (default 1)")
    g.add_argument("--until", type=float, default=None, metavar="S",
                   help="stop the simulated clock at S seconds")
    g.add_argument("--max-pending", type=int, default=64, metavar="N",
                   help="most waiting gangs one window's snapshot holds (default 64)")
    g.add_argument("--compare", default=None, metavar="LIST",
                   help="policies to compare, e.g. cpsat,cpsat-oblivious,bestfit-oblivious")


# --------------------------------------------------------------------------------------------
# Running and reporting
# --------------------------------------------------------------------------------------------


#: Flags behind the fields of :class:`TimedConfig`, for error messages.
_FLAGS = {"window_s": "--window-s", "time_limit_s": "--time-limit",
          "max_pending": "--max-pending", "policy": "--policy/--compare"}


def build_configs(
    contenders: Sequence[Contender],
    *,
    window_s: float,
    time_limit_s: float,
    seed: int,
    max_pending: int = 64,
    until_s: float | None = None,
) -> list[TimedConfig]:
    """One config per contender, every bad value reported before anything runs."""
    from admission.cli import UsageError
    from solver.names import SolverName
    from solver.types import ProblemError

    unknown = [c.policy for c in contenders if SolverName.of(c.policy) is None]
    if unknown:
        raise UsageError(f"--policy/--compare: unknown policy {unknown[0]!r}; choose from "
                         f"{', '.join(SolverName)}, each optionally with -oblivious")
    if until_s is not None and until_s <= 0:
        raise UsageError(f"--until: must be > 0 seconds, got {until_s:g}")
    try:
        return [
            TimedConfig(policy=c.policy, window_s=window_s, time_limit_s=time_limit_s,
                        seed=seed, interference_aware=c.interference_aware,
                        max_pending=max_pending, until_s=until_s)
            for c in contenders
        ]
    except ProblemError as exc:
        raise UsageError(f"{_FLAGS.get(exc.path, exc.path)}: {exc.message}") from None


def run_contenders(
    scenario: Scenario, configs: Sequence[TimedConfig], *, console: Console | None = None
) -> list[TimedResult]:
    """Replay ``scenario`` once per config, with a progress bar on ``console``."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    results = []
    with Progress(
        TextColumn("{task.description:<20}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}% of arrivals"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=console is None,
    ) as bar:
        for config in configs:
            task = bar.add_task(config.name, total=1.0)

            def tick(done: float, task: Any = task) -> None:
                bar.update(task, completed=done)

            results.append(simulate_timed(scenario, config, progress=tick))
            bar.update(task, completed=1.0)
    return results


def _table(title: str, columns: Sequence[str]) -> Table:
    """A compact table that fits an 80-column terminal for the usual policy names."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in columns:
        # policy names must stay whole; the numbers are short
        left = col in ("policy", "tenant")
        table.add_column(col, justify="left" if left else "right", no_wrap=left)
    return table


def results_table(results: Sequence[TimedResult], *, title: str) -> Table:
    """Queueing, utilisation, fairness and energy: one row per policy."""
    table = _table(title, ("policy", "started", "wait s\np50/p90/p99", "alloc %", "Jain",
                           "kWh", "solve s"))
    for r in results:
        w = r.wait_percentiles_s
        table.add_row(
            r.name,
            f"{r.placed}/{len(r.outcomes)}",
            f"{w['p50']:.0f}/{w['p90']:.0f}/{w['p99']:.0f}",
            f"{r.mean_utilisation * 100:.1f}",
            f"{r.jain:.3f}",
            f"{r.energy_kwh:.1f}",
            f"{r.solve_seconds:.1f}",
        )
    return table


def colocation_table(results: Sequence[TimedResult]) -> Table:
    """Interference: SLO attainment, its misses by cause, latency and slowdown."""
    table = _table("Co-location: latency-sensitive pods and shared GPUs",
                   ("policy", "SLO met %", "pods ok", "ban h", "lat. h", "LS ms",
                    "slowdown"))
    for r in results:
        table.add_row(
            r.name,
            f"{r.slo.attainment * 100:.1f}",
            f"{r.slo.pods_always_met}/{r.slo.pods}",
            f"{r.slo.ban_miss_s / 3600:.2f}",
            f"{r.slo.latency_miss_s / 3600:.2f}",
            f"{r.slo.mean_latency_ms:.1f}",
            f"{r.slo.mean_slowdown:.3f}",
        )
    return table


def tenant_table(results: Sequence[TimedResult]) -> Table:
    """Each tenant's GPU time against its weight and its fair share, while gangs arrive
    (GPU-hours of both are in the JSON)."""
    table = _table("Tenants while gangs arrive: GPU time against weight and fair share",
                   ("policy", "tenant", "weight", "share", "got/fair", "wait s\np50/p90"))
    for r in results:
        for t in r.tenants:
            table.add_row(
                r.name, t.tenant, f"{t.entitled:.2f}", f"{t.share:.2f}",
                f"{t.fair_ratio:.2f}", f"{t.wait_p50_s:.0f}/{t.wait_p90_s:.0f}",
            )
    return table


def print_report(console: Console, results: Sequence[TimedResult], *, title: str) -> None:
    console.print(results_table(results, title=title))
    console.print(colocation_table(results))
    console.print(tenant_table(results))


def write_outputs(
    results: Sequence[TimedResult],
    *,
    json_path: Path | None,
    plot_path: Path | None,
    title: str,
    extra: dict[str, Any] | None = None,
) -> None:
    if json_path is not None:
        doc = {**(extra or {}), "results": [r.summary() for r in results]}
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(doc, indent=2) + "\n")
    if plot_path is not None:
        from admission.simulate.plots import timed_figure

        fig = timed_figure(results, title=title)
        plot_path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(plot_path, dpi=110)


def _arg(args: argparse.Namespace, name: str, default: Any) -> Any:
    value = getattr(args, name, None)
    return default if value is None else value


def _first_seed(args: argparse.Namespace) -> int:
    seeds = _arg(args, "seeds", None)
    if seeds is None:
        return 0
    if isinstance(seeds, str):
        return int(seeds.split(",")[0])
    if isinstance(seeds, Sequence):
        return int(seeds[0])
    return int(seeds)


def _contenders(args: argparse.Namespace, fallback: Sequence[Contender]) -> list[Contender]:
    from admission.cli import UsageError

    compare = _arg(args, "compare", None)
    policy = _arg(args, "policy", None)
    if compare:
        found = list(parse_contenders(compare))
        if not found:
            raise UsageError("--compare: name at least one policy, e.g. cpsat,bestfit-oblivious")
        return found
    if policy:
        return [Contender(policy)]
    return list(fallback)


def run_default(
    args: argparse.Namespace | None = None,
    *,
    console: Console | None = None,
) -> int:
    """``berth simulate`` with no arguments: a generated cluster and workload, every policy,
    a table and a plot (``--plot`` overrides where it goes)."""
    from rich.console import Console

    from solver.generate import generate

    args = args or argparse.Namespace()
    console = console or Console()
    seed = _first_seed(args)
    window = float(_arg(args, "window_s", 5.0))
    limit = float(_arg(args, "time_limit", 1.0))
    contenders = _contenders(args, DEFAULT_CONTENDERS)
    scenario = generate(seed=seed)
    gpus = sum(len(n.gpus) for n in scenario.nodes)
    console.print(
        f"[bold]berth simulate[/bold]: embedded default: generated cluster of "
        f"{len(scenario.nodes)} nodes / {gpus} GPUs, {len(scenario.arrivals)} gangs of "
        f"{len(scenario.tenants)} tenants over "
        f"{scenario.arrivals[-1].arrival_s / 60:.0f} min (seed {seed}), "
        f"{window:g} s batch windows"
    )
    configs = build_configs(contenders, window_s=window, time_limit_s=limit, seed=seed,
                            max_pending=int(_arg(args, "max_pending", 64)))
    started = time.perf_counter()
    results = run_contenders(scenario, configs, console=console)
    wall = time.perf_counter() - started
    title = f"embedded default, seed {seed}, window {window:g} s"
    print_report(console, results, title=f"Policies on the {title}")
    plot = Path(_arg(args, "plot", DEFAULT_PLOT))
    json_out = _arg(args, "json", None)
    write_outputs(results, json_path=Path(json_out) if json_out else None, plot_path=plot,
                  title=f"berth simulate: {title}",
                  extra={"mode": "default", "seed": seed, "window_s": window,
                         "wall_seconds": wall})
    console.print(f"plot: {plot}   ({wall:.1f} s)")
    return 0


def load_trace_scenario(args: argparse.Namespace) -> Scenario:
    """The node list and pod list of ``args`` as a timed scenario (tenants by hash of the pod
    name, see :func:`solver.simulate.timed_scenario.tenant_by_hash`)."""
    from admission.cli import UsageError
    from admission.simulate.tracefiles import TraceFileError, read_nodes, read_pods
    from solver.simulate.timed_scenario import scenario_from_trace
    from solver.types import ProblemError

    nodes_path, pods_path = _arg(args, "nodes", None), _arg(args, "pods", None)
    if not nodes_path or not pods_path:
        raise UsageError("--mode timed needs --nodes NODES.csv and --pods PODS.csv "
                         "(or no arguments at all for the embedded default)")
    try:
        nodes = read_nodes(Path(nodes_path))
        pods = read_pods(Path(pods_path))
    except TraceFileError as exc:
        raise UsageError(str(exc)) from None
    if all(p.creation_time == 0 and p.deletion_time == 0 for p in pods):
        raise UsageError(f"{pods_path}: --mode timed needs the creation_time and deletion_time "
                         "columns, and this pod list has no times; use --mode fgd for it")
    try:
        return scenario_from_trace(
            nodes, pods, tenants=int(_arg(args, "tenants", 4)),
            time_scale=float(_arg(args, "time_scale", 1.0)),
            speedup=float(_arg(args, "speedup", 1.0)),
        )
    except ProblemError as exc:
        raise UsageError(f"{exc.path}: {exc.message}") from None


def run_timed(args: argparse.Namespace, *, console: Console | None = None) -> int:
    """``berth simulate --mode timed --nodes N.csv --pods P.csv [--policy P | --compare L]``."""
    from rich.console import Console


    console = console or Console()
    seed = _first_seed(args)
    window = float(_arg(args, "window_s", 5.0))
    limit = float(_arg(args, "time_limit", 2.0))
    contenders = _contenders(args, (Contender("cpsat"),))
    until = _arg(args, "until", None)
    configs = build_configs(contenders, window_s=window, time_limit_s=limit, seed=seed,
                            max_pending=int(_arg(args, "max_pending", 64)),
                            until_s=float(until) if until is not None else None)
    scenario = load_trace_scenario(args)
    console.print(
        f"[bold]berth simulate --mode timed[/bold]: {len(scenario.nodes)} nodes, "
        f"{len(scenario.arrivals)} pods in {len(scenario.tenants)} tenants "
        f"(CRC-32 of the pod name), time x{float(_arg(args, 'time_scale', 1.0)):g}, "
        f"arrivals x{float(_arg(args, 'speedup', 1.0)):g} faster, "
        f"{window:g} s batch windows"
    )
    started = time.perf_counter()
    results = run_contenders(scenario, configs, console=console)
    wall = time.perf_counter() - started
    title = f"{Path(_arg(args, 'pods', 'pods')).name}, timed, window {window:g} s"
    print_report(console, results, title=title)
    json_out, plot = _arg(args, "json", None), _arg(args, "plot", None)
    write_outputs(results, json_path=Path(json_out) if json_out else None,
                  plot_path=Path(plot) if plot else None, title=f"berth simulate: {title}",
                  extra={"mode": "timed", "seed": seed, "window_s": window,
                         "wall_seconds": wall})
    return 0
