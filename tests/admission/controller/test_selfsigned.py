"""Self-managed webhook certificates: one Secret for every replica, CA injected once."""

from __future__ import annotations

import base64
import copy
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509

from admission import jsonpatch
from admission.controller import selfsigned
from admission.controller.api import Conflict, Json
from admission.jsonpatch import PatchOp


class CertStore:
    def __init__(self) -> None:
        self.secrets: dict[str, Json] = {}
        self.webhook: Json = {"metadata": {"name": "berth"}, "webhooks": [
            {"name": "pods.berth.dev", "clientConfig": {"service": {"name": "berth-webhook"}}}]}
        self.patches = 0
        self.race = False  # a competitor creates the Secret between our get and create

    def get_secret(self, namespace: str, name: str) -> Json | None:
        return copy.deepcopy(self.secrets.get(name))

    def create_secret(self, namespace: str, secret: Json) -> Json:
        if self.race:
            self.race = False
            other = copy.deepcopy(secret)
            other["data"]["ca.crt"] = base64.b64encode(b"winner").decode()
            self.secrets[secret["metadata"]["name"]] = other
        if secret["metadata"]["name"] in self.secrets:
            raise Conflict(409, "already exists")
        self.secrets[secret["metadata"]["name"]] = copy.deepcopy(secret)
        return secret

    def get_webhook_config(self, name: str) -> Json | None:
        return copy.deepcopy(self.webhook)

    def patch_webhook_config(self, name: str, ops: Sequence[PatchOp]) -> Json:
        self.patches += 1
        self.webhook = jsonpatch.apply(self.webhook, ops)
        return self.webhook


def ensure(store: CertStore, d: Path) -> None:
    selfsigned.ensure(store, namespace="berth-system", secret="berth-webhook-tls",
                      service="berth-webhook", webhook_config="berth", cert_dir=d)


def test_replicas_share_one_certificate_and_inject_the_ca_once(tmp_path: Path) -> None:
    store = CertStore()
    ensure(store, tmp_path / "a")
    ensure(store, tmp_path / "b")
    assert (tmp_path / "a" / "tls.crt").read_bytes() == (tmp_path / "b" / "tls.crt").read_bytes()
    assert store.patches == 1
    ca = (tmp_path / "a" / "ca.crt").read_bytes()
    assert store.webhook["webhooks"][0]["clientConfig"]["caBundle"] == base64.b64encode(
        ca).decode()
    cert = x509.load_pem_x509_certificate((tmp_path / "a" / "tls.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "berth-webhook.berth-system.svc" in names.get_values_for_type(x509.DNSName)
    assert oct((tmp_path / "a" / "tls.key").stat().st_mode & 0o777) == "0o600"


def test_losing_the_creation_race_uses_the_winners_secret(tmp_path: Path) -> None:
    store = CertStore()
    store.race = True
    ensure(store, tmp_path)
    assert (tmp_path / "ca.crt").read_bytes() == b"winner"
