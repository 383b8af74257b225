"""Trace replay: the FGD paper's protocol (:mod:`solver.simulate.protocol`) and a replay in
simulated time with queues and departures (:mod:`solver.simulate.timed`)."""
