"""``berth simulate``: replay a cluster and a pod list through a placement policy.

This module is the command line only: it defines the flags, turns them into calls of
:mod:`admission.simulate` (the simulator's shell) and reports that package's
:class:`~admission.simulate.SimulateError` as a usage error, message unchanged.

``--mode fgd`` (the default for CSV input) runs the FGD paper's protocol
(:mod:`solver.simulate.protocol`) for each seed and reports the allocation ratio against the
arrived GPU demand (:func:`admission.simulate.replay_fgd`, whose JSON bench/trace_replay.py
consumes). ``--mode timed`` replays a node list and a pod list in simulated time
(:func:`admission.simulate.replay_trace`), and no scenario arguments at all run Berth's own
generated cluster and workload (:func:`admission.simulate.replay_default`).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from admission.cli import UsageError
from admission.simulate import (
    DEFAULT_CONTENDERS,
    DEFAULT_SETTLE_S,
    Contender,
    SimulateError,
    build_configs,
    parse_contenders,
    parse_seeds,
    replay_default,
    replay_fgd,
    replay_trace,
)
from solver.names import QUEUEING, SolverName

if TYPE_CHECKING:
    from rich.console import Console

NAME = "simulate"
HELP = ("Replay a cluster and a pod list through a placement policy (the FGD paper's protocol), "
        "or, without arguments, Berth's embedded default scenario.")
DEFAULT_SEEDS = "42,43,44,45,46,47,48,49,50,51"
#: Default batch window (arrivals) for policies that are not greedy.
DEFAULT_BATCH_WINDOW = 128
#: Where the no-argument run writes its plot (``out/`` is git-ignored).
DEFAULT_PLOT = Path("out/simulate-default.png")
#: Bounds of the --mode fgd flags: a batch window of 10,000 arrivals, 10 x the cluster's GPU
#: capacity, ten minutes per window, 1,000 FGD passes per window.
MAX_WINDOW = 10_000
MAX_ARRIVAL = 10.0
MAX_TIME_LIMIT_S = 600.0
MAX_ORDERS = 1_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", metavar="NODES.csv", help="node list (sn,cpu_milli,...)")
    parser.add_argument("--pods", metavar="PODS.csv", help="pod list (name,cpu_milli,...)")
    parser.add_argument("--policy", choices=[s.value for s in SolverName], default=None,
                        help="placement policy (default: fgd for CSV input); kueue and volcano "
                             "are Kueue-like and Volcano-like baselines (models of their "
                             "queueing, --mode timed only; the real systems are compared in "
                             "e2e/bench_compare.py)")
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
    parser.add_argument("--objective", choices=("controller", "packing"), default="controller",
                        help="cpsat in --mode fgd: controller = the engine berth serve runs "
                             "(solver.api.solve, called as the controller calls it; default); "
                             "packing = an EXPERIMENT the controller never runs (the replay's "
                             "own window solver, solver.simulate.window: FGD passes in several "
                             "orders, then a CP-SAT packing model), labelled so in the output")
    parser.add_argument("--orders", type=int, default=None, metavar="N",
                        help="--objective packing only: FGD passes per window, each in its own "
                             "order of the window's pods (default: 16; 1 = FGD in arrival order)")
    parser.add_argument("--json", metavar="OUT.json", help="write the results as JSON")
    parser.add_argument("--plot", metavar="OUT.png",
                        help="plot allocation ratio against arrived demand")
    parser.add_argument("--mode", choices=("fgd", "timed"), default=None,
                        help="fgd: the FGD paper's protocol (default for CSV input); "
                             "timed: arrivals and departures in simulated time")
    _add_timed_arguments(parser)


def _add_timed_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags only the timed replay and the embedded default read (the shared ones above:
    ``--nodes``, ``--pods``, ``--policy``, ``--seeds``, ``--time-limit``, ``--json``,
    ``--plot``, ``--mode``)."""
    g = parser.add_argument_group("timed replay (--mode timed and the embedded default)")
    g.add_argument("--window-s", type=float, default=5.0, metavar="S",
                   help="batch window in simulated seconds (default 5)")
    g.add_argument("--settle-s", type=float, default=None, metavar="S",
                   help="a batch runs S simulated seconds after arrivals or departures "
                   "settle, before the window ends, as the policy's batch.settleSeconds makes "
                   f"berth serve do (default {DEFAULT_SETTLE_S:g}; 0: only at the window)")
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


def run(args: argparse.Namespace) -> int:
    _check_fgd_flags(args)
    no_input = args.nodes is None and args.pods is None
    if args.mode == "timed" or (no_input and args.mode is None):
        runner = run_timed if args.mode == "timed" else run_default
        return int(runner(args))
    if args.nodes is None or args.pods is None:
        raise UsageError("--mode fgd needs both --nodes NODES.csv and --pods PODS.csv")
    return run_fgd(args)


@contextmanager
def _usage_errors() -> Iterator[None]:
    """The simulator's bad-input errors as usage errors, with the same message."""
    try:
        yield
    except SimulateError as exc:
        raise UsageError(str(exc)) from None


# --------------------------------------------------------------------------------------------
# --mode fgd
# --------------------------------------------------------------------------------------------


def _check_fgd_flags(args: argparse.Namespace) -> None:
    """The numbers only ``--mode fgd`` reads, checked whatever the mode (a flag given is meant
    to be used; one out of range is a mistake either way)."""
    window = _arg(args, "window", None)
    if window is not None and not 1 <= window <= MAX_WINDOW:
        raise UsageError(f"--window: must be in 1..{MAX_WINDOW} arrivals, got {window}")
    arrival = _arg(args, "arrival", 1.3)
    if not (math.isfinite(arrival) and 0 < arrival <= MAX_ARRIVAL):
        raise UsageError(f"--arrival: must be > 0 and at most {MAX_ARRIVAL:g} (times the "
                         f"cluster's GPU capacity), got {arrival:g}")
    limit = _arg(args, "time_limit", 2.0)
    if not (math.isfinite(limit) and 0 < limit <= MAX_TIME_LIMIT_S):
        raise UsageError(f"--time-limit: must be > 0 and at most {MAX_TIME_LIMIT_S:g} "
                         f"seconds, got {limit:g}")
    orders = _arg(args, "orders", None)
    if orders is not None and not 1 <= orders <= MAX_ORDERS:
        raise UsageError(f"--orders: must be in 1..{MAX_ORDERS}, got {orders}")


def run_fgd(args: argparse.Namespace) -> int:
    policy = args.policy or "fgd"
    if policy in QUEUEING:
        raise UsageError(f"--policy {policy}: the {policy}-like baseline models per-tenant "
                         "queues, which the FGD paper's protocol (one tenant, pod by pod) does "
                         "not have; use it with --mode timed")
    greedy = policy != "cpsat"
    window = args.window if args.window is not None else (1 if greedy else DEFAULT_BATCH_WINDOW)
    _check_fgd_flags(args)
    if args.orders is not None and (policy != "cpsat" or args.objective != "packing"):
        raise UsageError("--orders: only the experimental --policy cpsat --objective packing "
                         "solver makes FGD passes in given orders; the controller's engine "
                         "sizes its order search from --time-limit. Drop --orders, or add "
                         "--objective packing")
    with _usage_errors():
        replay_fgd(nodes_file=args.nodes, pods_file=args.pods, policy=policy, window=window,
                   seeds=parse_seeds(args.seeds or DEFAULT_SEEDS), arrival=args.arrival,
                   time_limit=args.time_limit, objective=args.objective, orders=args.orders,
                   json_path=Path(args.json) if args.json else None,
                   plot_path=Path(args.plot) if args.plot else None)
    return 0


# --------------------------------------------------------------------------------------------
# The embedded default and --mode timed
# --------------------------------------------------------------------------------------------


def _arg(args: argparse.Namespace, name: str, default: Any) -> Any:
    value = getattr(args, name, None)
    return default if value is None else value


def _settle(args: argparse.Namespace) -> float:
    return float(_arg(args, "settle_s", DEFAULT_SETTLE_S))


def _first_seed(args: argparse.Namespace) -> int:
    """The first of ``--seeds`` (the timed replay and the default run one seed), every seed
    checked as in ``--mode fgd``."""
    seeds = _arg(args, "seeds", None)
    if seeds is None:
        return 0
    if isinstance(seeds, str | int):
        text = str(seeds)
    elif isinstance(seeds, Sequence):
        text = ",".join(str(s) for s in seeds)
    else:
        raise UsageError(f"--seeds: {seeds!r} is not a list of whole numbers")
    with _usage_errors():
        return parse_seeds(text)[0]


def _contenders(args: argparse.Namespace, fallback: Sequence[Contender]) -> list[Contender]:
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


def run_default(args: argparse.Namespace | None = None, *,
                console: Console | None = None) -> int:
    """``berth simulate`` with no arguments: a generated cluster and workload, every policy,
    a table and a plot (``--plot`` overrides where it goes)."""
    from rich.console import Console

    args = args or argparse.Namespace()
    console = console or Console()
    seed = _first_seed(args)
    window = float(_arg(args, "window_s", 5.0))
    settle = _settle(args)
    limit = float(_arg(args, "time_limit", 1.0))
    contenders = _contenders(args, DEFAULT_CONTENDERS)
    json_out = _arg(args, "json", None)
    with _usage_errors():
        replay_default(contenders=contenders, seed=seed, window_s=window, settle_s=settle,
                       time_limit_s=limit,
                       max_pending=int(_arg(args, "max_pending", 64)),
                       json_path=Path(json_out) if json_out else None,
                       plot_path=Path(_arg(args, "plot", DEFAULT_PLOT)), console=console)
    return 0


def run_timed(args: argparse.Namespace, *, console: Console | None = None) -> int:
    """``berth simulate --mode timed --nodes N.csv --pods P.csv [--policy P | --compare L]``."""
    from rich.console import Console

    console = console or Console()
    seed = _first_seed(args)
    window = float(_arg(args, "window_s", 5.0))
    limit = float(_arg(args, "time_limit", 2.0))
    contenders = _contenders(args, (Contender("cpsat"),))
    until = _arg(args, "until", None)
    with _usage_errors():
        configs = build_configs(contenders, window_s=window, settle_s=_settle(args),
                                time_limit_s=limit, seed=seed,
                                max_pending=int(_arg(args, "max_pending", 64)),
                                until_s=float(until) if until is not None else None)
        nodes, pods = _arg(args, "nodes", None), _arg(args, "pods", None)
        if not nodes or not pods:
            raise UsageError("--mode timed needs --nodes NODES.csv and --pods PODS.csv "
                             "(or no arguments at all for the embedded default)")
        json_out, plot = _arg(args, "json", None), _arg(args, "plot", None)
        replay_trace(configs, nodes_file=str(nodes), pods_file=str(pods),
                     tenants=int(_arg(args, "tenants", 4)),
                     time_scale=float(_arg(args, "time_scale", 1.0)),
                     speedup=float(_arg(args, "speedup", 1.0)),
                     json_path=Path(json_out) if json_out else None,
                     plot_path=Path(plot) if plot else None, console=console)
    return 0
