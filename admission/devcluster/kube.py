"""Small API steps every installation on the local cluster takes: a namespace ready for pods,
CRDs served, objects created once.

Shared by ``berth dev-cluster up --with-berth`` (admission/devcluster/berth.py, kueue.py,
volcano.py) and the e2e suite's fixtures.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException


def resource(api: client.ApiClient, api_version: str, kind: str) -> Any:
    """A dynamic-client resource (for CRDs the typed client does not know)."""
    dyn: Any = dynamic.DynamicClient  # untyped
    return dyn(api).resources.get(api_version=api_version, kind=kind)


def create_once(create: Any, *args: Any, **kwargs: Any) -> bool:
    """Call ``create``; an object that already exists (409) is fine. True when created."""
    try:
        create(*args, **kwargs)
    except ApiException as exc:
        if exc.status != 409:
            raise
        return False
    return True


def ensure_namespace(core: client.CoreV1Api, name: str,
                     labels: Mapping[str, str] | None = None, timeout: float = 30) -> str:
    """Create namespace ``name`` (if absent) and wait for its default service account, which
    the ServiceAccount admission plugin requires before any pod can be created in it."""
    body = {"metadata": {"name": name, "labels": dict(labels or {})}}
    create_once(core.create_namespace, body)
    deadline = time.monotonic() + timeout
    while True:
        try:
            core.read_namespaced_service_account("default", name)
            return name
        except ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def install_crds(api: client.ApiClient, files: Iterable[Path], timeout: float = 60) -> list[str]:
    """Create the CRDs in ``files`` (one per file; existing ones are kept) and wait until each
    is Established, i.e. served. Returns their names."""
    crds = resource(api, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
    names = []
    for path in sorted(files):
        doc = yaml.safe_load(path.read_text())
        create_once(crds.create, body=doc)
        names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            status = crds.get(name=name).to_dict().get("status") or {}
            if any(c["type"] == "Established" and c["status"] == "True"
                   for c in status.get("conditions") or []):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout:.0f}s")
            time.sleep(0.2)
    return names
