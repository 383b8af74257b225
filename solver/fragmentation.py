"""GPU fragmentation as the FGD paper measures it (Weng et al., "Beware of Fragmentation", ATC'23).

Why a statistical measure: whether free GPU capacity is usable depends on what will ask for it.
Half a GPU is a fragment for a pod that wants a whole one and none for a pod that wants a
quarter. FGD therefore measures a node's fragmentation against a *target workload*, the typical
pod shapes with their popularity, and places each pod where the expected fragmentation grows
least.

Definitions (milli-GPU units). For node n with free CPU ``c_n``, GPU model and per-GPU free
shares ``r_1..r_G``, and a typical pod m asking ``c_m`` CPU and ``k_m`` GPUs of ``d_m`` each:

- m *cannot run* on n when ``c_m > c_n``, or its GPU models exclude n's model, or fewer than
  ``k_m`` GPUs have ``r_g >= d_m``. Then every free GPU share on n is a fragment for m:
  ``F_n(m) = sum_g r_g``.
- Otherwise the fragments are the GPUs too small for m: ``F_n(m) = sum_{g: r_g < d_m} r_g``.
- A CPU-only typical pod can use no GPU, so every free GPU share is a fragment for it, whether
  its CPU fits or not: ``F_n(m) = sum_g r_g``. (The paper's public simulator counts it so: its
  "CPU pod satisfied" class is not the "satisfied" one that is left out of the fragment sum.)
  Such pods therefore add ``p_m x`` the free GPU to every node, which never changes which node
  a GPU pod prefers, and leave a CPU-only pod's own choice to the GPU typical pods.
- Expected fragmentation ``F_n(M) = sum_m p_m F_n(m)`` with ``p_m`` the popularity of m.
- FGD places a pod on the node (and GPU) minimising ``F_n'(M) - F_n(M)``, n' being n after the
  placement.

Memory is not part of the measure (it is not in the paper's either); placement still checks it.

:class:`FragTable` evaluates the measure for many nodes at once with numpy: per *GPU profile*
``(d, k)`` it keeps the count of GPUs with ``r >= d`` and their sum, so a candidate placement
changes a few numbers instead of re-scanning every typical pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from solver.types import PodRequest, TypicalPod

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: Share of all pods the typical shapes must cover (the paper's popularity threshold).
DEFAULT_COVERAGE = 0.95


def typical_pods(
    pods: Iterable[PodRequest], coverage: float = DEFAULT_COVERAGE
) -> tuple[TypicalPod, ...]:
    """The most popular pod shapes (CPU, GPU count, per-GPU share, models) that together cover
    ``coverage`` of ``pods``, each weighted by its share of all pods. CPU-only pods count, as
    in the paper's simulator: they are part of what arrives."""
    counts: Counter[tuple[int, int, int, frozenset[str]]] = Counter(
        (p.cpu_milli, p.gpu_count, p.gpu_milli, p.models if p.gpu_count else frozenset())
        for p in pods
    )
    total = sum(counts.values())
    if total == 0:
        return ()
    # most popular first; equal counts put the larger shape first (CPU, then per-GPU share,
    # then GPU count), as the paper's simulator orders them, which decides the cut
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0][0], kv[0][2], kv[0][1],
                                                    "|".join(sorted(kv[0][3]))), reverse=True)
    out: list[TypicalPod] = []
    covered = 0
    for (cpu, count, milli, models), n in ranked:
        out.append(TypicalPod(cpu_milli=cpu, gpu_count=count, gpu_milli=milli, models=models,
                              weight=n / total))
        covered += n
        if covered >= coverage * total:
            break
    return tuple(out)


def pod_fragmentation(
    cpu_free: int, model: str | None, gpu_free: Sequence[int], pod: TypicalPod
) -> int:
    """``F_n(m)``: the free GPU milli on a node that typical pod ``pod`` cannot use."""
    free = [max(0, r) for r in gpu_free]
    total = sum(free)
    if pod.gpu_count == 0:
        return total  # a CPU-only pod uses no GPU: all of it is a fragment for it
    model_ok = model is not None and (not pod.models or model in pod.models)
    fits = sum(1 for r in free if r >= pod.gpu_milli) >= pod.gpu_count
    if pod.cpu_milli > cpu_free or not model_ok or not fits:
        return total
    return sum(r for r in free if r < pod.gpu_milli)


def node_fragmentation(
    cpu_free: int, model: str | None, gpu_free: Sequence[int], workload: Sequence[TypicalPod]
) -> float:
    """``F_n(M)``: the expected fragmentation of one node against the target workload (the
    reference definition; :class:`FragTable` computes the same in bulk). Used by the tests
    only, as the oracle FragTable is held to."""
    return sum(p.weight * pod_fragmentation(cpu_free, model, gpu_free, p) for p in workload)


class FragTable:
    """The target workload compiled for vectorised evaluation over nodes.

    ``models`` names the GPU models by index; a node's model index is ``len(models)`` when it
    has no GPU. Typical pods are grouped into GPU profiles ``(d_q, k_q)``; ``weights[q, i, j]``
    is the popularity of the pods of profile q that fit a node of model i whose free CPU
    reaches the j-th smallest CPU request (``cpu_steps``).
    """

    def __init__(self, workload: Sequence[TypicalPod], models: Sequence[str]) -> None:
        profiles = sorted({(p.gpu_milli, p.gpu_count) for p in workload})
        if not profiles:
            profiles = [(0, 0)]
        self.d: IntArray = np.array([d for d, _ in profiles], dtype=np.int64)
        self.k: IntArray = np.array([k for _, k in profiles], dtype=np.int64)
        self.cpu_steps: IntArray = np.array(sorted({p.cpu_milli for p in workload}) or [0],
                                            dtype=np.int64)
        q_of = {prof: i for i, prof in enumerate(profiles)}
        n_models = len(models)
        steps = len(self.cpu_steps)
        w = np.zeros((len(profiles), n_models + 1, steps + 1), dtype=np.float64)
        for p in workload:
            if p.gpu_count == 0:
                continue  # uses no GPU anywhere: its fragment is always the whole free GPU
            q = q_of[(p.gpu_milli, p.gpu_count)]
            j = int(np.searchsorted(self.cpu_steps, p.cpu_milli)) + 1
            for i, name in enumerate(models):
                if not p.models or name in p.models:
                    w[q, i, j] += p.weight
        self.weights: FloatArray = np.cumsum(w, axis=2)
        self.total_weight = float(sum(p.weight for p in workload))

    def stats(self, gpu_free: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        """Per node (rows of ``gpu_free``, missing GPUs as 0): GPUs with ``r >= d_q``, their
        free sum, per profile; and the total free."""
        r = np.maximum(gpu_free, 0)[..., None]
        big = r >= self.d
        cnt = big.sum(axis=-2).astype(np.int64)
        usable = (r * big).sum(axis=-2).astype(np.int64)
        return cnt, usable, r[..., 0].sum(axis=-1).astype(np.int64)

    def expected(
        self,
        cnt: IntArray,
        usable: IntArray,
        total: IntArray,
        model: IntArray,
        cpu_free: IntArray,
    ) -> FloatArray:
        """``F_n(M) = sum_m p_m F_n(m)`` for every row of :meth:`stats`: every typical pod sees
        ``total`` as fragment, less what the pods able to run there could use."""
        out: FloatArray = self.total_weight * total - self.usable_mass(cnt, usable, model,
                                                                        cpu_free)
        return out

    def fit_weights(self, model: IntArray, cpu_free: IntArray) -> FloatArray:
        """``(rows, Q)``: per node, the popularity of the typical pods of each GPU profile whose
        CPU and model fit (GPU fit aside)."""
        j = np.searchsorted(self.cpu_steps, cpu_free, side="right")
        out: FloatArray = self.weights[:, model, j].T
        return out

    def usable_mass(
        self, cnt: IntArray, usable: IntArray, model: IntArray, cpu_free: IntArray
    ) -> FloatArray:
        """``sum_m p_m [m fits] usable_m``: the popularity-weighted free GPU that pods able to
        run on the node could use."""
        j = np.searchsorted(self.cpu_steps, cpu_free, side="right")
        w = np.moveaxis(self.weights[:, model, j], 0, -1)
        fits = cnt >= self.k
        out: FloatArray = (fits * usable * w).sum(axis=-1)
        return out

