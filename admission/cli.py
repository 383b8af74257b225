"""The ``berth`` command line: a dispatcher over the modules in :mod:`admission.commands`."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from types import ModuleType

from admission import commands
from admission.errors import UsageError

__all__ = ["UsageError", "build_parser", "main"]


def _command_modules() -> list[ModuleType]:
    mods = []
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mods.append(importlib.import_module(f"{commands.__name__}.{info.name}"))
    return mods


DESCRIPTION = "Batch admission controller for multi-tenant GPU clusters on Kubernetes."


def build_parser(prog: str = "berth", description: str = DESCRIPTION,
                 modules: Sequence[ModuleType] | None = None) -> argparse.ArgumentParser:
    """The command line of ``prog`` with one subcommand per module (every command module by
    default; the kubectl plugin passes its own few)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _command_modules() if modules is None else modules:
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None, *,
         parser: argparse.ArgumentParser | None = None) -> int:
    parser = parser or build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "_run"):
        parser.print_help()
        return 2
    try:
        return int(args._run(args))
    except UsageError as exc:
        print(f"{parser.prog} {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
