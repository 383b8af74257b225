"""``berth policy check FILE``: validate a policy file and print every error with its line."""

from __future__ import annotations

import argparse

NAME = "policy"
HELP = "Check a policy file: prints every error with its path and line; exit 2 on error."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="policy_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="validate FILE and report every problem at once")
    check.add_argument("file", metavar="FILE", help="the policy YAML")
    check.add_argument("--quiet", "-q", action="store_true", help="print nothing when valid")


def run(args: argparse.Namespace) -> int:
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
