"""Priority with aging: the main objective term, admitted priority-weighted GPU demand.

Each admitted gang is worth ``demand weight x GPU demand x (1 + priority + aging x hours
waited)`` (see :func:`solver.cpsat.instance.priority_weight`), so higher priority wins and a
long wait eventually wins too.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from solver.cpsat.instance import Instance
from solver.cpsat.variables import Term, Vars


def build(inst: Instance, model: cp_model.CpModel, v: Vars) -> list[Term]:
    return [("demand", sum(inst.gang_value(g) * v.admit[g] for g in range(len(inst.gangs))))]
