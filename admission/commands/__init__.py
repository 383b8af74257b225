"""Subcommands of ``berth``: one module each, found at start-up.

Each module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.
Modules import their heavy dependencies inside ``run`` so that ``berth --help`` stays fast.
"""
