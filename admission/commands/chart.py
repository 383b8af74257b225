"""``berth chart [--check]``: render the Helm chart in charts/berth from the kustomize sources in
config/ (admission/chart.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "chart"
HELP = ("Regenerate the Helm chart charts/berth from config/ (kubectl kustomize of every "
        "combination of its choices); --check only reports stale files (exit 1).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true",
                        help="write nothing; list the files that differ and exit 1 if any do")
    parser.add_argument("--root", type=Path, default=None, metavar="DIR",
                        help="the repository checkout to write into (default: the one this "
                             "berth runs from)")


def run(args: argparse.Namespace) -> int:
    from admission.chart import ChartError, stale, write_chart
    from admission.cli import UsageError
    from admission.reference import repository_root

    root: Path = args.root or repository_root()
    if not (root / "config" / "base").is_dir():
        raise UsageError(f"{root} is not a Berth checkout (no config/base/); pass --root")
    try:
        if args.check:
            old = stale(root)
            for path in old:
                print(f"{path}: stale; run `berth chart` to regenerate it")
            if not old:
                print("the chart is current")
            return 1 if old else 0
        changed = write_chart(root)
    except ChartError as exc:
        raise UsageError(str(exc)) from None
    for path in changed:
        print(f"wrote {path}")
    if not changed:
        print("the chart is current")
    return 0
