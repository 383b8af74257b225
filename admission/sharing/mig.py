"""MIG with the device plugin's mixed strategy: a share becomes ``nvidia.com/mig-<profile>: 1``.

The smallest profile whose compute share and memory both hold the request is chosen; the pod
then holds that profile's share, which is what the plan must account for. A pod asking for a
profile of the policy directly holds that profile's share.
"""

from __future__ import annotations

from collections.abc import Mapping

from admission.constants import RESOURCE_GPU, RESOURCE_MIG_PREFIX
from admission.policy import Mig, MigProfile
from admission.sharing.base import Reading, SharingError, Translation, plain_whole


def _held(p: MigProfile) -> int:
    """The milli-GPU a profile holds (1/7 of a GPU: 143)."""
    return min(1000, max(1, round(p.fraction * 1000)))


class MigAdapter:
    name = "mig"

    def __init__(self, config: Mig) -> None:
        self.profiles = sorted(config.profiles, key=lambda p: (p.fraction, p.memory_mib))
        self.by_resource = {f"{RESOURCE_MIG_PREFIX}{p.name}": p for p in self.profiles}
        self.resources = frozenset(self.by_resource)

    def share(self, milli: int, memory_mib: int) -> Translation:
        for p in self.profiles:
            if _held(p) >= milli and p.memory_mib >= memory_mib:
                return Translation(milli=_held(p),
                                   resources=((f"{RESOURCE_MIG_PREFIX}{p.name}", 1),),
                                   remove=(RESOURCE_GPU,))
        raise SharingError(
            f"no MIG profile holds a {milli / 1000:g} share with {memory_mib} MiB; "
            f"profiles: {self._names()}"
        )

    def whole(self, count: int) -> Translation:
        return plain_whole(count)

    def read(self, values: Mapping[str, int]) -> Reading:
        asked = [k for k in values if k in self.by_resource]
        if RESOURCE_GPU in values or len(asked) != 1:
            raise SharingError(
                f"a container takes one MIG slice or whole GPUs ({RESOURCE_GPU}), not both or "
                f"several; ask for one of: {', '.join(self.by_resource)}")
        key = asked[0]
        if values[key] != 1:
            raise SharingError(f"a pod takes one MIG slice: set {key} to 1, or ask for whole "
                               f"GPUs with {RESOURCE_GPU}")
        held = _held(self.by_resource[key])
        # Kept as written: another profile of the same size (a +me variant) is not the same.
        return Reading(held, 0, Translation(milli=held, resources=((key, 1),)), on_grid=False)

    def _names(self) -> str:
        return ", ".join(f"{p.name} ({p.fraction:.3g})" for p in self.profiles)
