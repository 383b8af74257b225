"""Interference: sharing bans and latency SLOs between pods placed on the same GPU.

Against what already runs on a GPU, bans and SLOs are enforced by candidate filtering (see
:mod:`solver.cpsat.candidates`). Between pending pods this module adds, per GPU:

* a ban ``use[p] + use[q] <= 1`` for every pair of classes that may not hold the GPU together
  with what runs there (exclusive classes, ``no_share_with``, or an SLO already broken by the
  pair);
* for each latency-sensitive class present, an additive budget: every other newcomer adds its
  pairwise slowdown increment, and the sum must stay within the slowdown the SLO tolerates.
  This is exact for pairs and a linear approximation for larger groups; the checker then judges
  the plan with the full model, and the API falls back to the greedy plan if it objects.

The objective charges ``interference weight x milli x (slowdown - 1)`` for each placement next
to pods already running on the GPU, so quieter neighbours are preferred.
"""

from __future__ import annotations

from collections import defaultdict

from ortools.sat.python import cp_model

from solver.cpsat.instance import Instance
from solver.cpsat.variables import Term, Vars, scaled

BUDGET_SCALE = 1000


def build(inst: Instance, model: cp_model.CpModel, v: Vars) -> list[Term]:
    rules = inst.qos
    costs: list[cp_model.LinearExprT] = []
    w = inst.weights.interference
    for (node, i), uses in v.on_gpu.items():
        running = inst.gpu_classes(node, i)
        by_class: dict[str | None, list[cp_model.IntVar]] = defaultdict(list)
        for pi, u in uses:
            cls = inst.pods[pi].pod.qos_class
            by_class[cls].append(u)
            if running and w > 0:
                cost = scaled(w * inst.pods[pi].pod.gpu_milli * (rules.slowdown(cls, running) - 1))
                if cost > 0:
                    costs.append(cost * u)
        if not rules.restrictive or len(uses) < 2:
            continue
        classes = sorted(by_class, key=lambda c: "" if c is None else c)
        for a_i, a in enumerate(classes):
            for b in classes[a_i:]:
                if rules.allowed([*running, a, b]):
                    continue
                if a == b:
                    xs = by_class[a]  # two of this class may not meet: at most one
                    model.add(sum(xs) <= 1)
                    continue
                for ua in by_class[a]:
                    for ub in by_class[b]:
                        model.add(ua + ub <= 1)
        _slo_budgets(inst, model, running, by_class)
    return [("interference", -sum(costs))] if costs else []


def _slo_budgets(
    inst: Instance, model: cp_model.CpModel, running: list[str | None],
    by_class: dict[str | None, list[cp_model.IntVar]],
) -> None:
    rules = inst.qos
    for k, r in enumerate(running):  # latency-sensitive pods already on the GPU
        limit = rules.slo_slowdown(r)
        if limit is None:
            continue
        others = [*running[:k], *running[k + 1:]]
        base = rules.slowdown(r, others)
        incs = [(round(BUDGET_SCALE * (rules.slowdown(r, [*others, c]) - base)), u)
                for c, us in by_class.items() for u in us]
        cap = round(BUDGET_SCALE * (limit - base))
        if sum(x for x, _u in incs) > cap:
            model.add(sum(x * u for x, u in incs) <= cap)
    for cls, us in by_class.items():  # latency-sensitive newcomers
        limit = rules.slo_slowdown(cls)
        if limit is None:
            continue
        base = rules.slowdown(cls, running)
        cap = round(BUDGET_SCALE * (limit - base))
        inc = {c: round(BUDGET_SCALE * (rules.slowdown(cls, [*running, c]) - base))
               for c in by_class}
        for u in us:
            terms = [(inc[c], q) for c, qs in by_class.items() for q in qs if q is not u]
            if sum(x for x, _q in terms) > cap:
                model.add(sum(x * q for x, q in terms) <= cap).only_enforce_if(u)
