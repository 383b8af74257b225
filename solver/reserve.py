"""Reservations and backfill: planning one step ahead in time.

A window's model decides only what fits now, so a large gang can wait for hours while small
pods keep filling every hole it needs: aging raises its value but cannot make it fit. Given
when running pods are expected to end (:attr:`solver.types.Running.remaining_s`), this module
looks ahead for the gangs that matter most:

1. **Who**: walking the queue (priority aged by waiting: :func:`solver.queue.queue_order`),
   a gang that fits in what is free (best-fit) is taken as placed there first; the first
   ``max_gangs`` that do not fit and have waited at least ``policy.reservations.after_s``
   get reservations. So a hold never takes capacity a gang ahead of it could use now.
2. **When and where**: the earliest moment, among the expected ends of running pods and no
   further than ``horizon_s`` ahead, at which the gang fits once the pods expected to end by
   then have gone (best-fit placement of the gang alone, quotas included; found by bisection,
   since capacity only frees as time passes, over at most :data:`MAX_STARTS` of the ends, or
   over all of them with ``policy.reservations.keep``). A running pod of unknown end never
   frees.
3. **What is held**: of the GPUs, CPU and memory that placement uses, the part that is free
   now, once the start is at most ``policy.reservations.hold_ahead_s`` away (before that the
   reservation is planned and shown, and what it will use stays open to every gang). In the
   window's solve it is held by a stand-in running pod of no tenant (so no quota is charged
   for it), and no other gang may take it...
4. **Backfill**: ... except gangs known to end before the reserved start
   (:attr:`solver.types.Gang.runtime_s`, an enforced bound such as a deadline), which a
   second, smaller solve places into what the first left, reserved capacity included.

Why hold only from shortly before the start: held capacity idles until the start unless a gang
with a bound backfills it, and most gangs declare none. In the timed replay of the embedded
default (bench/reservations_sim.md), with run times known only as estimates (no gang can
backfill), holding from the moment of planning cost a mean wait 1.30x best-fit's and 2.3
points of allocation for the same p99 as no reservations at all; held from 600 s before the
start, the same p99 gain as with exact deadlines (0.89x) for a mean of 1.06x. With deadlines
on every gang (the best case for backfill) it changes the medians by a few seconds.

Re-planned every window from the snapshot alone: no state is kept, so a reservation moves when
the cluster does (a pod that ends early, a more urgent gang). With ``policy.reservations.keep``
the caller marks the gangs its earlier plans reserved (:attr:`solver.types.Gang.reserved`) and
the queue keeps them ahead of later arrivals (:func:`solver.queue.queue_order`), so the walk
in step 1 reaches them first. The plan says which gangs hold
reservations (:attr:`solver.plan.Plan.reservations`) and the reserved gang's deferral names its
expected start; a gang that would fit now but for what is held says so (:data:`HELD`), rather
than that no node has room while GPUs stand free. Pure: no I/O, nothing beyond the snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from solver.baselines import ClusterArrays, GangPlacer, place
from solver.baselines.fgdcache import shape_of
from solver.checker import check
from solver.cpsat.reasons import ROOM_REASONS
from solver.names import SolverName
from solver.plan import Deferred, GangPlacement, Plan, Reservation, SolveStats
from solver.queue import queue_order
from solver.state import free_capacity
from solver.types import Gang, GpuShare, Running, Snapshot

#: The name prefix of the stand-in running pods that hold reserved capacity in a solve.
HOLD_PREFIX = "reservation/"
#: The start of the reason of a gang that would fit now but for capacity held for a
#: reservation (the controller's condition reason ``HeldForReservation``).
HELD = "held: "
#: How much of the window's time limit the backfill solve gets, when there is one.
BACKFILL_SHARE = 0.25
#: How many gangs are tried, per reservation allowed, before looking no further.
TRIES_PER_RESERVATION = 3
#: How far down the queue gangs are looked at (those ahead that fit now are placed first).
MAX_AHEAD = 64
#: How many of the running pods' expected ends are candidate starts (bisected: each trial
#: places the gang once); with more ends, a start may come up to one spacing late, and move
#: from window to window with which ends the spread takes. With ``reservations.keep`` a second
#: bisection looks among the ends between the two candidates that bracket the start, so the
#: start is exact: a kept reservation's first start is a promise (measured both ways in
#: bench/reservations_sim.md, "Exact starts").
MAX_STARTS = 32

#: What solves a snapshot within a time limit (the engine's own solve, without reservations).
SolveFn = Callable[[Snapshot, float], Plan]


@dataclass(frozen=True, slots=True)
class Held:
    """A reservation and the stand-in running pods that hold its capacity in the solve."""

    reservation: Reservation
    pods: tuple[Running, ...]


def _fits(snapshot: Snapshot, gang: Gang, running: tuple[Running, ...]) -> GangPlacement | None:
    trial = replace(snapshot, gangs=(gang,), running=running)
    plan = place(trial, SolverName.BESTFIT)
    return plan.admitted[0] if plan.admitted else None


def _earliest(snapshot: Snapshot, gang: Gang, running: tuple[Running, ...], horizon_s: float,
              *, exact: bool = False) -> tuple[float, GangPlacement] | None:
    """The earliest expected end of running pods after which ``gang`` fits, and where: among
    at most :data:`MAX_STARTS` of the ends unless ``exact``."""
    ends = sorted({r.remaining_s for r in running
                   if r.remaining_s is not None and r.remaining_s <= horizon_s})
    if not ends:
        return None

    def at(t: float) -> GangPlacement | None:
        left = tuple(r for r in running if r.remaining_s is None or r.remaining_s > t)
        return _fits(snapshot, gang, left)

    def first_fit(candidates: list[float], fits_last: GangPlacement
                  ) -> tuple[float, GangPlacement]:
        """The first of ``candidates`` at which the gang fits, given that the last does."""
        lo, hi, found = 0, len(candidates) - 1, fits_last
        while lo < hi:
            mid = (lo + hi) // 2
            got = at(candidates[mid])
            if got is None:
                lo = mid + 1
            else:
                hi, found = mid, got
        return candidates[hi], found

    grid = ends
    if len(ends) > MAX_STARTS:  # spread over the ends, the last kept
        step = len(ends) / MAX_STARTS
        grid = sorted({ends[min(len(ends) - 1, round((i + 1) * step) - 1)]
                       for i in range(MAX_STARTS)})
    last = at(grid[-1])
    if last is None:
        return None
    start, found = first_fit(grid, last)
    if grid is ends or not exact:
        return start, found
    below = max((t for t in grid if t < start), default=-1.0)
    return first_fit([t for t in ends if below < t <= start], found)


def _hold(snapshot: Snapshot, gang: Gang, placement: GangPlacement,
          running: tuple[Running, ...]) -> tuple[Running, ...]:
    """Stand-in pods holding what ``placement`` uses that is free now."""
    free = free_capacity(replace(snapshot, running=running))
    pods = {p.name: p for p in gang.pods}
    out = []
    for pp in placement.pods:
        f = free[pp.node]
        pod = pods[pp.pod]
        cpu = max(0, min(pod.cpu_milli, f.cpu_milli))
        mem = max(0, min(pod.memory_mib, f.memory_mib))
        gpus = []
        for s in pp.gpus:
            milli = min(s.milli, f.gpu_milli.get(s.index, 0))
            if milli > 0:
                gpus.append(GpuShare(s.index, milli))
                f.gpu_milli[s.index] -= milli
        f.cpu_milli -= cpu
        f.memory_mib -= mem
        if cpu or mem or gpus:
            out.append(Running(name=f"{HOLD_PREFIX}{gang.name}/{pp.pod}", node=pp.node,
                               cpu_milli=cpu, memory_mib=mem, gpus=tuple(gpus)))
    return tuple(out)


def plan_reservations(snapshot: Snapshot) -> tuple[Held, ...]:
    """The reservations this window makes (see the module's steps 1-3)."""
    rules = snapshot.policy.reservations
    if rules.max_gangs == 0 or not snapshot.gangs:
        return ()
    if not any(r.remaining_s is not None for r in snapshot.running):
        return ()  # nothing is known to end: no start can be planned
    running = snapshot.running
    made: list[Held] = []
    tries = 0
    placer = _placer(snapshot, running)
    for looked, gang in enumerate(queue_order(snapshot)):
        if (len(made) >= rules.max_gangs or tries >= rules.max_gangs * TRIES_PER_RESERVATION
                or looked >= MAX_AHEAD):
            break
        now = placer.place(gang)
        if not isinstance(now, str):  # it fits now: it goes first, and what it takes is not held
            running = (*running, *_as_running(gang, now, gang.runtime_s))
            continue
        if gang.wait_seconds < rules.after_s:
            continue
        tries += 1
        found = _earliest(snapshot, gang, running, rules.horizon_s, exact=rules.keep)
        if found is None:
            continue
        start, placement = found
        hold = _hold(snapshot, gang, placement, running) if held_now(snapshot, start) else ()
        nodes = tuple(sorted({p.node for p in placement.pods}))
        made.append(Held(Reservation(gang.name, start, nodes), hold))
        # a later reservation plans around this one as if its gang held its place for good
        running = (*running, *_as_running(gang, placement, None))
        placer = _placer(snapshot, running)
    return tuple(made)


def held_now(snapshot: Snapshot, start_in_s: float) -> bool:
    """Whether a reservation starting in ``start_in_s`` holds its capacity in this window (its
    start is at most ``policy.reservations.hold_ahead_s`` away) or is only planned."""
    return start_in_s <= snapshot.policy.reservations.hold_ahead_s


def _placer(snapshot: Snapshot, running: tuple[Running, ...]) -> GangPlacer:
    """Best-fit into what ``running`` leaves, one gang after another (quota carried over)."""
    state = ClusterArrays(replace(snapshot, running=running))
    return GangPlacer(state, SolverName.BESTFIT, np.random.default_rng(0))


def _as_running(gang: Gang, placement: GangPlacement, remaining: float | None
                ) -> tuple[Running, ...]:
    pods = {p.name: p for p in gang.pods}
    return tuple(Running(name=f"{HOLD_PREFIX}{gang.name}/{pp.pod}@planned", node=pp.node,
                         cpu_milli=pods[pp.pod].cpu_milli, memory_mib=pods[pp.pod].memory_mib,
                         gpus=pp.gpus, tenant=gang.tenant, remaining_s=remaining)
                 for pp in placement.pods)


def _as_placed(snapshot: Snapshot, placements: Sequence[GangPlacement]) -> tuple[Running, ...]:
    """The pods of ``placements`` as running pods: what they take from a later placement."""
    gangs = {g.name: g for g in snapshot.gangs}
    return tuple(
        Running(name=pp.pod, node=pp.node, cpu_milli=pod.cpu_milli,
                memory_mib=pod.memory_mib, gpus=pp.gpus, tenant=gangs[gp.gang].tenant,
                qos_class=pod.qos_class)
        for gp in placements for pp in gp.pods
        for pod in gangs[gp.gang].pods if pod.name == pp.pod)


def held_back(snapshot: Snapshot, admitted: Sequence[GangPlacement],
              deferred: Sequence[Deferred], held: Sequence[Held]) -> dict[str, str]:
    """The reasons of the ``deferred`` gangs (at most :data:`MAX_AHEAD`, in order) that wait
    for room although they would fit now beside the ``admitted`` gangs but for the capacity
    ``held`` for reservations, by gang: without it their reason would say that no node has room
    while GPUs stand free. A gang that may backfill (its own bound ends before the reserved
    start) is not one of them: something else keeps it out. Names the nodes and the reserved
    start, never the reserved gang (it may be another tenant's)."""
    holding = [h.reservation for h in held if h.pods]
    gangs = {g.name: g for g in snapshot.gangs}
    waiting = [gangs[d.gang] for d in deferred
               if d.gang in gangs and d.reason.startswith(ROOM_REASONS)][:MAX_AHEAD]
    if not holding or not waiting:
        return {}
    state = ClusterArrays(replace(snapshot, running=(*snapshot.running,
                                                     *_as_placed(snapshot, admitted))))
    free_milli = int(np.maximum(state.gfree, 0).sum())
    tried: dict[Hashable, frozenset[str] | None] = {}  # gangs alike fit alike
    out = {}
    for gang in waiting:
        if gang.gpu_demand_milli > free_milli:
            continue
        key = (gang.tenant, gang.topology, tuple(shape_of(p) for p in gang.pods))
        if key not in tried:
            state.checkpoint()
            got = GangPlacer(state, SolverName.BESTFIT, np.random.default_rng(0)).place(gang)
            state.rollback()
            tried[key] = None if isinstance(got, str) else frozenset(pp.node for pp in got.pods)
        nodes = tried[key]
        if nodes is None:
            continue
        over = [r for r in holding if nodes & set(r.nodes)]
        if not over:
            continue
        start = min(r.start_in_s for r in over)
        if gang.runtime_s is not None and gang.runtime_s <= start:
            continue
        where = ", ".join(sorted(nodes & {n for r in over for n in r.nodes}))
        bound = ("this one has no deadline of its own" if gang.runtime_s is None else
                 f"its own deadline, {gang.runtime_s:.0f} s, ends later")
        out[gang.name] = (f"{HELD}it fits now only in capacity held on {where} for a reserved "
                          f"gang expected to start in {start:.0f} s; only a gang whose own "
                          f"deadline ends before then may use it ({bound})")
    return out


def judged_backfill(snapshot: Snapshot, first: list[GangPlacement],
                    backfill: tuple[GangPlacement, ...], stats: SolveStats
                    ) -> list[GangPlacement]:
    """The first solve's gangs and, in its order, each backfilled gang the checker accepts
    beside them. Each solve was judged on its own snapshot, but the two together can break a
    rule neither saw: a lender's backfilled gang takes back idle quota that a gang of the first
    solve borrows (the pool rule of :func:`solver.rules.quota_problems`)."""
    kept = list(first)
    for gp in backfill:
        if not check(snapshot, Plan(tuple([*kept, gp]), (), stats)):
            kept.append(gp)
    return kept


def solve_with_reservations(snapshot: Snapshot, time_limit: float, solve: SolveFn) -> Plan:
    """``solve`` for the window, with the reservations it makes held and backfilled (the
    module's steps), or plain ``solve`` when it makes none."""
    # planning takes its own time beside the solve's limit (0.23 s for 1,000 nodes and 300
    # pending gangs, bench/reserve.md): taking it out of the limit would make the solve's
    # deterministic budget depend on the wall clock
    held = plan_reservations(snapshot)
    if not held:
        return solve(snapshot, time_limit)
    stand_ins = tuple(r for h in held for r in h.pods)
    # backfill is for what is held; a reservation not held yet keeps nothing from anyone
    earliest = min((h.reservation.start_in_s for h in held if h.pods), default=0.0)
    backfill = [g for g in snapshot.gangs
                if g.runtime_s is not None and g.runtime_s <= earliest] if stand_ins else []
    first_limit = time_limit * (1 - BACKFILL_SHARE) if backfill else time_limit
    first = solve(replace(snapshot, running=(*snapshot.running, *stand_ins)), first_limit)
    admitted = list(first.admitted)
    wall = first.stats.wall_seconds
    done = first.admitted_names
    later = [g for g in backfill if g.name not in done]
    if later:
        placed = _as_placed(snapshot, first.admitted)
        second = solve(replace(snapshot, gangs=tuple(later),
                               running=(*snapshot.running, *placed)),
                       time_limit * BACKFILL_SHARE)
        admitted = judged_backfill(snapshot, admitted, second.admitted, first.stats)
        wall += second.stats.wall_seconds
        done = frozenset(g.gang for g in admitted)
    reserved = {h.reservation.gang: h.reservation for h in held}
    waiting = [d for d in first.deferred if d.gang not in done and d.gang not in reserved]
    by_hold = held_back(snapshot, admitted, waiting, held)
    deferred = []
    for d in first.deferred:
        if d.gang in done:
            continue
        if d.gang in by_hold:
            d = Deferred(d.gang, by_hold[d.gang])
        r = reserved.get(d.gang)
        if r is not None:
            lead = snapshot.policy.reservations.hold_ahead_s
            until = ("" if held_now(snapshot, r.start_in_s) else
                     f"; held from {lead:.0f} s before, open to other gangs until then")
            d = Deferred(d.gang, f"reserved: expected to start in {r.start_in_s:.0f} s on "
                                 f"{', '.join(r.nodes)}, when running pods there end{until}")
        deferred.append(d)
    detail = dict(first.stats.detail)
    detail["reservations"] = float(len(held))
    detail["backfilled"] = float(len(admitted) - len(first.admitted))
    stats = SolveStats(solver=first.stats.solver, status=first.stats.status, wall_seconds=wall,
                       objective=first.stats.objective, bound=first.stats.bound,
                       fallback=first.stats.fallback, detail=detail)
    return Plan(tuple(admitted), tuple(deferred), stats,
                reservations=tuple(h.reservation for h in held))
