"""Certificates for a throwaway local control plane.

The local cluster needs the same trust chain a kubeadm cluster has, only smaller: one CA that
signs the apiserver's serving certificate (IP SAN 127.0.0.1, so clients verify it) and the
admin client certificate (group ``system:masters``, so RBAC lets it do anything), and an RSA
key pair the apiserver signs and verifies service-account tokens with. Keys are written 0600.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Short-lived on purpose: these certificates live as long as a test session or a dev cluster.
_VALIDITY = dt.timedelta(days=7)


@dataclass(frozen=True)
class ClusterPki:
    """Paths of the PEM files a local control plane is started with."""

    ca_cert: Path
    ca_key: Path
    apiserver_cert: Path
    apiserver_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path  # RSA private key: signs service-account tokens
    sa_pub: Path  # its public key: verifies them


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.touch(mode=0o600)
    path.write_bytes(pem)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _builder(subject: x509.Name, issuer: x509.Name, public_key: object) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def issue_serving_cert(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    cn: str,
    ips: tuple[str, ...] = ("127.0.0.1",),
    dns: tuple[str, ...] = ("localhost",),
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A TLS server certificate for ``cn`` valid for the given IPs and DNS names."""
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    sans += [x509.DNSName(d) for d in dns]
    cert = (
        _builder(_name(cn), ca_cert.subject, key.public_key())
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _issue_client_cert(
    ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, *, cn: str, group: str
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    # The apiserver maps CN to the user name and O to its groups.
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(_name(cn, group), ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def write_cluster_pki(directory: Path) -> ClusterPki:
    """Generate a fresh CA and everything the control plane needs into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = ClusterPki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        apiserver_cert=directory / "apiserver.crt",
        apiserver_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("berth-dev-cluster-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(paths.ca_key, ca_key)
    _write_cert(paths.ca_cert, ca_cert)

    # The in-cluster service name is included so the same cert works for clients that
    # address the "kubernetes" service, as controllers in a real cluster do.
    api_cert, api_key = issue_serving_cert(
        ca_cert, ca_key, cn="kube-apiserver",
        ips=("127.0.0.1", "10.0.0.1"),
        dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
    )
    _write_key(paths.apiserver_key, api_key)
    _write_cert(paths.apiserver_cert, api_cert)

    admin_cert, admin_key = _issue_client_cert(
        ca_cert, ca_key, cn="berth-admin", group="system:masters"
    )
    _write_key(paths.admin_key, admin_key)
    _write_cert(paths.admin_cert, admin_cert)

    # Service-account tokens are signed with RSA (RS256), the algorithm every verifier accepts.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(paths.sa_key, sa_key)
    paths.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return paths


def load_ca(paths: ClusterPki) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA of an existing PKI directory, to issue more certificates (a webhook's)."""
    cert = x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())
    key = serialization.load_pem_private_key(paths.ca_key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{paths.ca_key}: expected an EC private key")
    return cert, key


def write_serving_pair(
    paths: ClusterPki, directory: Path, *, cn: str, ips: tuple[str, ...] = ("127.0.0.1",)
) -> tuple[Path, Path]:
    """Issue a serving cert from the cluster CA into ``directory`` as tls.crt / tls.key."""
    ca_cert, ca_key = load_ca(paths)
    cert, key = issue_serving_cert(ca_cert, ca_key, cn=cn, ips=ips)
    directory.mkdir(parents=True, exist_ok=True)
    crt, k = directory / "tls.crt", directory / "tls.key"
    _write_key(k, key)
    _write_cert(crt, cert)
    return crt, k
