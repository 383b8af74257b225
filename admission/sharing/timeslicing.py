"""NVIDIA device plugin time-slicing: each GPU is advertised as ``replicas`` slots.

A share of ``f`` takes ``f x replicas`` slots of the (usually renamed) shared resource, so the
node's slot count accounts for shares the way Berth's plan does. This needs the device
plugin's ``failRequestsGreaterThanOne: false``. When the shared resource keeps the name
``nvidia.com/gpu``, whole GPUs are counted in slots too.
"""

from __future__ import annotations

from admission.constants import RESOURCE_GPU
from admission.policy import TimeSlicing
from admission.sharing.base import SharingError, Translation, plain_whole


class TimeSlicingAdapter:
    name = "time-slicing"

    def __init__(self, config: TimeSlicing) -> None:
        self.resource = config.resource_name
        self.replicas = config.replicas

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
