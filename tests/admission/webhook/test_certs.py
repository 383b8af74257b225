"""Certificates: what `berth certs` writes verifies as a serving chain, the rendered webhook
configuration trusts it, and a real TLS server reloads a rotated pair without dropping the
connections it already has."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import shutil
import ssl
import stat
from pathlib import Path

import aiohttp
import pytest
import yaml
from cryptography import x509
from review_helpers import SAMPLE, fixture

from admission import event_loop
from admission.certs import (
    WEBHOOK_TEMPLATE,
    CertError,
    TlsReloader,
    render_webhook_config,
    write_bundle,
)
from admission.cli import main
from admission.webhook import WebhookConfig, start_webhook


def test_bundle_is_a_valid_chain_for_the_host(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path, "127.0.0.1", ["berth-webhook.berth-system.svc"], days=30)
    assert stat.S_IMODE(os.stat(bundle.tls_key).st_mode) == 0o600
    ca = x509.load_pem_x509_certificate(bundle.ca_cert.read_bytes())
    cert = x509.load_pem_x509_certificate(bundle.tls_cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert san.get_values_for_type(x509.DNSName) == ["berth-webhook.berth-system.svc"]
    basic = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert basic.ca and basic.path_length == 0
    for c in (ca, cert):
        assert c.not_valid_after_utc - c.not_valid_before_utc == dt.timedelta(days=30)
    # the standard library agrees the pair matches and the chain verifies for the host
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(bundle.tls_cert, bundle.tls_key)


def test_rendered_webhook_configuration(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path, "127.0.0.1")
    doc = yaml.safe_load(render_webhook_config(
        bundle.ca_cert.read_bytes(), url="https://127.0.0.1:9443/mutate-pods",
        namespaces=["team-b", "team-a"]))
    assert doc["kind"] == "MutatingWebhookConfiguration"
    hook = doc["webhooks"][0]
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == bundle.ca_cert.read_bytes()
    assert hook["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate-pods"
    assert hook["rules"][0]["operations"] == ["CREATE"] and hook["sideEffects"] == "None"
    # Scoped as config/base/webhook.yaml ships it, narrowed to the given namespaces.
    shipped = yaml.safe_load(WEBHOOK_TEMPLATE.read_text())["webhooks"][0]
    assert hook["matchConditions"] == shipped["matchConditions"]
    assert hook["rules"] == shipped["rules"] and "objectSelector" not in hook
    *base, narrowed = hook["namespaceSelector"]["matchExpressions"]
    assert base == shipped["namespaceSelector"]["matchExpressions"]
    assert narrowed == {"key": "kubernetes.io/metadata.name", "operator": "In",
                        "values": ["team-a", "team-b"]}


def test_rendering_needs_the_shipped_configuration(tmp_path: Path) -> None:
    with pytest.raises(CertError, match="config/ directory of a Berth checkout"):
        render_webhook_config(b"ca", template=tmp_path / "missing.yaml")
    assert main(["certs", "--out", str(tmp_path / "c"), "--host", "h"]) == 0


def test_certs_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "certs"
    assert main(["certs", "--out", str(out), "--host", "127.0.0.1", "--dns", "localhost",
                 "--render-webhook-config", "-", "--service", "berth-system/berth-webhook",
                 "--policy", str(SAMPLE)]) == 0
    text = capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"ca.crt", "tls.crt", "tls.key"}
    doc = yaml.safe_load(text[text.index("apiVersion"):])
    assert doc["webhooks"][0]["clientConfig"]["service"]["name"] == "berth-webhook"
    assert main(["certs", "--out", str(out), "--host", "h", "--service", "nope"]) == 2
    assert "--service must be NAMESPACE/NAME" in capsys.readouterr().err


def test_missing_or_mismatched_files_are_explained(tmp_path: Path) -> None:
    with pytest.raises(CertError, match="berth certs --out"):
        TlsReloader(tmp_path)
    one, two = write_bundle(tmp_path / "1", "127.0.0.1"), write_bundle(tmp_path / "2", "127.0.0.1")
    shutil.copy(two.tls_key, one.tls_key)
    with pytest.raises(CertError, match="cannot load"):
        TlsReloader(tmp_path / "1")


def _client_context(ca: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    return ctx


async def _peer_serial(port: int, ca: Path) -> int:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=_client_context(ca))
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return x509.load_der_x509_certificate(der).serial_number


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated")
async def test_tls_server_reloads_rotated_certificates_without_dropping(tmp_path: Path) -> None:
    await _rotation(tmp_path)


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated")
def test_tls_reload_and_minimum_version_hold_on_uvloop(tmp_path: Path) -> None:
    # `berth webhook` serves on uvloop, whose TLS layer is its own: the same checks there.
    event_loop.run(_rotation(tmp_path), "uvloop")


async def _rotation(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    first = write_bundle(certs, "127.0.0.1")
    old_ca = tmp_path / "old-ca.crt"
    shutil.copy(first.ca_cert, old_ca)
    policy = tmp_path / "policy.yaml"
    shutil.copy(SAMPLE, policy)
    server = await start_webhook(WebhookConfig(policy=policy, cert_dir=certs, port=0,
                                               policy_interval=0.05, cert_interval=0.05,
                                               drain_seconds=0))
    try:
        url = f"https://127.0.0.1:{server.port}/mutate-pods"
        old_serial = await _peer_serial(server.port, old_ca)
        # TLS 1.1 and older are refused
        legacy = _client_context(old_ca)
        legacy.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        legacy.maximum_version = ssl.TLSVersion.TLSv1_1
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await asyncio.open_connection("127.0.0.1", server.port, ssl=legacy)

        connector = aiohttp.TCPConnector(ssl=_client_context(old_ca), limit=1)
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.post(url, json=fixture("job-pod.json")) as resp:
                assert resp.status == 200
            write_bundle(certs, "127.0.0.1")  # rotate: new CA, new pair
            for _ in range(100):
                await asyncio.sleep(0.05)
                if server.state.metrics.cert_reloads.labels(result="success")._value.get():
                    break
            # the kept-alive connection still answers...
            async with session.post(url, json=fixture("kueue-pod.json")) as resp:
                assert resp.status == 200
                assert (await resp.json())["response"]["allowed"] is True
        # ...new connections get the new certificate, which the old CA does not trust
        assert await _peer_serial(server.port, certs / "ca.crt") != old_serial
        with pytest.raises(ssl.SSLCertVerificationError):
            await _peer_serial(server.port, old_ca)
        expiry = server.state.metrics.cert_expiry._value.get()
        assert expiry > 0
    finally:
        await server.stop()
