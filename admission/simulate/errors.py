"""The one error the simulator's shell raises for bad input.

The shell is a library: ``berth simulate`` and the benchmarks in bench/ call it with typed
arguments, so it cannot know how its caller reports a mistake. Every bad value, file or flag
combination it meets becomes a :class:`SimulateError` whose message names the flag or the file
and says what would fix it; ``berth simulate`` prints that message as it stands.
"""

from __future__ import annotations


class SimulateError(ValueError):
    """Bad input to a simulation, as one line for the user (no traceback)."""
