"""The one X.509 builder: a CA and the certificates it signs, as both of Berth's trust chains
(the webhook's, :mod:`admission.certs`, and the local control plane's,
:mod:`admission.devcluster.pki`) get them."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from admission import certbuilder as cb
from admission.certs import write_bundle
from admission.devcluster.pki import write_cluster_pki

NOW = dt.datetime(2026, 11, 29, 18, 0, tzinfo=dt.UTC)
VALID = cb.Validity(not_before=NOW - cb.CLOCK_SKEW, not_after=NOW + dt.timedelta(days=3))


def _ext(cert: x509.Certificate, kind: type[x509.ExtensionType]) -> x509.Extension:
    return cert.extensions.get_extension_for_class(kind)  # type: ignore[type-var]


def test_authority_signs_what_it_issues_and_only_that() -> None:
    ca = cb.authority("test-ca", valid=VALID, path_length=0)
    assert ca.cert.subject == ca.cert.issuer == cb.name("test-ca")
    basic = _ext(ca.cert, x509.BasicConstraints)
    assert basic.critical and basic.value == x509.BasicConstraints(ca=True, path_length=0)
    usage = _ext(ca.cert, x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    assert not usage.value.key_encipherment
    cert, key = cb.issue(ca, cb.name("svc"), usage=ExtendedKeyUsageOID.SERVER_AUTH, valid=VALID,
                         hosts=["10.0.0.1", "svc.ns.svc", "::1", "10.0.0.1"])
    cert.verify_directly_issued_by(ca.cert)
    assert cert.public_key() == key.public_key()
    assert (cert.not_valid_before_utc, cert.not_valid_after_utc) == (VALID.not_before,
                                                                      VALID.not_after)
    sans = _ext(cert, x509.SubjectAlternativeName).value
    assert list(sans) == [x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                          x509.DNSName("svc.ns.svc"), x509.IPAddress(ipaddress.ip_address("::1"))]
    assert _ext(cert, x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH])
    assert _ext(cert, x509.BasicConstraints).value.ca is False
    assert (_ext(cert, x509.AuthorityKeyIdentifier).value.key_identifier
            == _ext(ca.cert, x509.SubjectKeyIdentifier).value.digest)


def test_a_client_certificate_carries_no_hosts() -> None:
    ca = cb.authority("test-ca", valid=VALID, path_length=None)
    cert, _ = cb.issue(ca, cb.name("admin", "system:masters"),
                       usage=ExtendedKeyUsageOID.CLIENT_AUTH, valid=VALID)
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == (
        "system:masters")
    with pytest.raises(x509.ExtensionNotFound):
        _ext(cert, x509.SubjectAlternativeName)


def test_both_chains_are_built_by_it(tmp_path: Path) -> None:
    # Each leaf names its issuer's key the way the builder writes it, in both chains.
    bundle = write_bundle(tmp_path / "hook", "127.0.0.1", ["berth-webhook.berth-system.svc"])
    pki = write_cluster_pki(tmp_path / "pki")
    pairs = [(bundle.ca_cert, bundle.tls_cert), (pki.ca_cert, pki.apiserver_cert),
             (pki.ca_cert, pki.admin_cert)]
    for ca_path, leaf_path in pairs:
        ca = x509.load_pem_x509_certificate(ca_path.read_bytes())
        leaf = x509.load_pem_x509_certificate(leaf_path.read_bytes())
        assert (_ext(leaf, x509.AuthorityKeyIdentifier).value.key_identifier
                == _ext(ca, x509.SubjectKeyIdentifier).value.digest), leaf_path
