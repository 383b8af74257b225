"""What Berth shows its users: ``berth status`` (per tenant quota, use, borrowing and the
waiting queue) and ``berth explain POD`` (why one pod waits and what would let it start).

Read-only, with the user's own kubeconfig and RBAC: :func:`connect` and :func:`read` take one
look at the cluster (policy, pods, nodes; the Lease and Events when allowed), :func:`picture`
rebuilds the controller's own view of it (its snapshot, gangs and quota usage), and
:func:`status` / :func:`explain` say what it shows; :func:`print_status`,
:func:`print_explanation` and :func:`to_json` print it. :class:`StatusError` carries the one
line a command prints when nothing can be shown (a 401 or 403 names what to ask for).
"""

from __future__ import annotations

from admission.status.gather import (
    ClusterView,
    PodRead,
    StatusError,
    read,
    read_pod,
    with_pod,
)
from admission.status.model import Picture, picture
from admission.status.render import print_explanation, print_status, to_json
from admission.status.report import Status, status
from admission.status.source import Connection, Denied, Source, SourceError, connect
from admission.status.why import Explanation, explain

__all__ = [
    "ClusterView",
    "Connection",
    "Denied",
    "Explanation",
    "Picture",
    "PodRead",
    "Source",
    "SourceError",
    "Status",
    "StatusError",
    "connect",
    "explain",
    "picture",
    "print_explanation",
    "print_status",
    "read",
    "read_pod",
    "status",
    "to_json",
    "with_pod",
]
