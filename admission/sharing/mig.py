"""MIG with the device plugin's mixed strategy: a share becomes ``nvidia.com/mig-<profile>: 1``.

The smallest profile whose compute share and memory both hold the request is chosen; the pod
then holds that profile's share, which is what the plan must account for.
"""

from __future__ import annotations

from admission.constants import RESOURCE_GPU
from admission.policy import Mig
from admission.sharing.base import SharingError, Translation, plain_whole


class MigAdapter:
    name = "mig"

    def __init__(self, config: Mig) -> None:
        self.profiles = sorted(config.profiles, key=lambda p: (p.fraction, p.memory_mib))

    def share(self, milli: int, memory_mib: int) -> Translation:
        for p in self.profiles:
            if p.fraction * 1000 >= milli - 1e-6 and p.memory_mib >= memory_mib:
                held = min(1000, max(1, round(p.fraction * 1000)))
                return Translation(milli=held, resources=((f"nvidia.com/mig-{p.name}", 1),),
                                   remove=(RESOURCE_GPU,))
        names = ", ".join(f"{p.name} ({p.fraction:.3g})" for p in self.profiles)
        raise SharingError(
            f"no MIG profile holds a {milli / 1000:g} share with {memory_mib} MiB; "
            f"profiles: {names}"
        )

    def whole(self, count: int) -> Translation:
        return plain_whole(count)
