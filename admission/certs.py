"""Certificates for the webhook: a CA and a serving key pair, the TLS context that serves them,
and the MutatingWebhookConfiguration that trusts the CA.

Mounted Secrets change in place (cert-manager renewals, rotated Secrets), so the server hashes
the files periodically and loads a changed pair into the live :class:`ssl.SSLContext`: new
handshakes get the new certificate, connections already open keep theirs, and no request is
dropped. A half-written pair (new cert, old key) fails validation and is retried on the next
tick while the old pair stays in use.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import hashlib
import ipaddress
import os
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from admission import certbuilder as cb

CA_CERT = "ca.crt"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
WEBHOOK_NAME = "pods.berth.dev"


class CertError(ValueError):
    """Certificates missing or unusable; the message names the file and the fix."""


@dataclass(frozen=True, slots=True)
class Bundle:
    ca_cert: Path
    tls_cert: Path
    tls_key: Path


def generate(host: str, dns: list[str] | None = None, days: int = 365,
             ) -> tuple[bytes, bytes, bytes]:
    """(CA cert PEM, serving cert PEM, serving key PEM) for ``host`` and extra DNS names."""
    start = dt.datetime.now(dt.UTC) - cb.CLOCK_SKEW
    valid = cb.Validity(not_before=start, not_after=start + dt.timedelta(days=days))
    ca = cb.authority("berth-webhook-ca", valid=valid, path_length=0)
    # X.509 caps a common name at 64 characters; a longer DNS name (up to 253) lives in the
    # subject alternative names alone, which is what TLS clients check anyway.
    cn = host if len(host) <= 64 else "berth-webhook"
    cert, key = cb.issue(ca, cb.name(cn), usage=ExtendedKeyUsageOID.SERVER_AUTH, valid=valid,
                         hosts=[host, *(dns or [])])
    return cb.certificate_pem(ca.cert), cb.certificate_pem(cert), cb.private_key_pem(key)


def write_bundle(out: Path, host: str, dns: list[str] | None = None, days: int = 365) -> Bundle:
    """Write ca.crt, tls.crt and tls.key (mode 0600) into ``out``, replacing each file whole."""
    out.mkdir(parents=True, exist_ok=True)
    ca, cert, key = generate(host, dns, days)
    bundle = Bundle(out / CA_CERT, out / TLS_CERT, out / TLS_KEY)
    for path, data, mode in ((bundle.ca_cert, ca, 0o644), (bundle.tls_key, key, 0o600),
                             (bundle.tls_cert, cert, 0o644)):
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # atomic: a reader never sees half a file
    return bundle


def expiry(cert_pem: bytes) -> dt.datetime:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


# --------------------------------------------------------------------------------------------
# Serving
# --------------------------------------------------------------------------------------------


def _paths(cert_dir: Path) -> tuple[Path, Path]:
    cert, key = cert_dir / TLS_CERT, cert_dir / TLS_KEY
    for p in (cert, key):
        if not p.is_file():
            raise CertError(f"{p}: not found; create it with "
                            f"`berth certs --out {cert_dir} --host HOST`")
    return cert, key


def new_server_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION
    return ctx


class TlsReloader:
    """Owns the live server context and reloads it when tls.crt or tls.key change."""

    def __init__(self, cert_dir: Path) -> None:
        self.cert_dir = cert_dir
        self.context = new_server_context()
        self._digest = ""
        self.not_after: dt.datetime | None = None
        self.last_error = ""
        if not self.reload():
            raise CertError(f"{cert_dir}: {self.last_error}")

    def _read(self) -> tuple[bytes, bytes]:
        cert, key = _paths(self.cert_dir)
        return cert.read_bytes(), key.read_bytes()

    def changed(self) -> bool:
        try:
            cert, key = self._read()
        except (OSError, CertError):
            return False
        return hashlib.sha256(cert + b"\0" + key).hexdigest() != self._digest

    def reload(self) -> bool:
        """Load the pair if it changed; True when a new pair is now served. A pair that does
        not load leaves the old one in place and sets ``last_error``."""
        try:
            cert, key = self._read()
            digest = hashlib.sha256(cert + b"\0" + key).hexdigest()
            if digest == self._digest:
                return False
            # Validate in a scratch context first: the live one must never hold half a pair.
            new_server_context().load_cert_chain(self.cert_dir / TLS_CERT, self.cert_dir / TLS_KEY)
            self.context.load_cert_chain(self.cert_dir / TLS_CERT, self.cert_dir / TLS_KEY)
            self.not_after = expiry(cert)
        except (OSError, ssl.SSLError, ValueError) as exc:
            self.last_error = f"cannot load {TLS_CERT}/{TLS_KEY}: {exc}"
            return False
        self._digest = digest
        self.last_error = ""
        return True


# --------------------------------------------------------------------------------------------
# The MutatingWebhookConfiguration
# --------------------------------------------------------------------------------------------

# config/base/webhook.yaml is the one description of the webhook's scope (rules,
# namespaceSelector, matchConditions, failure policy): the rendered configuration copies its
# entry and changes only where the apiserver calls and which CA it trusts.
WEBHOOK_TEMPLATE = Path(__file__).resolve().parents[1] / "config" / "base" / "webhook.yaml"


def webhook_template(path: Path = WEBHOOK_TEMPLATE) -> dict[str, Any]:
    """The webhook entry of config/base/webhook.yaml (a copy the caller may change)."""
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CertError(f"{path}: cannot read Berth's webhook configuration ({exc.strerror}); "
                        "rendering it needs the config/ directory of a Berth checkout") from None
    hooks = [h for h in doc.get("webhooks") or [] if h.get("name") == WEBHOOK_NAME]
    if doc.get("kind") != "MutatingWebhookConfiguration" or len(hooks) != 1:
        raise CertError(f"{path}: expected a MutatingWebhookConfiguration with one webhook "
                        f"named {WEBHOOK_NAME}")
    return copy.deepcopy(hooks[0])


def render_webhook_config(
    ca_pem: bytes, *, url: str | None = None, service: tuple[str, str] | None = None,
    namespaces: list[str] | None = None, failure_policy: str = "Fail", timeout_seconds: int = 5,
    template: Path = WEBHOOK_TEMPLATE,
) -> str:
    """MutatingWebhookConfiguration YAML scoped as config/base/webhook.yaml, trusting
    ``ca_pem``, calling ``url`` or the in-cluster ``service`` (namespace, name), and further
    limited to ``namespaces`` when given (ANDed with the shipped namespaceSelector)."""
    import yaml

    client: dict[str, object] = {"caBundle": base64.b64encode(ca_pem).decode()}
    if service is not None:
        client["service"] = {"namespace": service[0], "name": service[1], "path": "/mutate-pods",
                             "port": 443}
    else:
        client["url"] = url or "https://127.0.0.1:8443/mutate-pods"
    webhook = webhook_template(template)
    # Fail: a GPU pod created while Berth is down would escape its quota and gang rules;
    # the shipped matchConditions keep every other pod away from this webhook.
    webhook.update(failurePolicy=failure_policy, timeoutSeconds=timeout_seconds,
                   clientConfig=client)
    if namespaces:
        selector = webhook.setdefault("namespaceSelector", {})
        selector.setdefault("matchExpressions", []).append(
            {"key": "kubernetes.io/metadata.name", "operator": "In",
             "values": sorted(namespaces)})
    doc = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "berth", "labels": {"app.kubernetes.io/name": "berth"}},
        "webhooks": [webhook],
    }
    return yaml.safe_dump(doc, sort_keys=False)


#: RFC 1123 host name label: letters, digits and hyphens, not starting or ending with a hyphen.
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def san_problem(value: str, *, wildcard: bool = False) -> str | None:
    """Why ``value`` cannot be a subject alternative name of the serving certificate (None: it
    can): it must be an IPv4 or IPv6 literal or a DNS name of labels of 1 to 63 letters, digits
    and hyphens, 253 characters at most; ``wildcard`` also allows a leading ``*.``."""
    if not value.strip():
        return "is empty; give a DNS name or an IP address, e.g. 127.0.0.1"
    shown = repr(value if len(value) <= 60 else value[:57] + "...")
    if value != value.strip() or any(c.isspace() for c in value):
        return f"{shown} contains white space; give one DNS name or IP address"
    if "://" in value or "/" in value:
        return f"{shown} is a URL or a path; give the host name alone, e.g. berth.example.com"
    if "%" in value:
        return f"{shown}: drop the zone (%...); a certificate holds the bare address"
    try:
        ipaddress.ip_address(value)
        return None
    except ValueError:
        pass
    if value.startswith("[") and value.endswith("]"):
        return f"{shown}: write the IPv6 address without brackets"
    if value.count(":") == 1 or (value.startswith("[") and "]:" in value):
        return f"{shown} has a port; give the host alone (the port goes into --url)"
    if ":" in value:
        return f"{shown} is not a valid IPv6 address"
    if not value.isascii():
        return f"{shown} is not ASCII; write an internationalised name in its xn-- form"
    if len(value) > 253:
        return f"{len(value)} characters; a DNS name has at most 253"
    if value.endswith(".") and value.strip("."):
        return f"{shown}: drop the trailing dot"
    labels = value.split(".")
    if labels[0] == "*" and len(labels) > 1:
        if not wildcard:
            return f"{shown} is a wildcard; the address called must be one name (wildcards go " \
                "in --dns)"
        labels = labels[1:]
    for label in labels:
        if not label:
            return f"{shown} has an empty label (two dots in a row, or a leading dot)"
        if len(label) > 63:
            return f"{shown} has a label of {len(label)} characters; at most 63"
        if not _LABEL.fullmatch(label):
            return (f"{shown}: label {label[:20]!r} may hold only letters, digits and hyphens, "
                    "and may not start or end with a hyphen")
    if all(label.isdigit() for label in labels):
        return f"{shown} is not a valid IPv4 address"
    return None
