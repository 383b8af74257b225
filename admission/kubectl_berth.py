"""``kubectl berth``: the kubectl plugin (the ``kubectl-berth`` console script on PATH).

kubectl runs ``kubectl-berth status ...`` for ``kubectl berth status ...``; the plugin offers
the two read-only commands, with the same options and exit statuses as ``berth status`` and
``berth explain``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from admission import cli
from admission.commands import explain, status

COMMANDS = (status, explain)


def build_parser() -> argparse.ArgumentParser:
    return cli.build_parser(
        prog="kubectl berth",
        description="Berth's queue as its users see it: tenants' quotas and waiting gangs, "
                    "and why a pod waits.",
        modules=COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(argv, parser=build_parser())


if __name__ == "__main__":
    raise SystemExit(main())
