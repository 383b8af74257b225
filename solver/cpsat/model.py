"""The batch model composed from its concerns, solved with a time limit and a greedy hint.

Recipe, one function a step (after the CP-SAT primer's split): (1) :func:`make_instance` derives
the instance and its candidates; (2) :func:`build` makes the variables, lets each concern module
add its constraints and objective terms, and maximizes their sum; (3) :func:`add_hint` hints the
greedy plan; (4) :func:`search_parameters` (or :func:`fixed_parameters`) sets how to search;
(5) :func:`solve` runs CP-SAT; (6) :func:`read_back` turns the solution into placements and
objective terms. :func:`solve_window` runs the recipe for a window, :func:`score_plan` the same
model with a given plan's placements fixed. Allowed models and allowed nodes
(:mod:`solver.eligibility`) are enforced in step 1: a pod gets no variable for a node or GPU it
may not use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ortools.sat.python import cp_model, cp_model_helper

from solver.baselines import ClusterArrays
from solver.cpsat import (
    capacity,
    energy,
    fairness,
    fragmentation,
    gang,
    interference,
    order,
    priority,
    quota,
    stay,
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
    ("order", order.build),
    ("capacity", capacity.build),
    ("topology", topology.build),
    ("quota", quota.build),
    ("interference", interference.build),
    ("priority", priority.build),
    ("fairness", fairness.build),
    ("energy", energy.build),
    ("fragmentation", fragmentation.build),
    ("stay", stay.build),
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


@dataclass(slots=True)
class BatchModel:
    """The model of one instance, with its decision variables and named objective terms."""

    inst: Instance
    model: cp_model.CpModel
    v: Vars
    terms: list[Term]


def build(inst: Instance) -> BatchModel:
    """The variables, every concern's constraints and terms, and the objective (their sum)."""
    model = cp_model.CpModel()
    v = make_vars(inst, model)
    terms: list[Term] = []
    for _name, build_concern in CONCERNS:
        terms.extend(build_concern(inst, model, v))
    model.maximize(sum(expr for _n, expr in terms))
    return BatchModel(inst, model, v, terms)


def add_hint(bm: BatchModel, hint: Plan) -> None:
    """Hint ``hint``'s placements (admit, place and use variables); a gang the model cannot
    express (e.g. a node its candidates left out) is hinted as not admitted."""
    inst, v = bm.inst, bm.v
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
    hint_proto = bm.model.proto.solution_hint
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


def _fix_to_hint(model: cp_model.CpModel, v: Vars) -> None:
    """Fix every hinted decision variable (admit, place, use) of ``model`` to its hint."""
    hinted = dict(zip(model.proto.solution_hint.vars, model.proto.solution_hint.values,
                      strict=True))
    for x in [*v.admit, *v.place.values(), *v.use.values()]:
        if x.index in hinted:
            model.add(model.get_bool_var_from_proto_index(x.index) == hinted[x.index])


def search_parameters(*, budget: float, deterministic_time: float | None, seed: int,
                      workers: int) -> cp_model_helper.SatParameters:
    """How the batch model is searched: ``budget`` seconds of wall time at most.

    ``deterministic_time``: the deterministic-time budget (None: ``budget``)."""
    params = cp_model_helper.SatParameters()
    params.max_time_in_seconds = budget
    # Determinism: a deterministic-time budget, and with several workers the interleaved
    # (deterministic) parallel mode; only the wall-clock guard can make reruns differ.
    params.max_deterministic_time = (budget if deterministic_time is None
                                     else deterministic_time) * DTIME_PER_SECOND
    params.random_seed = seed
    params.num_workers = max(1, workers)
    params.interleave_search = workers > 1
    # Stop within 0.1% of the bound: proving the last fraction (often symmetric choices among
    # idle GPUs) costs far more than it is worth inside a batch window.
    params.relative_gap_limit = RELATIVE_GAP
    _light_presolve(params)
    return params


def fixed_parameters(*, time_limit: float) -> cp_model_helper.SatParameters:
    """How a model whose placements are fixed is solved: one worker, ``time_limit`` seconds."""
    params = cp_model_helper.SatParameters()
    params.max_time_in_seconds = time_limit
    params.num_workers = 1
    return params


def solve(model: cp_model.CpModel, params: cp_model_helper.SatParameters, *,
          log: Callable[[str], None] | None = None
          ) -> tuple[cp_model.CpSolver, cp_model.CpSolverStatus]:
    """Solve ``model`` under ``params`` (the search log, if any, goes to ``log``); the solver,
    to read the solution from, and its status code."""
    solver = cp_model.CpSolver()
    solver.parameters.copy_from(params)
    if log is not None:
        solver.parameters.log_search_progress = True
        solver.parameters.log_to_stdout = False
        solver.log_callback = log
    return solver, solver.solve(model)


def read_back(solver: cp_model.CpSolver, code: cp_model.CpSolverStatus, bm: BatchModel, *,
              placements: list[GangPlacement] | None = None) -> CpsatResult:
    """The solution as placements, objective, bound and each term's value; no placements when
    there is none. ``placements``: what the model's placements were fixed to (None: read them
    from the solution). Timings other than the solve's own are left for the caller."""
    status = _STATUS.get(code, str(code))
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return CpsatResult(status, None, None, None, 0.0, solver.wall_time)
    return CpsatResult(
        status,
        bm.v.extract(bm.inst, solver) if placements is None else placements,
        solver.objective_value / SCALE,
        solver.best_objective_bound / SCALE,
        0.0,
        solver.wall_time,
        {name: solver.value(expr) / SCALE for name, expr in bm.terms},
    )


def _complete_hint(bm: BatchModel, time_limit: float) -> bool:
    """Turn the placement hint into a hint for every variable (aggregates, quota and fairness
    terms included) by solving the model with the placements fixed. A complete hint lets
    CP-SAT start from the greedy plan at once. False: the hint does not fit the model."""
    model = bm.model
    fixed = model.clone()
    _fix_to_hint(fixed, bm.v)
    params = fixed_parameters(time_limit=time_limit)
    _light_presolve(params)
    solver, code = solve(fixed, params)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
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
    bm = build(make_instance(snapshot, hint=hint, arrays=arrays))
    hint_complete = False
    if hint is not None:
        add_hint(bm, hint)
        hint_complete = complete_hints and _complete_hint(
            bm, max(0.01, (time_limit - (time.perf_counter() - t0)) / 4))
    build_seconds = time.perf_counter() - t0

    if time_limit - build_seconds < 0.005:
        # building used the budget: report no solution, the caller keeps the greedy plan
        return CpsatResult("NOT_STARTED", None, None, None, build_seconds, 0.0,
                           size={"wall_capped": 1.0}, arrays=bm.inst.arrays)
    budget = time_limit - build_seconds
    solver, code = solve(bm.model, search_parameters(
        budget=budget, deterministic_time=deterministic_time, seed=seed, workers=workers),
        log=log)
    size = {"hint_complete": float(hint_complete),
            "pods": float(len(bm.inst.pods)), "place_vars": float(len(bm.v.place)),
            "use_vars": float(len(bm.v.use)), "nodes_offered": float(len(bm.v.on_node))}
    if code != cp_model.OPTIMAL and solver.wall_time >= 0.95 * budget:
        size["wall_capped"] = 1.0
    return replace(read_back(solver, code, bm), build_seconds=build_seconds, size=size,
                   arrays=bm.inst.arrays)


def score_plan(snapshot: Snapshot, plan: Plan, *, time_limit: float = 30.0) -> CpsatResult:
    """The batch model's objective for a given plan (its placements fixed), so plans from
    different solvers or from a partitioned solve are compared on the same scale."""
    t0 = time.perf_counter()
    inst = make_instance(snapshot, hint=plan)
    inst.hint = None  # no stay term: it is relative to a hint, and plans are compared here
    bm = build(inst)
    add_hint(bm, plan)
    _fix_to_hint(bm.model, bm.v)
    build_seconds = time.perf_counter() - t0
    solver, code = solve(bm.model, fixed_parameters(time_limit=time_limit))
    return replace(read_back(solver, code, bm, placements=list(plan.admitted)),
                   build_seconds=build_seconds)
