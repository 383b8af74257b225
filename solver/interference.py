"""Predicted slowdown of pods that share one GPU: the interference model behind co-location.

Why a model at all: two pods on one GPU slow each other, and a latency-sensitive inference pod
can miss its SLO next to a busy neighbour. The solver must decide *before* placing, so it needs
a prediction from what it knows in advance: each QoS class's solo profile
(:class:`solver.types.QoSProfile`).

The model
---------
A profile's ``sm`` and ``membw`` are the fractions of time the GPU's SMs and its memory were
busy while the class ran alone. They are exactly what NVML reports as ``utilization.gpu`` and
``utilization.memory`` (the share of the sample period during which a kernel ran, and during
which device memory was read or written), so the node agent can measure them.

For a pod ``p`` co-located with ``others`` on one GPU, per resource ``r`` in {SM, memory
bandwidth}, let ``own = p.r``, ``rest = sum(o.r for o in others)`` and ``total = own + rest``.

1. Saturation (proportional share). When the busy times add up to more than the whole period
   (``total > 1``), the GPU time-slices contexts, or MPS splits SMs and bandwidth among them, in
   proportion to demand: each party gets ``1/total`` of what it wanted, so its ``r``-bound work
   stretches by ``max(1, total)``.
2. Sub-saturation contention. Even below 100 %, co-runners share the L2 cache, DRAM queues and
   the block scheduler, so they slow each other before either saturates the GPU (the effect
   that interference-aware sharing systems such as Gpulet, ATC'22, and Orion, EuroSys'24, are
   built around). Modelled as ``contention * min(rest, 1)``: linear in how busy the neighbours
   keep ``r``, capped where saturation takes over. The default coefficient
   (:data:`DEFAULT_CONTENTION`, 15 % at a fully busy neighbour) is a starting point, not a
   measurement; calibrate it per GPU model where co-location measurements exist.
   Measured on an H200 (bench/gpu_colocation.md): under time-slicing two busy neighbours each
   run about 2x slower whatever unit they keep busy, more than this form predicts (RMS error
   0.48; no coefficient brings it under 0.40), and under MPS a latency-sensitive pod beside any
   saturating neighbour runs 5-15x slower. The form is unchanged until it is recalibrated on
   more GPU models; the ban of ``training`` next to ``latency-inference`` holds in both modes.
3. A pod is sensitive to each resource in proportion to its own use of it:
   ``w_r = p.r / (p.sm + p.membw)`` (a pod that uses neither is not slowed).

    slowdown(p, others) = sum_r w_r * (max(1, total_r) + contention * min(rest_r, 1))

It is >= 1, equals 1 alone, grows monotonically with every neighbour's demand, and costs a few
float operations, so the CP-SAT model can tabulate it for every pair or small set of classes.
The predicted latency of a latency-sensitive class is its solo latency times its slowdown.

Refinement from measurements
----------------------------
Shipped defaults (:data:`DEFAULT_PROFILES`) are starting points; admins override them by class
name in the policy, and :func:`refine_profile` folds in what the agent observes: an
exponentially weighted moving average of SM and memory-bandwidth utilisation per class, from
samples in which the class ran alone on a GPU (or from per-process utilisation where NVML
supports it), so the readings are solo readings and not already inflated by interference.
Memory footprint follows the larger of its average and the latest sample, because
under-estimating it leads to out-of-memory failures rather than mere slowdown. Latency and SLO
come from the workload's own metrics, never from NVML, and are left as declared.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations_with_replacement

from solver.types import ProblemError, QoSProfile

#: Default extra slowdown per unit of neighbours' busy time below saturation (see module doc).
DEFAULT_CONTENTION = 0.15

#: Profile assumed for a pod that declares no QoS class or an unknown one: a busy, ordinary
#: neighbour, so that the unknown is neither free nor forbidden.
UNCLASSIFIED = QoSProfile(name="unclassified", sm=0.5, membw=0.4)

#: QoS classes that ship with Berth. Figures are starting points for each kind of work on a
#: data-centre GPU, not measurements: the policy overrides any of them by name, and
#: :func:`refine_profiles` moves them toward what the agent observes.
DEFAULT_PROFILES: tuple[QoSProfile, ...] = (
    # Large kernels back to back: near-saturates SMs, heavy on memory for optimiser steps.
    QoSProfile(name="training", sm=0.85, membw=0.6, memory_mib=40_000),
    # Throughput inference with large batches: busy but with gaps between batches.
    QoSProfile(name="batch-inference", sm=0.6, membw=0.45, memory_mib=16_000),
    # Online serving with small batches: light load, strict tail latency. Never next to
    # training, whose long kernels cannot be preempted under time-slicing and wreck the tail.
    QoSProfile(
        name="latency-inference",
        sm=0.3,
        membw=0.25,
        memory_mib=8_000,
        latency_sensitive=True,
        solo_latency_ms=20.0,
        slo_ms=40.0,
        no_share_with=frozenset({"training"}),
    ),
    # Notebooks and interactive sessions: mostly idle, bursty.
    QoSProfile(name="interactive", sm=0.1, membw=0.1, memory_mib=8_000),
    # Preemptible scavenger work: whatever is left.
    QoSProfile(name="best-effort", sm=0.4, membw=0.3, memory_mib=8_000),
)


def _weights(profile: QoSProfile) -> tuple[float, float]:
    used = profile.sm + profile.membw
    if used <= 0:
        return 0.0, 0.0
    return profile.sm / used, profile.membw / used


def slowdown(
    profile: QoSProfile,
    others: Sequence[QoSProfile],
    *,
    contention: float = DEFAULT_CONTENTION,
) -> float:
    """Predicted factor (>= 1.0) by which ``profile`` runs slower on one GPU with ``others``."""
    if not others:
        return 1.0
    w_sm, w_bw = _weights(profile)
    if w_sm == 0.0 and w_bw == 0.0:
        return 1.0
    rest_sm = rest_bw = 0.0
    for o in others:  # a plain loop: this runs for every pair the CP-SAT model considers
        rest_sm += o.sm
        rest_bw += o.membw
    stretch_sm = max(1.0, profile.sm + rest_sm) + contention * min(rest_sm, 1.0)
    stretch_bw = max(1.0, profile.membw + rest_bw) + contention * min(rest_bw, 1.0)
    return max(1.0, w_sm * stretch_sm + w_bw * stretch_bw)


def predicted_latency_ms(
    profile: QoSProfile,
    others: Sequence[QoSProfile],
    *,
    contention: float = DEFAULT_CONTENTION,
) -> float | None:
    """Solo latency times slowdown for a latency-sensitive class; None for any other class."""
    if not profile.latency_sensitive or profile.solo_latency_ms is None:
        return None
    return profile.solo_latency_ms * slowdown(profile, others, contention=contention)


def within_slo(
    profile: QoSProfile,
    others: Sequence[QoSProfile],
    *,
    contention: float = DEFAULT_CONTENTION,
) -> bool:
    """True when ``profile`` keeps its SLO next to ``others`` (always, if it has none)."""
    latency = predicted_latency_ms(profile, others, contention=contention)
    if latency is None or profile.slo_ms is None:
        return True
    return latency <= profile.slo_ms


def may_share(a: QoSProfile, b: QoSProfile) -> bool:
    """True unless either class is exclusive or bans the other (symmetric)."""
    if a.exclusive or b.exclusive:
        return False
    return b.name not in a.no_share_with and a.name not in b.no_share_with


def group_allowed(
    group: Sequence[QoSProfile],
    *,
    contention: float = DEFAULT_CONTENTION,
) -> bool:
    """True when all of ``group`` may run on one GPU: no ban between any two members and every
    latency-sensitive member within its SLO. A group of one is always allowed."""
    for i, a in enumerate(group):
        for b in group[i + 1 :]:
            if not may_share(a, b):
                return False
    return all(
        within_slo(p, [*group[:i], *group[i + 1 :]], contention=contention)
        for i, p in enumerate(group)
    )


def group_excess_slowdown(
    group: Sequence[QoSProfile],
    *,
    contention: float = DEFAULT_CONTENTION,
) -> float:
    """Sum over the members of (slowdown - 1): the cost of a co-location that the solver's
    objective weighs (0 for a group of one)."""
    return sum(
        slowdown(p, [*group[:i], *group[i + 1 :]], contention=contention) - 1.0
        for i, p in enumerate(group)
    )


def resolve_profiles(overrides: Iterable[QoSProfile] = ()) -> dict[str, QoSProfile]:
    """The classes in force: :data:`DEFAULT_PROFILES` with the policy's ``overrides`` replacing
    or adding classes by name."""
    profiles = {p.name: p for p in DEFAULT_PROFILES}
    for p in overrides:
        profiles[p.name] = p
    return profiles


def profile_for(name: str | None, profiles: Mapping[str, QoSProfile]) -> QoSProfile:
    """The profile of class ``name``; :data:`UNCLASSIFIED` for None or an unknown class."""
    if name is None:
        return UNCLASSIFIED
    return profiles.get(name, UNCLASSIFIED)


def pair_table(
    profiles: Iterable[QoSProfile],
    *,
    contention: float = DEFAULT_CONTENTION,
) -> dict[tuple[str, str], float]:
    """``(a, b) -> slowdown of a next to one b`` for every ordered pair of classes (including a
    class with itself), for models that precompute pairwise costs."""
    ps = list(profiles)
    table: dict[tuple[str, str], float] = {}
    for a, b in combinations_with_replacement(ps, 2):
        table[a.name, b.name] = slowdown(a, [b], contention=contention)
        table[b.name, a.name] = slowdown(b, [a], contention=contention)
    return table


# --------------------------------------------------------------------------------------------
# Refinement from the agent's readings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UtilisationSample:
    """One solo observation of a class: SM and memory-bandwidth busy fractions (0..1) and the
    GPU memory it held (MiB; None when not measured, which leaves the footprint as it was)."""

    qos_class: str
    sm: float
    membw: float
    memory_mib: int | None = None

    def __post_init__(self) -> None:
        p = f"samples[{self.qos_class}]"
        if not 0 <= self.sm <= 1:
            raise ProblemError(f"{p}.sm", f"must be in [0, 1], got {self.sm}")
        if not 0 <= self.membw <= 1:
            raise ProblemError(f"{p}.membw", f"must be in [0, 1], got {self.membw}")
        if self.memory_mib is not None and self.memory_mib < 0:
            raise ProblemError(f"{p}.memory_mib", f"must be >= 0, got {self.memory_mib}")


def refine_profile(
    profile: QoSProfile, sample: UtilisationSample, *, alpha: float = 0.1
) -> QoSProfile:
    """``profile`` moved toward one solo ``sample`` by an EWMA step of weight ``alpha``."""
    if not 0 < alpha <= 1:
        raise ProblemError("refine.alpha", f"must be in (0, 1], got {alpha}")
    if sample.qos_class != profile.name:
        raise ProblemError(
            "refine.sample.qos_class",
            f"sample of {sample.qos_class!r} cannot refine profile {profile.name!r}",
        )
    sm = (1 - alpha) * profile.sm + alpha * sample.sm
    membw = (1 - alpha) * profile.membw + alpha * sample.membw
    memory = profile.memory_mib
    if sample.memory_mib is not None:
        avg_mem = (1 - alpha) * profile.memory_mib + alpha * sample.memory_mib
        # Floor, so integer steps do not stall above the observed footprint.
        memory = max(math.floor(avg_mem), sample.memory_mib)
    return replace(
        profile,
        sm=min(1.0, max(0.0, sm)),
        membw=min(1.0, max(0.0, membw)),
        memory_mib=memory,
    )


def refine_profiles(
    profiles: Mapping[str, QoSProfile],
    samples: Iterable[UtilisationSample],
    *,
    alpha: float = 0.1,
) -> dict[str, QoSProfile]:
    """Fold ``samples`` in order into ``profiles``; samples of unknown classes are ignored
    (a class must be declared before measurements can shape it)."""
    out = dict(profiles)
    for s in samples:
        current = out.get(s.qos_class)
        if current is not None:
            out[s.qos_class] = refine_profile(current, s, alpha=alpha)
    return out
