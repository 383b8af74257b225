"""Berth's ValidatingAdmissionPolicies on the cluster under test, as config/ ships them.

The policies and bindings are read from their files in config/ (the one source) and created
with names suffixed per test, each binding limited to that test's namespaces, and a binding's
``paramRef.namespace`` (the namespace of a service account it names) set to where the test
installed that account, as kustomize would set berth-system. Deleted afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from admission.devcluster.binaries import REPO_ROOT
from e2e.helpers import eventually

POD_KEYS_POLICY = REPO_ROOT / "config" / "base" / "pod-keys-policy.yaml"


def policy_docs(files: Sequence[Path], *, suffix: str, namespaces: Sequence[str] | None,
                param_namespace: str | None = None) -> list[dict[str, Any]]:
    """The objects of ``files`` as this test creates them (see the module's docstring)."""
    docs = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
    for doc in docs:
        kind, spec = doc["kind"], doc["spec"]
        doc["metadata"]["name"] = f"{doc['metadata']['name']}-{suffix}"
        if kind == "ValidatingAdmissionPolicyBinding":
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


def _type_checked(adm: client.AdmissionregistrationV1Api, name: str) -> None:
    """Wait until the apiserver has type-checked the policy's CEL against the real schema, and
    fail on any warning (a type error there would fail every matching request at runtime)."""
    def status() -> Any:
        return adm.read_validating_admission_policy(name)

    policy = eventually(status, lambda p: p.status is not None and p.status.observed_generation
                        == p.metadata.generation, timeout=30,
                        what=f"the apiserver to type-check ValidatingAdmissionPolicy {name}")
    warnings = (policy.status.type_checking.expression_warnings or []
                if policy.status.type_checking else [])
    assert not warnings, f"{name}: " + "; ".join(f"{w.field_ref}: {w.warning}" for w in warnings)


@contextmanager
def admission_policies(api: client.ApiClient, *, suffix: str,
                       namespaces: Sequence[str] | None = None,
                       files: Sequence[Path] = (POD_KEYS_POLICY,),
                       param_namespace: str | None = None) -> Iterator[list[dict[str, Any]]]:
    adm = client.AdmissionregistrationV1Api(api)
    docs = policy_docs(files, suffix=suffix, namespaces=namespaces,
                       param_namespace=param_namespace)
    created: list[dict[str, Any]] = []
    try:
        for doc in docs:  # policies before their bindings, as the files list them
            if doc["kind"] == "ValidatingAdmissionPolicy":
                adm.create_validating_admission_policy(doc)
            else:
                adm.create_validating_admission_policy_binding(doc)
            created.append(doc)
        for doc in docs:
            if doc["kind"] == "ValidatingAdmissionPolicy":
                _type_checked(adm, doc["metadata"]["name"])
        yield docs
    finally:
        for doc in reversed(created):
            try:
                if doc["kind"] == "ValidatingAdmissionPolicy":
                    adm.delete_validating_admission_policy(doc["metadata"]["name"])
                else:
                    adm.delete_validating_admission_policy_binding(doc["metadata"]["name"])
            except ApiException as exc:
                if exc.status != 404:
                    raise
