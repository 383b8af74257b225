"""The policy as the solver sees it: :class:`solver.types.SolverPolicy` and the tenants.

The solver never reads YAML; the controller converts the loaded policy once per version with
:func:`to_solver` and hands the result to every snapshot.
"""

from __future__ import annotations

from admission import constants as c
from admission.policy.model import Policy, QoSClass
from admission.policy.model import Tenant as PolicyTenant
from solver.types import (
    FairSharing,
    LearnedRuntimes,
    QoSProfile,
    Queueing,
    Reclaim,
    Reservations,
    SolverPolicy,
    TargetWorkload,
    Tenant,
    Weights,
)


def _milli(gpus: float | None) -> int | None:
    return None if gpus is None else round(gpus * 1000)


def solver_tenant(t: PolicyTenant) -> Tenant:
    return Tenant(
        name=t.name,
        quota_milli=_milli(t.quota.gpus),
        weight=t.weight,
        can_borrow=t.borrowing.enabled,
        borrow_limit_milli=_milli(t.borrowing.limit_gpus) if t.borrowing.enabled else None,
    )


def solver_qos(q: QoSClass) -> QoSProfile:
    return QoSProfile(
        name=q.name,
        sm=q.sm,
        membw=q.membw,
        memory_mib=q.memory_mib,
        latency_sensitive=q.latency_sensitive,
        solo_latency_ms=q.solo_latency_ms,
        slo_ms=q.slo_ms,
        exclusive=q.exclusive,
        no_share_with=frozenset(q.no_share_with),
    )


def _names(model: str) -> tuple[str, ...]:
    return model, *(model + suffix for suffix in c.DRA_MODEL_SUFFIXES)


def to_solver(policy: Policy) -> tuple[SolverPolicy, tuple[Tenant, ...]]:
    """Map the policy to the solver's knobs and tenants."""
    w = policy.solver.weights
    r = policy.solver.reservations
    rc = policy.solver.reclaim
    q = policy.solver.queueing
    solver_policy = SolverPolicy(
        weights=Weights(
            demand=w.demand,
            aging_per_hour=w.aging_per_hour,
            fragmentation=w.fragmentation,
            topology=w.topology,
            fairness=w.fairness,
            energy=w.energy,
            interference=w.interference,
            stay=w.stay,
        ),
        topology_levels=tuple(level.name for level in policy.topology.levels),
        reservations=Reservations(max_gangs=r.max_gangs, after_s=r.after_seconds,
                                  horizon_s=r.horizon_seconds,
                                  hold_ahead_s=r.hold_ahead_seconds, keep=r.keep),
        reclaim=Reclaim(enabled=rc.enabled, min_run_s=rc.min_runtime_seconds,
                        max_gangs=rc.max_gangs_per_window,
                        preempt_within_tenant=rc.preempt_within_tenant),
        fair_sharing=FairSharing(half_life_s=policy.solver.fair_sharing.half_life_seconds,
                                 boost=policy.solver.fair_sharing.boost),
        target_workload=TargetWorkload(
            half_life_s=policy.solver.target_workload.half_life_seconds),
        learned_runtimes=LearnedRuntimes(
            enabled=policy.solver.learned_runtimes.enabled,
            min_samples=policy.solver.learned_runtimes.min_samples,
            samples=policy.solver.learned_runtimes.samples),
        queueing=Queueing(short_run_bonus=q.short_run_bonus, short_run_s=q.short_run_seconds,
                          keep_order_after_s=q.keep_order_after_seconds),
        qos_classes=tuple(solver_qos(q) for q in policy.qos_classes),
        # the same GPU published through DRA is <model>@dra to the solver (docs/dra.md)
        idle_watts={name: m.idle_watts for m in policy.gpu_models for name in _names(m.name)},
        active_watts={name: m.active_watts for m in policy.gpu_models
                      for name in _names(m.name)},
    )
    return solver_policy, tuple(solver_tenant(t) for t in policy.tenants)
