"""The batch model composed from its concerns, solved with a time limit and a greedy hint.

Recipe: (1) derive the instance and its candidates, (2) make the variables, (3) let each concern
module add its constraints and objective terms, (4) hint the greedy plan, (5) solve, (6) read
the placements back. Allowed models and allowed nodes (:mod:`solver.eligibility`) are enforced
in step 1: a pod gets no variable for a node or GPU it may not use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ortools.sat.python import cp_model, cp_model_helper

from solver.baselines import ClusterArrays
from solver.cpsat import (
    capacity,
    energy,
    fairness,
    fragmentation,
    gang,
    interference,
    priority,
    quota,
    topology,
)
from solver.cpsat.instance import Instance, make_instance
from solver.cpsat.variables import SCALE, Term, Vars, make_vars
from solver.plan import GangPlacement, Plan
from solver.types import Snapshot

BuildFn = Callable[[Instance, cp_model.CpModel, Vars], list[Term]]

# Every concern, in the order the recipe applies them.
CONCERNS: tuple[tuple[str, BuildFn], ...] = (
    ("gang", gang.build),
    ("capacity", capacity.build),
    ("topology", topology.build),
    ("quota", quota.build),
    ("interference", interference.build),
    ("priority", priority.build),
    ("fairness", fairness.build),
    ("energy", energy.build),
    ("fragmentation", fragmentation.build),
)

# Deterministic time units granted per second of wall-clock budget.
DTIME_PER_SECOND = 1.0
RELATIVE_GAP = 1e-3

_STATUS = {
    cp_model.OPTIMAL: "OPTIMAL",
    cp_model.FEASIBLE: "FEASIBLE",
    cp_model.INFEASIBLE: "INFEASIBLE",
    cp_model.MODEL_INVALID: "MODEL_INVALID",
    cp_model.UNKNOWN: "UNKNOWN",
}


@dataclass(slots=True)
class CpsatResult:
    """What one CP-SAT solve found; ``admitted`` is None when it found no solution."""

    status: str
    admitted: list[GangPlacement] | None
    objective: float | None
    bound: float | None
    build_seconds: float
    solve_seconds: float
    terms: dict[str, float] = field(default_factory=dict)
    size: dict[str, float] = field(default_factory=dict)
    arrays: ClusterArrays | None = None  # the snapshot's free capacity, for reuse


def _hint(inst: Instance, v: Vars, model: cp_model.CpModel, hint: Plan) -> None:
    gang_index = {g.name: gi for gi, g in enumerate(inst.gangs)}
    chosen_nodes: set[tuple[int, str]] = set()
    chosen_gpus: set[tuple[int, str, int]] = set()
    admitted = set()
    for gp in hint.admitted:
        gi = gang_index.get(gp.gang)
        if gi is None:
            continue
        by_pod = {inst.pods[pi].pod.name: pi for pi in inst.gang_pods[gi]}
        keys = [(by_pod.get(pp.pod), pp) for pp in gp.pods]
        if any(pi is None or (pi, pp.node) not in v.place for pi, pp in keys):
            continue  # hint not expressible in this model (e.g. filtered); leave it out
        admitted.add(gi)
        for pi, pp in keys:
            assert pi is not None
            chosen_nodes.add((pi, pp.node))
            for s in pp.gpus:
                chosen_gpus.add((pi, pp.node, s.index))
    # written to the proto in bulk: add_hint per variable costs more than the rest together
    hint_proto = model.proto.solution_hint
    hint_proto.vars.extend([x.index for x in v.admit])
    hint_proto.values.extend([int(gi in admitted) for gi in range(len(v.admit))])
    hint_proto.vars.extend([x.index for x in v.place.values()])
    hint_proto.values.extend([int(key in chosen_nodes) for key in v.place])
    hint_proto.vars.extend([u.index for u in v.use.values()])
    hint_proto.values.extend([int(ukey in chosen_gpus) for ukey in v.use])


def _light_presolve(params: cp_model_helper.SatParameters) -> None:
    """Presolve lightly: on these models full probing and symmetry detection take most of a
    sub-second budget and buy little (the model is already small and the hint is good)."""
    params.cp_model_probing_level = 0
    params.max_presolve_iterations = 1
    params.symmetry_level = 0


def _complete_hint(model: cp_model.CpModel, v: Vars, time_limit: float) -> bool:
    """Turn the placement hint into a hint for every variable (aggregates, quota and fairness
    terms included) by solving the model with the placements fixed. A complete hint lets
    CP-SAT start from the greedy plan at once. False: the hint does not fit the model."""
    hinted = dict(zip(model.proto.solution_hint.vars, model.proto.solution_hint.values,
                      strict=True))
    fixed = model.clone()
    for x in [*v.admit, *v.place.values(), *v.use.values()]:
        if x.index in hinted:
            fixed.add(fixed.get_bool_var_from_proto_index(x.index) == hinted[x.index])
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    _light_presolve(solver.parameters)
    if solver.solve(fixed) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return False
    model.clear_hints()  # type: ignore[no-untyped-call]
    for i, value in enumerate(solver.response_proto.solution):
        model.add_hint(model.get_int_var_from_proto_index(i), value)
    return True


def solve_window(
    snapshot: Snapshot,
    *,
    hint: Plan | None = None,
    time_limit: float = 1.0,
    seed: int = 0,
    workers: int = 1,
    arrays: ClusterArrays | None = None,
    log: Callable[[str], None] | None = None,
    complete_hints: bool = False,
    deterministic_time: float | None = None,
) -> CpsatResult:
    """Build and solve the batch model for one snapshot (or one partition of it).

    ``deterministic_time``: CP-SAT's deterministic-time budget; give one that does not depend
    on measured wall time to get the same plan on every run (None: what is left of
    ``time_limit`` after building, which varies with the machine's load).

    ``complete_hints``: extend the placement hint to every variable first (one extra solve
    with the placements fixed). CP-SAT then starts from the hint at once, but the extra solve
    costs about as much as a presolve, so it is off by default.
    """
    t0 = time.perf_counter()
    inst = make_instance(snapshot, hint=hint, arrays=arrays)
    model = cp_model.CpModel()
    v = make_vars(inst, model)
    terms: list[Term] = []
    for _name, build in CONCERNS:
        terms.extend(build(inst, model, v))
    model.maximize(sum(expr for _n, expr in terms))
    hint_complete = False
    if hint is not None:
        _hint(inst, v, model, hint)
        hint_complete = complete_hints and _complete_hint(
            model, v, max(0.01, (time_limit - (time.perf_counter() - t0)) / 4))
    build_seconds = time.perf_counter() - t0

    if time_limit - build_seconds < 0.005:
        # building used the budget: report no solution, the caller keeps the greedy plan
        return CpsatResult("NOT_STARTED", None, None, None, build_seconds, 0.0,
                           size={"wall_capped": 1.0}, arrays=inst.arrays)
    solver = cp_model.CpSolver()
    params = solver.parameters
    budget = time_limit - build_seconds
    params.max_time_in_seconds = budget
    # Determinism: a deterministic-time budget, and with several workers the interleaved
    # (deterministic) parallel mode; only the wall-clock guard above can make reruns differ.
    params.max_deterministic_time = (budget if deterministic_time is None
                                     else deterministic_time) * DTIME_PER_SECOND
    params.random_seed = seed
    params.num_workers = max(1, workers)
    params.interleave_search = workers > 1
    # Stop within 0.1% of the bound: proving the last fraction (often symmetric choices among
    # idle GPUs) costs far more than it is worth inside a batch window.
    params.relative_gap_limit = RELATIVE_GAP
    _light_presolve(params)
    if log is not None:
        params.log_search_progress = True
        params.log_to_stdout = False
        solver.log_callback = log
    code = solver.solve(model)
    status = _STATUS.get(code, str(code))
    size = {"hint_complete": float(hint_complete),
            "pods": float(len(inst.pods)), "place_vars": float(len(v.place)),
            "use_vars": float(len(v.use)), "nodes_offered": float(len(v.on_node))}
    solve_seconds = solver.wall_time
    if code != cp_model.OPTIMAL and solve_seconds >= 0.95 * budget:
        size["wall_capped"] = 1.0
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return CpsatResult(status, None, None, None, build_seconds, solve_seconds, size=size,
                           arrays=inst.arrays)
    values = {name: solver.value(expr) / SCALE for name, expr in terms}
    return CpsatResult(
        status,
        v.extract(inst, solver),
        solver.objective_value / SCALE,
        solver.best_objective_bound / SCALE,
        build_seconds,
        solve_seconds,
        values,
        size,
        inst.arrays,
    )


def score_plan(snapshot: Snapshot, plan: Plan, *, time_limit: float = 30.0) -> CpsatResult:
    """The batch model's objective for a given plan (its placements fixed), so plans from
    different solvers or from a partitioned solve are compared on the same scale."""
    t0 = time.perf_counter()
    inst = make_instance(snapshot, hint=plan)
    model = cp_model.CpModel()
    v = make_vars(inst, model)
    terms: list[Term] = []
    for _name, build in CONCERNS:
        terms.extend(build(inst, model, v))
    model.maximize(sum(expr for _n, expr in terms))
    _hint(inst, v, model, plan)
    proto_hint = dict(zip(model.proto.solution_hint.vars, model.proto.solution_hint.values,
                          strict=True))
    for x in [*v.admit, *v.place.values(), *v.use.values()]:
        model.add(x == proto_hint[x.index])
    build_seconds = time.perf_counter() - t0
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    code = solver.solve(model)
    status = _STATUS.get(code, str(code))
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return CpsatResult(status, None, None, None, build_seconds, solver.wall_time)
    return CpsatResult(status, list(plan.admitted), solver.objective_value / SCALE,
                       solver.best_objective_bound / SCALE, build_seconds, solver.wall_time,
                       {name: solver.value(expr) / SCALE for name, expr in terms})
