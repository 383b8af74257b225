"""Berth's ValidatingAdmissionPolicies on a local cluster, as config/ ships them.

The policies and bindings are read from their files in config/ (the one source): the pod-keys
policy of config/base (only Berth may change its labels, annotations and gate after CREATE)
and the node agent's node policy. ``berth dev-cluster up --with-berth`` creates them as they
are; the e2e suite (e2e/policies.py) suffixes their names per test, limits each binding to
that test's namespaces and points a binding's ``paramRef.namespace`` (the namespace of a
service account it names) where the test installed that account, as kustomize would set
berth-system. Either way the apiserver's type check of each policy's CEL is waited for, and a
warning fails the install (a type error there would fail every matching request at runtime).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from admission.devcluster.binaries import REPO_ROOT
from admission.devcluster.processes import StartupError

POD_KEYS_POLICY = REPO_ROOT / "config" / "base" / "pod-keys-policy.yaml"


def policy_docs(files: Sequence[Path], *, suffix: str | None = None,
                namespaces: Sequence[str] | None = None,
                param_namespace: str | None = None) -> list[dict[str, Any]]:
    """The objects of ``files``, named with ``suffix`` and bound to ``namespaces`` when given
    (see the module's docstring)."""
    docs = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
    for doc in docs:
        kind, spec = doc["kind"], doc["spec"]
        if suffix:
            doc["metadata"]["name"] = f"{doc['metadata']['name']}-{suffix}"
        if kind == "ValidatingAdmissionPolicyBinding":
            if suffix:
                spec["policyName"] = f"{spec['policyName']}-{suffix}"
            if namespaces:
                spec["matchResources"] = {"namespaceSelector": {"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In",
                     "values": sorted(namespaces)}]}}
            if "paramRef" in spec and param_namespace is not None:
                spec["paramRef"]["namespace"] = param_namespace
        elif kind != "ValidatingAdmissionPolicy":
            raise ValueError(f"{files}: unexpected kind {kind}")
    return docs


def _type_checked(adm: Any, name: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        policy = adm.read_validating_admission_policy(name)
        if policy.status is not None and \
                policy.status.observed_generation == policy.metadata.generation:
            break
        if time.monotonic() > deadline:
            raise StartupError(f"the apiserver did not type-check ValidatingAdmissionPolicy "
                               f"{name} within {timeout:.0f}s")
        time.sleep(0.2)
    warnings = (policy.status.type_checking.expression_warnings or []
                if policy.status.type_checking else [])
    if warnings:
        raise StartupError(f"{name}: " + "; ".join(f"{w.field_ref}: {w.warning}"
                                                   for w in warnings))


def install_policies(api: client.ApiClient, docs: Sequence[dict[str, Any]]
                     ) -> list[dict[str, Any]]:
    """Create ``docs`` (policies before their bindings, as the files list them) and wait for
    each policy's type check. Returns what was created, for :func:`remove_policies`; on a
    failure removes it again and raises."""
    adm: Any = client.AdmissionregistrationV1Api(api)  # takes the manifests as dicts
    created: list[dict[str, Any]] = []
    try:
        for doc in docs:
            if doc["kind"] == "ValidatingAdmissionPolicy":
                adm.create_validating_admission_policy(doc)
            else:
                adm.create_validating_admission_policy_binding(doc)
            created.append(doc)
        for doc in docs:
            if doc["kind"] == "ValidatingAdmissionPolicy":
                _type_checked(adm, doc["metadata"]["name"])
    except BaseException:
        remove_policies(api, created)
        raise
    return created


def remove_policies(api: client.ApiClient, created: Sequence[dict[str, Any]]) -> None:
    adm: Any = client.AdmissionregistrationV1Api(api)
    for doc in reversed(created):
        try:
            if doc["kind"] == "ValidatingAdmissionPolicy":
                adm.delete_validating_admission_policy(doc["metadata"]["name"])
            else:
                adm.delete_validating_admission_policy_binding(doc["metadata"]["name"])
        except ApiException as exc:
            if exc.status != 404:
                raise
