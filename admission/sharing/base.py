"""What a sharing backend turns a GPU demand into: container resources and env; and what a pod
that asks in the backend's own resources is asking for.

Resources are immutable once a pod exists (KEP-3838), so the webhook translates a fraction into
the backend's vocabulary at CREATE. Each backend is one small adapter: two methods that
translate a share or whole GPUs, and one that reads its own resources back into a share, so a
pod written for the device plugin directly is screened like one written in Berth's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from admission.constants import ANNOTATION_FRACTION, RESOURCE_GPU


class SharingError(ValueError):
    """The backend cannot express this demand; the message says what it can express."""


@dataclass(frozen=True, slots=True)
class Translation:
    """Resources to set on the GPU container (limits, and requests where present), resources to
    drop from it, env vars to add, and the share of the GPU the pod will really hold."""

    milli: int
    resources: tuple[tuple[str, int], ...] = ()
    remove: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Reading:
    """A share of one GPU that a container asked for in the backend's own resources: the
    share it holds, the GPU memory it named, and the translation that keeps the resources as
    the pod wrote them."""

    milli: int
    memory_mib: int
    translation: Translation
    on_grid: bool = True  # the share must be one of the policy's fractionGrid values


class SharingAdapter(Protocol):
    name: str
    # The resources of this backend a pod may ask for directly (read back by :meth:`read`).
    resources: frozenset[str]

    def share(self, milli: int, memory_mib: int) -> Translation:
        """A share of one GPU (``milli`` < 1000), optionally with GPU memory in MiB."""
        ...

    def whole(self, count: int) -> Translation:
        """``count`` whole GPUs."""
        ...

    def read(self, values: Mapping[str, int]) -> Reading:
        """The share one container asks for in this backend's resources (``values``: its GPU
        resources, ``nvidia.com/gpu`` included when present); :class:`SharingError` with the
        fix when it is not a share this backend can hold."""
        ...


def plain_whole(count: int) -> Translation:
    return Translation(milli=1000, resources=((RESOURCE_GPU, count),))


def use_fraction(what: str) -> str:
    """The fix for a share asked for in a way the backend cannot read back."""
    return (f"{what}; ask for a share with the annotation {ANNOTATION_FRACTION} (e.g. \"0.5\") "
            f"and Berth sets the resources, or for whole GPUs with {RESOURCE_GPU}")
