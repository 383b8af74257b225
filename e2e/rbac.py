"""Berth's deployed identity on the cluster under test: config/base/rbac.yaml as installed.

``berth serve`` in a real installation talks to the apiserver as the ``berth`` service account
with only the permissions config/base/rbac.yaml grants. Applying those very objects here and
running ``berth serve`` with a token of that account lets the real RBAC authorizer check that
the least-privilege rules are enough (and an admin kubeconfig would hide any gap).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from admission.devcluster.binaries import REPO_ROOT

RBAC_FILE = REPO_ROOT / "config" / "base" / "rbac.yaml"


def install_rbac(api: client.ApiClient, namespace: str, suffix: str,
                 files: tuple[Path, ...] = (RBAC_FILE,)) -> list[tuple[str, str]]:
    """Create the objects of config/base/rbac.yaml (and of any component's RBAC file added in
    ``files``) with ``namespace`` where kustomize would put berth-system, cluster-scoped names
    suffixed so tests cannot collide. Returns what to delete (kind, name) for the
    cluster-scoped ones."""
    rbac, core = client.RbacAuthorizationV1Api(api), client.CoreV1Api(api)
    created: list[tuple[str, str]] = []
    docs: list[dict[str, Any]] = [d for f in files for d in yaml.safe_load_all(f.read_text())
                                  if d]
    cluster_names = {d["metadata"]["name"]: f"{d['metadata']['name']}-{suffix}"
                     for d in docs if d["kind"].startswith("Cluster")}
    for doc in docs:
        kind, meta = doc["kind"], doc["metadata"]
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
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
                               bound_pod: Any = None) -> Path:
    """A kubeconfig that authenticates as ``namespace/account`` with a fresh token, bound to
    ``bound_pod`` (a V1Pod) when given, as the kubelet's projected tokens are: the apiserver
    then adds the pod's node to the request's user info."""
    core = client.CoreV1Api(api)
    spec: dict[str, Any] = {"expirationSeconds": 3600}
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
    out.write_text(yaml.safe_dump(conf))
    out.chmod(0o600)
    return out
