"""Fake GPU nodes for the local control plane, managed by kwok.

A node carries what Berth's inventory reads from a real GPU node: ``nvidia.com/gpu`` in its
capacity, the GPU Feature Discovery labels for model, memory and count, and the topology labels
that place it in an NVLink domain, a rack and a block. kwok manages only nodes with the
``kwok.x-k8s.io/node: fake`` annotation, keeps them Ready and runs the pods bound to them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from admission.agent.schema import ANNOTATION_GPUS

# GPU Feature Discovery labels, as the NVIDIA GPU operator writes them on real nodes.
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"  # MiB per GPU
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
GPU_RESOURCE = "nvidia.com/gpu"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"

# Topology levels -> node label keys, as the default policy's topology levels name them
# (config/policy/sample-policy.yaml). "clique" is the label GPU Feature Discovery writes on
# multi-node NVLink systems (GB200 NVL72); NVLink domains inside a node travel per GPU in the
# agent's annotation instead.
TOPOLOGY_LABELS: Mapping[str, str] = {
    "clique": "nvidia.com/gpu.clique",
    "rack": "topology.kubernetes.io/rack",
    "block": "topology.kubernetes.io/block",
}
KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
# kwok's own taint key is not needed: pods tolerate nothing special and the fake nodes are the
# only nodes, so scheduling onto them is the point.


@dataclass(frozen=True)
class FakeGpuNode:
    name: str
    gpus: int = 8
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    gpu_memory_mib: int = 81559
    nvlink_domains: int = 1  # NVLink domains inside the node; GPUs split evenly between them
    # Time-slicing slots per GPU advertised as nvidia.com/gpu.shared (0: none), as the NVIDIA
    # device plugin does with a renamed shared resource; fractional pods request these.
    shared_slots_per_gpu: int = 0
    topology: Mapping[str, str] = field(default_factory=dict)  # level -> domain name
    cpu: str = "128"
    memory: str = "1024Gi"
    pods: str = "110"
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()

    def manifest(self, topology_labels: Mapping[str, str] = TOPOLOGY_LABELS) -> dict[str, Any]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            LABEL_GPU_PRODUCT: self.gpu_product,
            LABEL_GPU_MEMORY: str(self.gpu_memory_mib),
            LABEL_GPU_COUNT: str(self.gpus),
        }
        for level, domain in self.topology.items():
            if level not in topology_labels:
                raise ValueError(f"node {self.name}: unknown topology level {level!r} "
                                 f"(known: {', '.join(sorted(topology_labels))})")
            labels[topology_labels[level]] = domain
        labels.update(self.labels)
        # What the node agent would publish: one entry per GPU with its node-local NVLink domain.
        per_domain = max(1, self.gpus // max(1, self.nvlink_domains))
        gpus = [{"index": i, "model": self.gpu_product, "memory_mib": self.gpu_memory_mib,
                 "nvlink_domain": f"nvl{min(i // per_domain, self.nvlink_domains - 1)}",
                 "mig": []} for i in range(self.gpus)]
        annotations = {**KWOK_ANNOTATION, ANNOTATION_GPUS: json.dumps(gpus)}
        resources = {"cpu": self.cpu, "memory": self.memory, "pods": self.pods,
                     GPU_RESOURCE: str(self.gpus)}
        if self.shared_slots_per_gpu:
            resources[SHARED_GPU_RESOURCE] = str(self.gpus * self.shared_slots_per_gpu)
        spec: dict[str, Any] = {}
        if self.taints:
            spec["taints"] = [dict(t) for t in self.taints]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels, "annotations": annotations},
            "spec": spec,
            # Status may be set on create; kwok then keeps the conditions and lease fresh.
            "status": {"capacity": resources, "allocatable": dict(resources)},
        }


def gpu_fleet(
    *,
    blocks: int = 1,
    racks_per_block: int = 2,
    nodes_per_rack: int = 2,
    gpus_per_node: int = 8,
    nvlink_domains_per_node: int = 1,
    shared_slots_per_gpu: int = 0,
    gpu_product: str = "NVIDIA-H100-80GB-HBM3",
    gpu_memory_mib: int = 81559,
    prefix: str = "gpu",
) -> list[FakeGpuNode]:
    """A regular tree: blocks > racks > nodes > NVLink domains > GPUs, nodes named by position
    (``gpu-b0-r1-n1``) so that a test can tell from a node name where it sits."""
    nodes = []
    for b in range(blocks):
        for r in range(racks_per_block):
            rack = f"b{b}-r{r}"
            for n in range(nodes_per_rack):
                nodes.append(FakeGpuNode(
                    name=f"{prefix}-{rack}-n{n}",
                    gpus=gpus_per_node,
                    gpu_product=gpu_product,
                    gpu_memory_mib=gpu_memory_mib,
                    nvlink_domains=nvlink_domains_per_node,
                    shared_slots_per_gpu=shared_slots_per_gpu,
                    topology={"block": f"b{b}", "rack": rack},
                ))
    return nodes


def create_nodes(core_v1: Any, nodes: Iterable[FakeGpuNode]) -> list[str]:
    """Create the nodes through a ``kubernetes.client.CoreV1Api``; returns their names."""
    names = []
    for node in nodes:
        core_v1.create_node(node.manifest())
        names.append(node.name)
    return names
