"""A tenant with only pod rights in its own namespace cannot get past Berth (DESIGN contract 7).

The tenant acts as a service account of its namespace whose Role allows pods create, update,
patch, get and list there and nothing else. On the real apiserver:

- screening has no opt-out: a pod labelled ``berth.dev/webhook=skip`` still goes through
  Berth's webhook, and so does GPU demand that sits only in an init container, a sidecar (an
  init container with ``restartPolicy: Always``) or only in ``nvidia.com/gpu.shared``;
- after CREATE, Berth's keys are Berth's: relabelling ``berth.dev/tenant``, writing
  ``berth.dev/assigned-node`` or lifting the ``berth.dev/admission`` gate is refused by the
  ValidatingAdmissionPolicy of config/base (the e2e harness installs it for every Berth test,
  so the release tests show Berth's own service account is still let through).

"The webhook saw it" is read from ``berth webhook``'s own review counter, so these tests judge
the apiserver-side scoping (matchConditions, selectors), not what the review then decides.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from admission import constants as c
from admission.devcluster.binaries import REPO_ROOT
from e2e.berth import GATE, BerthWebhook, berth_webhook
from e2e.conftest import E2ECluster
from e2e.helpers import api_refusal, eventually, pod_manifest
from e2e.rbac import service_account_kubeconfig

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="runs berth webhook on this host; kind deploys it from config/"),
]

ONLY_BERTH = "only Berth may change"
SHIPPED_WEBHOOK = REPO_ROOT / "config" / "base" / "webhook.yaml"


@pytest.fixture
def webhook(cluster: E2ECluster, tenant_namespaces: dict[str, str],
            tmp_path: Path) -> Iterator[BerthWebhook]:
    with berth_webhook(cluster, tmp_path / "berth", tenant_namespaces) as hook:
        yield hook


def reviews_seen(hook: BerthWebhook) -> int:
    """How many AdmissionReviews ``berth webhook`` has answered (its /metrics)."""
    seen = hook.metric("berth_webhook_review_seconds_count")
    assert seen is not None, "berth webhook's /metrics has no berth_webhook_review_seconds_count"
    return int(seen)


def create_seen(core: client.CoreV1Api, hook: BerthWebhook, ns: str,
                manifest: dict[str, Any]) -> Any:
    """Create ``manifest`` and assert Berth's webhook reviewed it. Returns the stored pod, or
    the ApiException of a refusal (Berth's own message)."""
    before = reviews_seen(hook)
    try:
        result: Any = core.create_namespaced_pod(ns, manifest)
    except ApiException as exc:
        result = exc
    seen = reviews_seen(hook) - before
    name = manifest["metadata"]["name"]
    assert seen >= 1, (f"pod {name} was admitted without Berth's webhook seeing it "
                       f"(stored: {not isinstance(result, ApiException)})")
    if isinstance(result, ApiException):
        assert "berth" in (result.body or "").lower(), result.body
    return result


def gates(pod: Any) -> list[str]:
    return [g.name for g in pod.spec.scheduling_gates or []]


def _registered_hook(cluster: E2ECluster, hook: BerthWebhook) -> Any:
    """The webhook entry the harness registered for ``hook`` (found by its URL's port)."""
    adm = client.AdmissionregistrationV1Api(cluster.api)
    for conf in adm.list_mutating_webhook_configuration().items:
        for entry in conf.webhooks or []:
            if entry.client_config.url and f":{hook.port}/" in entry.client_config.url:
                return cluster.api.sanitize_for_serialization(entry)
    raise AssertionError(f"no MutatingWebhookConfiguration calls port {hook.port}")


def test_a_pod_cannot_opt_out_of_screening(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], webhook: BerthWebhook
) -> None:
    # What the harness registered is scoped as config/base ships it (plus the narrowing to
    # this test's namespaces), so what holds here holds for the installation.
    shipped = yaml.safe_load(SHIPPED_WEBHOOK.read_text())["webhooks"][0]
    live = _registered_hook(cluster, webhook)
    assert (live.get("objectSelector") or {}) == (shipped.get("objectSelector") or {}), (
        f"objectSelector {live.get('objectSelector')} is not config/base's "
        f"{shipped.get('objectSelector')}")
    live_ns = live["namespaceSelector"].get("matchExpressions") or []
    for expression in shipped["namespaceSelector"].get("matchExpressions") or []:
        assert expression in live_ns, f"config/base's namespaceSelector {expression} not live"
    assert live["matchConditions"] == shipped["matchConditions"]

    # Neither a namespace label nor a pod label takes a GPU pod out of screening.
    ns = tenant_namespaces["team-a"]
    cluster.core.patch_namespace(ns, {"metadata": {"labels": {"berth.dev/webhook": "skip"}}})
    manifest = pod_manifest("skipper", gpus=1, labels={"berth.dev/webhook": "skip"})
    result = create_seen(cluster.core, webhook, ns, manifest)
    if not isinstance(result, ApiException):  # or refused for its forged Berth label
        assert gates(result) == [GATE], "a GPU pod labelled berth.dev/webhook=skip ran ungated"


def _init_gpu_pod(name: str, *, sidecar: bool) -> dict[str, Any]:
    manifest = pod_manifest(name)
    init: dict[str, Any] = {"name": "prep", "image": "registry.invalid/prep:latest",
                            "resources": {"limits": {c.RESOURCE_GPU: "1"}}}
    if sidecar:
        init["restartPolicy"] = "Always"
    manifest["spec"]["initContainers"] = [init]
    return manifest


@pytest.mark.parametrize("sidecar", [False, True], ids=["init-container", "sidecar"])
def test_gpus_of_init_and_sidecar_containers_are_screened(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], webhook: BerthWebhook,
    sidecar: bool,
) -> None:
    ns = tenant_namespaces["team-a"]
    result = create_seen(cluster.core, webhook, ns, _init_gpu_pod("init-gpu", sidecar=sidecar))
    if not isinstance(result, ApiException):
        assert gates(result) == [GATE]


def test_shared_gpu_resource_alone_is_screened(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], webhook: BerthWebhook
) -> None:
    """``nvidia.com/gpu.shared`` without ``nvidia.com/gpu``: the webhook must see it. (What it
    then decides - gate, refuse, or count the slots as demand - is the review's business.)"""
    ns = tenant_namespaces["team-a"]
    manifest = pod_manifest("slots")
    manifest["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu.shared": "2"}
    create_seen(cluster.core, webhook, ns, manifest)


def _tenant_user(cluster: E2ECluster, ns: str, out: Path) -> client.CoreV1Api:
    """A service account of ``ns`` allowed pods create/update/patch/get/list there, only."""
    assert cluster.local is not None
    core, rbac = cluster.core, client.RbacAuthorizationV1Api(cluster.api)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "tenant"}})
    rbac.create_namespaced_role(ns, {
        "metadata": {"name": "tenant-pods"},
        "rules": [{"apiGroups": [""], "resources": ["pods"],
                   "verbs": ["create", "update", "patch", "get", "list"]}]})
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": "tenant-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "tenant-pods"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}]})
    kubeconfig = service_account_kubeconfig(
        cluster.api, server=cluster.local.server, ca_pem=cluster.ca_bundle_pem(),
        namespace=ns, account="tenant", out=out)
    return client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))



def _refused(call: Any, key: str) -> str:
    with pytest.raises(ApiException) as refused:
        call()
    body = refused.value.body or ""
    assert refused.value.status in (403, 422), body
    assert key in body and ONLY_BERTH in body, body
    return body


def test_a_tenant_cannot_rewrite_berth_keys_after_create(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], webhook: BerthWebhook,
    tmp_path: Path,
) -> None:
    ns = tenant_namespaces["team-a"]
    tenant = _tenant_user(cluster, ns, tmp_path / "tenant.kubeconfig")
    pod = tenant.create_namespaced_pod(ns, pod_manifest("train", gpus=2))
    assert gates(pod) == [GATE] and pod.metadata.labels[c.LABEL_TENANT] == "team-a"
    # A new policy takes a moment to reach the admission chain: probe with dry runs.
    eventually(lambda: api_refusal(lambda: tenant.patch_namespaced_pod(
        "train", ns, {"metadata": {"labels": {c.LABEL_TENANT: "team-b"}}}, dry_run="All")),
        lambda exc: exc is not None and ONLY_BERTH in (exc.body or ""), timeout=30,
        what="the pod-keys ValidatingAdmissionPolicy to take effect")

    # Move the pod's quota to another tenant.
    _refused(lambda: tenant.patch_namespaced_pod(
        "train", ns, {"metadata": {"labels": {c.LABEL_TENANT: "team-b"}}}), c.LABEL_TENANT)
    # Forge a placement.
    _refused(lambda: tenant.patch_namespaced_pod(
        "train", ns, {"metadata": {"annotations": {c.ANNOTATION_ASSIGNED_NODE: "gpu-node-0"}}}),
        c.ANNOTATION_ASSIGNED_NODE)
    # Skip the solver: lift Berth's gate (a JSON patch, as a controller would send it).
    index = gates(tenant.read_namespaced_pod("train", ns)).index(GATE)
    _refused(lambda: tenant.patch_namespaced_pod(
        "train", ns, [{"op": "remove", "path": f"/spec/schedulingGates/{index}"}]), GATE)
    # Taking a Berth label away is a change too.
    _refused(lambda: tenant.patch_namespaced_pod(
        "train", ns, {"metadata": {"labels": {c.LABEL_TENANT: None}}}), c.LABEL_TENANT)

    # Nor through the status subresource, for a tenant granted it: a status update carries
    # metadata changes too.
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rbac.create_namespaced_role(ns, {
        "metadata": {"name": "tenant-pod-status"},
        "rules": [{"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]}]})
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": "tenant-pod-status"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "tenant-pod-status"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}]})
    via_status = eventually(lambda: api_refusal(lambda: tenant.patch_namespaced_pod_status(
        "train", ns, {"metadata": {"labels": {c.LABEL_TENANT: "team-b"}}})),
        lambda exc: exc is None or "cannot patch resource" not in (exc.body or ""),
        timeout=30, what="RBAC to grant the tenant pods/status")
    assert via_status is not None, "the tenant relabelled its pod through pods/status"
    assert c.LABEL_TENANT in (via_status.body or "") and ONLY_BERTH in (via_status.body or "")

    # The tenant's own keys stay the tenant's; the pod is as Berth left it.
    tenant.patch_namespaced_pod("train", ns, {"metadata": {"labels": {"app": "llama"}}})
    stored = cluster.core.read_namespaced_pod("train", ns)
    assert stored.metadata.labels[c.LABEL_TENANT] == "team-a"
    assert stored.metadata.labels["app"] == "llama"
    assert c.ANNOTATION_ASSIGNED_NODE not in (stored.metadata.annotations or {})
    assert gates(stored) == [GATE]
