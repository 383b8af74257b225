"""Berth's deployed identity on a local cluster: config/base/rbac.yaml (and the RBAC of any
component it runs with) installed as kustomize would, and a kubeconfig of its service account.

``berth serve`` in a real installation talks to the apiserver as the ``berth`` service account
with only the permissions config/base/rbac.yaml grants. ``berth dev-cluster up --with-berth``
and the e2e suite apply those very objects and run ``berth serve`` with a token of that
account, so the real RBAC authorizer checks that the least-privilege rules are enough (an admin
kubeconfig would hide any gap).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from admission.devcluster.binaries import REPO_ROOT

CONFIG = REPO_ROOT / "config"
RBAC_FILE = CONFIG / "base" / "rbac.yaml"
NAMESPACE_FILE = CONFIG / "base" / "namespace.yaml"
ACCOUNT = "berth"


def rbac_files(components: Iterable[str] = ()) -> tuple[Path, ...]:
    """config/base/rbac.yaml plus config/components/<name>/rbac.yaml of each named component
    that has one (volcano does; kueue needs nothing more)."""
    extra = [p for name in components
             if (p := CONFIG / "components" / name / "rbac.yaml").exists()]
    return (RBAC_FILE, *extra)


def install_rbac(api: client.ApiClient, namespace: str, suffix: str | None = None,
                 files: tuple[Path, ...] = (RBAC_FILE,)) -> list[tuple[str, str]]:
    """Create the objects of ``files`` with ``namespace`` where kustomize would put
    berth-system; with ``suffix`` the cluster-scoped names are suffixed so that several
    installations (one per test) cannot collide. Returns what to delete (kind, name) for the
    cluster-scoped ones."""
    # Any: the client takes plain dicts (as read from the YAML) where its stubs say models.
    rbac: Any = client.RbacAuthorizationV1Api(api)
    core: Any = client.CoreV1Api(api)
    created: list[tuple[str, str]] = []
    docs: list[dict[str, Any]] = [d for f in files for d in yaml.safe_load_all(f.read_text())
                                  if d]
    cluster_names = {d["metadata"]["name"]: (f"{d['metadata']['name']}-{suffix}" if suffix
                                             else d["metadata"]["name"])
                     for d in docs if d["kind"].startswith("Cluster")}
    for doc in docs:
        kind, meta = doc["kind"], doc["metadata"]
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
        if not kind.startswith("Cluster"):
            meta["namespace"] = namespace  # where kustomize would say berth-system
        if kind.startswith("Cluster"):
            meta["name"] = cluster_names[meta["name"]]
            if "roleRef" in doc and doc["roleRef"]["kind"] == "ClusterRole":
                doc["roleRef"]["name"] = cluster_names[doc["roleRef"]["name"]]
        if kind == "ServiceAccount":
            core.create_namespaced_service_account(namespace, doc)
        elif kind == "Role":
            rbac.create_namespaced_role(namespace, doc)
        elif kind == "RoleBinding":
            rbac.create_namespaced_role_binding(namespace, doc)
        elif kind == "ClusterRole":
            rbac.create_cluster_role(doc)
            created.append((kind, meta["name"]))
        elif kind == "ClusterRoleBinding":
            rbac.create_cluster_role_binding(doc)
            created.append((kind, meta["name"]))
        else:
            raise ValueError(f"{files}: unexpected kind {kind}")
    return created


def uninstall_rbac(api: client.ApiClient, created: list[tuple[str, str]]) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    for kind, name in created:
        if kind == "ClusterRole":
            rbac.delete_cluster_role(name)
        else:
            rbac.delete_cluster_role_binding(name)


def service_account_kubeconfig(api: client.ApiClient, *, server: str, ca_pem: bytes,
                               namespace: str, account: str, out: Path,
                               expiration_seconds: int = 3600, bound_pod: Any = None) -> Path:
    """A kubeconfig that authenticates as ``namespace/account`` with a fresh token, bound to
    ``bound_pod`` (a V1Pod) when given, as the kubelet's projected tokens are: the apiserver
    then adds the pod's node to the request's user info."""
    core: Any = client.CoreV1Api(api)
    spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
    if bound_pod is not None:
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1",
                                  "name": bound_pod.metadata.name,
                                  "uid": bound_pod.metadata.uid}
    request = core.create_namespaced_service_account_token(account, namespace, {"spec": spec})
    conf = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": account, "user": {"token": request.status.token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": account}}],
        "current-context": "c",
    }
    out.touch(mode=0o600)
    out.write_text(yaml.safe_dump(conf))
    out.chmod(0o600)
    return out
