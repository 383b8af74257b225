"""The decision variables of the batch model and how a solution turns back into placements.

Only candidate (pod, node, GPU) triples get variables (see :mod:`solver.cpsat.candidates`), so
the indexes below are sparse; ``on_node`` and ``on_gpu`` are the reverse indexes the capacity
and interference modules sum over.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from solver.cpsat.instance import OBJECTIVE_SCALE, Instance
from solver.plan import GangPlacement, PodPlacement
from solver.types import GpuShare

GpuKey = tuple[str, int]


@dataclass(slots=True)
class Vars:
    # admit[g]: gang g is admitted in this window (all its pods placed) or not at all
    admit: list[cp_model.IntVar]
    # place[p, n]: pod p runs on node n
    place: dict[tuple[int, str], cp_model.IntVar] = field(default_factory=dict)
    # use[p, n, i]: pod p takes its per-GPU share (gpu_milli) of GPU i on node n
    use: dict[tuple[int, str, int], cp_model.IntVar] = field(default_factory=dict)
    # reverse indexes: node -> pods that may run there; GPU -> (pod, use var)
    on_node: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    on_gpu: dict[GpuKey, list[tuple[int, cp_model.IntVar]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # pod -> its place vars, GPU use vars per node
    pod_nodes: dict[int, list[tuple[str, cp_model.IntVar]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    pod_gpus: dict[tuple[int, str], list[tuple[int, cp_model.IntVar]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    def extract(self, inst: Instance, solver: cp_model.CpSolver) -> list[GangPlacement]:
        """Placements of the admitted gangs in the solver's best solution."""
        admitted = []
        for gi, gang in enumerate(inst.gangs):
            if not solver.boolean_value(self.admit[gi]):
                continue
            pods = []
            for pi in inst.gang_pods[gi]:
                pod = inst.pods[pi].pod
                node = next(n for n, v in self.pod_nodes[pi] if solver.boolean_value(v))
                shares = tuple(
                    GpuShare(i, pod.gpu_milli)
                    for i, v in self.pod_gpus.get((pi, node), [])
                    if solver.boolean_value(v)
                )
                pods.append(PodPlacement(pod.name, node, shares))
            admitted.append(GangPlacement(gang.name, tuple(pods)))
        return admitted


def make_vars(inst: Instance, model: cp_model.CpModel) -> Vars:
    v = Vars(admit=[model.new_bool_var(f"admit[{g.name}]") for g in inst.gangs])
    for pi, ref in enumerate(inst.pods):
        for cand in inst.candidates[pi]:
            x = model.new_bool_var(f"place[{pi},{cand.node}]")
            v.place[(pi, cand.node)] = x
            v.on_node[cand.node].append(pi)
            v.pod_nodes[pi].append((cand.node, x))
            if ref.pod.gpu_count == 0:
                continue
            for i in cand.gpus:
                u = model.new_bool_var(f"use[{pi},{cand.node},{i}]")
                v.use[(pi, cand.node, i)] = u
                v.on_gpu[(cand.node, i)].append((pi, u))
                v.pod_gpus[(pi, cand.node)].append((i, u))
    return v


# An objective term: a name (reported in SolveStats.detail) and an integer linear expression
# that the model maximises; penalties are returned negated.
Term = tuple[str, cp_model.LinearExprT]

# Objective units: SCALE units = one milli-GPU of priority-1 demand, so that float weights
# round to integers with two decimals to spare.
SCALE = OBJECTIVE_SCALE


def scaled(x: float) -> int:
    return round(SCALE * x)
