"""NVIDIA device plugin MPS: the pod takes one MPS slot and limits itself through MPS env.

``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` caps its share of the SMs and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` its GPU memory; both are read by the CUDA runtime when the
client connects to the node's MPS daemon. The slot says nothing about the share, so a pod that
asks for the slot itself is refused with the annotation to use: Berth sets the slot and the env.
"""

from __future__ import annotations

from collections.abc import Mapping

from admission.constants import RESOURCE_GPU
from admission.policy import Mps
from admission.sharing.base import Reading, SharingError, Translation, plain_whole, use_fraction


class MpsAdapter:
    name = "mps"

    def __init__(self, config: Mps) -> None:
        self.resource = config.resource_name
        self.resources = (frozenset() if self.resource == RESOURCE_GPU
                          else frozenset({self.resource}))

    def share(self, milli: int, memory_mib: int) -> Translation:
        env = [("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", str(max(1, round(milli / 10))))]
        if memory_mib:
            env.append(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", f"0={memory_mib}M"))
        remove = (RESOURCE_GPU,) if self.resource != RESOURCE_GPU else ()
        return Translation(milli=milli, resources=((self.resource, 1),), remove=remove,
                           env=tuple(env))

    def whole(self, count: int) -> Translation:
        return plain_whole(count)

    def read(self, values: Mapping[str, int]) -> Reading:
        raise SharingError(use_fraction(
            f"an MPS slot ({self.resource}) does not say how much of the GPU the pod takes"))
