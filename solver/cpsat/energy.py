"""Energy: prefer GPUs that already run something over waking idle ones.

Activating an idle GPU costs ``energy weight x (active watts - idle watts)`` of its model, from
the policy's per-model power figures (a default when the policy has none). A GPU counts as idle
when nothing runs on it now.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from solver.cpsat.instance import Instance
from solver.cpsat.variables import Term, Vars, scaled
from solver.types import MILLI

# Watts an idle GPU adds when it starts work, when the policy gives no figure for its model.
DEFAULT_ACTIVATION_WATTS = 150.0


def activation_watts(inst: Instance, model_name: str) -> float:
    pol = inst.snapshot.policy
    active = pol.active_watts.get(model_name)
    if active is None:
        return DEFAULT_ACTIVATION_WATTS
    return max(0.0, active - pol.idle_watts.get(model_name, 0.0))


def build(inst: Instance, model: cp_model.CpModel, v: Vars) -> list[Term]:
    if inst.weights.energy <= 0:
        return []
    costs: list[cp_model.LinearExprT] = []
    for (node, i), uses in v.on_gpu.items():
        if not inst.gpu_idle(node, i):
            continue
        cost = scaled(inst.weights.energy * activation_watts(inst, inst.gpu(node, i).model))
        if cost == 0:
            continue
        if all(inst.pods[pi].pod.gpu_milli == MILLI for pi, _u in uses):
            # whole-GPU pods: capacity lets at most one take it, so the sum is the activation
            costs.append(cost * sum(u for _pi, u in uses))
            continue
        # active[n, i]: idle GPU i on node n gets work in this window
        active = model.new_bool_var(f"active[{node},{i}]")
        for _pi, u in uses:
            model.add_implication(u, active)
        costs.append(cost * active)
    return [("energy", -sum(costs))] if costs else []
