"""Sharing backends: how a fraction of a GPU is expressed in a pod's resources.

One adapter per backend (time-slicing, MPS, MIG, HAMi, none), chosen by the policy's
``sharing.backend``.
"""

from __future__ import annotations

from admission.policy import Sharing
from admission.sharing.base import Reading, SharingAdapter, SharingError, Translation
from admission.sharing.hami import HamiAdapter
from admission.sharing.mig import MigAdapter
from admission.sharing.mps import MpsAdapter
from admission.sharing.none import NoSharing
from admission.sharing.timeslicing import TimeSlicingAdapter

__all__ = ["Reading", "SharingAdapter", "SharingError", "Translation", "adapter_for"]


def adapter_for(sharing: Sharing) -> SharingAdapter:
    if sharing.backend == "time-slicing":
        return TimeSlicingAdapter(sharing.time_slicing)
    if sharing.backend == "mps":
        return MpsAdapter(sharing.mps)
    if sharing.backend == "mig":
        return MigAdapter(sharing.mig)
    if sharing.backend == "hami":
        return HamiAdapter()
    return NoSharing()
