"""charts/berth installed with the real Helm into a real kube-apiserver.

A control plane of its own (the chart installs the cluster-wide webhook configuration and
pod-keys policy under their real names, which would screen every other test's namespaces):

- ``helm install`` with the defaults creates every object and the apiserver accepts them all
  (the webhook's matchConditions and the ValidatingAdmissionPolicies' CEL type-check cleanly);
- the installed webhook fails closed and is scoped: with no Berth replica answering (kwok runs
  no containers), a GPU pod in a tenant namespace is refused naming the webhook, a CPU-only pod
  is admitted without calling it;
- ``helm upgrade --set-file policy=...`` changes the policy ConfigMap in place (same object,
  so the replicas reload it without a restart); a bad value is refused and changes nothing;
- ``helm uninstall`` leaves nothing of Berth's behind, and GPU pods are admitted again;
- with backend kueue or volcano (their CRDs installed from the pinned builds), the queues the
  sample policy names are created in the tenants' namespaces and removed on uninstall.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from admission.devcluster import DevCluster, kueue, volcano
from admission.devcluster.binaries import REPO_ROOT, MissingBinary, binary
from admission.devcluster.kube import ensure_namespace, resource
from e2e.conftest import _start_local
from e2e.helpers import eventually

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="starts a control plane of its own on this machine"),
]

CHART = REPO_ROOT / "charts" / "berth"
NS = "berth-system"


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    cluster = _start_local(tmp_path_factory.mktemp("helm-cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def api(own_cluster: DevCluster) -> client.ApiClient:
    return config.new_client_from_config(str(own_cluster.kubeconfig))


class Helm:
    def __init__(self, kubeconfig: Path, home: Path) -> None:
        try:
            self.exe = str(binary("helm"))
        except MissingBinary as exc:
            pytest.fail(f"e2e: {exc}", pytrace=False)
        self.kubeconfig = kubeconfig
        self.env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"),
                    "HELM_CONFIG_HOME": str(home / "config"),
                    "HELM_DATA_HOME": str(home / "data")}

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.exe, "--kubeconfig", str(self.kubeconfig), *args],
                              capture_output=True, text=True, timeout=180, env=self.env)
        if check:
            assert proc.returncode == 0, f"helm {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
        return proc


@pytest.fixture(scope="module")
def helm(own_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(own_cluster.kubeconfig, tmp_path_factory.mktemp("helm-home"))


def gpu_pod(name: str, gpus: int = 1) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": limits}}]}}


def cluster_scoped(api: client.ApiClient) -> dict[str, set[str]]:
    """Berth's cluster-scoped objects by kind (the part of an install a namespace delete would
    not remove)."""
    adm = client.AdmissionregistrationV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    label = "app.kubernetes.io/part-of=berth"
    return {
        "MutatingWebhookConfiguration": {o.metadata.name for o in
                                         adm.list_mutating_webhook_configuration().items},
        "ValidatingAdmissionPolicy": {o.metadata.name for o in
                                      adm.list_validating_admission_policy().items},
        "ValidatingAdmissionPolicyBinding": {
            o.metadata.name for o in adm.list_validating_admission_policy_binding().items},
        "ClusterRole": {o.metadata.name for o in
                        rbac.list_cluster_role(label_selector=label).items},
        "ClusterRoleBinding": {o.metadata.name for o in
                               rbac.list_cluster_role_binding(label_selector=label).items},
    }


def test_install_upgrade_uninstall(api: client.ApiClient, helm: Helm, tmp_path: Path) -> None:
    core = client.CoreV1Api(api)
    for tenant in ("team-a", "team-b"):
        ensure_namespace(core, tenant)
    before = cluster_scoped(api)

    helm("install", "berth", str(CHART), "--namespace", NS, "--create-namespace")
    status = yaml.safe_load(helm("status", "berth", "-n", NS, "-o", "yaml").stdout)
    assert status["info"]["status"] == "deployed", status["info"]

    # Every object of the default rendering is there, as the chart rendered it.
    rendered = [d for d in yaml.safe_load_all(
        helm("get", "manifest", "berth", "-n", NS).stdout) if d]
    kinds = {d["kind"] for d in rendered}
    assert {"Deployment", "DaemonSet", "Service", "ConfigMap", "MutatingWebhookConfiguration",
            "ValidatingAdmissionPolicy", "ClusterRole", "PodDisruptionBudget"} <= kinds
    for doc in rendered:
        meta = doc["metadata"]
        got = resource(api, doc["apiVersion"], doc["kind"]).get(
            name=meta["name"], namespace=meta.get("namespace") if doc["kind"] not in
            ("ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
             "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding") else None)
        assert got.metadata.name == meta["name"]
    adm = client.AdmissionregistrationV1Api(api)
    for name in ("berth-pod-keys", "berth-agent-node"):
        eventually(lambda name=name: adm.read_validating_admission_policy(name).status,
                   lambda st: st is not None and st.type_checking is not None, timeout=30,
                   what=f"the type check of {name}")
        checked = adm.read_validating_admission_policy(name).status.type_checking
        assert not checked.expression_warnings, (name, checked.expression_warnings)
    hook = adm.read_mutating_webhook_configuration("berth").webhooks[0]
    assert hook.failure_policy == "Fail" and hook.client_config.service.namespace == NS
    policy_cm = core.read_namespaced_config_map("berth-policy", NS)
    assert policy_cm.data["policy.yaml"] == (CHART / "files" / "policy-standalone.yaml"
                                             ).read_text()

    # Fail closed, and scoped: no replica answers, so a GPU pod is refused naming the webhook;
    # a CPU-only pod never reaches it.
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("team-a", gpu_pod("gpu-while-down"))
    assert "pods.berth.dev" in str(refused.value.body), refused.value.body
    core.create_namespaced_pod("team-a", gpu_pod("cpu-only", gpus=0))

    # A new policy reaches the same ConfigMap in place.
    new_policy = tmp_path / "policy.yaml"
    new_policy.write_text("apiVersion: berth.dev/v1alpha1\nkind: Policy\ntenants:\n"
                          "  - name: team-a\n    namespaces: [team-a]\n    quota: {gpus: 8}\n")
    helm("upgrade", "berth", str(CHART), "-n", NS, "--set-file", f"policy={new_policy}")
    after = core.read_namespaced_config_map("berth-policy", NS)
    assert after.metadata.uid == policy_cm.metadata.uid
    assert after.data["policy.yaml"] == new_policy.read_text()

    # A bad value is refused with its name, and the release stays as it was.
    bad = helm("upgrade", "berth", str(CHART), "-n", NS, "--set", "backend=slurm", check=False)
    assert bad.returncode != 0 and "backend" in bad.stderr, bad.stderr
    history = yaml.safe_load(helm("history", "berth", "-n", NS, "-o", "yaml").stdout)
    assert [h["revision"] for h in history] == [1, 2], history
    assert core.read_namespaced_config_map("berth-policy", NS).data["policy.yaml"] == \
        new_policy.read_text()

    helm("uninstall", "berth", "-n", NS, "--wait")
    assert cluster_scoped(api) == before
    left = [p.metadata.name for p in core.list_namespaced_pod(NS).items]
    assert not core.list_namespaced_config_map(
        NS, label_selector="app.kubernetes.io/part-of=berth").items, left
    # With Berth gone, GPU pods are admitted again (and, ungated, left to the scheduler).
    pod = core.create_namespaced_pod("team-a", gpu_pod("gpu-after"))
    assert not pod.spec.scheduling_gates
    core.delete_collection_namespaced_pod("team-a", grace_period_seconds=0)


@pytest.mark.parametrize("backend", ["kueue", "volcano"])
def test_backend_queues(api: client.ApiClient, helm: Helm, backend: str) -> None:
    core = client.CoreV1Api(api)
    for tenant in ("team-a", "team-b"):
        ensure_namespace(core, tenant)
    try:
        (kueue if backend == "kueue" else volcano).install_crds(api)
    except MissingBinary as exc:
        pytest.fail(f"e2e: {exc}", pytrace=False)
    release = f"berth-{backend}"
    helm("install", release, str(CHART), "--namespace", NS, "--create-namespace",
         "--set", f"backend={backend}")
    try:
        policy = yaml.safe_load(core.read_namespaced_config_map("berth-policy", NS)
                                .data["policy.yaml"])
        assert policy["release"]["backend"] == backend
        if backend == "kueue":
            cq = resource(api, "kueue.x-k8s.io/v1beta2", "ClusterQueue")
            lq = resource(api, "kueue.x-k8s.io/v1beta2", "LocalQueue")
            assert {o.metadata.name for o in cq.get().items} >= {"team-a", "team-b"}
            for tenant in ("team-a", "team-b"):
                assert lq.get(namespace=tenant).items, f"no LocalQueue in {tenant}"
        else:
            queues = resource(api, "scheduling.volcano.sh/v1beta1", "Queue")
            names = {o.metadata.name for o in queues.get().items}
            assert len(names - {"default", "root"}) >= 2, names
    finally:
        helm("uninstall", release, "-n", NS, "--wait")
    if backend == "kueue":
        deadline = time.monotonic() + 30
        cq = resource(api, "kueue.x-k8s.io/v1beta2", "ClusterQueue")
        while cq.get().items and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not cq.get().items
