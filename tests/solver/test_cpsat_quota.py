"""Tenant quotas with borrowing of idle quota, as the checker defines them."""

from __future__ import annotations

from test_cpsat_cases import admitted, as_plan, gang, node, pod, running, snap, solve

from solver.cpsat.reasons import deferrals
from solver.types import Tenant


def _gangs(tenant: str, n: int) -> list:  # type: ignore[type-arg]
    return [gang(f"{tenant}{i}", pod(), tenant=tenant) for i in range(n)]


def test_no_borrowing_stays_within_quota() -> None:
    s = snap([node("n", gpus=4)], _gangs("a", 3),
             tenants=(Tenant("a", 1000, can_borrow=False), Tenant("b", 3000)))
    res = solve(s)
    assert len(admitted(res)) == 1
    reasons = {d.reason for d in deferrals(s, as_plan(res))}
    assert reasons == {"quota: tenant a would use 2000 of its 1000 milli-GPU and may not borrow"}


def test_borrowing_uses_idle_quota_of_others() -> None:
    s = snap([node("n", gpus=4)], _gangs("a", 3),
             tenants=(Tenant("a", 1000), Tenant("b", 2000)))
    assert len(admitted(solve(s))) == 3


def test_borrowing_is_limited_by_what_others_leave_idle() -> None:
    s = snap([node("n", gpus=4)], _gangs("a", 3),
             tenants=(Tenant("a", 1000), Tenant("b", 2000)),
             run=(running("rb", "n", (0, 1000), tenant="b"),))
    assert len(admitted(solve(s))) == 2


def test_borrow_limit_caps_borrowing() -> None:
    s = snap([node("n", gpus=4)], _gangs("a", 3),
             tenants=(Tenant("a", 1000, borrow_limit_milli=1000), Tenant("b", 3000)))
    assert len(admitted(solve(s))) == 2


def test_a_tenant_already_over_quota_does_not_block_others() -> None:
    s = snap([node("n", gpus=4)], _gangs("b", 1),
             tenants=(Tenant("a", 0, can_borrow=False), Tenant("b", 1000)),
             run=(running("ra", "n", (0, 1000), tenant="a"),))
    assert admitted(solve(s)) == {"b0"}
