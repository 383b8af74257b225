"""The simulator's shell: trace files in, tables, JSON and plots out.

The replays themselves are pure and live in :mod:`solver.simulate`; this package reads the
Alibaba-format node and pod lists (:mod:`~admission.simulate.tracefiles`), runs the timed replay
for a set of contenders and reports it (:mod:`~admission.simulate.timed`), and draws the plots
(:mod:`~admission.simulate.plots`). ``berth simulate`` (admission/commands/simulate.py) parses
the command line and calls this package; the benchmarks in bench/ call it the same way.
"""

from __future__ import annotations

from admission.simulate.plots import binned, timed_figure
from admission.simulate.tracefiles import TraceFileError, read_nodes, read_pods

__all__ = ["TraceFileError", "binned", "read_nodes", "read_pods", "timed_figure"]
