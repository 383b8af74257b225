"""Trace replay, pure: everything only the simulator uses.

- :mod:`~solver.simulate.protocol`: the FGD paper's protocol (one try per arrival, no departures).
- :mod:`~solver.simulate.window`: an experiment, a replay-only packing solver for the protocol
  (``--objective packing``); the controller never runs it.
- :mod:`~solver.simulate.timed` and :mod:`~solver.simulate.timed_scenario`: a replay in
  simulated time with queues and departures; :mod:`~solver.simulate.metrics` its figures.
- :mod:`~solver.simulate.trace`: one row of an Alibaba-format node or pod list as solver types.
- :mod:`~solver.simulate.bound`: upper bounds on the allocation any policy can reach.
"""
