"""The simulator's shell: trace files in, tables, JSON and plots out.

The replays themselves are pure and live in :mod:`solver.simulate`; this package reads the
Alibaba-format node and pod lists (:mod:`~admission.simulate.tracefiles`), runs the FGD paper's
protocol over a set of seeds and reports it (:mod:`~admission.simulate.fgd`), runs the timed
replay for a set of contenders and reports it (:mod:`~admission.simulate.timed`), and draws the
plots (:mod:`~admission.simulate.plots`).

Everything here takes typed arguments and reports bad input as one
:class:`~admission.simulate.errors.SimulateError` (trace files as its subclass
:class:`~admission.simulate.tracefiles.TraceFileError`), whose message names the flag or the
file. ``berth simulate`` (admission/commands/simulate.py) parses the command line, calls this
package and prints those messages as usage errors; the benchmarks in bench/ call it the same
way. Import from here, not from the modules.
"""

from __future__ import annotations

from admission.simulate.errors import SimulateError
from admission.simulate.fgd import (
    parse_seeds,
    plot_curves,
    replay_fgd,
    simulate_fgd,
)
from admission.simulate.plots import binned, timed_figure
from admission.simulate.timed import (
    DEFAULT_CONTENDERS,
    DEFAULT_SETTLE_S,
    Contender,
    build_configs,
    load_trace_scenario,
    parse_contenders,
    replay_default,
    replay_trace,
)
from admission.simulate.tracefiles import TraceFileError, read_nodes, read_pods

__all__ = [
    "DEFAULT_CONTENDERS",
    "DEFAULT_SETTLE_S",
    "Contender",
    "SimulateError",
    "TraceFileError",
    "binned",
    "build_configs",
    "load_trace_scenario",
    "parse_contenders",
    "parse_seeds",
    "plot_curves",
    "read_nodes",
    "read_pods",
    "replay_default",
    "replay_fgd",
    "replay_trace",
    "simulate_fgd",
    "timed_figure",
]
