"""Free capacity derived from a snapshot, as plain per-node records: what is left on each node
and GPU after what runs.

The checker judges a plan on these records (:func:`node_free` for each node the plan uses,
less what runs there), apart from the numpy :class:`~solver.baselines.ClusterArrays` that the
baselines and the CP-SAT model place into, so a mistake in one derivation shows up against the
other. :func:`free_capacity` derives the whole cluster: the tests hold the arrays to it, and
reservations (:mod:`solver.reserve`) measure what is free now with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from solver.types import MILLI, Node, Snapshot


@dataclass(slots=True)
class NodeFree:
    cpu_milli: int
    memory_mib: int
    gpu_milli: dict[int, int]  # GPU index -> free milli-GPU
    gpu_memory_mib: dict[int, int] = field(default_factory=dict)  # GPU index -> free GPU memory
    gpu_classes: dict[int, list[str]] = field(default_factory=dict)  # QoS classes on each GPU

    def copy(self) -> NodeFree:
        return NodeFree(
            self.cpu_milli,
            self.memory_mib,
            dict(self.gpu_milli),
            dict(self.gpu_memory_mib),
            {k: list(v) for k, v in self.gpu_classes.items()},
        )


FreeState = dict[str, NodeFree]


def node_free(node: Node) -> NodeFree:
    return NodeFree(
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        gpu_milli={g.index: MILLI for g in node.gpus},
        gpu_memory_mib={g.index: g.memory_mib for g in node.gpus},
        gpu_classes={g.index: [] for g in node.gpus},
    )


def free_capacity(snapshot: Snapshot) -> FreeState:
    """Capacity left on every node once the running pods are subtracted (may go negative when
    the cluster is overcommitted; nothing new fits there then).

    The oracle the tests hold :class:`~solver.baselines.ClusterArrays` to, and what
    :mod:`solver.reserve` holds for a reservation."""
    free = {n.name: node_free(n) for n in snapshot.nodes}
    mem_per_gpu = {n.name: {g.index: g.memory_mib for g in n.gpus} for n in snapshot.nodes}
    for r in snapshot.running:
        f = free[r.node]
        f.cpu_milli -= r.cpu_milli
        f.memory_mib -= r.memory_mib
        for s in r.gpus:
            f.gpu_milli[s.index] -= s.milli
            total = mem_per_gpu[r.node][s.index]
            f.gpu_memory_mib[s.index] -= total * s.milli // MILLI
            if r.qos_class:
                f.gpu_classes[s.index].append(r.qos_class)
    return free
