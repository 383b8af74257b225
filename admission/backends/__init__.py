"""Release backends: where a released pod queues once Berth opens its gate.

- ``standalone``: the default kube-scheduler binds the pod within the node affinity Berth wrote.
- ``kueue``: the pod carries its tenant's LocalQueue label and Kueue's pod-group keys; Kueue's
  gate and Berth's gate coexist and each tool removes only its own (see :mod:`.kueue`).
- ``volcano``: the pod runs under ``schedulerName: volcano`` in a PodGroup with ``minMember``
  equal to the gang size, in its tenant's Volcano queue (see :mod:`.volcano`).

Each backend is one module implementing :class:`~.base.Backend`; :data:`BACKENDS` lists them,
and the webhook, the policy and the controller reach a backend only through
:func:`backend_named`, never by comparing names.
"""

from __future__ import annotations

from collections.abc import Mapping

from admission.backends.base import Backend, BackendName
from admission.backends.kueue import KueueBackend
from admission.backends.standalone import StandaloneBackend
from admission.backends.volcano import VolcanoBackend

BACKENDS: Mapping[str, Backend] = {
    b.name: b for b in (StandaloneBackend(), KueueBackend(), VolcanoBackend())
}


def backend_named(name: str) -> Backend:
    """The backend ``release.backend`` names; ValueError listing every name otherwise."""
    found = BACKENDS.get(name)
    if found is None:
        *most, last = BackendName
        raise ValueError(f"release.backend: unknown backend {name!r}; "
                         f"use {', '.join(most)} or {last}")
    return found


__all__ = ["BACKENDS", "Backend", "BackendName", "KueueBackend", "StandaloneBackend",
           "VolcanoBackend", "backend_named"]
