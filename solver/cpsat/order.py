"""Keep order: the gangs that have waited and that the plan the model starts from admits stay
admitted.

The order search keeps only passes that start every gang best-fit in queue order starts once it
has waited ``policy.queueing.keep_order_after_s`` (:func:`solver.queue.kept_in_order`,
:mod:`solver.cpsat.search`), and the hint is such a pass. Here the model is held to the hint's
waited gangs: CP-SAT may admit more gangs, move pods and trade among the gangs that have not
waited yet, never leave a waited gang of the hint out for a better packing. Without this the
window's value (admitted GPU demand) prefers a large, long gang that a rearrangement makes fit
over the gangs at the head of the queue, and in the timed replay the head waits for it
(bench/reservations_sim.md, "Keeping the queue's order"). Feasible by construction: the hint
admits them all.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from solver.cpsat.instance import Instance
from solver.cpsat.variables import Term, Vars
from solver.queue import kept_in_order


def build(inst: Instance, model: cp_model.CpModel, v: Vars) -> list[Term]:
    if inst.hint is None:
        return []
    keep = kept_in_order(inst.snapshot, inst.hint.admitted_names)
    for gi, gang in enumerate(inst.gangs):
        if gang.name in keep:
            model.add(v.admit[gi] == 1)
    return []
