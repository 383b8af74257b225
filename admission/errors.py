"""Errors shared by the ``berth`` commands.

:class:`UsageError` lives here rather than in :mod:`admission.cli` so that it is one class even
when the CLI runs as ``python -m admission.cli`` (then ``admission.cli`` is loaded twice).
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2, no traceback."""
