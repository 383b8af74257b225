"""The pricing problem of the pattern bound: the most profitable way to fill ONE node.

Given a profit per pod class (its GPU demand less the prices the pattern LP puts on it), find
the multiset of pods that fits one node of a kind and earns the most. The answer's value is
used as an upper bound (see :mod:`solver.simulate.bound.patterns`), so it must never be below
the best real pattern's. It is exact for a slightly relaxed node, solved by dynamic
programming in numpy:

- GPUs exactly: a whole-GPU pod of ``k`` GPUs takes ``k`` GPUs that nothing else uses; sharing
  pods take their ``milli`` of one GPU, and the shares on one GPU sum to at most 1000. Models
  decide which classes may use the kind at all.
- CPU per node, in units of ``unit`` milli-CPU: a pod counts ``floor(cpu / unit)`` units and
  the node holds ``floor(capacity / unit)``. Rounding every request down can only let more
  fit (the floors of a sum's terms never exceed the floor of the sum), so every real pattern
  stays a pattern. Share sizes are rounded down the same way when their common divisor is too
  fine for a small table.
- Memory is not checked per node; the pattern LP holds it per node kind (pooled), together with
  the exact CPU, and passes their prices into the profits.
- How many pods of a class arrived is left to the pattern LP.

Two tables: ``share[m, w]``, the best profit of sharing pods on one GPU using at most ``m``
share units and ``w`` CPU units (an unbounded knapsack); then ``node[g, w]``, the best profit on
``g`` GPUs with at most ``w`` CPU units, each GPU either a share-GPU (a max-plus convolution with
``share[full]``) or part of a whole-GPU pod. Both start from zero everywhere, so each entry is
the best over everything that fits *within* its budget. The pattern is read back from the
tables.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from solver.types import MILLI

#: The CPU table has at most this many units per node.
CPU_STEPS = 1000
#: The share table has at most this many units per GPU.
SHARE_STEPS = 200


@dataclass(frozen=True, slots=True)
class PodClass:
    """Arrived pods that are interchangeable for packing; ``count`` of them arrived."""

    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_milli: int  # per GPU; 1000 for whole-GPU pods
    models: frozenset[str]
    count: int

    @property
    def demand_milli(self) -> int:
        return self.gpu_count * self.gpu_milli

    @property
    def whole(self) -> bool:
        return self.gpu_milli >= MILLI


@dataclass(frozen=True, slots=True)
class NodeKind:
    """Nodes that are interchangeable for packing; ``count`` of them in the cluster."""

    models: frozenset[str]
    gpus: int
    cpu_milli: int
    memory_mib: int
    count: int

    def most(self, c: PodClass) -> int:
        """How many pods of ``c`` fit one empty node of this kind (GPUs, CPU, memory)."""
        n = (self.gpus // c.gpu_count) * (1 if c.whole else MILLI // c.gpu_milli)
        if c.cpu_milli:
            n = min(n, self.cpu_milli // c.cpu_milli)
        if c.memory_mib:
            n = min(n, self.memory_mib // c.memory_mib)
        return n

    def admits(self, c: PodClass) -> bool:
        """Whether pods of ``c`` can run on this kind of node at all (when it is empty)."""
        return (c.gpu_count <= self.gpus and c.cpu_milli <= self.cpu_milli
                and c.memory_mib <= self.memory_mib
                and (not c.models or bool(c.models & self.models)))


@dataclass(frozen=True, slots=True)
class Priced:
    """The pricing answer for one kind: the best pattern (class index -> pods) and its profit,
    the most any pattern of the (relaxed) node earns, in milli-GPU."""

    pattern: dict[int, int]
    profit: float


def price(kind: NodeKind, classes: Sequence[PodClass], profits: Sequence[float]) -> Priced:
    """The most profitable pattern for one node of ``kind``. ``profits[i]`` is what one pod of
    ``classes[i]`` earns; classes that earn nothing or cannot run on the kind are left out."""
    cand = [i for i, c in enumerate(classes) if profits[i] > 0 and kind.admits(c)]
    if not cand:
        return Priced({}, 0.0)
    unit = max(1, -(-kind.cpu_milli // CPU_STEPS))
    cap = kind.cpu_milli // unit
    cpu = {i: classes[i].cpu_milli // unit for i in cand}
    cand = _undominated(cand, classes, profits, cpu)
    shares = [i for i in cand if not classes[i].whole]
    whole = [i for i in cand if classes[i].whole]
    step = _share_unit([classes[i].gpu_milli for i in shares])
    full = MILLI // step
    size = {i: classes[i].gpu_milli // step for i in shares}
    # share[m, w]: best profit of sharing pods on one GPU within m share units, w CPU units
    share = np.zeros((full + 1, cap + 1))
    for i in shares:
        q, c, r = size[i], cpu[i], profits[i]
        for m in range(q, full + 1):  # ascending m: a class may repeat (unbounded)
            np.maximum(share[m, c:], share[m - q, : cap + 1 - c] + r, out=share[m, c:])
    one_gpu = share[full]
    # node[g, w]: best profit on g GPUs within w CPU units
    node = np.zeros((kind.gpus + 1, cap + 1))
    for g in range(1, kind.gpus + 1):
        node[g] = _max_plus(node[g - 1], one_gpu)
        for i in whole:
            k, c, r = classes[i].gpu_count, cpu[i], profits[i]
            if k <= g:
                np.maximum(node[g, c:], node[g - k, : cap + 1 - c] + r, out=node[g, c:])
    pattern = _read_back(node, share, one_gpu, kind.gpus, cap, whole, shares, full,
                         size, cpu, classes, profits)
    return Priced(pattern, float(node[kind.gpus, cap]))


def _undominated(cand: list[int], classes: Sequence[PodClass], profits: Sequence[float],
                 cpu: dict[int, int]) -> list[int]:
    """Drop a class when another of the same GPU shape takes no more CPU units and earns at
    least as much: swapping it in never hurts, so the best value is unchanged."""
    keep: list[int] = []
    by_shape: dict[tuple[int, int], list[int]] = {}
    for i in cand:
        by_shape.setdefault((classes[i].gpu_count, classes[i].gpu_milli), []).append(i)
    for group in by_shape.values():
        best = -math.inf
        for i in sorted(group, key=lambda i: (cpu[i], -profits[i])):
            if profits[i] > best:  # earns more than every class with fewer CPU units
                keep.append(i)
                best = profits[i]
    return sorted(keep)


def _share_unit(sizes: Sequence[int]) -> int:
    """The share table's unit: the sizes' common divisor with 1000, or a coarser divisor of
    1000 (sizes then round down) when that would make the table too long and every size is at
    least one unit."""
    g = MILLI
    for s in sizes:
        g = math.gcd(g, s)
    if MILLI // g <= SHARE_STEPS:
        return g
    coarse = next(d for d in range(1, MILLI + 1) if MILLI % d == 0 and MILLI // d <= SHARE_STEPS)
    return coarse if coarse <= min(sizes) else g


def _max_plus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """out[w] = max over v <= w of a[w - v] + b[v], for non-decreasing ``a`` and ``b``: only
    the ``v`` where ``b`` steps up can win, and there are few of them."""
    out: np.ndarray = a + b[0]
    for v in np.flatnonzero(np.diff(b) > 0) + 1:
        np.maximum(out[v:], a[: a.shape[0] - v] + b[v], out=out[v:])
    return out


def _read_back(node: np.ndarray, share: np.ndarray, one_gpu: np.ndarray, gpus: int, cap: int,
               whole: list[int], shares: list[int], full: int, size: dict[int, int],
               cpu: dict[int, int], classes: Sequence[PodClass],
               profits: Sequence[float]) -> dict[int, int]:
    """The pattern behind ``node[gpus, cap]``: retrace each entry to the step that made it (a
    whole-GPU pod, or one GPU of shares and the CPU it took). Any pattern read back fits the
    relaxed node, whatever round-off does to the choice."""
    pattern: dict[int, int] = {}
    g, w = gpus, cap
    while g > 0 and node[g, w] > 0:
        value = node[g, w]
        step = next((i for i in whole if classes[i].gpu_count <= g and cpu[i] <= w
                     and _same(node[g - classes[i].gpu_count, w - cpu[i]] + profits[i],
                               value)), None)
        if step is not None:
            pattern[step] = pattern.get(step, 0) + 1
            g, w = g - classes[step].gpu_count, w - cpu[step]
            continue
        v = int(np.argmax(node[g - 1, w::-1] + one_gpu[: w + 1]))  # CPU units of this GPU
        m, u = full, v
        while share[m, u] > 0:  # the GPU's shares, one at a time
            fits = [i for i in shares if size[i] <= m and cpu[i] <= u]
            if not fits:
                break
            i = max(fits, key=lambda i: share[m - size[i], u - cpu[i]] + profits[i])
            pattern[i] = pattern.get(i, 0) + 1
            m, u = m - size[i], u - cpu[i]
        g, w = g - 1, w - v
    return pattern


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))
