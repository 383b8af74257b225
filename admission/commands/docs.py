"""``berth docs [--check]``: regenerate what is generated from the code: the policy's JSON Schema
(config/policy/policy.schema.json) and the pages under docs/reference/."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "docs"
HELP = ("Regenerate config/policy/policy.schema.json and docs/reference/*.md from the code; "
        "--check only reports stale files (exit 1).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true",
                        help="write nothing; list the files that differ and exit 1 if any do")
    parser.add_argument("--root", type=Path, default=None, metavar="DIR",
                        help="the repository checkout to write into (default: the one this "
                             "berth runs from)")


def run(args: argparse.Namespace) -> int:
    from admission.cli import UsageError
    from admission.reference import repository_root, stale, write_all

    root: Path = args.root or repository_root()
    if not (root / "config" / "policy").is_dir():
        raise UsageError(f"{root} is not a Berth checkout (no config/policy/); pass --root")
    if args.check:
        old = stale(root)
        for path in old:
            print(f"{path}: stale; run `berth docs` to regenerate it")
        if not old:
            print("generated files are current")
        return 1 if old else 0
    changed = write_all(root)
    for path in changed:
        print(f"wrote {path}")
    if not changed:
        print("generated files are current")
    return 0
