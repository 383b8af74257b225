"""The shared rules: the checker judges by exactly what the solvers build with."""

from __future__ import annotations

from test_checker import TWO_GPUS, gang, node, plan, pod, quota_snapshot

from solver.checker import Kind, quota_violations
from solver.rules import plan_quota_problems, quota_usage_milli
from solver.types import GpuShare, Running, Snapshot, Tenant

QUOTA_CASES = (
    quota_snapshot(Tenant("a", quota_milli=3000), running=1),
    quota_snapshot(Tenant("a", quota_milli=2000, can_borrow=False),
                   Tenant("b", quota_milli=8000), running=1),
    quota_snapshot(Tenant("a", quota_milli=1000, borrow_limit_milli=1000),
                   Tenant("b", quota_milli=8000), running=1),
    quota_snapshot(Tenant("a", quota_milli=2000), Tenant("b", quota_milli=500), running=1),
)


def test_quota_violations_are_the_rules_quota_problems() -> None:
    found = []
    for snap in QUOTA_CASES:
        problems = plan_quota_problems(snap, plan(TWO_GPUS))
        violations = quota_violations(snap, plan(TWO_GPUS))
        assert [v.message for v in violations] == problems
        assert all(v.kind == Kind.QUOTA for v in violations)
        found.append(len(problems))
    assert found == [0, 1, 1, 1]


def test_plan_quota_problems_judges_only_tenants_the_plan_admits_for() -> None:
    over = Snapshot(
        nodes=(node("n1", gpus=8),),
        gangs=(gang("g", pod(gpu_count=2), tenant="b"),),
        tenants=(Tenant("a", quota_milli=0, can_borrow=False), Tenant("b", quota_milli=4000)),
        running=(Running("r", "n1", gpus=(GpuShare(0, 1000),), tenant="a"),),
    )
    admit_b = plan(TWO_GPUS)
    assert quota_usage_milli(over, admit_b) == {"a": 1000, "b": 2000}
    assert plan_quota_problems(over, admit_b) == []
    assert plan_quota_problems(Snapshot(nodes=over.nodes, gangs=over.gangs), admit_b) == []
