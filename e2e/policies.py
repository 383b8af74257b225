"""Berth's ValidatingAdmissionPolicies on the cluster under test, as config/ ships them.

Reading them from config/ and creating them (names suffixed per test, each binding limited to
that test's namespaces, ``paramRef.namespace`` where the test installed the account it names,
the apiserver's type check waited for) lives in :mod:`admission.devcluster.policies`, shared
with ``berth dev-cluster up --with-berth``; here they are undone after the test.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client

from admission.devcluster.policies import (
    POD_KEYS_POLICY,
    install_policies,
    policy_docs,
    remove_policies,
)

__all__ = ["POD_KEYS_POLICY", "admission_policies", "policy_docs"]


@contextmanager
def admission_policies(api: client.ApiClient, *, suffix: str,
                       namespaces: Sequence[str] | None = None,
                       files: Sequence[Path] = (POD_KEYS_POLICY,),
                       param_namespace: str | None = None) -> Iterator[list[dict[str, Any]]]:
    docs = policy_docs(files, suffix=suffix, namespaces=namespaces,
                       param_namespace=param_namespace)
    created = install_policies(api, docs)
    try:
        yield docs
    finally:
        remove_policies(api, created)
