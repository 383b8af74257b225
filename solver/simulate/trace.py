"""Rows of the Alibaba openb trace (node lists and pod lists), already read as text, turned into
problem types.

The files themselves are read in ``admission/simulate/tracefiles.py``; this module only
interprets one row at a time and says which column is wrong, so the reader can name file, line
and column.
Column meanings are those of the trace's README (``../shared/data/alibaba-gpu-v2023``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from solver.schema import MAX_VALUE
from solver.simulate.timed_scenario import TracePod
from solver.types import GPU, MILLI, Node, PodRequest, ProblemError

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
#: Most GPUs on one node, or asked for by one pod (as in a snapshot).
MAX_GPUS = 64
#: Latest creation or deletion time, in seconds (about 300 years).
MAX_TIME_S = 10**10


class RowError(ValueError):
    """A value in ``column`` cannot be used; ``message`` says why and what is expected."""

    def __init__(self, column: str, message: str) -> None:
        super().__init__(f"column {column}: {message}")
        self.column = column
        self.message = message


def _int(row: Mapping[str, str], column: str, *, default: int | None = None,
         hi: int = MAX_VALUE) -> int:
    """A whole number in ``0..hi``, written as an integer or as a float (``1e3``, ``4.0``)."""
    raw = (row.get(column) or "").strip()
    if not raw:
        if default is not None:
            return default
        raise RowError(column, "is empty; expected a whole number")
    shown = raw if len(raw) <= 24 else raw[:21] + "..."
    if len(raw) > 64:
        raise RowError(column, f"{shown!r} ({len(raw)} characters) is not a number in 0..{hi}")
    try:
        value: float = int(raw)
    except ValueError:
        try:
            value = float(raw)
        except ValueError:
            raise RowError(column, f"{shown!r} is not a number") from None
    if not math.isfinite(value) or value != int(value) or value < 0:
        raise RowError(column, f"{shown!r} must be a whole number >= 0")
    if value > hi:
        raise RowError(column, f"{shown!r} is too large: at most {hi}")
    return int(value)


def node_from_row(row: Mapping[str, str]) -> Node:
    """A node-list row: ``sn, cpu_milli, memory_mib, gpu, model``."""
    name = (row.get("sn") or "").strip()
    if not name:
        raise RowError("sn", "is empty; every node needs a name")
    gpus = _int(row, "gpu", default=0, hi=MAX_GPUS)
    model = (row.get("model") or "").strip()
    if gpus and not model:
        raise RowError("model", f"node {name} has {gpus} GPU(s) but no model")
    try:
        return Node(
            name=name,
            cpu_milli=_int(row, "cpu_milli"),
            memory_mib=_int(row, "memory_mib"),
            gpus=tuple(GPU(index=i, model=model) for i in range(gpus)),
        )
    except ProblemError as exc:
        raise RowError(exc.path, exc.message) from None


def pod_from_row(row: Mapping[str, str]) -> TracePod:
    """A pod-list row; the time and QoS columns are optional (the multigpu lists lack them)."""
    name = (row.get("name") or "").strip()
    if not name:
        raise RowError("name", "is empty; every pod needs a name")
    num_gpu = _int(row, "num_gpu", default=0, hi=MAX_GPUS)
    gpu_milli = _int(row, "gpu_milli", default=0)
    if num_gpu == 0:
        gpu_milli = 0
    elif not 0 < gpu_milli <= MILLI:
        raise RowError("gpu_milli", f"{gpu_milli} must be in 1..1000 for a GPU pod")
    elif num_gpu > 1 and gpu_milli != MILLI:
        raise RowError("gpu_milli", f"a pod with {num_gpu} GPUs takes them whole; expected 1000")
    spec = (row.get("gpu_spec") or "").strip()
    models = frozenset(m for m in spec.split("|") if m) if num_gpu else frozenset()
    creation = _int(row, "creation_time", default=0, hi=MAX_TIME_S)
    deletion = _int(row, "deletion_time", default=creation, hi=MAX_TIME_S)
    return TracePod(
        name=name,
        cpu_milli=_int(row, "cpu_milli"),
        memory_mib=_int(row, "memory_mib"),
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        models=models,
        qos=(row.get("qos") or "").strip(),
        creation_time=creation,
        deletion_time=deletion,
    )


def pod_request(pod: TracePod) -> PodRequest:
    """The pod's resource request, without QoS class (the FGD protocol ignores it)."""
    return PodRequest(
        name=pod.name,
        cpu_milli=pod.cpu_milli,
        memory_mib=pod.memory_mib,
        gpu_count=pod.num_gpu,
        gpu_milli=pod.gpu_milli,
        models=pod.models,
    )
