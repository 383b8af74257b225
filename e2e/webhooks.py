"""Registering a mutating webhook with the cluster under test, and waiting until it acts.

A MutatingWebhookConfiguration takes a moment to reach the apiserver's admission chain after it
is created; the only reliable readiness signal is a dry-run create that comes back mutated.
Also a minimal TLS webhook (standard library only) that labels and gates pods: it proves the
apiserver -> webhook path of the local cluster itself, independently of Berth's webhook.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e.helpers import eventually


def mutating_webhook_config(
    name: str,
    *,
    url: str,
    ca_pem: bytes,
    namespace: str,
    failure_policy: str = "Fail",
    timeout_seconds: int = 5,
) -> dict[str, Any]:
    """A configuration that sends CREATE of pods in ``namespace`` (only) to ``url``."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": f"{name}.e2e.berth.dev",
            "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            # kubernetes.io/metadata.name is set by the apiserver on every namespace.
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "failurePolicy": failure_policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": timeout_seconds,
        }],
    }


@contextmanager
def registered(api: client.ApiClient, config: dict[str, Any]) -> Iterator[None]:
    adm = client.AdmissionregistrationV1Api(api)
    adm.create_mutating_webhook_configuration(config)
    try:
        yield
    finally:
        try:
            adm.delete_mutating_webhook_configuration(config["metadata"]["name"])
        except ApiException as exc:
            if exc.status != 404:
                raise


def wait_until_mutating(core: client.CoreV1Api, namespace: str, probe: dict[str, Any],
                        mutated: Callable[[Any], bool], timeout: float = 30) -> Any:
    """Dry-run create ``probe`` until the returned pod satisfies ``mutated``."""
    def attempt() -> Any:
        try:
            return core.create_namespaced_pod(namespace, probe, dry_run="All")
        except ApiException as exc:
            return exc  # the webhook may refuse or be unreachable while it propagates
    return eventually(attempt, lambda p: not isinstance(p, ApiException) and mutated(p),
                      timeout=timeout, what="the webhook configuration to take effect")


class LabellingWebhook:
    """An HTTPS admission webhook that adds a label and a scheduling gate to every pod, and
    records the requests it answered. Serves on 127.0.0.1 in a background thread."""

    LABEL = "e2e.berth.dev/mutated"

    def __init__(self, cert: Path, key: Path, gate: str) -> None:
        self.gate = gate
        self.reviews: list[dict[str, Any]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.reviews.append(body)
                response = hook.review(body)
                data = json.dumps(response).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), str(key))
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def review(self, body: dict[str, Any]) -> dict[str, Any]:
        request = body["request"]
        pod = request["object"]
        patch: list[dict[str, Any]] = []
        if not pod["metadata"].get("labels"):
            patch.append({"op": "add", "path": "/metadata/labels", "value": {}})
        patch.append({"op": "add", "path": "/metadata/labels/e2e.berth.dev~1mutated",
                      "value": "true"})
        if not pod["spec"].get("schedulingGates"):
            patch.append({"op": "add", "path": "/spec/schedulingGates", "value": []})
        patch.append({"op": "add", "path": "/spec/schedulingGates/-",
                      "value": {"name": self.gate}})
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {
                "uid": request["uid"],
                "allowed": True,
                "patchType": "JSONPatch",
                "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
            },
        }

    def __enter__(self) -> LabellingWebhook:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._thread.is_alive():  # shutdown() would wait forever on a server never started
            self.server.shutdown()
        self.server.server_close()
