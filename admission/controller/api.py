"""The few API-server operations the controller performs, as a protocol over plain JSON dicts.

:class:`admission.kube.KubeApi` implements it with the ``kubernetes`` client; the unit tests use
an in-memory API server that enforces the same update rules. Keeping the surface this small is
what makes the release protocol reviewable: every write the controller makes goes through one of
these methods.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from admission.jsonpatch import PatchOp

Json = dict[str, Any]


class ApiError(Exception):
    """The API server refused a request; ``status`` is its HTTP status (0: no answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message


class Conflict(ApiError):
    """The object changed since it was read (a failed JSON-patch ``test``, or 409)."""


class NotFound(ApiError):
    """The object is gone."""


class Gone(ApiError):
    """A watch's resource version is too old (410): list again."""


#: The DRA kinds the controller watches, by their plural resource names, and the method of the
#: ``kubernetes`` client's ResourceV1Api that lists each. (Templates are not among them: the
#: controller reads the claim made from a template, only the webhook reads templates.)
DRA_LISTERS = {"resourceslices": "list_resource_slice",
               "resourceclaims": "list_resource_claim_for_all_namespaces",
               "deviceclasses": "list_device_class"}
DRA_KINDS = tuple(DRA_LISTERS)


class ClusterApi(Protocol):
    # pods
    def list_pods(self) -> tuple[list[Json], str]: ...
    def watch_pods(self, resource_version: str, timeout_seconds: int) -> Iterator[tuple[str, Json]]:
        ...
    def get_pod(self, namespace: str, name: str) -> Json | None: ...
    def patch_pod(self, namespace: str, name: str, ops: Sequence[PatchOp]) -> Json: ...
    def set_pod_condition(self, namespace: str, name: str, condition: Json) -> Json: ...
    # policy/v1 Eviction (pods/eviction create): PodDisruptionBudgets are respected, a refusal
    # is an ApiError with status 429; ``dry_run`` asks without evicting
    def evict_pod(self, namespace: str, name: str, *, dry_run: bool = False) -> None: ...
    # nodes
    def list_nodes(self) -> tuple[list[Json], str]: ...
    def watch_nodes(self, resource_version: str,
                    timeout_seconds: int) -> Iterator[tuple[str, Json]]: ...
    # Jobs (batch/v1), read only: their deadlines bound when their pods end (runtimes.py)
    def list_jobs(self) -> tuple[list[Json], str]: ...
    def watch_jobs(self, resource_version: str,
                   timeout_seconds: int) -> Iterator[tuple[str, Json]]: ...
    # Dynamic Resource Allocation (resource.k8s.io/v1): kind is one of DRA_KINDS; a cluster
    # that does not serve the API lists nothing
    def list_dra(self, kind: str) -> tuple[list[Json], str]: ...
    def watch_dra(self, kind: str, resource_version: str,
                  timeout_seconds: int) -> Iterator[tuple[str, Json]]: ...
    # events, leases, backend objects
    def create_event(self, namespace: str, event: Json) -> None: ...
    def get_lease(self, namespace: str, name: str) -> Json | None: ...
    def create_lease(self, namespace: str, lease: Json) -> Json: ...
    def replace_lease(self, namespace: str, name: str, lease: Json) -> Json: ...
    # the leader's saved records (admission/controller/records.py): one ConfigMap in Berth's
    # own namespace; replace_config_map carries the resourceVersion it read (409 if stale)
    def get_config_map(self, namespace: str, name: str) -> Json | None: ...
    def create_config_map(self, namespace: str, body: Json) -> Json: ...
    def replace_config_map(self, namespace: str, name: str, body: Json) -> Json: ...
    def apply_custom(self, group: str, version: str, plural: str, namespace: str,
                     body: Json) -> Json: ...
    # a backend's own objects in one namespace, read only (Kueue's Workloads: queued.py);
    # NotFound when the cluster does not serve that group and version
    def list_custom(self, group: str, version: str, plural: str,
                    namespace: str) -> list[Json]: ...
