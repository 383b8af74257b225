"""X.509 names, keys and certificates, built one way for both of Berth's trust chains.

The webhook's own chain (:mod:`admission.certs`: a CA and the serving pair it signs) and the
local control plane's (:mod:`admission.devcluster.pki`: a CA, the apiserver's serving pair, an
admin client pair) have the same shape: P-256 keys, SHA-256 signatures, a critical
BasicConstraints, a CA that may only sign certificates and CRLs, key identifiers that link a
certificate to its issuer, and a host list whose IP addresses become IP SANs and everything
else DNS SANs. Only names, lifetimes and the CA's path length differ, so those are arguments.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID, ObjectIdentifier

#: How far back a certificate's validity starts, so a peer whose clock runs a little behind
#: does not see it as not yet valid.
CLOCK_SKEW = dt.timedelta(minutes=5)


@dataclass(frozen=True, slots=True, kw_only=True)
class Validity:
    """When a certificate is valid; ``not_before`` is usually :data:`CLOCK_SKEW` ago."""

    not_before: dt.datetime
    not_after: dt.datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Authority:
    """A CA: its certificate and the key it signs with."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def name(common_name: str, organization: str | None = None) -> x509.Name:
    """``CN=common_name`` (and ``O=organization``: the apiserver reads it as a group)."""
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def private_key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    """The key as unencrypted PKCS#8 PEM (the file is what protects it: write it 0600)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def certificate_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def subject_alt_names(hosts: Iterable[str]) -> x509.SubjectAlternativeName:
    """An IP SAN for each host that is an IP address, a DNS SAN for each other; in the order
    given, each once."""
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(list(dict.fromkeys(names)))


def _base(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
          valid: Validity) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid.not_before).not_valid_after(valid.not_after)
    )


def authority(common_name: str, *, valid: Validity, path_length: int | None) -> Authority:
    """A new self-signed CA (``path_length`` 0: it signs end-entity certificates only)."""
    key = new_key()
    subject = name(common_name)
    cert = (
        _base(subject, subject, key.public_key(), valid)
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return Authority(cert=cert, key=key)


def issue(ca: Authority, subject: x509.Name, *, usage: ObjectIdentifier, valid: Validity,
          hosts: Iterable[str] = ()) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A new key and its end-entity certificate signed by ``ca``, for one extended key usage
    (``ExtendedKeyUsageOID.SERVER_AUTH`` or ``CLIENT_AUTH``) and, when given, the ``hosts``
    it serves (:func:`subject_alt_names`)."""
    key = new_key()
    builder = _base(subject, ca.cert.subject, key.public_key(), valid)
    hosts = tuple(hosts)
    if hosts:  # no SAN extension at all for a client (cryptography 51 refuses an empty one)
        builder = builder.add_extension(subject_alt_names(hosts), critical=False)
    cert = (
        builder
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), False)
        .sign(ca.key, hashes.SHA256())
    )
    return cert, key
