"""Self-managed webhook certificates: one CA and serving pair per installation, kept in a Secret.

The ``self-signed-certs`` kustomize component runs ``berth serve --self-signed-secret NAME``:
every replica, before its webhook listens, reads the Secret (the first replica to find none
generates the pair and creates it; a replica that loses that race reads the winner's), writes
the files into its certificate directory, and puts the CA into the MutatingWebhookConfiguration's
``caBundle`` when it differs. Like the rest of Berth, the Secret is the only store, so every
replica serves the same certificate and a restart changes nothing. To rotate, delete the Secret
and restart the Deployment (or use the cert-manager component, which rotates by itself).
"""

from __future__ import annotations

import base64
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from admission.certs import CA_CERT, TLS_CERT, TLS_KEY, generate
from admission.controller.api import Conflict, Json
from admission.jsonpatch import PatchOp

log = logging.getLogger(__name__)


class CertApi(Protocol):
    def get_secret(self, namespace: str, name: str) -> Json | None: ...
    def create_secret(self, namespace: str, secret: Json) -> Json: ...
    def get_webhook_config(self, name: str) -> Json | None: ...
    def patch_webhook_config(self, name: str, ops: Sequence[PatchOp]) -> Json: ...


def service_names(service: str, namespace: str) -> tuple[str, list[str]]:
    host = f"{service}.{namespace}.svc"
    return host, [service, f"{service}.{namespace}", f"{host}.cluster.local"]


def ensure_secret(api: CertApi, namespace: str, name: str, service: str) -> dict[str, bytes]:
    """The Secret's files, creating the Secret when there is none."""
    secret = api.get_secret(namespace, name)
    if secret is None:
        host, dns = service_names(service, namespace)
        ca, cert, key = generate(host, dns, days=3650)
        body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": name, "namespace": namespace,
                             "labels": {"app.kubernetes.io/name": "berth"}},
                "data": {k: base64.b64encode(v).decode() for k, v in
                         ((CA_CERT, ca), (TLS_CERT, cert), (TLS_KEY, key))}}
        try:
            secret = api.create_secret(namespace, body)
            log.info("created webhook certificate Secret %s/%s for %s", namespace, name, host)
        except Conflict:
            secret = api.get_secret(namespace, name)  # another replica won the race
            if secret is None:
                raise
    data = secret.get("data") or {}
    missing = [k for k in (CA_CERT, TLS_CERT, TLS_KEY) if k not in data]
    if missing:
        raise ValueError(f"Secret {namespace}/{name} lacks {', '.join(missing)}; delete it and "
                         "restart so that a complete one is generated")
    return {k: base64.b64decode(data[k]) for k in (CA_CERT, TLS_CERT, TLS_KEY)}


def write_files(cert_dir: Path, files: dict[str, bytes]) -> None:
    cert_dir.mkdir(parents=True, exist_ok=True)
    for fname, content in files.items():
        path = cert_dir / fname
        tmp = path.with_name(f".{fname}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                     0o600 if fname == TLS_KEY else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        os.replace(tmp, path)


def ca_bundle_ops(config: Json, ca_pem: bytes) -> list[PatchOp]:
    """JSON patch setting every webhook's caBundle to ``ca_pem``; [] when all already match."""
    want = base64.b64encode(ca_pem).decode()
    ops: list[PatchOp] = []
    for i, hook in enumerate(config.get("webhooks") or []):
        if (hook.get("clientConfig") or {}).get("caBundle") != want:
            ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle",
                        "value": want})
    return ops


def ensure(api: CertApi, *, namespace: str, secret: str, service: str, webhook_config: str,
           cert_dir: Path) -> None:
    files = ensure_secret(api, namespace, secret, service)
    write_files(cert_dir, files)
    config = api.get_webhook_config(webhook_config)
    if config is None:
        log.warning("MutatingWebhookConfiguration %s not found; caBundle not injected",
                    webhook_config)
        return
    ops = ca_bundle_ops(config, files[CA_CERT])
    if ops:
        api.patch_webhook_config(webhook_config, ops)
        log.info("injected the CA into MutatingWebhookConfiguration %s", webhook_config)
