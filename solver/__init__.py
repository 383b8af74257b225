"""Berth's functional core: the batch placement problem, its solvers and the one checker.

Pure: no Kubernetes client, no aiohttp, no I/O (an import-linter contract). Everything arrives
in a :class:`~solver.types.Snapshot` and leaves as a :class:`~solver.plan.Plan`.

- :mod:`solver.api` — ``solve(snapshot, ...)``: the one entry point the controller,
  ``berth solve`` and ``berth simulate`` call; it composes a solver with the checker and falls
  back to a greedy plan when CP-SAT finds nothing the checker accepts in time.
- :mod:`solver.types`, :mod:`solver.schema`, :mod:`solver.plan` — the problem, its file format
  and validation, the answer.
- :mod:`solver.cpsat` — the CP-SAT model, one module per constraint or objective term.
- :mod:`solver.baselines` — first-fit, best-fit, random and FGD behind one interface.
- :mod:`solver.checker` — judges every plan from any solver; imports none of them.
- :mod:`solver.rules` — the rules the solvers build by and the checker judges by, stated once.
- :mod:`solver.queue` — the order of waiting gangs and the quota-wait reason, for the solvers
  and for the controller's "N gangs ahead" message.
- :mod:`solver.names` — the solver names, listed once.
- :mod:`solver.state`, :mod:`solver.eligibility`, :mod:`solver.fragmentation`,
  :mod:`solver.interference`, :mod:`solver.partition` — free capacity, node filters,
  FGD's fragmentation measure, the co-location model, POP-style partitioning.
- :mod:`solver.simulate` — everything only the simulator uses: the FGD protocol, the timed
  replay, the generator, trace rows, metrics and the upper bounds.
"""
