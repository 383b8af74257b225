"""What a timed replay consumes: a cluster, tenants, policy and gangs with arrival times.

A :class:`Scenario` is built either by Berth's own generator (:mod:`solver.simulate.generate`)
or from a trace with creation and deletion times (:func:`scenario_from_trace`, fed by the CSV
reader in ``admission/``). It validates itself, so the simulator never meets an arrival it cannot
account for.

Time semantics: a gang arrives at ``arrival_s`` and, once placed, runs for ``duration_s``. For a
trace, ``duration_s = deletion_time - creation_time``: a pod that waits runs for as long as it
ran in the original cluster rather than being cut short at its recorded deletion time, so that
queueing delays work out as lost time, not as lost work.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from solver.types import (
    MILLI,
    Gang,
    Node,
    PodRequest,
    ProblemError,
    SolverPolicy,
    Tenant,
)


@dataclass(frozen=True, slots=True)
class TimedGang:
    """A gang that arrives at ``arrival_s`` (seconds) and runs ``duration_s`` once placed."""

    gang: Gang
    arrival_s: float
    duration_s: float

    def __post_init__(self) -> None:
        p = f"arrivals[{self.gang.name}]"
        if self.arrival_s < 0:
            raise ProblemError(f"{p}.arrival_s", f"must be >= 0, got {self.arrival_s}")
        if self.duration_s <= 0:
            raise ProblemError(f"{p}.duration_s", f"must be > 0, got {self.duration_s}")


@dataclass(frozen=True, slots=True)
class Scenario:
    """A cluster, its tenants and policy, and the gangs that arrive over time (in order)."""

    nodes: tuple[Node, ...]
    tenants: tuple[Tenant, ...]
    arrivals: tuple[TimedGang, ...]
    policy: SolverPolicy = field(default_factory=SolverPolicy)

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ProblemError("scenario.nodes", "a scenario needs at least one node")
        if not self.tenants:
            raise ProblemError("scenario.tenants", "a scenario needs at least one tenant")
        tenant_names = {t.name for t in self.tenants}
        seen: set[str] = set()
        last = 0.0
        for a in self.arrivals:
            name = a.gang.name
            if name in seen:
                raise ProblemError(f"arrivals[{name}]", "gang names must be unique")
            seen.add(name)
            if a.gang.tenant not in tenant_names:
                raise ProblemError(
                    f"arrivals[{name}].tenant", f"unknown tenant {a.gang.tenant!r}"
                )
            if a.arrival_s < last:
                raise ProblemError(f"arrivals[{name}].arrival_s", "arrivals must be in time order")
            last = a.arrival_s

    @property
    def gpu_capacity_milli(self) -> int:
        return sum(len(n.gpus) for n in self.nodes) * MILLI


# --------------------------------------------------------------------------------------------
# Traces with creation and deletion times (the Alibaba openb pod lists)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TracePod:
    """One row of a pod list with times, already parsed (the reader lives in ``admission/``)."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    models: frozenset[str]
    qos: str
    creation_time: int
    deletion_time: int


def middle_slice(pods: Sequence[TracePod], count: int) -> list[TracePod]:
    """``count`` consecutive pods by creation time (then name) from the middle of a pod list
    (a trace's early months are nearly empty), times shifted so the first arrives at 0."""
    ordered = sorted(pods, key=lambda p: (p.creation_time, p.name))
    if not ordered:
        return []
    start = len(ordered) // 2
    t0 = ordered[start].creation_time
    return [replace(p, creation_time=p.creation_time - t0, deletion_time=p.deletion_time - t0)
            for p in ordered[start : start + count]]


def speedup_for_load(pods: Sequence[TracePod], capacity_gpus: float, load: float) -> float:
    """How much faster than recorded ``pods`` must arrive for the GPU time they offer within
    their (sped-up) arrival period to be ``load`` x ``capacity_gpus`` over it. Run times are
    long-tailed (a few pods ran for months), so each counts only up to the period's end;
    offered load grows with the speedup, so the answer is bisected on a log scale in
    ``[1, 1e6]``."""
    if not pods or capacity_gpus <= 0:
        return 1.0
    span = max(1, max(p.creation_time for p in pods) - min(p.creation_time for p in pods))

    def offered(speedup: float) -> float:
        window = span / speedup
        gpu_s = sum(p.num_gpu * p.gpu_milli / 1000
                    * min(window, max(1, p.deletion_time - p.creation_time)) for p in pods)
        return gpu_s / (capacity_gpus * window)

    lo, hi = 1.0, 1e6
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if offered(mid) < load else (lo, mid)
    return lo


def tenant_by_hash(pod_name: str, tenants: int) -> str:
    """The tenant rule for traces that carry none: CRC-32 of the pod name, modulo the number of
    tenants, named ``team-a``, ``team-b``, ... CRC-32 is stable across runs and platforms
    (Python's ``hash`` is salted), and spreads every kind of pod evenly over the tenants."""
    if not 1 <= tenants <= 26:
        raise ProblemError("tenants", f"must be in [1, 26], got {tenants}")
    return tenant_name(zlib.crc32(pod_name.encode()) % tenants)


def tenant_name(i: int) -> str:
    return f"team-{chr(ord('a') + i)}"


def qos_class_for_trace(pod: TracePod) -> str:
    """Map the trace's QoS column and shape to Berth's shipped classes
    (:data:`solver.interference.DEFAULT_PROFILES`): a latency-sensitive (``LS``) pod that shares
    a GPU is online inference; multi-GPU pods are training; ``BE`` is best-effort; whole-GPU
    and the remaining classes (Burstable, Guaranteed) are throughput inference."""
    if pod.num_gpu > 1:
        return "training"
    if pod.qos == "BE":
        return "best-effort"
    if pod.qos == "LS" and 0 < pod.gpu_milli < MILLI:
        return "latency-inference"
    return "batch-inference"


def scenario_from_trace(
    nodes: Sequence[Node],
    pods: Sequence[TracePod],
    *,
    tenants: int = 4,
    time_scale: float = 1.0,
    speedup: float = 1.0,
    policy: SolverPolicy | None = None,
) -> Scenario:
    """One single-pod gang per trace pod, arriving at ``creation_time * time_scale / speedup``
    and running ``(deletion_time - creation_time) * time_scale`` (at least one second); tenants
    by :func:`tenant_by_hash`, all of weight 1.

    ``time_scale`` stretches or shrinks the whole trace and leaves its load as it was (arrival
    rate and run times change together). ``speedup`` makes pods arrive that many times faster
    with run times unchanged, so the offered load grows by that factor: the openb pod lists
    keep only a few dozen GPUs busy at any moment of their recorded times, far below the
    cluster's capacity, and queueing only appears once arrivals are sped up."""
    if time_scale <= 0:
        raise ProblemError("time_scale", f"must be > 0, got {time_scale}")
    if speedup <= 0:
        raise ProblemError("speedup", f"must be > 0, got {speedup}")
    arrivals = []
    for p in pods:
        if p.deletion_time < p.creation_time:
            raise ProblemError(
                f"pods[{p.name}].deletion_time",
                f"{p.deletion_time} is before creation_time {p.creation_time}",
            )
        gpu_milli = p.gpu_milli if p.num_gpu > 0 else 0
        request = PodRequest(
            name=p.name,
            cpu_milli=p.cpu_milli,
            memory_mib=p.memory_mib,
            gpu_count=p.num_gpu,
            gpu_milli=gpu_milli,
            models=p.models,
            qos_class=qos_class_for_trace(p) if p.num_gpu > 0 else None,
        )
        gang = Gang(name=p.name, tenant=tenant_by_hash(p.name, tenants), pods=(request,))
        duration = max(1.0, (p.deletion_time - p.creation_time) * time_scale)
        arrivals.append(TimedGang(gang, p.creation_time * time_scale / speedup, duration))
    arrivals.sort(key=lambda a: (a.arrival_s, a.gang.name))
    return Scenario(
        nodes=tuple(nodes),
        tenants=tuple(Tenant(name=tenant_name(i)) for i in range(tenants)),
        arrivals=tuple(arrivals),
        policy=policy or SolverPolicy(),
    )
