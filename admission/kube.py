"""The controller's :class:`~admission.controller.api.ClusterApi` over the ``kubernetes`` client.

Thin on purpose: every call asks for the raw JSON (``_preload_content=False``) so the controller
works on the same dicts the API server sends and the tests record, and every failure becomes one
of the protocol's exceptions (404 NotFound, 409 or a failed JSON-patch ``test`` Conflict, 410
Gone, anything else ApiError) with the server's own message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from admission.controller import ApiError, Conflict, Gone, Json, NotFound
from admission.controller.api import DRA_LISTERS
from admission.jsonpatch import PatchOp

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"


# Connections kept open to the API server: the two watches, the Lease and the release's
# concurrent writes (Settings.release_writers per pool) with room to spare. The client's
# default (5 per CPU) would make writes beyond it open and drop a TLS connection each.
CONNECTIONS = 32
DRA_ABSENT_RECHECK = 60.0  # seconds between looks for resource.k8s.io/v1 on a server without


def load_client(kubeconfig: str | None = None) -> client.ApiClient:
    """In-cluster configuration unless a kubeconfig file is named."""
    cfg = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize, CONNECTIONS)
    return client.ApiClient(cfg)


def _error(exc: ApiException) -> ApiError:
    try:
        status_body = json.loads(exc.body or "{}")
        message = status_body.get("message") or exc.reason
        causes = (status_body.get("details") or {}).get("causes")
    except (ValueError, AttributeError):
        message, causes = str(exc.reason), None
    status = int(exc.status or 0)
    if status == 404:
        return NotFound(status, message)
    if status == 409:
        return Conflict(status, message)
    if status == 410:
        return Gone(status, message)
    if status == 422 and not causes:
        # A JSON patch that does not apply to the object as stored (a failed ``test`` op, a
        # missing path) comes back as a bare 422 "the server rejected our request"; validation
        # failures name their causes. The former means the object changed: read it again.
        return Conflict(status, message)
    return ApiError(status, message)


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Json:
    try:
        resp = fn(*args, _preload_content=False, **kwargs)
    except ApiException as exc:
        raise _error(exc) from None
    except HTTPError as exc:
        raise ApiError(0, f"no answer from the API server: {exc}") from None
    data: Json = json.loads(resp.data or b"{}")
    return data


class RawWatch(watch.Watch):
    """Watch events as the API server's JSON only. The client would also turn every event's
    object into its model (``json.dumps`` then a V1Pod built field by field), which the
    controller never reads: under a burst, with several events per pod, that was the largest
    CPU cost of ``berth serve``."""

    def get_return_type(self, func: Callable[..., Any]) -> None:
        return None


#: The longest a read of a backend's objects (list_custom) may hold up a controller cycle.
LIST_CUSTOM_TIMEOUT_S = 10.0


class KubeApi:
    def __init__(self, api_client: client.ApiClient, *, request_timeout: float = 30.0) -> None:
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.admission = client.AdmissionregistrationV1Api(api_client)
        self.resource = client.ResourceV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.timeout = request_timeout

    # ------------------------------------------------------------------ pods and nodes
    def list_pods(self) -> tuple[list[Json], str]:
        data = _call(self.core.list_pod_for_all_namespaces, _request_timeout=self.timeout)
        return data.get("items") or [], data["metadata"]["resourceVersion"]

    def list_nodes(self) -> tuple[list[Json], str]:
        data = _call(self.core.list_node, _request_timeout=self.timeout)
        return data.get("items") or [], data["metadata"]["resourceVersion"]

    def _watch(self, fn: Callable[..., Any], resource_version: str,
               timeout_seconds: int) -> Iterator[tuple[str, Json]]:
        w = RawWatch()
        try:
            for event in w.stream(fn, resource_version=resource_version,
                                  timeout_seconds=timeout_seconds, allow_watch_bookmarks=True,
                                  _request_timeout=timeout_seconds + 30):
                raw = event.get("raw_object") or {}
                if event.get("type") == "ERROR" and raw.get("code") == 410:
                    raise Gone(410, raw.get("message", "resource version too old"))
                yield event["type"], raw
        except ApiException as exc:
            raise _error(exc) from None
        except HTTPError as exc:
            raise ApiError(0, f"watch interrupted: {exc}") from None
        finally:
            w.stop()

    def watch_pods(self, resource_version: str, timeout_seconds: int) -> Iterator[tuple[str, Json]]:
        return self._watch(self.core.list_pod_for_all_namespaces, resource_version,
                           timeout_seconds)

    def watch_nodes(self, resource_version: str,
                    timeout_seconds: int) -> Iterator[tuple[str, Json]]:
        return self._watch(self.core.list_node, resource_version, timeout_seconds)

    def list_jobs(self) -> tuple[list[Json], str]:
        data = _call(self.batch.list_job_for_all_namespaces, _request_timeout=self.timeout)
        return data.get("items") or [], data["metadata"]["resourceVersion"]

    def watch_jobs(self, resource_version: str,
                   timeout_seconds: int) -> Iterator[tuple[str, Json]]:
        return self._watch(self.batch.list_job_for_all_namespaces, resource_version,
                           timeout_seconds)

    # ------------------------------------------------------------------ DRA
    def _dra_lister(self, kind: str) -> Callable[..., Any]:
        lister: Callable[..., Any] = getattr(self.resource, DRA_LISTERS[kind])
        return lister

    def list_dra(self, kind: str) -> tuple[list[Json], str]:
        """Everything of a DRA kind; ([], "") from a server that does not serve
        resource.k8s.io/v1 (404), so a cluster without DRA costs nothing."""
        try:
            data = _call(self._dra_lister(kind), _request_timeout=self.timeout)
        except NotFound:
            return [], ""
        return data.get("items") or [], data["metadata"]["resourceVersion"]

    def watch_dra(self, kind: str, resource_version: str,
                  timeout_seconds: int) -> Iterator[tuple[str, Json]]:
        if not resource_version:  # not served: look again after a while
            time.sleep(min(timeout_seconds, DRA_ABSENT_RECHECK))
            raise Gone(410, f"{kind}: resource.k8s.io/v1 not served; listing again")
        return self._watch(self._dra_lister(kind), resource_version, timeout_seconds)

    def get_pod(self, namespace: str, name: str) -> Json | None:
        try:
            return _call(self.core.read_namespaced_pod, name, namespace,
                         _request_timeout=self.timeout)
        except NotFound:
            return None

    def patch_pod(self, namespace: str, name: str, ops: Sequence[PatchOp]) -> Json:
        return _call(self.core.patch_namespaced_pod, name, namespace, ops,
                     _content_type=JSON_PATCH, _request_timeout=self.timeout)

    def set_pod_condition(self, namespace: str, name: str, condition: Json) -> Json:
        # Pod conditions merge by type under a strategic merge patch: only ours changes.
        return _call(self.core.patch_namespaced_pod_status, name, namespace,
                     {"status": {"conditions": [condition]}}, _content_type=STRATEGIC_MERGE,
                     _request_timeout=self.timeout)

    def evict_pod(self, namespace: str, name: str, *, dry_run: bool = False) -> None:
        body: Json = {"apiVersion": "policy/v1", "kind": "Eviction",
                      "metadata": {"name": name, "namespace": namespace}}
        if dry_run:
            body["deleteOptions"] = {"dryRun": ["All"]}
        _call(self.core.create_namespaced_pod_eviction, name, namespace, body,
              _request_timeout=self.timeout)

    # ------------------------------------------------------------------ events, leases, CRs
    def create_event(self, namespace: str, event: Json) -> None:
        _call(self.core.create_namespaced_event, namespace, event, _request_timeout=self.timeout)

    def get_lease(self, namespace: str, name: str) -> Json | None:
        try:
            return _call(self.coordination.read_namespaced_lease, name, namespace,
                         _request_timeout=self.timeout)
        except NotFound:
            return None

    def create_lease(self, namespace: str, lease: Json) -> Json:
        return _call(self.coordination.create_namespaced_lease, namespace, lease,
                     _request_timeout=self.timeout)

    def replace_lease(self, namespace: str, name: str, lease: Json) -> Json:
        return _call(self.coordination.replace_namespaced_lease, name, namespace, lease,
                     _request_timeout=self.timeout)

    def get_config_map(self, namespace: str, name: str) -> Json | None:
        try:
            return _call(self.core.read_namespaced_config_map, name, namespace,
                         _request_timeout=self.timeout)
        except NotFound:
            return None

    def create_config_map(self, namespace: str, body: Json) -> Json:
        return _call(self.core.create_namespaced_config_map, namespace, body,
                     _request_timeout=self.timeout)

    def replace_config_map(self, namespace: str, name: str, body: Json) -> Json:
        return _call(self.core.replace_namespaced_config_map, name, namespace, body,
                     _request_timeout=self.timeout)

    def apply_custom(self, group: str, version: str, plural: str, namespace: str,
                     body: Json) -> Json:
        """Create the object, or bring the spec and labels of an existing one up to date."""
        try:
            return _call(self.custom.create_namespaced_custom_object, group, version,
                         namespace, plural, body, _request_timeout=self.timeout)
        except Conflict:
            patch = {"metadata": {"labels": body["metadata"].get("labels") or {}},
                     "spec": body.get("spec") or {}}
            return _call(self.custom.patch_namespaced_custom_object, group, version,
                         namespace, plural, body["metadata"]["name"], patch,
                         _content_type=MERGE_PATCH, _request_timeout=self.timeout)

    def list_custom(self, group: str, version: str, plural: str,
                    namespace: str) -> list[Json]:
        # resourceVersion "0": served from the API server's watch cache, not a quorum read
        data = _call(self.custom.list_namespaced_custom_object, group, version, namespace,
                     plural, resource_version="0",
                     _request_timeout=min(self.timeout, LIST_CUSTOM_TIMEOUT_S))
        return data.get("items") or []

    # ------------------------------------------------------------------ self-signed certificates
    def get_secret(self, namespace: str, name: str) -> Json | None:
        try:
            return _call(self.core.read_namespaced_secret, name, namespace,
                         _request_timeout=self.timeout)
        except NotFound:
            return None

    def create_secret(self, namespace: str, secret: Json) -> Json:
        return _call(self.core.create_namespaced_secret, namespace, secret,
                     _request_timeout=self.timeout)

    def get_webhook_config(self, name: str) -> Json | None:
        try:
            return _call(self.admission.read_mutating_webhook_configuration, name,
                         _request_timeout=self.timeout)
        except NotFound:
            return None

    def patch_webhook_config(self, name: str, ops: Sequence[PatchOp]) -> Json:
        return _call(self.admission.patch_mutating_webhook_configuration, name, ops,
                     _content_type=JSON_PATCH, _request_timeout=self.timeout)
