"""``berth solve SNAPSHOT``: place a snapshot's pending gangs offline and show the plan.

The same code path as the controller: parse the snapshot (docs/snapshot-format.md), optionally
take tenants and solver knobs from the admin's policy file, call :func:`solver.api.solve`, and
print the plan as a table or as JSON. Bad input is reported with the file, the field path and
the problem, exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any

from admission.cli import UsageError
from solver.names import SolverName

NAME = "solve"
HELP = "Place the pending gangs of a cluster snapshot (YAML or JSON) and print the plan."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("snapshot", metavar="SNAPSHOT",
                        help="cluster snapshot with pending gangs (see docs/snapshot-format.md)")
    parser.add_argument("--policy", metavar="POLICY.yaml",
                        help="admin policy whose tenants and solver settings replace the "
                             "snapshot's")
    parser.add_argument("--solver", choices=[s.value for s in SolverName],
                        default=SolverName.CPSAT.value,
                        help="placement policy (default: cpsat); kueue and volcano are the "
                             "Kueue-like and Volcano-like baselines, models of those systems' "
                             "queueing (docs/baselines.md), not the systems")
    parser.add_argument("--time-limit", type=float, default=1.0, metavar="S",
                        help="seconds the solve may take (default: 1.0)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--workers", type=int, default=1,
                        help="CP-SAT worker threads (default: 1)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def _load(path: str) -> object:
    """The snapshot file's document, read with bounded work (admission.snapshot_file)."""
    from admission.snapshot_file import DocumentError, load_document

    try:
        return load_document(path, what="a snapshot (YAML or JSON)")
    except DocumentError as exc:
        if len(exc.lines) == 1:
            raise UsageError(exc.lines[0]) from None
        raise _Rejected(_errors(path, list(exc.lines), prefixed=True)) from None


class _Rejected(Exception):
    """Errors already printed; the command exits with ``status``."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


#: Most errors printed for one file; the rest are counted.
MAX_PRINTED_ERRORS = 50


def _errors(path: str, lines: list[str], *, prefixed: bool = False) -> int:
    for line in lines[:MAX_PRINTED_ERRORS]:
        print(line if prefixed else f"{path}: {line}", file=sys.stderr)
    n = len(lines)
    more = n - MAX_PRINTED_ERRORS
    if more > 0:
        print(f"{path}: ... and {more} more", file=sys.stderr)
    print(f"{path}: {n} error{'s' if n != 1 else ''}; nothing was solved", file=sys.stderr)
    return 2


#: Bounds of the numeric flags: CP-SAT's seed is a 32-bit integer; an hour is far beyond any
#: batch window; more workers than this only contend for the machine.
MAX_TIME_LIMIT_S = 3600.0
MAX_SEED = 2**31 - 1
MAX_WORKERS = 256


def _check_flags(args: argparse.Namespace) -> None:
    import math

    if not (math.isfinite(args.time_limit) and 0 < args.time_limit <= MAX_TIME_LIMIT_S):
        raise UsageError(f"--time-limit must be > 0 and at most {MAX_TIME_LIMIT_S:g} seconds, "
                         f"got {args.time_limit}")
    if not 1 <= args.workers <= MAX_WORKERS:
        raise UsageError(f"--workers must be in 1..{MAX_WORKERS}, got {args.workers}")
    if not 0 <= args.seed <= MAX_SEED:
        raise UsageError(f"--seed must be in 0..{MAX_SEED}, got {args.seed}")


def run(args: argparse.Namespace) -> int:
    from solver.api import solve
    from solver.schema import SnapshotError, parse_snapshot, plan_to_dict
    from solver.types import ProblemError

    _check_flags(args)
    try:
        snapshot = parse_snapshot(_load(args.snapshot))
    except _Rejected as exc:
        return exc.status
    except SnapshotError as exc:
        return _errors(args.snapshot, [str(e) for e in exc.errors])
    if args.policy:
        from admission.policy import PolicyError, load_policy, to_solver

        try:
            policy = load_policy(args.policy)
        except PolicyError as exc:
            for issue in exc.issues:
                print(issue.render(args.policy), file=sys.stderr)
            print(f"{args.policy}: the policy was not accepted; nothing was solved",
                  file=sys.stderr)
            return 2
        solver_policy, tenants = to_solver(policy)
        try:
            snapshot = replace(snapshot, policy=solver_policy, tenants=tenants or snapshot.tenants)
        except ProblemError as exc:
            return _errors(args.snapshot, [f"{exc.path}: {exc.message} (with the tenants of "
                                           f"{args.policy})"])
    plan = solve(snapshot, solver=args.solver, time_limit=args.time_limit, seed=args.seed,
                 workers=args.workers)
    data = plan_to_dict(plan)
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        print()
    else:
        _print_table(snapshot, data)
    return 0


def _shares(gpus: list[dict[str, Any]]) -> str:
    if not gpus:
        return "-"
    return ", ".join(f"GPU{g['index']}" + ("" if g["milli"] == 1000 else f"×{g['milli']}m")
                     for g in gpus)


def _print_table(snapshot: Any, data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    tenants = {g.name: g.tenant for g in snapshot.gangs}
    admitted = Table(title=f"Admitted gangs ({len(data['admitted'])})", title_justify="left")
    for col in ("gang", "tenant", "pod", "node", "GPU shares"):
        admitted.add_column(col)
    for g in data["admitted"]:
        for i, p in enumerate(g["pods"]):
            first = i == 0
            admitted.add_row(g["gang"] if first else "", tenants.get(g["gang"], "") if first
                             else "", p["pod"], p["node"], _shares(p["gpus"]))
    console.print(admitted)
    deferred = Table(title=f"Deferred gangs ({len(data['deferred'])})", title_justify="left")
    deferred.add_column("gang")
    deferred.add_column("tenant")
    deferred.add_column("reason")
    for d in data["deferred"]:
        deferred.add_row(d["gang"], tenants.get(d["gang"], ""), d["reason"])
    console.print(deferred)
    if data["evictions"]:
        evicted = Table(title=f"Evicted gangs ({len(data['evictions'])})",
                        title_justify="left")
        for col in ("gang", "tenant", "pods", "for gang", "of tenant", "why"):
            evicted.add_column(col)
        for e in data["evictions"]:
            evicted.add_row(e["gang"], e["tenant"], ", ".join(e["pods"]), e["for_gang"],
                            e["for_tenant"], "preempted" if e.get("preempt") else "reclaimed")
        console.print(evicted)
    s = data["stats"]
    stats = Table(title="Solver", title_justify="left", show_header=False)
    stats.add_column("what")
    stats.add_column("value")
    stats.add_row("solver", s["solver"])
    stats.add_row("status", s["status"] + (" (greedy fallback)" if s["fallback"] else ""))
    stats.add_row("wall time", f"{s['wall_seconds'] * 1000:.0f} ms")
    if s["objective"] is not None:
        stats.add_row("objective / bound", f"{s['objective']:.1f} / {s['bound']:.1f}")
    for k, v in s["detail"].items():
        stats.add_row(k, f"{v:.3f}" if isinstance(v, float) and not v.is_integer() else
                      f"{v:g}")
    console.print(stats)
