"""Reading the ResourceClaims and ResourceClaimTemplates a pod names, for its review.

The review itself stays pure (:func:`admission.webhook.review.review` takes what was read);
this is the I/O around it. Only a pod in a managed namespace whose spec names claims costs a
read, and only of objects in the pod's own namespace: a pod cannot make Berth read anything
its author could not name (the API server itself refuses claims of other namespaces).

The spec of a claim and of a template cannot change after creation, so what was read is kept
for ``ttl`` seconds (bounded in number); an object that does not exist is not kept, so a
template created a moment after the first pod is found by the next one. The reads run in a
worker thread (the ``kubernetes`` client blocks) with a timeout; a read that fails refuses the
pod with the reason and "try again" rather than admitting a demand Berth could not see.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from admission.dra import TEMPLATE, ClaimRef

log = logging.getLogger(__name__)

MAX_CACHED = 4096


class ClaimReadError(Exception):
    """A claim or template could not be read (not a 404): the review refuses, naming it."""

    def __init__(self, ref: ClaimRef, why: str) -> None:
        super().__init__(f"{ref.kind} {ref.object}: {why}")
        self.ref = ref
        self.why = why


def api_client(kubeconfig: str | None = None) -> Any:
    """A ``kubernetes`` ApiClient: in-cluster credentials unless a kubeconfig file is named."""
    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(cfg)


class ClaimReader:
    """GET of claims and templates through a ``kubernetes`` ApiClient, with a TTL cache."""

    def __init__(self, api_client: Any, *, ttl: float = 10.0, timeout: float = 5.0) -> None:
        self.api_client = api_client
        self.ttl = ttl
        self.timeout = timeout
        self._cache: OrderedDict[tuple[str, str, str], tuple[float, Mapping[str, Any]]] = \
            OrderedDict()

    def _get(self, namespace: str, kind: str, name: str) -> Mapping[str, Any] | None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api = client.ResourceV1Api(self.api_client)
        # with _preload_content=False either answers the raw HTTP response, not the model
        # its stub names
        read: Callable[..., Any] = (api.read_namespaced_resource_claim_template
                                    if kind == TEMPLATE else api.read_namespaced_resource_claim)
        try:
            resp = read(name, namespace, _preload_content=False, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            try:
                message = json.loads(exc.body or "{}").get("message") or exc.reason
            except (ValueError, AttributeError):
                message = exc.reason
            raise RuntimeError(f"the API server answered {exc.status}: {message}") from None
        obj = json.loads(resp.data or b"{}")
        return obj if isinstance(obj, dict) else None

    async def read(self, namespace: str, refs: Sequence[ClaimRef]
                   ) -> dict[tuple[str, str], Mapping[str, Any] | None]:
        """Each ref's object (None: it does not exist), or :class:`ClaimReadError`."""
        out: dict[tuple[str, str], Mapping[str, Any] | None] = {}
        now = time.monotonic()
        for ref in refs:
            key = (namespace, ref.kind, ref.object)
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] < self.ttl:
                out[(ref.kind, ref.object)] = hit[1]
                continue
            try:
                obj = await asyncio.wait_for(
                    asyncio.to_thread(self._get, namespace, ref.kind, ref.object),
                    self.timeout + 1)
            except TimeoutError:
                raise ClaimReadError(ref, f"no answer from the API server within "
                                          f"{self.timeout:g}s") from None
            except Exception as exc:  # any client failure refuses the pod with its reason
                raise ClaimReadError(ref, str(exc) or type(exc).__name__) from None
            out[(ref.kind, ref.object)] = obj
            if obj is not None:
                self._cache[key] = (now, obj)
                self._cache.move_to_end(key)
                while len(self._cache) > MAX_CACHED:
                    self._cache.popitem(last=False)
        return out
