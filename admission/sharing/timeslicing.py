"""NVIDIA device plugin time-slicing: each GPU is advertised as ``replicas`` slots.

A share of ``f`` takes ``f x replicas`` slots of the (usually renamed) shared resource, so the
node's slot count accounts for shares the way Berth's plan does. This needs the device
plugin's ``failRequestsGreaterThanOne: false``. When the shared resource keeps the name
``nvidia.com/gpu``, whole GPUs are counted in slots too. A pod asking for ``N`` slots of the
renamed resource directly holds ``N / replicas`` of a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping

from admission.constants import RESOURCE_GPU
from admission.policy import TimeSlicing
from admission.sharing.base import Reading, SharingError, Translation, plain_whole, use_fraction


class TimeSlicingAdapter:
    name = "time-slicing"

    def __init__(self, config: TimeSlicing) -> None:
        self.resource = config.resource_name
        self.replicas = config.replicas
        # Slots of nvidia.com/gpu itself are whole GPUs in Berth's vocabulary: nothing to read.
        self.resources = (frozenset() if self.resource == RESOURCE_GPU
                          else frozenset({self.resource}))

    def share(self, milli: int, memory_mib: int) -> Translation:
        slots = milli * self.replicas / 1000
        if abs(slots - round(slots)) > 1e-6 or round(slots) < 1:
            raise SharingError(
                f"a {milli / 1000:g} share is {slots:g} time-slicing slots; "
                f"use a multiple of 1/{self.replicas}"
            )
        remove = (RESOURCE_GPU,) if self.resource != RESOURCE_GPU else ()
        return Translation(milli=milli, resources=((self.resource, round(slots)),), remove=remove)

    def whole(self, count: int) -> Translation:
        if self.resource == RESOURCE_GPU:
            return Translation(milli=1000, resources=((RESOURCE_GPU, count * self.replicas),))
        return plain_whole(count)

    def read(self, values: Mapping[str, int]) -> Reading:
        if RESOURCE_GPU in values:
            raise SharingError(use_fraction(
                f"{RESOURCE_GPU} and {self.resource} in one container: the first is whole "
                "GPUs, the second slots of a shared one"))
        slots = values[self.resource]
        if not 1 <= slots < self.replicas:
            raise SharingError(
                f"{slots} slots is not a share of one GPU (each GPU has {self.replicas}): ask "
                f"for 1 to {self.replicas - 1} slots, or for whole GPUs with {RESOURCE_GPU}")
        milli = round(slots * 1000 / self.replicas)
        return Reading(milli, 0, Translation(milli=milli, resources=((self.resource, slots),)))
