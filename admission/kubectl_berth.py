"""``kubectl berth``: the kubectl plugin (the ``kubectl-berth`` console script on PATH).

kubectl runs ``kubectl-berth status ...`` for ``kubectl berth status ...``; the plugin offers
the two read-only commands, with the same options and exit statuses as ``berth status`` and
``berth explain``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from admission.commands import explain, status
from admission.errors import UsageError

COMMANDS = (status, explain)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl berth",
        description="Berth's queue as its users see it: tenants' quotas and waiting gangs, "
                    "and why a pod waits.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in COMMANDS:
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "_run"):
        parser.print_help()
        return 2
    try:
        return int(args._run(args))
    except UsageError as exc:
        print(f"kubectl berth {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
