"""Tenant quotas with borrowing of idle quota, exactly the rule the checker judges by
(:func:`solver.rules.quota_problems`).

``over[t] = max(0, usage - quota)`` is what tenant t borrows, ``idle[t] = max(0, quota -
usage)`` what it lends, over tenants that have a quota (usage: milli-GPU of running pods plus
admitted gangs). When t admits a gang: ``over[t] == 0`` unless t may borrow; ``over[t] <=
borrow_limit``; and if ``over[t] > 0``, all borrowing must fit in the idle quota of all tenants
(``pool_ok``). A tenant that admits nothing is not judged, so admitting nothing always fits.
"""

from __future__ import annotations

from collections import defaultdict

from ortools.sat.python import cp_model

from solver.cpsat.instance import Instance
from solver.cpsat.variables import Term, Vars


def build(inst: Instance, model: cp_model.CpModel, v: Vars) -> list[Term]:
    snap = inst.snapshot
    tenants = [t for t in snap.tenants if t.quota_milli is not None]
    if not tenants:
        return []
    run = inst.running_by_tenant().gpu_milli
    pending: dict[str, list[int]] = defaultdict(list)
    for gi, gang in enumerate(inst.gangs):
        pending[gang.tenant].append(gi)
    # pool_ok: total borrowing fits in the idle quota (required whenever an admitting tenant
    # borrows)
    pool_ok = model.new_bool_var("quota_pool_ok")
    overs: list[cp_model.IntVar] = []
    idles: list[cp_model.IntVar] = []
    for t in tenants:
        assert t.quota_milli is not None
        q, r0 = t.quota_milli, run.get(t.name, 0)
        gis = pending.get(t.name, [])
        top = r0 + sum(inst.gangs[g].gpu_demand_milli for g in gis)
        usage = r0 + sum(inst.gangs[g].gpu_demand_milli * v.admit[g] for g in gis)
        # over[t], idle[t]: milli-GPU tenant t borrows / leaves idle after this window
        over = model.new_int_var(0, max(0, top - q), f"over[{t.name}]")
        idle = model.new_int_var(0, q, f"idle[{t.name}]")
        model.add_max_equality(over, [usage - q, 0])
        model.add_max_equality(idle, [q - usage, 0])
        overs.append(over)
        idles.append(idle)
        for g in gis:
            if not t.can_borrow:
                model.add(over == 0).only_enforce_if(v.admit[g])
                continue
            if t.borrow_limit_milli is not None:
                model.add(over <= t.borrow_limit_milli).only_enforce_if(v.admit[g])
            model.add(over == 0).only_enforce_if([v.admit[g], pool_ok.Not()])
    model.add(sum(overs) <= sum(idles)).only_enforce_if(pool_ok)
    return []
