"""Where a pending gang stands: its place in the queue and what its tenant's quota says.

Both are read by the solvers and by the controller's messages to users (``waiting: quota: ...;
3 gangs ahead``), so each has one definition here: the order the greedy pass serves gangs in
is the order a user is told about, and the quota reason a solver defers a gang with is the one
the gang's pods show.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Iterable, Mapping

from solver.fairshare import boosts
from solver.rules import quota_problems
from solver.types import Gang, Queueing, Snapshot


def short_run_bonus(gang: Gang, queueing: Queueing) -> float:
    """The priority points ``gang`` gains for a short enforced run-time limit
    (:attr:`solver.types.Gang.runtime_s`; :class:`solver.types.Queueing`): the full bonus at
    0 s, none at ``short_run_s`` or longer, none without a limit. Only an enforced limit
    counts: a gang that asks to go first for a short run is stopped when the run is over, so
    a tenant gains nothing by understating it."""
    if gang.runtime_s is None or queueing.short_run_bonus <= 0:
        return 0.0
    return queueing.short_run_bonus * max(0.0, 1.0 - gang.runtime_s / queueing.short_run_s)


def gang_boost(gang: Gang, boost: Mapping[str, float], queueing: Queueing) -> float:
    """What ``gang``'s effective priority adds to its priority and aging: its tenant's
    fair-share boost (``boost``, :func:`solver.fairshare.boosts`) and its short-run bonus."""
    return boost.get(gang.tenant, 0.0) + short_run_bonus(gang, queueing)


def queue_order(snapshot: Snapshot) -> list[Gang]:
    """The snapshot's gangs by effective priority (priority plus ``aging_per_hour`` per hour
    waited, plus the tenant's fair-share boost: :func:`solver.fairshare.boosts`, plus the
    short-run bonus: :func:`short_run_bonus`), highest first; equal ones keep their snapshot
    order. With ``policy.reservations.keep``, a gang holding a reservation from an earlier
    window (:attr:`solver.types.Gang.reserved`) ranks at least as high as every gang without
    one of its priority or lower."""
    aging = snapshot.policy.weights.aging_per_hour
    boost = boosts(snapshot)
    queueing = snapshot.policy.queueing
    value = {g.name: g.priority + aging * g.wait_seconds / 3600.0
             + gang_boost(g, boost, queueing) for g in snapshot.gangs}
    if snapshot.policy.reservations.keep and any(g.reserved for g in snapshot.gangs):
        kept = _kept_reservations(snapshot.gangs, value)
        return sorted(snapshot.gangs,
                      key=lambda g: (-kept[g.name], not g.reserved, -value[g.name]))
    return sorted(snapshot.gangs, key=lambda g: -value[g.name])


def _kept_reservations(gangs: Iterable[Gang], value: dict[str, float]) -> dict[str, float]:
    """``value`` with each reserved gang's raised to the highest of the unreserved gangs of its
    priority or lower: a reservation, once given, is not taken back by gangs that arrive
    later, wait longer or earn a larger bonus, only by a gang of a higher ``priority`` (a
    PriorityClass the admin ranks above it) that also ranks higher."""
    others = sorted((g.priority, value[g.name]) for g in gangs if not g.reserved)
    best, top = [], float("-inf")  # the highest value among the others up to each priority
    for _, v in others:
        top = max(top, v)
        best.append(top)
    keys = [p for p, _ in others]
    out = dict(value)
    for g in gangs:
        if g.reserved:
            i = bisect_right(keys, g.priority)
            if i:
                out[g.name] = max(value[g.name], best[i - 1])
    return out


def kept_in_order(snapshot: Snapshot, admitted: Iterable[str]) -> frozenset[str]:
    """Of the gangs ``admitted`` (by best-fit in queue order, or by the plan the model starts
    from), those that have waited at least ``policy.queueing.keep_order_after_s``, and with
    ``policy.reservations.keep`` those holding a reservation: the window starts them whatever
    else it finds (:class:`solver.types.Queueing`). Empty when the policy turns both off."""
    after = snapshot.policy.queueing.keep_order_after_s
    keep = snapshot.policy.reservations.keep
    if after is None and not keep:
        return frozenset()
    kept = {g.name for g in snapshot.gangs
            if (after is not None and g.wait_seconds >= after) or (keep and g.reserved)}
    return frozenset(name for name in admitted if name in kept)


def tenant_turns(snapshot: Snapshot) -> list[Gang]:
    """The queue with the tenants taking turns: what a bounded window (a backlog larger than
    one solve holds, :func:`solver.cpsat.solve.bounded`) takes its head and tail from.

    :func:`queue_order` breaks near-ties by wait, so in a burst it is first come, first
    served across tenants: one tenant's 10,000 pods created a second earlier would fill every
    bounded window ahead of another tenant's one gang. Here a higher priority (with the
    tenant's fair-share boost; aging left out) still goes first, and within a priority the
    tenants take weighted turns (weighted fair queueing: each gang's key is its tenant's GPU
    demand queued up to and including it, over the tenant's weight); each tenant's own gangs
    keep their :func:`queue_order`. With ``policy.reservations.keep``, gangs holding a
    reservation go first within their priority, so a bounded window never leaves them out."""
    boost = boosts(snapshot)
    weight = {t.name: t.weight for t in snapshot.tenants}
    keep = snapshot.policy.reservations.keep
    queued: dict[str, float] = {}
    keyed = []
    for pos, g in enumerate(queue_order(snapshot)):
        # a gang asking no GPU still takes a turn: count it as one milli-GPU
        queued[g.tenant] = queued.get(g.tenant, 0.0) + max(g.gpu_demand_milli, 1)
        turn = queued[g.tenant] / max(weight.get(g.tenant, 1.0), 1e-9)
        held = not (keep and g.reserved)  # False sorts first
        keyed.append((-(g.priority + boost.get(g.tenant, 0.0)), held, turn, pos, g))
    return [k[-1] for k in sorted(keyed, key=lambda k: k[:4])]


def quota_reason(snapshot: Snapshot, gang: Gang, used: Mapping[str, int],
                 admitting: Collection[str] = ()) -> str | None:
    """Why the tenants' quotas keep ``gang`` out, or None when they let it in.

    ``used``: GPU milli each tenant uses without the gang (running pods and the gangs admitted
    so far); ``admitting``: the tenants those admitted gangs belong to. The judgement is the
    checker's rule (:func:`solver.rules.quota_problems`) on the usage with the gang added."""
    if not snapshot.tenants:
        return None
    tenant = snapshot.tenant(gang.tenant)
    after = dict(used)
    after[tenant.name] = after.get(tenant.name, 0) + gang.gpu_demand_milli
    problems = quota_problems(snapshot.tenants, after, {*admitting, tenant.name})
    if not problems:
        return None
    quota, total = tenant.quota_milli, after[tenant.name]
    if quota is not None and total > quota:
        over = total - quota
        if not tenant.can_borrow:
            return (f"quota: tenant {tenant.name} would use {total} of its {quota} "
                    "milli-GPU and may not borrow")
        if tenant.borrow_limit_milli is not None and over > tenant.borrow_limit_milli:
            return (f"quota: tenant {tenant.name} would borrow {over} milli-GPU, above its "
                    f"limit of {tenant.borrow_limit_milli}")
        quotas = [(t.name, t.quota_milli) for t in snapshot.tenants if t.quota_milli is not None]
        borrowed = sum(max(0, after.get(n, 0) - q) for n, q in quotas)
        idle = sum(max(0, q - after.get(n, 0)) for n, q in quotas)
        if borrowed > idle:
            left = max(0, idle - (borrowed - over))
            return (f"quota: tenant {tenant.name} would use {total} of its {quota} "
                    f"milli-GPU and only {left} idle quota is left to borrow")
    return f"quota: {problems[0]}"
