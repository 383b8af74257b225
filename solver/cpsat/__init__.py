"""The CP-SAT batch model, one module per concern.

Layout (after the CP-SAT primer's split of a model):

- :mod:`~solver.cpsat.instance`: the data a solve works on, derived once from the snapshot;
  :mod:`~solver.cpsat.candidates` filters where each pod may go (and breaks symmetry);
- :mod:`~solver.cpsat.variables`: the decision variables and how a solution becomes placements;
- one module per concern, each ``build(instance, model, vars) -> objective terms``:
  :mod:`~solver.cpsat.gang`, :mod:`~solver.cpsat.capacity`, :mod:`~solver.cpsat.topology`,
  :mod:`~solver.cpsat.quota`, :mod:`~solver.cpsat.interference`,
  :mod:`~solver.cpsat.priority`, :mod:`~solver.cpsat.fairness`, :mod:`~solver.cpsat.energy`,
  :mod:`~solver.cpsat.fragmentation`;
- :mod:`~solver.cpsat.model` composes them and solves; :mod:`~solver.cpsat.solve` wraps that
  with the greedy hint, the judge it is given (the checker, from :mod:`solver.api`) and the
  fallback; :mod:`~solver.cpsat.reasons` explains why gangs wait.
"""
