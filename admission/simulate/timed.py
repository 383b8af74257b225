"""The shell around the timed replay: the embedded default (``berth simulate`` with no
arguments) and a timed replay of a node list and a pod list (``berth simulate --mode timed``).

The pure replay lives in :mod:`solver.simulate.timed`; this module picks the scenario (Berth's
generator, or a node list and a pod list with creation and deletion times), runs the policies,
prints the comparison table, and writes the JSON and the plot. It takes typed arguments and
raises :class:`~admission.simulate.errors.SimulateError` on bad input; turning flags into these
calls is the command's part (admission/commands/simulate.py).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from admission.policy import MIN_SETTLE_SECONDS, Batch
from admission.simulate.errors import SimulateError
from admission.simulate.outputs import check_outputs, save_figure, write_text
from solver.simulate.timed import TimedConfig, TimedResult, simulate_timed

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from solver.simulate.timed_scenario import Scenario


@dataclass(frozen=True, slots=True)
class Contender:
    """One row of a comparison: a policy, shown the true QoS profiles or blind to them, with
    every gang's deadline known (its run time: what reservations plan with) or none."""

    policy: str
    interference_aware: bool = True
    deadlines: bool = True

    @property
    def name(self) -> str:
        name = self.policy if self.interference_aware else f"{self.policy}-oblivious"
        return name if self.deadlines else f"{name}{NO_DEADLINES}"


#: The suffix of a contender that is told no gang's deadline (nothing is known to end, so
#: nothing is reserved).
NO_DEADLINES = "-nodeadlines"

#: The embedded default compares every policy, the interference-oblivious variants of CP-SAT
#: and best-fit (co-location against interference-oblivious packing), and CP-SAT without
#: deadlines (no reservations or backfill: planning only what fits now); and the Kueue-like and
#: Volcano-like baselines (models of those systems' queueing, solver/baselines/kueue.py and
#: volcano.py; the real systems are compared in e2e/bench_compare.py).
DEFAULT_CONTENDERS = (
    Contender("cpsat"),
    Contender("cpsat", deadlines=False),
    Contender("cpsat", interference_aware=False),
    Contender("fgd"),
    Contender("bestfit"),
    Contender("bestfit", interference_aware=False),
    Contender("firstfit"),
    Contender("random"),
    Contender("kueue"),
    Contender("volcano"),
)


def parse_contenders(text: str) -> tuple[Contender, ...]:
    """``cpsat,bestfit-oblivious,cpsat-nodeadlines,...`` -> contenders; a ``-oblivious``
    suffix hides the QoS profiles from that policy, ``-nodeadlines`` every gang's deadline."""
    out = []
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            continue
        deadlines = not name.endswith(NO_DEADLINES)
        name = name.removesuffix(NO_DEADLINES)
        aware = not name.endswith("-oblivious")
        out.append(Contender(name.removesuffix("-oblivious"), interference_aware=aware,
                             deadlines=deadlines))
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Running and reporting
# --------------------------------------------------------------------------------------------


#: Bounds of the timed replay's knobs: a batch window of a day, a solve of ten minutes per
#: window, the clock stopped within 30,000 years, 10,000 gangs in one window's snapshot.
MIN_WINDOW_S = 0.001
MAX_WINDOW_S = 86_400.0
#: The policy's default batch.settleSeconds: the replay wakes as ``berth serve`` does.
DEFAULT_SETTLE_S = Batch.model_fields["settle_seconds"].default
#: Most batch windows a replay's span may hold (the clock stays exact to a window's width).
MAX_WINDOWS = 10**9
MAX_TIME_LIMIT_S = 600.0
MAX_UNTIL_S = 1e12
MAX_PENDING = 10_000
MAX_CONTENDERS = 20
#: A trace's times are stretched (``time_scale``) or its arrivals sped up (``speedup``) by at
#: most this factor either way.
MAX_FACTOR = 1e6
#: Tenants a trace's pods are hashed into (named team-a to team-z).
MAX_TENANTS = 26

#: Flags behind the fields of :class:`TimedConfig`, for error messages.
_FLAGS = {"window_s": "--window-s", "settle_s": "--settle-s", "time_limit_s": "--time-limit",
          "max_pending": "--max-pending", "policy": "--policy/--compare"}


def build_configs(
    contenders: Sequence[Contender],
    *,
    window_s: float,
    time_limit_s: float,
    seed: int,
    settle_s: float = DEFAULT_SETTLE_S,
    max_pending: int = 64,
    until_s: float | None = None,
) -> list[TimedConfig]:
    """One config per contender, every bad value reported before anything runs."""
    from solver.names import SolverName
    from solver.types import ProblemError

    unknown = [c.policy for c in contenders if SolverName.of(c.policy) is None]
    if unknown:
        raise SimulateError(f"--policy/--compare: unknown policy {unknown[0]!r}; choose from "
                            f"{', '.join(SolverName)}, each optionally with -oblivious")
    if until_s is not None and not (math.isfinite(until_s) and 0 < until_s <= MAX_UNTIL_S):
        raise SimulateError(f"--until: must be > 0 and at most {MAX_UNTIL_S:g} seconds, got "
                            f"{until_s:g}; leave it out to run until nothing is left to happen")
    if not (math.isfinite(window_s) and MIN_WINDOW_S <= window_s <= MAX_WINDOW_S):
        raise SimulateError(f"--window-s: must be in [{MIN_WINDOW_S:g}, {MAX_WINDOW_S:g}] "
                            f"seconds, got {window_s:g}")
    if not (math.isfinite(settle_s) and (settle_s == 0 or MIN_SETTLE_SECONDS <= settle_s
                                         <= MAX_WINDOW_S)):
        raise SimulateError(f"--settle-s: must be 0 (batches only at the window) or in "
                            f"[{MIN_SETTLE_SECONDS:g}, {MAX_WINDOW_S:g}] seconds, got "
                            f"{settle_s:g}")
    if not (math.isfinite(time_limit_s) and 0 < time_limit_s <= MAX_TIME_LIMIT_S):
        raise SimulateError(f"--time-limit: must be > 0 and at most {MAX_TIME_LIMIT_S:g} "
                            f"seconds, got {time_limit_s:g}")
    if not 1 <= max_pending <= MAX_PENDING:
        raise SimulateError(f"--max-pending: must be in 1..{MAX_PENDING}, got {max_pending}")
    if len(contenders) > MAX_CONTENDERS:
        raise SimulateError(f"--compare: at most {MAX_CONTENDERS} policies, got "
                            f"{len(contenders)}")
    try:
        return [
            TimedConfig(policy=c.policy, window_s=window_s, settle_s=settle_s or None,
                        time_limit_s=time_limit_s,
                        seed=seed, interference_aware=c.interference_aware,
                        max_pending=max_pending, until_s=until_s,
                        deadline_factor=1.0 if c.deadlines else None, label=c.name)
            for c in contenders
        ]
    except ProblemError as exc:
        raise SimulateError(f"{_FLAGS.get(exc.path, exc.path)}: {exc.message}") from None


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
                           "rsv/\nlate", "kWh"))
    for r in results:
        w = r.wait_percentiles_s
        table.add_row(
            r.name,
            f"{r.placed}/{len(r.outcomes)}",
            f"{w['p50']:.0f}/{w['p90']:.0f}/{w['p99']:.0f}",
            f"{r.mean_utilisation * 100:.1f}",
            f"{r.jain:.3f}",
            f"{r.reserved_gangs}/{r.reserved_late}",
            f"{r.energy_kwh:.1f}",
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
        write_text(json_path, json.dumps(doc, indent=2) + "\n")
    if plot_path is not None:
        from admission.simulate.plots import timed_figure

        fig = timed_figure(results, title=title)  # selects matplotlib's Agg backend
        try:
            save_figure(fig, plot_path, dpi=110)
        finally:
            import matplotlib.pyplot as plt

            plt.close(fig)


def settle_words(settle_s: float) -> str:
    """How the replay's batches run early, for its heading."""
    return f" (sooner {settle_s:g} s after arrivals settle)" if settle_s else ""


def replay_default(
    *,
    contenders: Sequence[Contender],
    seed: int,
    window_s: float,
    time_limit_s: float,
    max_pending: int,
    json_path: Path | None,
    plot_path: Path,
    console: Console,
    settle_s: float = DEFAULT_SETTLE_S,
) -> list[TimedResult]:
    """The embedded default: a generated cluster and workload, the contenders, a table and a
    plot (whose directory is created where missing)."""
    from solver.simulate.generate import generate

    check_outputs(json_path=json_path, plot_path=plot_path, make_plot_parent=True)

    configs = build_configs(contenders, window_s=window_s, settle_s=settle_s,
                            time_limit_s=time_limit_s, seed=seed, max_pending=max_pending)
    scenario = generate(seed=seed)
    gpus = sum(len(n.gpus) for n in scenario.nodes)
    console.print(
        f"[bold]berth simulate[/bold]: embedded default: generated cluster of "
        f"{len(scenario.nodes)} nodes / {gpus} GPUs, {len(scenario.arrivals)} gangs of "
        f"{len(scenario.tenants)} tenants over "
        f"{scenario.arrivals[-1].arrival_s / 60:.0f} min (seed {seed}), "
        f"{window_s:g} s batch windows{settle_words(settle_s)}"
    )
    started = time.perf_counter()
    results = run_contenders(scenario, configs, console=console)
    wall = time.perf_counter() - started
    title = f"embedded default, seed {seed}, window {window_s:g} s"
    print_report(console, results, title=f"Policies on the {title}")
    write_outputs(results, json_path=json_path, plot_path=plot_path,
                  title=f"berth simulate: {title}",
                  extra={"mode": "default", "seed": seed, "window_s": window_s,
                         "settle_s": settle_s,
                         "wall_seconds": wall})
    console.print(f"plot: {plot_path}   ({wall:.1f} s)")
    return results


def load_trace_scenario(nodes_file: str, pods_file: str, *, tenants: int, time_scale: float,
                        speedup: float) -> Scenario:
    """A node list and a pod list as a timed scenario (tenants by hash of the pod name, see
    :func:`solver.simulate.timed_scenario.tenant_by_hash`); errors name the files as given."""
    from admission.simulate.tracefiles import read_nodes, read_pods
    from solver.simulate.timed_scenario import scenario_from_trace
    from solver.types import ProblemError

    if not 1 <= tenants <= MAX_TENANTS:
        raise SimulateError(f"--tenants: must be in 1..{MAX_TENANTS}, got {tenants}")
    for flag, value in (("--time-scale", time_scale), ("--speedup", speedup)):
        if not (math.isfinite(value) and 1 / MAX_FACTOR <= value <= MAX_FACTOR):
            raise SimulateError(f"{flag}: must be a factor in [{1 / MAX_FACTOR:g}, "
                                f"{MAX_FACTOR:g}], got {value:g}")
    nodes = read_nodes(Path(nodes_file))
    pods = read_pods(Path(pods_file))
    if all(p.creation_time == 0 and p.deletion_time == 0 for p in pods):
        raise SimulateError(f"{pods_file}: --mode timed needs the creation_time and "
                            "deletion_time columns, and this pod list has no times; use "
                            "--mode fgd for it")
    try:
        return scenario_from_trace(nodes, pods, tenants=tenants, time_scale=time_scale,
                                   speedup=speedup)
    except ProblemError as exc:
        raise SimulateError(f"{exc.path}: {exc.message}") from None


def replay_trace(
    configs: Sequence[TimedConfig],
    *,
    nodes_file: str,
    pods_file: str,
    tenants: int,
    time_scale: float,
    speedup: float,
    json_path: Path | None,
    plot_path: Path | None,
    console: Console,
) -> list[TimedResult]:
    """A timed replay of a node list and a pod list under each config (as
    :func:`build_configs` makes them: one window and one seed for all), a table, and the JSON
    and the plot where asked."""
    window_s, seed = configs[0].window_s, configs[0].seed
    settle_s = configs[0].settle_s or 0.0
    check_outputs(json_path=json_path, plot_path=plot_path, inputs=(nodes_file, pods_file))
    scenario = load_trace_scenario(nodes_file, pods_file, tenants=tenants,
                                   time_scale=time_scale, speedup=speedup)
    span = max((a.arrival_s + a.duration_s for a in scenario.arrivals), default=0.0)
    if span / window_s > MAX_WINDOWS:
        raise SimulateError(f"--window-s: {pods_file} spans {span:g} s (after --time-scale "
                            f"and --speedup), more than {MAX_WINDOWS:g} windows of "
                            f"{window_s:g} s; raise --window-s or lower --time-scale")
    console.print(
        f"[bold]berth simulate --mode timed[/bold]: {len(scenario.nodes)} nodes, "
        f"{len(scenario.arrivals)} pods in {len(scenario.tenants)} tenants "
        f"(CRC-32 of the pod name), time x{time_scale:g}, arrivals x{speedup:g} faster, "
        f"{window_s:g} s batch windows{settle_words(settle_s)}"
    )
    started = time.perf_counter()
    results = run_contenders(scenario, configs, console=console)
    wall = time.perf_counter() - started
    title = f"{Path(pods_file).name}, timed, window {window_s:g} s"
    print_report(console, results, title=title)
    write_outputs(results, json_path=json_path, plot_path=plot_path,
                  title=f"berth simulate: {title}",
                  extra={"mode": "timed", "seed": seed, "window_s": window_s,
                         "settle_s": settle_s, "wall_seconds": wall})
    return results
