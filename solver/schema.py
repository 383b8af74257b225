"""Snapshots from plain data (what a YAML or JSON file loads into), and plans back to data.

Pure: the caller reads the file. :func:`parse_snapshot` walks the whole document and collects
EVERY problem with its field path (``gangs[2].pods[0].gpu_milli: must be in (0, 1000]``)
before it builds anything, so a user fixes all mistakes in one go; it raises
:class:`SnapshotError` carrying them. docs/snapshot-format.md documents the format.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from solver.plan import Plan
from solver.types import (
    GPU,
    MAX_QUOTA_MILLI,
    MAX_TENANT_WEIGHT,
    MAX_WATTS,
    MAX_WEIGHT,
    MILLI,
    FairSharing,
    Gang,
    GpuShare,
    MigSlice,
    Node,
    NodeSelectorRequirement,
    PodRequest,
    ProblemError,
    QoSProfile,
    Queueing,
    Reclaim,
    Reservations,
    Running,
    Snapshot,
    SolverPolicy,
    Taint,
    TargetWorkload,
    Tenant,
    Toleration,
    TopologyMode,
    TopologyRequirement,
    TypicalPod,
    Weights,
)

T = TypeVar("T")

#: The largest magnitude of any number in a snapshot: 10^9 milli-cores is a million cores,
#: 10^9 MiB a petabyte, 10^9 milli-GPU a million GPUs, 10^9 seconds thirty years. Larger values
#: are typos, and they would overflow the solver's 64-bit arithmetic.
MAX_VALUE = 10**9
#: Most pods in all gangs together, replicas counted.
MAX_PODS = 100_000
#: Longest text of a value quoted back in an error message.
_QUOTE = 40


@dataclass(frozen=True, slots=True)
class FieldError:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SnapshotError(ValueError):
    """The document is not a valid snapshot; ``errors`` lists every problem found."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = tuple(errors)


class _Reader:
    """Typed field access that records problems instead of raising."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []
        self.pods = 0  # pods of all gangs so far, replicas counted

    def err(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def obj(self, value: object, path: str, allowed: tuple[str, ...]) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.err(path, f"must be a mapping, got {_kind(value)}")
            return None
        for key in value:
            if not isinstance(key, str) or key not in allowed:
                name = _clip(str(key))
                near = difflib.get_close_matches(name, allowed, n=1) or [
                    a for a in allowed if a.startswith(name)][:1]
                hint = f" (did you mean {near[0]!r}?)" if near else f"; known: {', '.join(allowed)}"
                self.err(_join(path, name), f"unknown field{hint}")
        return value

    def items(self, value: object, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.err(path, f"must be a list, got {_kind(value)}")
            return []
        return value

    def text(self, d: Mapping[str, Any], key: str, path: str, *, required: bool = False,
            default: str = "") -> str:
        v = d.get(key)
        if v is None:
            if required:
                self.err(_join(path, key), "is required")
            return default
        if not isinstance(v, str) or (required and not v):
            self.err(_join(path, key), f"must be a non-empty string, got {_kind(v)}")
            return default
        return v

    def opt_str(self, d: Mapping[str, Any], key: str, path: str) -> str | None:
        v = d.get(key)
        if v is None:
            return None
        if not isinstance(v, str):
            self.err(_join(path, key), f"must be a string, got {_kind(v)}")
            return None
        return v

    def integer(self, d: Mapping[str, Any], key: str, path: str, *, default: int = 0,
            lo: int | None = 0, hi: int | None = MAX_VALUE, required: bool = False,
            lo_open: bool = False) -> int:
        """An integer in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``); ``lo=None``: down to
        ``-MAX_VALUE``."""
        symmetric = lo is None
        lo = -MAX_VALUE if lo is None else lo
        v = d.get(key)
        if v is None:
            if required:
                self.err(_join(path, key), "is required")
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            self.err(_join(path, key), f"must be an integer, got {_kind(v)}")
            return default
        if (v <= lo if lo_open else v < lo) or (hi is not None and v > hi):
            if symmetric:
                bound = f"in [{-MAX_VALUE}, {MAX_VALUE}]"
            elif hi == MAX_VALUE and v > hi:
                bound = f"<= {MAX_VALUE}"
            else:
                bound = _range(lo, None if hi == MAX_VALUE else hi, lo_open)
                bound = f"in {bound}" if bound.startswith(("[", "(")) else bound
            self.err(_join(path, key), f"must be {bound}, got {_number(v)}")
            return default
        return v

    def opt_int(self, d: Mapping[str, Any], key: str, path: str) -> int | None:
        if d.get(key) is None:
            return None
        before = len(self.errors)
        v = self.integer(d, key, path)
        return v if len(self.errors) == before else None

    def number(self, d: Mapping[str, Any], key: str, path: str, *, default: float,
              lo: float = -MAX_VALUE, hi: float = MAX_VALUE, positive: bool = False) -> float:
        v = d.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int | float):
            self.err(_join(path, key), f"must be a number, got {_kind(v)}")
            return default
        f = float(v) if not isinstance(v, int) or abs(v) <= MAX_VALUE else math.inf
        bounds = f"({0:g}, {hi:g}]" if positive else f"[{lo:g}, {hi:g}]"
        if not math.isfinite(f):
            self.err(_join(path, key), f"must be a finite number in {bounds}, got {_number(v)}")
            return default
        if positive and f <= 0:
            self.err(_join(path, key), f"must be > 0, got {v}")
            return default
        if f < lo or f > hi:
            self.err(_join(path, key), f"must be in {bounds}, got {_number(v)}")
            return default
        return f

    def opt_float(self, d: Mapping[str, Any], key: str, path: str) -> float | None:
        if d.get(key) is None:
            return None
        before = len(self.errors)
        v = self.number(d, key, path, default=0.0, lo=0.0)
        return v if len(self.errors) == before else None

    def flag(self, d: Mapping[str, Any], key: str, path: str, *, default: bool) -> bool:
        v = d.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            self.err(_join(path, key), f"must be true or false, got {_kind(v)}")
            return default
        return v

    def str_map(self, d: Mapping[str, Any], key: str, path: str) -> dict[str, str]:
        v = d.get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            self.err(_join(path, key), f"must be a mapping of strings, got {_kind(v)}")
            return {}
        out = {}
        for k, val in v.items():
            if not isinstance(k, str) or not isinstance(val, str):
                self.err(_join(_join(path, key), _clip(str(k))), "keys and values must be strings")
                continue
            out[k] = val
        return out

    def num_map(self, d: Mapping[str, Any], key: str, path: str,
                hi: float = MAX_VALUE) -> dict[str, float]:
        v = d.get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            self.err(_join(path, key), f"must be a mapping of numbers, got {_kind(v)}")
            return {}
        out = {}
        for k, val in v.items():
            if (not isinstance(k, str) or isinstance(val, bool)
                    or not isinstance(val, int | float) or not 0 <= val <= hi):
                self.err(_join(_join(path, key), _clip(str(k))),
                         f"must be a number in [0, {hi:g}], got {_kind(val)}")
                continue
            out[k] = float(val)
        return out

    def str_list(self, d: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
        out = []
        for i, v in enumerate(self.items(d.get(key), _join(path, key))):
            if not isinstance(v, str) or not v:
                self.err(f"{_join(path, key)}[{i}]", f"must be a non-empty string, got {_kind(v)}")
                continue
            out.append(v)
        return tuple(out)

    def build(self, path: str, make: Callable[..., T], *args: Any) -> T | None:
        """Run a type's constructor; its own validation error is reported under ``path``."""
        try:
            return make(*args)
        except ProblemError as exc:
            self.err(path, exc.message)
            return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _clip(text: str) -> str:
    return text if len(text) <= _QUOTE else text[: _QUOTE - 3] + "..."


def _number(v: int | float) -> str:
    """A number for an error message: a 400-digit integer is shown by its size."""
    if isinstance(v, int) and abs(v) > 10**15:
        digits = int(abs(v).bit_length() * math.log10(2)) + 1  # str() refuses 4,300+ digits
        return f"a {'negative ' if v < 0 else ''}~{digits}-digit number"
    return repr(v)


def _kind(v: object) -> str:
    if v is None:
        return "nothing"
    if isinstance(v, bool):
        return f"boolean {v}"
    if isinstance(v, int | float):
        return f"{type(v).__name__} {_number(v)}"
    if isinstance(v, str):
        return f"str {_clip(v)!r}"
    return type(v).__name__


def _range(lo: int | None, hi: int | None, lo_open: bool) -> str:
    if hi is None:
        return f"{'>' if lo_open else '>='} {lo}"
    left = "(" if lo_open else "["
    return f"{left}{'' if lo is None else lo}, {hi}]"


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------

NODE_FIELDS = ("name", "cpu_milli", "memory_mib", "gpus", "labels", "taints", "topology",
               "schedulable", "ready")
GPU_FIELDS = ("index", "model", "memory_mib", "nvlink_domain", "mig")
GPU_GROUP_FIELDS = ("count", "model", "memory_mib", "nvlink_size")
MIG_FIELDS = ("profile", "milli", "memory_mib", "used")
TAINT_FIELDS = ("key", "value", "effect")
RUNNING_FIELDS = ("name", "node", "cpu_milli", "memory_mib", "gpus", "tenant", "qos_class",
                  "remaining_s", "gang", "priority", "run_s")
SHARE_FIELDS = ("index", "milli")
TENANT_FIELDS = ("name", "quota_milli", "weight", "can_borrow", "borrow_limit_milli",
                 "past_held_milli", "past_fair_milli")
GANG_FIELDS = ("name", "tenant", "pods", "priority", "wait_seconds", "topology", "runtime_s",
               "reserved")
TOPOLOGY_FIELDS = ("level", "mode")
POD_FIELDS = ("name", "replicas", "cpu_milli", "memory_mib", "gpu_count", "gpu_milli",
              "gpu_memory_mib", "models", "qos_class", "node_selector", "affinity",
              "tolerations")
REQ_FIELDS = ("key", "operator", "values")
TOLERATION_FIELDS = ("key", "operator", "value", "effect")
POLICY_FIELDS = ("weights", "topology_levels", "qos_classes", "idle_watts", "active_watts",
                 "typical_pods", "reservations", "reclaim", "fair_sharing", "target_workload",
                 "queueing")
QUEUEING_FIELDS = ("short_run_bonus", "short_run_s", "keep_order_after_s")
FAIR_SHARING_FIELDS = ("half_life_s", "boost")
TARGET_WORKLOAD_FIELDS = ("half_life_s",)
RESERVATION_FIELDS = ("max_gangs", "after_s", "horizon_s", "hold_ahead_s", "keep")
RECLAIM_FIELDS = ("enabled", "min_run_s", "max_gangs")
WEIGHT_FIELDS = ("demand", "aging_per_hour", "fragmentation", "topology", "fairness", "energy",
                 "interference", "stay")
QOS_FIELDS = ("name", "sm", "membw", "memory_mib", "latency_sensitive", "solo_latency_ms",
              "slo_ms", "exclusive", "no_share_with")
TYPICAL_FIELDS = ("cpu_milli", "gpu_count", "gpu_milli", "models", "weight")
TOP_FIELDS = ("nodes", "running", "tenants", "gangs", "policy")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _gpus(r: _Reader, value: object, path: str, node: str) -> tuple[GPU, ...]:
    if isinstance(value, dict):  # shorthand: {count: 8, model: A100, memory_mib, nvlink_size}
        d = r.obj(value, path, GPU_GROUP_FIELDS)
        assert d is not None
        count = r.integer(d, "count", path, required=True, hi=64)
        model = r.text(d, "model", path, required=True)
        mem = r.integer(d, "memory_mib", path)
        size = r.integer(d, "nvlink_size", path, lo=0)
        gpus = []
        for i in range(count):
            nv = f"{node}/nv{i // size}" if size else None  # NVLink domains are per node
            g = r.build(path, GPU, i, model or "?", mem, nv)
            if g is not None:
                gpus.append(g)
        return tuple(gpus)
    out = []
    for i, raw in enumerate(r.items(value, path)):
        p = f"{path}[{i}]"
        d = r.obj(raw, p, GPU_FIELDS)
        if d is None:
            continue
        index = r.integer(d, "index", p, default=i)
        model = r.text(d, "model", p, required=True)
        mem = r.integer(d, "memory_mib", p)
        nv = r.opt_str(d, "nvlink_domain", p)
        migs = []
        for k, m in enumerate(r.items(d.get("mig"), f"{p}.mig")):
            mp = f"{p}.mig[{k}]"
            md = r.obj(m, mp, MIG_FIELDS)
            if md is None:
                continue
            prof = r.text(md, "profile", mp, required=True)
            milli = r.integer(md, "milli", mp, lo=0, lo_open=True, hi=MILLI, required=True,
                          default=1)
            mmem = r.integer(md, "memory_mib", mp)
            used = r.flag(md, "used", mp, default=False)
            s = r.build(mp, MigSlice, prof, milli, mmem, used)
            if s is not None:
                migs.append(s)
        g = r.build(p, GPU, index, model or "?", mem, nv, tuple(migs))
        if g is not None:
            out.append(g)
    indexes = [g.index for g in out]
    if len(set(indexes)) != len(indexes):
        r.err(path, "GPU indexes must be unique on a node")
    return tuple(out)


def _nodes(r: _Reader, value: object, names: set[str]) -> tuple[Node, ...]:
    """The valid nodes; ``names`` gets the name of every node, valid or not."""
    out = []
    raw_nodes = r.items(value, "nodes")
    if not raw_nodes and value is not None:
        return ()
    for i, raw in enumerate(raw_nodes):
        p = f"nodes[{i}]"
        before = len(r.errors)
        d = r.obj(raw, p, NODE_FIELDS)
        if d is None:
            continue
        name = r.text(d, "name", p, required=True)
        if name in names:
            r.err(f"{p}.name", f"duplicate node name {name!r}")
        names.add(name)
        cpu = r.integer(d, "cpu_milli", p, required=True)
        mem = r.integer(d, "memory_mib", p, required=True)
        gpus = _gpus(r, d.get("gpus"), f"{p}.gpus", name) if d.get("gpus") is not None else ()
        labels = r.str_map(d, "labels", p)
        topology = r.str_map(d, "topology", p)
        taints = []
        for k, t in enumerate(r.items(d.get("taints"), f"{p}.taints")):
            tp = f"{p}.taints[{k}]"
            td = r.obj(t, tp, TAINT_FIELDS)
            if td is None:
                continue
            key = r.text(td, "key", tp, required=True)
            effect = r.text(td, "effect", tp, default="NoSchedule")
            if effect not in EFFECTS:
                r.err(f"{tp}.effect", f"must be one of {', '.join(EFFECTS)}, got {effect!r}")
                continue
            val = r.text(td, "value", tp)
            taint = r.build(tp, Taint, key, val, effect)
            if taint is not None:
                taints.append(taint)
        sched = r.flag(d, "schedulable", p, default=True)
        ready = r.flag(d, "ready", p, default=True)
        if len(r.errors) > before:
            continue  # reported already; the constructor would only repeat it
        node = r.build(p, Node, name or "?", cpu, mem, gpus, labels, tuple(taints), topology,
                       sched, ready)
        if node is not None and name:
            out.append(node)
    return tuple(out)


def _running(r: _Reader, value: object, nodes: dict[str, Node],
             named: set[str]) -> tuple[Running, ...]:
    """``named``: every node the snapshot names, also those with errors of their own (a pod on
    one of them is not reported again)."""
    out = []
    for i, raw in enumerate(r.items(value, "running")):
        p = f"running[{i}]"
        d = r.obj(raw, p, RUNNING_FIELDS)
        if d is None:
            continue
        name = r.text(d, "name", p, required=True)
        node = r.text(d, "node", p, required=True)
        known = nodes.get(node)
        if node and known is None and nodes and node not in named:
            r.err(f"{p}.node", f"unknown node {_clip(node)!r}")
        shares = []
        for k, s in enumerate(r.items(d.get("gpus"), f"{p}.gpus")):
            sp = f"{p}.gpus[{k}]"
            sd = r.obj(s, sp, SHARE_FIELDS)
            if sd is None:
                continue
            index = r.integer(sd, "index", sp, required=True)
            milli = r.integer(sd, "milli", sp, lo=0, lo_open=True, hi=MILLI, default=MILLI)
            if known is not None and index not in {g.index for g in known.gpus}:
                r.err(f"{sp}.index", f"node {node} has no GPU {index}")
                continue
            shares.append(GpuShare(index, milli))
        run = r.build(p, Running, name or "?", node or "?", r.integer(d, "cpu_milli", p),
                      r.integer(d, "memory_mib", p), tuple(shares), r.opt_str(d, "tenant", p),
                      r.opt_str(d, "qos_class", p), r.opt_float(d, "remaining_s", p),
                      r.opt_str(d, "gang", p), r.integer(d, "priority", p, lo=None),
                      r.opt_float(d, "run_s", p))
        if run is not None and known is not None:
            out.append(run)
    return tuple(out)


def _tenants(r: _Reader, value: object) -> tuple[Tenant, ...]:
    out = []
    names: set[str] = set()
    for i, raw in enumerate(r.items(value, "tenants")):
        p = f"tenants[{i}]"
        d = r.obj(raw, p, TENANT_FIELDS)
        if d is None:
            continue
        name = r.text(d, "name", p, required=True)
        if name in names:
            r.err(f"{p}.name", f"duplicate tenant {name!r}")
        names.add(name)
        t = r.build(p, Tenant, name or "?", r.opt_int(d, "quota_milli", p),
                    r.number(d, "weight", p, default=1.0, positive=True, hi=MAX_TENANT_WEIGHT),
                    r.flag(d, "can_borrow", p, default=True),
                    r.opt_int(d, "borrow_limit_milli", p),
                    r.number(d, "past_held_milli", p, default=0.0, lo=0.0, hi=MAX_QUOTA_MILLI),
                    r.number(d, "past_fair_milli", p, default=0.0, lo=0.0, hi=MAX_QUOTA_MILLI))
        if t is not None and name:
            out.append(t)
    return tuple(out)


def _affinity(r: _Reader, value: object, path: str) -> tuple[tuple[NodeSelectorRequirement, ...],
                                                                ...]:
    terms = []
    for i, term in enumerate(r.items(value, path)):
        tp = f"{path}[{i}]"
        reqs = []
        for k, raw in enumerate(r.items(term, tp)):
            rp = f"{tp}[{k}]"
            d = r.obj(raw, rp, REQ_FIELDS)
            if d is None:
                continue
            key = r.text(d, "key", rp, required=True)
            op = r.text(d, "operator", rp, required=True)
            if op and op not in OPERATORS:
                r.err(f"{rp}.operator", f"must be one of {', '.join(OPERATORS)}, got {op!r}")
                continue
            values = r.str_list(d, "values", rp)
            req = r.build(rp, NodeSelectorRequirement, key, op, values)
            if req is not None:
                reqs.append(req)
        terms.append(tuple(reqs))
    return tuple(terms)


def _tolerations(r: _Reader, value: object, path: str) -> tuple[Toleration, ...]:
    out = []
    for i, raw in enumerate(r.items(value, path)):
        p = f"{path}[{i}]"
        d = r.obj(raw, p, TOLERATION_FIELDS)
        if d is None:
            continue
        op = r.text(d, "operator", p, default="Equal")
        if op not in ("Equal", "Exists"):
            r.err(f"{p}.operator", f"must be Equal or Exists, got {op!r}")
            continue
        effect = r.text(d, "effect", p)
        if effect and effect not in EFFECTS:
            r.err(f"{p}.effect", f"must be empty or one of {', '.join(EFFECTS)}, got {effect!r}")
            continue
        t = r.build(p, Toleration, r.text(d, "key", p), op, r.text(d, "value", p), effect)
        if t is not None:
            out.append(t)
    return tuple(out)


def _pods(r: _Reader, value: object, path: str) -> tuple[PodRequest, ...]:
    out: list[PodRequest] = []
    raw_pods = r.items(value, path)
    if not raw_pods and not any(e.path.startswith(path) for e in r.errors):
        r.err(path, "a gang needs at least one pod")
    for i, raw in enumerate(raw_pods):
        p = f"{path}[{i}]"
        before = len(r.errors)
        d = r.obj(raw, p, POD_FIELDS)
        if d is None:
            continue
        name = r.text(d, "name", p, required=True)
        replicas = r.integer(d, "replicas", p, default=1, lo=1, hi=10_000)
        count = r.integer(d, "gpu_count", p, hi=64)
        milli_default = MILLI if count else 0
        milli = r.integer(d, "gpu_milli", p, default=milli_default, lo=0, hi=MILLI,
                          lo_open=count > 0)
        if count == 0 and milli != 0:
            r.err(f"{p}.gpu_milli", "must be 0 (or absent) when gpu_count is 0")
        elif count > 0 and milli == 0:
            r.err(f"{p}.gpu_milli", "must be in (0, 1000] when the pod asks for GPUs")
        elif count > 1 and milli != MILLI:
            r.err(f"{p}.gpu_milli", "a pod with several GPUs takes them whole: set it to 1000")
        fields = (
            r.integer(d, "cpu_milli", p), r.integer(d, "memory_mib", p), count, milli,
            r.integer(d, "gpu_memory_mib", p), frozenset(r.str_list(d, "models", p)),
            r.opt_str(d, "qos_class", p), r.str_map(d, "node_selector", p),
            _affinity(r, d.get("affinity"), f"{p}.affinity"),
            _tolerations(r, d.get("tolerations"), f"{p}.tolerations"),
        )
        if not name or len(r.errors) > before:
            continue
        if r.pods + replicas > MAX_PODS:
            if r.pods <= MAX_PODS:
                r.err(f"{p}.replicas", f"the gangs hold more than {MAX_PODS} pods in all "
                      "(replicas counted); split the snapshot")
                r.pods = MAX_PODS + 1
            continue
        r.pods += replicas
        names = [name] if replicas == 1 else [f"{name}-{k}" for k in range(replicas)]
        for n in names:
            pod = r.build(p, PodRequest, n, *fields)
            if pod is not None:
                out.append(pod)
    seen: set[str] = set()
    for pod in out:
        if pod.name in seen:
            r.err(path, f"pod name {pod.name!r} appears twice in the gang")
        seen.add(pod.name)
    return tuple(out)


def _gangs(r: _Reader, value: object, tenants: set[str]) -> tuple[Gang, ...]:
    out = []
    names: set[str] = set()
    for i, raw in enumerate(r.items(value, "gangs")):
        p = f"gangs[{i}]"
        d = r.obj(raw, p, GANG_FIELDS)
        if d is None:
            continue
        name = r.text(d, "name", p, required=True)
        if name in names:
            r.err(f"{p}.name", f"duplicate gang name {name!r}")
        names.add(name)
        tenant = r.text(d, "tenant", p, required=True)
        if tenant and tenants and tenant not in tenants:
            r.err(f"{p}.tenant", f"unknown tenant {tenant!r}; declare it under tenants "
                  f"(known: {', '.join(sorted(tenants))})")
        topology = None
        if d.get("topology") is not None:
            tp = f"{p}.topology"
            td = r.obj(d["topology"], tp, TOPOLOGY_FIELDS)
            if td is not None:
                level = r.text(td, "level", tp, required=True)
                mode = r.text(td, "mode", tp, default="preferred")
                if mode not in ("required", "preferred"):
                    r.err(f"{tp}.mode", f"must be required or preferred, got {mode!r}")
                elif level:
                    topology = TopologyRequirement(level, TopologyMode(mode))
        pods = _pods(r, d.get("pods"), f"{p}.pods")
        if not pods:
            continue
        gang = r.build(p, Gang, name or "?", tenant or "?", pods,
                       r.integer(d, "priority", p, lo=None),
                       r.number(d, "wait_seconds", p, default=0.0, lo=0.0), topology,
                       r.opt_float(d, "runtime_s", p),
                       r.flag(d, "reserved", p, default=False))
        if gang is not None and name and pods:
            out.append(gang)
    return tuple(out)


def parse_policy(r: _Reader, value: object, path: str = "policy") -> SolverPolicy:
    if value is None:
        return SolverPolicy()
    d = r.obj(value, path, POLICY_FIELDS)
    if d is None:
        return SolverPolicy()
    weights = Weights()
    if d.get("weights") is not None:
        wp = f"{path}.weights"
        wd = r.obj(d["weights"], wp, WEIGHT_FIELDS)
        if wd is not None:
            base = Weights()
            w = {k: r.number(wd, k, wp, default=getattr(base, k), lo=0.0, hi=MAX_WEIGHT)
                 for k in WEIGHT_FIELDS}
            weights = r.build(wp, Weights, *(w[k] for k in WEIGHT_FIELDS)) or base
    classes = []
    for i, raw in enumerate(r.items(d.get("qos_classes"), f"{path}.qos_classes")):
        qp = f"{path}.qos_classes[{i}]"
        qd = r.obj(raw, qp, QOS_FIELDS)
        if qd is None:
            continue
        q = r.build(qp, QoSProfile, r.text(qd, "name", qp, required=True),
                    r.number(qd, "sm", qp, default=0.5, lo=0.0, hi=1.0),
                    r.number(qd, "membw", qp, default=0.5, lo=0.0, hi=1.0),
                    r.integer(qd, "memory_mib", qp),
                    r.flag(qd, "latency_sensitive", qp, default=False),
                    r.opt_float(qd, "solo_latency_ms", qp), r.opt_float(qd, "slo_ms", qp),
                    r.flag(qd, "exclusive", qp, default=False),
                    frozenset(r.str_list(qd, "no_share_with", qp)))
        if q is not None:
            classes.append(q)
    typical = []
    for i, raw in enumerate(r.items(d.get("typical_pods"), f"{path}.typical_pods")):
        tp = f"{path}.typical_pods[{i}]"
        td = r.obj(raw, tp, TYPICAL_FIELDS)
        if td is None:
            continue
        t = r.build(tp, TypicalPod, r.integer(td, "cpu_milli", tp),
                    r.integer(td, "gpu_count", tp, hi=64), r.integer(td, "gpu_milli", tp, hi=MILLI),
                    frozenset(r.str_list(td, "models", tp)),
                    r.number(td, "weight", tp, default=1.0, positive=True))
        if t is not None:
            typical.append(t)
    levels = r.str_list(d, "topology_levels", path) or SolverPolicy().topology_levels
    reservations = Reservations()
    if d.get("reservations") is not None:
        rp = f"{path}.reservations"
        rd = r.obj(d["reservations"], rp, RESERVATION_FIELDS)
        if rd is not None:
            reservations = r.build(rp, Reservations,
                                   r.integer(rd, "max_gangs", rp, default=1, hi=64),
                                   r.number(rd, "after_s", rp, default=300.0, lo=0.0),
                                   r.number(rd, "horizon_s", rp, default=21600.0, lo=0.0),
                                   r.number(rd, "hold_ahead_s", rp, default=600.0, lo=0.0),
                                   r.flag(rd, "keep", rp, default=False)
                                   ) or reservations
    reclaim = Reclaim()
    if d.get("reclaim") is not None:
        cp = f"{path}.reclaim"
        cd = r.obj(d["reclaim"], cp, RECLAIM_FIELDS)
        if cd is not None:
            reclaim = r.build(cp, Reclaim, r.flag(cd, "enabled", cp, default=False),
                              r.number(cd, "min_run_s", cp, default=300.0, lo=0.0),
                              r.integer(cd, "max_gangs", cp, default=4, hi=1024)) or reclaim
    # a field left out takes the type's own default, as the whole object left out does
    fair_sharing = FairSharing()
    if d.get("fair_sharing") is not None:
        fp = f"{path}.fair_sharing"
        fd = r.obj(d["fair_sharing"], fp, FAIR_SHARING_FIELDS)
        if fd is not None:
            fair_sharing = r.build(
                fp, FairSharing,
                r.number(fd, "half_life_s", fp, default=fair_sharing.half_life_s, lo=0.0),
                r.number(fd, "boost", fp, default=fair_sharing.boost, lo=0.0, hi=MAX_WEIGHT),
            ) or fair_sharing
    target = TargetWorkload()
    if d.get("target_workload") is not None:
        tp = f"{path}.target_workload"
        td = r.obj(d["target_workload"], tp, TARGET_WORKLOAD_FIELDS)
        if td is not None:
            target = r.build(tp, TargetWorkload, r.number(
                td, "half_life_s", tp, default=target.half_life_s, lo=0.0)) or target
    queueing = Queueing()
    if d.get("queueing") is not None:
        qp = f"{path}.queueing"
        qd = r.obj(d["queueing"], qp, QUEUEING_FIELDS)
        if qd is not None:
            # keep_order_after_s: left out, the default; null, off
            after = (None if "keep_order_after_s" in qd and qd["keep_order_after_s"] is None
                     else r.number(qd, "keep_order_after_s", qp,
                                   default=queueing.keep_order_after_s or 0.0, lo=0.0))
            queueing = r.build(
                qp, Queueing,
                r.number(qd, "short_run_bonus", qp, default=queueing.short_run_bonus, lo=0.0,
                         hi=MAX_WEIGHT),
                r.number(qd, "short_run_s", qp, default=queueing.short_run_s, lo=1.0),
                after) or queueing
    return SolverPolicy(weights, levels, tuple(classes),
                        r.num_map(d, "idle_watts", path, hi=MAX_WATTS),
                        r.num_map(d, "active_watts", path, hi=MAX_WATTS), tuple(typical),
                        reservations, reclaim, fair_sharing, target, queueing=queueing)


def parse_snapshot(data: object) -> Snapshot:
    """Build a snapshot from plain data, or raise :class:`SnapshotError` with every problem."""
    r = _Reader()
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {_kind(data)}"
        raise SnapshotError([FieldError("", f"the snapshot must be a mapping with nodes, "
                                            f"gangs, ... (see docs/snapshot-format.md); it is "
                                            f"{what}")])
    d = r.obj(data, "", TOP_FIELDS)
    if d is None:
        raise SnapshotError(r.errors)
    if d.get("nodes") is None:
        r.err("nodes", "is required: the cluster's nodes")
    named: set[str] = set()
    nodes = _nodes(r, d.get("nodes"), named)
    by_name = {n.name: n for n in nodes}
    running = _running(r, d.get("running"), by_name, named)
    tenants = _tenants(r, d.get("tenants"))
    gangs = _gangs(r, d.get("gangs"), {t.name for t in tenants})
    policy = parse_policy(r, d.get("policy"))
    if r.errors:
        raise SnapshotError(r.errors)
    try:
        return Snapshot(nodes, gangs, running, tenants, policy)
    except ProblemError as exc:
        raise SnapshotError([FieldError(exc.path, exc.message)]) from None


# --------------------------------------------------------------------------------------------
# Back to plain data
# --------------------------------------------------------------------------------------------


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The plan as JSON-ready data (the shape ``berth solve --json`` prints)."""
    s = plan.stats
    return {
        "admitted": [
            {"gang": g.gang, "pods": [
                {"pod": p.pod, "node": p.node,
                 "gpus": [{"index": x.index, "milli": x.milli} for x in p.gpus]}
                for p in g.pods]}
            for g in plan.admitted
        ],
        "deferred": [{"gang": d.gang, "reason": d.reason} for d in plan.deferred],
        "evictions": [{"gang": e.gang, "tenant": e.tenant, "pods": list(e.pods),
                       "for_gang": e.for_gang, "for_tenant": e.for_tenant,
                       "preempt": e.preempt}
                      for e in plan.evictions],
        "stats": {"solver": s.solver, "status": s.status, "wall_seconds": s.wall_seconds,
                  "objective": s.objective, "bound": s.bound, "fallback": s.fallback,
                  "detail": dict(sorted(s.detail.items()))},
    }


def _pod_dict(p: PodRequest) -> dict[str, Any]:
    d: dict[str, Any] = {"name": p.name, "cpu_milli": p.cpu_milli, "memory_mib": p.memory_mib,
                         "gpu_count": p.gpu_count, "gpu_milli": p.gpu_milli}
    if p.gpu_memory_mib:
        d["gpu_memory_mib"] = p.gpu_memory_mib
    if p.models:
        d["models"] = sorted(p.models)
    if p.qos_class is not None:
        d["qos_class"] = p.qos_class
    if p.node_selector:
        d["node_selector"] = dict(p.node_selector)
    if p.affinity:
        d["affinity"] = [[{"key": q.key, "operator": q.operator, "values": list(q.values)}
                          for q in term] for term in p.affinity]
    if p.tolerations:
        d["tolerations"] = [{"key": t.key, "operator": t.operator, "value": t.value,
                             "effect": t.effect} for t in p.tolerations]
    return d


def snapshot_to_dict(s: Snapshot) -> dict[str, Any]:
    """The snapshot as plain data that :func:`parse_snapshot` reads back to an equal one.
    Used by the tests only (the round trip that pins the format)."""
    pol = s.policy
    return {
        "nodes": [
            {"name": n.name, "cpu_milli": n.cpu_milli, "memory_mib": n.memory_mib,
             "gpus": [{"index": g.index, "model": g.model, "memory_mib": g.memory_mib,
                       "nvlink_domain": g.nvlink_domain,
                       "mig": [{"profile": m.profile, "milli": m.milli,
                                "memory_mib": m.memory_mib, "used": m.used} for m in g.mig]}
                      for g in n.gpus],
             "labels": dict(n.labels), "topology": dict(n.topology),
             "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in n.taints],
             "schedulable": n.schedulable, "ready": n.ready}
            for n in s.nodes
        ],
        "running": [
            {"name": r.name, "node": r.node, "cpu_milli": r.cpu_milli,
             "memory_mib": r.memory_mib, "tenant": r.tenant, "qos_class": r.qos_class,
             "gpus": [{"index": x.index, "milli": x.milli} for x in r.gpus],
             **({} if r.remaining_s is None else {"remaining_s": r.remaining_s}),
             **({} if r.gang is None else {"gang": r.gang}),
             **({} if r.priority == 0 else {"priority": r.priority}),
             **({} if r.run_s is None else {"run_s": r.run_s})}
            for r in s.running
        ],
        "tenants": [
            {"name": t.name, "quota_milli": t.quota_milli, "weight": t.weight,
             "can_borrow": t.can_borrow, "borrow_limit_milli": t.borrow_limit_milli,
             **({} if t.past_held_milli == t.past_fair_milli == 0.0 else
                {"past_held_milli": t.past_held_milli, "past_fair_milli": t.past_fair_milli})}
            for t in s.tenants
        ],
        "gangs": [
            {"name": g.name, "tenant": g.tenant, "priority": g.priority,
             "wait_seconds": g.wait_seconds,
             **({} if g.runtime_s is None else {"runtime_s": g.runtime_s}),
             **({"reserved": True} if g.reserved else {}),
             "topology": None if g.topology is None else
             {"level": g.topology.level, "mode": g.topology.mode.value},
             "pods": [_pod_dict(p) for p in g.pods]}
            for g in s.gangs
        ],
        "policy": {
            "weights": {k: getattr(pol.weights, k) for k in WEIGHT_FIELDS},
            "topology_levels": list(pol.topology_levels),
            "qos_classes": [
                {"name": q.name, "sm": q.sm, "membw": q.membw, "memory_mib": q.memory_mib,
                 "latency_sensitive": q.latency_sensitive, "solo_latency_ms": q.solo_latency_ms,
                 "slo_ms": q.slo_ms, "exclusive": q.exclusive,
                 "no_share_with": sorted(q.no_share_with)}
                for q in pol.qos_classes
            ],
            "idle_watts": dict(pol.idle_watts),
            "active_watts": dict(pol.active_watts),
            "typical_pods": [
                {"cpu_milli": t.cpu_milli, "gpu_count": t.gpu_count, "gpu_milli": t.gpu_milli,
                 "models": sorted(t.models), "weight": t.weight}
                for t in pol.typical_pods
            ],
            "reservations": {"max_gangs": pol.reservations.max_gangs,
                             "after_s": pol.reservations.after_s,
                             "horizon_s": pol.reservations.horizon_s,
                             "hold_ahead_s": pol.reservations.hold_ahead_s,
                             "keep": pol.reservations.keep},
            "reclaim": {"enabled": pol.reclaim.enabled, "min_run_s": pol.reclaim.min_run_s,
                        "max_gangs": pol.reclaim.max_gangs},
            "fair_sharing": {"half_life_s": pol.fair_sharing.half_life_s,
                             "boost": pol.fair_sharing.boost},
            "target_workload": {"half_life_s": pol.target_workload.half_life_s},
            "queueing": {"short_run_bonus": pol.queueing.short_run_bonus,
                         "short_run_s": pol.queueing.short_run_s,
                         "keep_order_after_s": pol.queueing.keep_order_after_s},
        },
    }
