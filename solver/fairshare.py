"""Fair share over time: each tenant's GPU use and fair share, averaged with a half-life.

Why
---
One window's fairness term (:mod:`solver.cpsat.fairness`) sees only what runs now. A tenant
whose big gangs waited an hour while small pods of others filled every hole is, in that
window, just a tenant with pending gangs; nothing says it is owed. Kueue's admission fair
sharing and KAI's time-based fair share judge a queue on its decayed past usage instead;
this module does the same for Berth's tenants.

The record
----------
:class:`UsageHistory` keeps two averages per tenant, decayed with the policy's half-life
``H`` (``solver.fairSharing.halfLifeSeconds``): the GPU milli it **held** and the GPU milli it
was **due** — a weighted max-min fair split of the cluster's GPUs over the tenants' demand
(held plus pending), the same definition the replays report as "got/fair"
(:func:`weighted_max_min`). Each window observes the snapshot it solves
(:func:`observe_snapshot`); between two observations the earlier values are taken to have
held, so each average is the exact integral of a step function under the weight
``2^(-age/H)``, normalised by the weight's own integral (a fresh record is not biased to 0).

The effect
----------
A tenant's **deficit** is ``1 - held/due`` of those averages, clamped to ``[0, 1]``; every
gang of that tenant gains ``boost x deficit`` priority points (``solver.fairSharing.boost``)
wherever Berth ranks gangs: the queue order (:func:`solver.queue.queue_order`: the greedy
passes, the search's hint, reservations' "who first", reclaim, what users are told) and each
gang's value in the CP-SAT objective (:func:`solver.cpsat.instance.priority_weight`). A
tenant that got more than its share is never pushed below its own priority; the others are
pulled up. Off (half-life 0), nothing changes.

Trust
-----
Only the snapshot feeds the record: held GPUs from running pods (their demand as Berth read
it from the pod spec at admission), pending demand from the gangs Berth holds, tenants from
namespaces. A tenant can raise its own demand by submitting more gangs, but water-filling caps
its due share at its weight's part of the cluster, and the boost at the policy's figure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace

from solver.types import MAX_QUOTA_MILLI, MILLI, Gang, Node, Snapshot

#: A tenant whose averages have both decayed below this (milli-GPU) is forgotten.
FORGET_MILLI = 1e-3


def weighted_max_min(
    capacity: float, demands: Mapping[str, float], weights: Mapping[str, float]
) -> dict[str, float]:
    """Weighted max-min fair split of ``capacity`` over ``demands`` (water-filling): no tenant
    gets more than it asks for, and what one leaves is shared among the rest by weight. This
    is the share a fair scheduler would give each tenant at one instant; a tenant asking for
    little is not counted as treated unfairly when it gets little."""
    if capacity < 0:
        raise ValueError("capacity must be >= 0")
    out = {t: 0.0 for t in demands}
    active = {t for t, d in demands.items() if d > 0}
    left = float(capacity)
    while active and left > 1e-12:
        wsum = sum(weights[t] for t in active)
        # the tenant whose demand is met first at the current water level
        level = min((demands[t] - out[t]) / weights[t] for t in active)
        level = min(level, left / wsum)
        for t in list(active):
            out[t] += level * weights[t]
            left -= level * weights[t]
            if demands[t] - out[t] <= 1e-9:
                out[t] = demands[t]
                active.discard(t)
    return out


def _max_flow(targets: Mapping[str, float], classes: Mapping[tuple[str, frozenset[str]], float],
              pools: Mapping[str, float]) -> float:
    """Most GPU milli that can go to the tenants (at most ``targets[t]`` each) through their
    demand classes (at most the class's demand, only into the pools it names; none: any
    pool) into the pools (at most each pool's capacity). Augmenting paths on a graph of a
    few dozen nodes (Edmonds-Karp)."""
    src: object = ("s",)
    sink: object = ("t",)
    cap: dict[tuple[object, object], float] = {}
    adj: dict[object, list[object]] = {}

    def edge(a: object, b: object, c: float) -> None:
        if c <= 0:
            return
        if (a, b) not in cap:
            adj.setdefault(a, []).append(b)
            adj.setdefault(b, []).append(a)
            cap.setdefault((b, a), 0.0)
        cap[(a, b)] = cap.get((a, b), 0.0) + c

    for t, c in targets.items():
        edge(src, ("tenant", t), c)
    for (t, models), c in classes.items():
        if t in targets:
            edge(("tenant", t), ("class", t, models), c)
            for m in (models or pools.keys()):
                if m in pools:
                    edge(("class", t, models), ("pool", m), math.inf)
    for m, c in pools.items():
        edge(("pool", m), sink, c)
    total = 0.0
    while True:
        parent: dict[object, object] = {src: src}
        queue: list[object] = [src]
        for u in queue:
            if u == sink:
                break
            for v in adj.get(u, ()):
                if v not in parent and cap[(u, v)] > 1e-9:
                    parent[v] = u
                    queue.append(v)
        if sink not in parent:
            return total
        push = math.inf
        v = sink
        while v != src:
            u = parent[v]
            push = min(push, cap[(u, v)])
            v = u
        v = sink
        while v != src:
            u = parent[v]
            cap[(u, v)] -= push
            cap[(v, u)] += push
            v = u
        total += push


def pooled_max_min(
    pools: Mapping[str, float],
    demands: Mapping[tuple[str, frozenset[str]], float],
    weights: Mapping[str, float],
) -> dict[str, float]:
    """Weighted max-min fair split of GPU ``pools`` (model -> capacity) when each demand may
    use only some pools: ``demands[(tenant, models)]`` may go to the pools named in
    ``models`` (empty: any). Progressive filling (the fair split with placement constraints,
    as in Choosy, EuroSys'13): all tenants' levels rise together, in proportion to their
    weights; a tenant stops where its demand is met or where no more can reach it, and the
    others go on. With every demand unconstrained it equals :func:`weighted_max_min` over the
    pools' total. A tenant asking only for a model the cluster lacks is due nothing."""
    per_tenant: dict[str, float] = {}
    for (t, _), d in demands.items():
        if d > 0:
            per_tenant[t] = per_tenant.get(t, 0.0) + d
    if all(not models for (_, models), d in demands.items() if d > 0):
        return {**dict.fromkeys((t for t, _ in demands), 0.0),
                **weighted_max_min(sum(pools.values()), per_tenant, weights)}
    out = dict.fromkeys((t for t, _ in demands), 0.0)
    active = set(per_tenant)
    fixed: dict[str, float] = {}
    total_cap = sum(pools.values())

    def feasible(level: float, extra: str | None = None, step: float = 0.0) -> bool:
        targets = dict(fixed)
        for t in active:
            targets[t] = min(per_tenant[t], weights[t] * level) + (step if t == extra else 0.0)
        want = sum(targets.values())
        return _max_flow(targets, demands, pools) >= want - 1e-9 * max(1.0, want)

    level = 0.0
    while active:
        hi = max(level, max((per_tenant[t] / weights[t] for t in active), default=0.0))
        hi = min(hi, level + total_cap / min(weights[t] for t in active))
        if feasible(hi):
            new = hi
        else:
            lo = level
            for _ in range(50):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if feasible(mid) else (lo, mid)
                if hi - lo <= 1e-9 * max(1.0, hi):
                    break
            new = lo
        level = new
        frozen = set()
        for t in active:
            target = min(per_tenant[t], weights[t] * level)
            step = max(1e-3, 1e-6 * target)
            if target >= per_tenant[t] - 1e-9 or not feasible(level, t, step):
                frozen.add(t)
        if not frozen:  # rounding left no tenant blocked: the split is as far as it goes
            frozen = set(active)
        for t in frozen:
            fixed[t] = min(per_tenant[t], weights[t] * level)
            active.discard(t)
    out.update(fixed)
    return out


def gang_models(gang: Gang) -> frozenset[str]:
    """The GPU models a gang's GPU demand may use: the union of its GPU pods' models, or
    empty (any model) when one of them names none."""
    models: set[str] = set()
    for p in gang.pods:
        if p.gpu_count <= 0:
            continue
        if not p.models:
            return frozenset()
        models |= p.models
    return frozenset(models)


def gpu_pools(nodes: Iterable[Node]) -> dict[str, float]:
    """GPU milli of the cluster by model (the pools of :func:`pooled_max_min`)."""
    pools: dict[str, float] = {}
    for n in nodes:
        for g in n.gpus:
            pools[g.model] = pools.get(g.model, 0.0) + MILLI
    return pools


class UsageHistory:
    """Decayed averages of each tenant's held GPU milli and fair share (see module doc)."""

    def __init__(self, half_life_s: float) -> None:
        if not half_life_s > 0:
            raise ValueError(f"half_life_s must be > 0, got {half_life_s}")
        self.half_life_s = float(half_life_s)
        self._sums: dict[str, tuple[float, float]] = {}
        self._mass = 0.0
        self._last_s: float | None = None
        self._last: dict[str, tuple[float, float]] = {}

    def observe(self, now_s: float, held: Mapping[str, float],
                fair: Mapping[str, float]) -> None:
        """Record the values in force from ``now_s`` on; the interval since the previous
        observation is folded in with that observation's values. A clock that goes back (a
        restarted replay, a skewed host) folds nothing in."""
        if self._last_s is not None:
            dt = max(0.0, now_s - self._last_s)
            d = 0.5 ** (dt / self.half_life_s)
            self._mass = self._mass * d + (1.0 - d)
            sums = {}
            for t in self._sums.keys() | self._last.keys():
                h, f = self._sums.get(t, (0.0, 0.0))
                vh, vf = self._last.get(t, (0.0, 0.0))
                h, f = h * d + vh * (1.0 - d), f * d + vf * (1.0 - d)
                if h > FORGET_MILLI * self._mass or f > FORGET_MILLI * self._mass:
                    sums[t] = (h, f)
            self._sums = sums
        if self._last_s is None or now_s > self._last_s:
            self._last_s = now_s
        self._last = {t: (min(float(held.get(t, 0.0)), MAX_QUOTA_MILLI),
                          min(float(fair.get(t, 0.0)), MAX_QUOTA_MILLI))
                      for t in held.keys() | fair.keys()}

    def past(self, tenant: str) -> tuple[float, float]:
        """(held, due) of ``tenant`` averaged over the past; (0, 0) before any interval."""
        if self._mass <= 0:
            return 0.0, 0.0
        h, f = self._sums.get(tenant, (0.0, 0.0))
        return h / self._mass, f / self._mass

    @property
    def tenants(self) -> set[str]:
        return set(self._sums)

    def state(self) -> dict[str, object]:
        """The record as plain JSON values (:meth:`from_state` reads it back)."""
        return {"halfLifeSeconds": self.half_life_s, "mass": self._mass,
                "lastSeconds": self._last_s,
                "sums": {t: [h, f] for t, (h, f) in sorted(self._sums.items())},
                "last": {t: [h, f] for t, (h, f) in sorted(self._last.items())}}

    @classmethod
    def from_state(cls, data: object, where: str = "usage") -> UsageHistory:
        """A record from :meth:`state`'s form; ValueError naming the field when it is not
        one (a value out of range included: nothing read here is trusted)."""
        d = state_fields(data, where, ("halfLifeSeconds", "mass", "lastSeconds", "sums", "last"))
        rec = cls(state_number(d["halfLifeSeconds"], f"{where}.halfLifeSeconds", low=1e-9))
        rec._mass = state_number(d["mass"], f"{where}.mass", high=1.0)
        last = d["lastSeconds"]
        rec._last_s = None if last is None else state_number(last, f"{where}.lastSeconds",
                                                             low=None)
        for name in ("sums", "last"):
            pairs = state_map(d[name], f"{where}.{name}")
            values: dict[str, tuple[float, float]] = {}
            for t, v in pairs.items():
                if not isinstance(v, list) or len(v) != 2:
                    raise ValueError(f"{where}.{name}.{t}: must be [held, due], got {v!r:.80}")
                # an average never exceeds the largest value ever recorded
                cap = MAX_QUOTA_MILLI if name == "last" else MAX_QUOTA_MILLI * max(rec._mass, 0.0)
                values[t] = (state_number(v[0], f"{where}.{name}.{t}[0]", high=cap),
                             state_number(v[1], f"{where}.{name}.{t}[1]", high=cap))
            if name == "sums":
                rec._sums = values
            else:
                rec._last = values
        return rec


def demand_and_share(snapshot: Snapshot) -> tuple[dict[str, float], dict[str, float]]:
    """What each tenant holds now, and its weighted max-min fair share of the cluster's GPUs
    over the tenants' demand (held plus the GPU demand of its pending gangs, which a tenant
    that may not borrow cannot have beyond its quota)."""
    held: dict[str, float] = {}
    for r in snapshot.running:
        if r.tenant is not None:
            held[r.tenant] = held.get(r.tenant, 0.0) + sum(s.milli for s in r.gpus)
    pending: dict[str, float] = {}
    for g in snapshot.gangs:
        pending[g.tenant] = pending.get(g.tenant, 0.0) + g.gpu_demand_milli
    demand: dict[str, float] = {}
    for t in held.keys() | pending.keys():
        want = held.get(t, 0.0) + pending.get(t, 0.0)
        tenant = snapshot.tenant(t)
        if tenant.quota_milli is not None and not tenant.can_borrow:
            want = min(want, max(float(tenant.quota_milli), held.get(t, 0.0)))
        demand[t] = want
    weights = {t: snapshot.tenant(t).weight for t in demand}
    fair = weighted_max_min(snapshot.gpu_capacity_milli, demand, weights)
    return held, fair


def observe_snapshot(history: UsageHistory, now_s: float, snapshot: Snapshot) -> None:
    """Record what ``snapshot`` says each tenant holds and is due, from ``now_s`` on."""
    held, fair = demand_and_share(snapshot)
    history.observe(now_s, held, fair)


def with_history(snapshot: Snapshot, history: UsageHistory) -> Snapshot:
    """``snapshot`` with each declared tenant's past held and due GPU milli from ``history``."""
    if not snapshot.tenants:
        return snapshot
    tenants = []
    for t in snapshot.tenants:
        held, fair = history.past(t.name)
        tenants.append(replace(t, past_held_milli=held, past_fair_milli=fair))
    return replace(snapshot, tenants=tuple(tenants))


def deficit(held: float, fair: float) -> float:
    """How far below its due share a tenant stayed: ``1 - held/fair`` in ``[0, 1]``; 0 without
    a due share."""
    if fair <= 0:
        return 0.0
    return min(1.0, max(0.0, 1.0 - held / fair))


def boosts(snapshot: Snapshot) -> dict[str, float]:
    """Priority points each tenant's gangs gain from its deficit (empty when fair sharing over
    time is off, or no tenant has one)."""
    fs = snapshot.policy.fair_sharing
    if not fs.enabled:
        return {}
    out = {}
    for t in snapshot.tenants:
        d = deficit(t.past_held_milli, t.past_fair_milli)
        if d > 0:
            out[t.name] = fs.boost * d
    return out


#: Most tenants a saved record may name (far above any policy's tenant list).
MAX_STATE_TENANTS = 10_000


def state_fields(data: object, where: str, keys: tuple[str, ...]) -> dict[str, object]:
    """``data`` as an object with exactly ``keys`` (the saved records' sections)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: must be an object, got {type(data).__name__}")
    missing = [k for k in keys if k not in data]
    extra = sorted(set(data) - set(keys))
    if missing or extra:
        raise ValueError(f"{where}: expected the fields {', '.join(keys)}"
                         + (f"; missing {', '.join(missing)}" if missing else "")
                         + (f"; unknown {', '.join(map(str, extra))}" if extra else ""))
    return data


def state_number(v: object, where: str, *, low: float | None = 0.0,
                 high: float | None = None) -> float:
    """A finite number within ``[low, high]`` (bools are not numbers here)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"{where}: must be a finite number, got {v!r:.80}")
    if low is not None and v < low:
        raise ValueError(f"{where}: must be at least {low}, got {v}")
    if high is not None and v > high * (1 + 1e-9) + 1e-9:
        raise ValueError(f"{where}: must be at most {high}, got {v}")
    return float(v)


def state_map(v: object, where: str) -> dict[str, object]:
    """An object keyed by tenant names, at most :data:`MAX_STATE_TENANTS` of them."""
    if not isinstance(v, dict):
        raise ValueError(f"{where}: must be an object keyed by tenant, got {type(v).__name__}")
    if len(v) > MAX_STATE_TENANTS:
        raise ValueError(f"{where}: names {len(v)} tenants, more than {MAX_STATE_TENANTS}")
    for t in v:
        if not isinstance(t, str) or not t or len(t) > 253:
            raise ValueError(f"{where}: a tenant name must be 1-253 characters, got {t!r:.80}")
    return v
