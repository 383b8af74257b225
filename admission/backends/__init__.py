"""Release backends: where a released pod queues once Berth opens its gate.

- ``standalone``: the default kube-scheduler binds the pod within the node affinity Berth wrote.
- ``kueue``: the pod carries its tenant's LocalQueue label and Kueue's pod-group keys; Kueue's
  gate and Berth's gate coexist and each tool removes only its own (see :mod:`.kueue`).
- ``volcano``: the pod runs under ``schedulerName: volcano`` in a PodGroup with ``minMember``
  equal to the gang size, in its tenant's Volcano queue (see :mod:`.volcano`).
"""

from __future__ import annotations

from admission.backends.base import Backend
from admission.backends.kueue import KueueBackend
from admission.backends.standalone import StandaloneBackend
from admission.backends.volcano import VolcanoBackend


def make_backend(name: str) -> Backend:
    if name == "standalone":
        return StandaloneBackend()
    if name == "kueue":
        return KueueBackend()
    if name == "volcano":
        return VolcanoBackend()
    raise ValueError(f"release.backend: unknown backend {name!r}; use standalone, kueue or volcano")


__all__ = ["Backend", "KueueBackend", "StandaloneBackend", "VolcanoBackend", "make_backend"]
