"""Certificates for a throwaway local control plane.

The local cluster needs the same trust chain a kubeadm cluster has, only smaller: one CA that
signs the apiserver's serving certificate (IP SAN 127.0.0.1, so clients verify it) and the
admin client certificate (group ``system:masters``, so RBAC lets it do anything), and an RSA
key pair the apiserver signs and verifies service-account tokens with. Keys are written 0600.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from admission import certbuilder as cb

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


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.touch(mode=0o600)
    path.write_bytes(cb.private_key_pem(key))


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cb.certificate_pem(cert))


def _validity() -> cb.Validity:
    now = dt.datetime.now(dt.UTC)
    return cb.Validity(not_before=now - cb.CLOCK_SKEW, not_after=now + _VALIDITY)


def issue_serving_cert(
    ca: cb.Authority,
    *,
    cn: str,
    ips: tuple[str, ...] = ("127.0.0.1",),
    dns: tuple[str, ...] = ("localhost",),
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A TLS server certificate for ``cn`` valid for the given IPs and DNS names."""
    return cb.issue(ca, cb.name(cn), usage=ExtendedKeyUsageOID.SERVER_AUTH,
                    valid=_validity(), hosts=(*ips, *dns))


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
    ca = cb.authority("berth-dev-cluster-ca", valid=_validity(), path_length=None)
    _write_key(paths.ca_key, ca.key)
    _write_cert(paths.ca_cert, ca.cert)

    # The in-cluster service name is included so the same cert works for clients that
    # address the "kubernetes" service, as controllers in a real cluster do.
    api_cert, api_key = issue_serving_cert(
        ca, cn="kube-apiserver",
        ips=("127.0.0.1", "10.0.0.1"),
        dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
    )
    _write_key(paths.apiserver_key, api_key)
    _write_cert(paths.apiserver_cert, api_cert)

    # The apiserver maps CN to the user name and O to its groups.
    admin_cert, admin_key = cb.issue(ca, cb.name("berth-admin", "system:masters"),
                                     usage=ExtendedKeyUsageOID.CLIENT_AUTH, valid=_validity())
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


def load_ca(paths: ClusterPki) -> cb.Authority:
    """The CA of an existing PKI directory, to issue more certificates (a webhook's)."""
    cert = x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())
    key = serialization.load_pem_private_key(paths.ca_key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{paths.ca_key}: expected an EC private key")
    return cb.Authority(cert=cert, key=key)


def write_serving_pair(
    paths: ClusterPki, directory: Path, *, cn: str, ips: tuple[str, ...] = ("127.0.0.1",)
) -> tuple[Path, Path]:
    """Issue a serving cert from the cluster CA into ``directory`` as tls.crt / tls.key."""
    cert, key = issue_serving_cert(load_ca(paths), cn=cn, ips=ips)
    directory.mkdir(parents=True, exist_ok=True)
    crt, k = directory / "tls.crt", directory / "tls.key"
    _write_key(k, key)
    _write_cert(crt, cert)
    return crt, k
