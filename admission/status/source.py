"""What ``berth status`` and ``berth explain`` read from the cluster, with the user's own
kubeconfig and RBAC: a read-only protocol over plain JSON, and its ``kubernetes`` client.

Every refusal is typed, so a command can say what the user may not do and what to ask for:
401 and 403 become :class:`Denied` (naming the verb, the resource and the namespace), 404
:class:`Missing`, no answer :class:`Unreachable`. Lists are paged (``limit``/``continue``) so
a large cluster is read in bounded pieces, as ``kubectl get`` does.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from admission.controller.api import DRA_LISTERS

Json = dict[str, Any]

PAGE = 500  # objects per list request
TIMEOUT = 30.0  # seconds per request
IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class SourceError(Exception):
    """The API server refused or did not answer; ``status`` is its HTTP status (0: none)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Request:
    """What was asked: ``get``/``list`` of ``resource`` (``pods``, ``configmaps``, ...) in
    ``namespace`` (None: every namespace at once, or a cluster-scoped resource)."""

    verb: str
    resource: str
    namespace: str | None = None
    cluster_scoped: bool = False
    name: str | None = None

    @property
    def where(self) -> str:
        if self.cluster_scoped:
            return "(cluster-scoped)"
        return f"in namespace {self.namespace}" if self.namespace else "in all namespaces"


class Denied(SourceError):
    """401 (credentials not accepted) or 403 (RBAC forbids ``request``)."""

    def __init__(self, status: int, message: str, request: Request) -> None:
        super().__init__(status, message)
        self.request = request

    def advice(self) -> str:
        """One line: what the user may not do and what to ask for."""
        r = self.request
        if self.status == 401:
            return ("the API server did not accept your credentials (401): the token or "
                    "certificate of your kubeconfig may have expired; log in again or pass "
                    "--kubeconfig/--context")
        scope = ("a ClusterRole" if r.cluster_scoped or r.namespace is None
                 else f"a Role or RoleBinding in namespace {r.namespace}")
        return (f"your user cannot {r.verb} {r.resource} {r.where} ({self.status}); ask your "
                f"cluster admin for '{r.verb}' on {r.resource} through {scope}")


class Missing(SourceError):
    """404: the object does not exist."""


class Unreachable(SourceError):
    """No answer from the API server."""


class Source(Protocol):
    """The reads the two commands make. Every method raises :class:`Denied`, :class:`Missing`
    or :class:`SourceError` (:class:`Unreachable`) instead of the client's own exceptions."""

    def list_pods(self, namespace: str | None) -> list[Json]: ...
    def list_nodes(self) -> list[Json]: ...
    def list_dra(self, kind: str) -> list[Json]: ...  # DRA_KINDS (resource.k8s.io/v1)
    def get_pod(self, namespace: str, name: str) -> Json: ...
    def get_config_map(self, namespace: str, name: str) -> Json: ...
    def get_lease(self, namespace: str, name: str) -> Json: ...
    def list_events(self, namespace: str | None, field_selector: str) -> list[Json]: ...
    def get_custom(self, group: str, version: str, plural: str, namespace: str,
                   name: str) -> Json: ...


@dataclass(frozen=True, slots=True)
class Connection:
    source: Source
    namespace: str  # the context's namespace (kubectl's default for -n)


def connect(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    """The user's client: ``kubeconfig`` (default ``$KUBECONFIG`` or ``~/.kube/config``) and its
    ``context`` (default: the current one); in a pod without a kubeconfig, its service
    account. Raises :class:`SourceError` with a sentence when neither can be loaded."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    namespace = "default"
    try:
        config.load_kube_config(config_file=kubeconfig, context=context,
                                client_configuration=cfg, persist_config=False)
        try:
            contexts, current = config.list_kube_config_contexts(kubeconfig)
            chosen = next((c for c in contexts if c.get("name") == context), current) \
                if context else current
            namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
        except (ConfigException, OSError):
            pass
    except (ConfigException, OSError, TypeError, ValueError) as exc:
        if kubeconfig or context:
            raise SourceError(0, f"cannot use the kubeconfig{_named(kubeconfig, context)}: "
                                 f"{exc}") from None
        try:
            config.load_incluster_config(client_configuration=cfg)
        except ConfigException:
            raise SourceError(0, "no kubeconfig ($KUBECONFIG, ~/.kube/config) and not "
                                 "running in a pod; pass --kubeconfig FILE") from None
        with contextlib.suppress(OSError):
            namespace = IN_CLUSTER_NAMESPACE.read_text().strip() or "default"
    return Connection(KubeSource(client.ApiClient(cfg)), namespace)


def _named(kubeconfig: str | None, context: str | None) -> str:
    parts = [f" {kubeconfig}" if kubeconfig else "", f" (context {context})" if context else ""]
    return "".join(parts)


class KubeSource:
    """:class:`Source` over the ``kubernetes`` client, raw JSON as the API server sends it."""

    def __init__(self, api_client: Any, *, timeout: float = TIMEOUT) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.resource = client.ResourceV1Api(api_client)
        self.timeout = timeout

    def _call(self, request: Request, fn: Callable[..., Any], *args: Any, **kw: Any) -> Json:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kw)
        except ApiException as exc:
            raise _refusal(exc, request) from None
        except HTTPError as exc:
            raise Unreachable(0, f"no answer from the API server: {exc}") from None
        data: Json = json.loads(resp.data or b"{}")
        return data

    def _list(self, request: Request, fn: Callable[..., Any], *args: Any, **kw: Any
              ) -> list[Json]:
        items: list[Json] = []
        token: str | None = None
        while True:
            page = self._call(request, fn, *args, limit=PAGE,
                              **({"_continue": token} if token else {}), **kw)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def list_pods(self, namespace: str | None) -> list[Json]:
        req = Request("list", "pods", namespace)
        if namespace is None:
            return self._list(req, self.core.list_pod_for_all_namespaces)
        return self._list(req, self.core.list_namespaced_pod, namespace)

    def list_nodes(self) -> list[Json]:
        return self._list(Request("list", "nodes", cluster_scoped=True), self.core.list_node)

    def list_dra(self, kind: str) -> list[Json]:
        return self._list(Request("list", f"{kind}.resource.k8s.io", cluster_scoped=True),
                          getattr(self.resource, DRA_LISTERS[kind]))

    def get_pod(self, namespace: str, name: str) -> Json:
        return self._call(Request("get", "pods", namespace, name=name),
                          self.core.read_namespaced_pod, name, namespace)

    def get_config_map(self, namespace: str, name: str) -> Json:
        return self._call(Request("get", "configmaps", namespace, name=name),
                          self.core.read_namespaced_config_map, name, namespace)

    def get_lease(self, namespace: str, name: str) -> Json:
        return self._call(Request("get", "leases", namespace, name=name),
                          self.coordination.read_namespaced_lease, name, namespace)

    def list_events(self, namespace: str | None, field_selector: str) -> list[Json]:
        req = Request("list", "events", namespace)
        if namespace is None:
            return self._list(req, self.core.list_event_for_all_namespaces,
                              field_selector=field_selector)
        return self._list(req, self.core.list_namespaced_event, namespace,
                          field_selector=field_selector)

    def get_custom(self, group: str, version: str, plural: str, namespace: str,
                   name: str) -> Json:
        return self._call(Request("get", f"{plural}.{group}", namespace, name=name),
                          self.custom.get_namespaced_custom_object, group, version, namespace,
                          plural, name)


def _refusal(exc: Any, request: Request) -> SourceError:
    """The client's ApiException as one of this module's errors, with the server's message."""
    try:
        body = json.loads(exc.body or "{}")
        message = str(body.get("message") or exc.reason)
    except (ValueError, AttributeError, TypeError):
        message = str(exc.reason)
    status = int(exc.status or 0)
    if status in (401, 403):
        return Denied(status, message, request)
    if status == 404:
        return Missing(status, message)
    if status == 0:
        return Unreachable(0, message)
    return SourceError(status, message)
