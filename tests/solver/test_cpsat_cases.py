"""Builders for the CP-SAT tests: small clusters and windows written in a line or two.

Imported by the test_cpsat_* modules (pytest puts this folder on sys.path).
"""

from __future__ import annotations

from solver.checker import check
from solver.cpsat.model import CpsatResult, solve_window
from solver.plan import Plan, SolveStats
from solver.types import (
    GPU,
    Gang,
    GpuShare,
    Node,
    PodRequest,
    Running,
    Snapshot,
    SolverPolicy,
    Tenant,
    Weights,
)

STATS = SolveStats(solver="test", status="TEST", wall_seconds=0.0)


def node(name: str, gpus: int = 4, model: str = "A100", rack: str = "r1", *,
         cpu: int = 64000, mem: int = 256000, nvlink: int = 2, **kw: object) -> Node:
    return Node(
        name=name, cpu_milli=cpu, memory_mib=mem,
        gpus=tuple(GPU(i, model, 40000, f"{name}/nv{i // nvlink}" if nvlink else None)
                   for i in range(gpus)),
        topology={"rack": rack}, **kw,  # type: ignore[arg-type]
    )


def pod(name: str = "p", gpus: int = 1, milli: int = 1000, **kw: object) -> PodRequest:
    base: dict[str, object] = {"cpu_milli": 1000, "memory_mib": 1000, "gpu_count": gpus,
                               "gpu_milli": milli if gpus else 0}
    base.update(kw)
    return PodRequest(name=name, **base)  # type: ignore[arg-type]


def gang(name: str, *pods: PodRequest, tenant: str = "t1", **kw: object) -> Gang:
    return Gang(name=name, tenant=tenant, pods=pods or (pod(),), **kw)  # type: ignore[arg-type]


def running(name: str, node_name: str, *shares: tuple[int, int], tenant: str | None = None,
            qos: str | None = None, cpu: int = 0) -> Running:
    return Running(name, node_name, cpu, 0, tuple(GpuShare(i, m) for i, m in shares),
                   tenant=tenant, qos_class=qos)


def snap(nodes: list[Node], gangs: list[Gang], *, run: tuple[Running, ...] = (),
         tenants: tuple[Tenant, ...] = (), weights: Weights | None = None,
         policy: SolverPolicy | None = None) -> Snapshot:
    pol = policy or SolverPolicy(weights=weights or Weights())
    return Snapshot(tuple(nodes), tuple(gangs), run, tenants, pol)


def solve(s: Snapshot, hint: Plan | None = None, time_limit: float = 5.0) -> CpsatResult:
    """Solve the model; the plan it returns must pass the checker."""
    res = solve_window(s, hint=hint, time_limit=time_limit, seed=0, workers=1)
    assert res.admitted is not None, f"no solution: {res.status}"
    violations = check(s, as_plan(res))
    assert not violations, [str(v) for v in violations]
    return res


def as_plan(res: CpsatResult) -> Plan:
    assert res.admitted is not None
    return Plan(tuple(res.admitted), (), STATS)


def admitted(res: CpsatResult) -> set[str]:
    assert res.admitted is not None
    return {g.gang for g in res.admitted}


def nodes_of(res: CpsatResult, gang_name: str) -> list[str]:
    assert res.admitted is not None
    gp = next(g for g in res.admitted if g.gang == gang_name)
    return [p.node for p in gp.pods]
