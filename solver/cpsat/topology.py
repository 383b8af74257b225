"""Topology: a required level keeps a gang in one domain; a preferred one penalises spread.

Domains come from :meth:`Instance.domain`: a GPU's NVLink domain, the node, or a node label
level such as ``rack`` or ``block``. The spread penalty is ``topology weight x gang demand`` per
domain beyond the first, so spreading costs a fixed fraction of what the gang is worth.
"""

from __future__ import annotations

from collections import defaultdict

from ortools.sat.python import cp_model

from solver.cpsat.instance import Instance
from solver.cpsat.variables import Term, Vars, scaled
from solver.types import TopologyMode


def _pod_domains(
    inst: Instance, v: Vars, gi: int, level: str
) -> dict[str, list[cp_model.IntVar]]:
    """Domain -> the place/use variables of the gang's pods that would put a pod there."""
    out: dict[str, list[cp_model.IntVar]] = defaultdict(list)
    for pi in inst.gang_pods[gi]:
        for node, x in v.pod_nodes.get(pi, []):
            if level == "nvlink":
                # a pod without a GPU is in no NVLink domain and does not count (as the checker)
                for i, u in v.pod_gpus.get((pi, node), []):
                    dom = inst.domain(level, node, i)
                    assert dom is not None
                    out[dom].append(u)
                continue
            dom = inst.domain(level, node)
            out[dom if dom is not None else f"node:{node}"].append(x)
    return out


def build(inst: Instance, model: cp_model.CpModel, v: Vars) -> list[Term]:
    penalties: list[cp_model.LinearExprT] = []
    for gi, gang in enumerate(inst.gangs):
        req = gang.topology
        if req is None:
            continue
        doms = _pod_domains(inst, v, gi, req.level)
        if req.mode is TopologyMode.REQUIRED:
            if not doms:
                # no pod of it can be in a domain of this level (CPU-only pods and NVLink):
                # nothing to keep together, as the checker judges; without this the gang
                # could never be admitted, though the order search and the checker admit it
                continue
            # sel[g, d]: gang g sits entirely inside domain d
            sel = {d: model.new_bool_var(f"sel[{gang.name},{d}]") for d in sorted(doms)}
            model.add(sum(sel.values()) == v.admit[gi])
            for d, xs in doms.items():
                for x in xs:
                    model.add_implication(x, sel[d])
            continue
        if len(doms) <= 1:
            continue
        # span[g, d]: some pod of gang g is placed in domain d
        span = {d: model.new_bool_var(f"span[{gang.name},{d}]") for d in sorted(doms)}
        for d, xs in doms.items():
            for x in xs:
                model.add_implication(x, span[d])
        cost = scaled(inst.weights.topology * gang.gpu_demand_milli)
        if cost:
            penalties.append(cost * (sum(span.values()) - v.admit[gi]))
    return [("topology", -sum(penalties))] if penalties else []
