"""The one interface every release backend implements, and the backends' names.

A backend owns its vocabulary and its release. The vocabulary is what the webhook and the
policy need: the labels and annotations its queue reads only at creation (the webhook adds
them at CREATE), the ``schedulerName`` its pods must carry, and what a tenant's queue is in it.
The release is what the controller needs: the metadata every pod carries when released, any
object the queue needs before the gates open, and what a pod lacks that only creation could have
set (fields KEP-3838 does not let a gated pod change, such as ``schedulerName``).

Nothing here imports the controller, so the webhook and the policy can import every backend:
a release sees the controller's gang and API client through the two small protocols below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Protocol

from admission.objects import Obj


class BackendName(StrEnum):
    """``release.backend`` in the policy."""

    STANDALONE = "standalone"
    KUEUE = "kueue"
    VOLCANO = "volcano"


class ReleasedGang(Protocol):
    """What a release reads of a gang (the controller's ``GangInfo``)."""

    @property
    def key(self) -> str: ...  # namespace/gang

    @property
    def size(self) -> int: ...

    @property
    def pods(self) -> Sequence[Obj]: ...


class CustomObjects(Protocol):
    """The API call a backend's :meth:`Backend.prepare` may make (the controller's API)."""

    def apply_custom(self, group: str, version: str, plural: str, namespace: str,
                     body: dict[str, Any]) -> dict[str, Any]: ...


class Backend(Protocol):
    name: BackendName
    title: str  # how a message names it
    # The schedulerName its pods must carry, set at creation (immutable after); None: any.
    scheduler_name: str | None
    # What a tenant's queue is in it (tenants[].queues.<name>, then required); None: no queues.
    queue_kind: str | None

    def creation_keys(self, *, queue: str | None, group: str, size: int | None,
                      labels: Mapping[str, str], annotations: Mapping[str, str],
                      add_labels: dict[str, str], add_annotations: dict[str, str]) -> None:
        """Add to ``add_labels``/``add_annotations`` the keys the backend reads only at creation
        that the pod's ``labels``/``annotations`` lack (keys the user wrote are kept).
        ``group``: the gang's label value; ``size``: its declared size (None: unstated)."""
        ...

    def pod_metadata(self, gang: ReleasedGang, queue: str | None) -> tuple[dict[str, str],
                                                                          dict[str, str]]:
        """(labels, annotations) every pod of the gang carries when released."""
        ...

    def prepare(self, api: CustomObjects, gang: ReleasedGang, queue: str | None) -> None:
        """Create or update what the queue needs before any gate opens (idempotent)."""
        ...

    def problem(self, pod: Obj) -> str | None:
        """What the pod lacks for this backend that can no longer be added, or None."""
        ...

    def waiting_for(self, pod: Obj) -> str | None:
        """What the backend's own queue has yet to do before Berth may place the pod (its
        admission, by the queue's quota), in words for the pod's condition; None: nothing."""
        ...
