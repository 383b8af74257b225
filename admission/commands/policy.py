"""``berth policy check FILE``: validate a policy file and print every error with its line.
``berth policy schema [--out FILE]``: the policy's JSON Schema, for editors and other tools."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "policy"
HELP = "Check a policy file: prints every error with its path and line; exit 2 on error."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="policy_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="validate FILE and report every problem at once")
    check.add_argument("file", metavar="FILE", help="the policy YAML")
    check.add_argument("--quiet", "-q", action="store_true", help="print nothing when valid")
    schema = sub.add_parser(
        "schema", help="print the policy's JSON Schema (draft 2020-12), generated from the "
        "model; config/policy/policy.schema.json is this output (`berth docs` rewrites it)")
    schema.add_argument("--out", "-o", metavar="FILE", type=Path, default=None,
                        help="write it to FILE instead of standard output")


def run(args: argparse.Namespace) -> int:
    if args.policy_command == "schema":
        return _schema(args.out)
    return _check(args)


def _schema(out: Path | None) -> int:
    from admission.cli import UsageError
    from admission.policy.schema import render_schema

    text = render_schema()
    if out is None:
        print(text, end="")
        return 0
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--out: cannot write {out}: {exc}") from None
    return 0


def _check(args: argparse.Namespace) -> int:
    from admission.policy import PolicyError, load_policy

    try:
        policy = load_policy(args.file)
    except PolicyError as exc:
        for issue in exc.issues:
            print(issue.render(args.file))
        n = len(exc.issues)
        print(f"{args.file}: {n} error{'s' if n != 1 else ''}; the policy was not accepted")
        return 2
    if not args.quiet:
        tenants = ", ".join(f"{t.name} ({', '.join(t.namespaces)})" for t in policy.tenants)
        print(f"{args.file}: valid (generation {policy.generation}); tenants: {tenants}; "
              f"sharing: {policy.sharing.backend}; release: {policy.release.backend}")
    return 0
