"""``berth status`` and ``berth explain`` against the real control plane, beside ``berth serve``
running as deployed: a gang placed, two waiting at quota; what the status shows per tenant and
for the queue, why the waiting pod waits, the same through ``kubectl berth``, and what a user
with less RBAC is shown or refused."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from admission import constants as c
from admission.devcluster.binaries import REPO_ROOT, binary
from e2e.berth import BerthWebhook, berth_webhook
from e2e.conftest import E2ECluster, drop_namespace, make_namespace
from e2e.helpers import BERTH, eventually, pod_manifest
from e2e.rbac import install_rbac, service_account_kubeconfig, uninstall_rbac

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="runs berth serve on this host; kind deploys it from config/"),
]


@dataclass
class Installed:
    hook: BerthWebhook
    home: str  # berth serve's namespace: its Lease and the policy ConfigMap


def _team_a_at_8_gpus_without_borrowing(doc: dict[str, Any]) -> None:
    for t in doc["tenants"]:
        if t["name"] == "team-a":
            t["quota"] = {"gpus": 8}
            t["borrowing"] = {"enabled": False}


@pytest.fixture
def installed(cluster: E2ECluster, tenant_namespaces: dict[str, str],
              tmp_path: Path) -> Iterator[Installed]:
    """``berth serve`` as the ``berth`` service account (config/base RBAC), its policy also in
    the ConfigMap ``berth-policy`` of its namespace, as config/base deploys it."""
    assert cluster.local is not None
    home = make_namespace(cluster.core, "berth-system")
    created = install_rbac(cluster.api, home, suffix=home)
    try:
        kubeconfig = service_account_kubeconfig(
            cluster.api, server=cluster.local.server, ca_pem=cluster.ca_bundle_pem(),
            namespace=home, account="berth", out=tmp_path / "berth-sa.kubeconfig")
        with berth_webhook(cluster, tmp_path / "berth", tenant_namespaces, serve=True,
                           kubeconfig=kubeconfig, lease_namespace=home,
                           edit_policy=_team_a_at_8_gpus_without_borrowing) as hook:
            cluster.core.create_namespaced_config_map(home, {
                "metadata": {"name": "berth-policy"},
                "data": {"policy.yaml": hook.policy.read_text()}})
            yield Installed(hook, home)
    finally:
        uninstall_rbac(cluster.api, created)
        drop_namespace(cluster.api, home)


def _berth(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BERTH, *args, "--kubeconfig", str(kubeconfig)],
                          capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _gang_pod(name: str, gang: str, size: int, gpus: int) -> dict[str, Any]:
    return pod_manifest(name, gpus=gpus, annotations={c.ANNOTATION_GANG: gang,
                                                      c.ANNOTATION_GANG_SIZE: str(size)})


def _waiting_reason(cluster: E2ECluster, ns: str, name: str) -> str | None:
    pod = cluster.core.read_namespaced_pod(name, ns)
    for cond in pod.status.conditions or []:
        if cond.type == "berth.dev/Waiting" and cond.status == "True":
            return str(cond.reason)
    return None


@pytest.fixture
def queue(cluster: E2ECluster, tenant_namespaces: dict[str, str],
          installed: Installed) -> str:
    """team-a (quota 8, no borrowing) runs one 8-GPU pod; gangs w1 then w2 (2 x 4 GPUs each)
    wait at quota, told so by the controller."""
    ns = tenant_namespaces["team-a"]
    cluster.core.create_namespaced_pod(ns, pod_manifest("run-0", gpus=8))
    eventually(lambda: cluster.core.read_namespaced_pod("run-0", ns),
               lambda p: p.status.phase == "Running", timeout=120,
               what="the 8-GPU pod released, bound and Running")
    for gang in ("w1", "w2"):
        for k in range(2):
            cluster.core.create_namespaced_pod(ns, _gang_pod(f"{gang}-{k}", gang, 2, 4))
        eventually(lambda g=gang: [_waiting_reason(cluster, ns, f"{g}-{k}") for k in range(2)],
                   lambda rs: rs == ["Quota", "Quota"], timeout=60,
                   what=f"gang {gang} told it waits at quota")
    return ns


def test_status_shows_used_quota_and_the_waiting_gangs_in_order(
    cluster: E2ECluster, installed: Installed, queue: str
) -> None:
    data = _json(_berth("status", "-o", "json", "--berth-namespace", installed.home,
                        kubeconfig=cluster.kubeconfig))
    assert data["policy"] == f"ConfigMap {installed.home}/berth-policy"
    assert data["controller"].startswith("leader e2e (Lease renewed")
    tenants = {t["tenant"]: t for t in data["tenants"]}
    a = tenants["team-a"]
    assert (a["quota"], a["used"], a["borrowed"], a["borrowing"], a["pods"]) == (
        8, 8, 0, "no", 1)
    assert (a["waiting_gangs"], a["waiting_gpus"]) == (2, 16)
    assert tenants["team-b"]["used"] == 0
    waiting = [(w["gang"], w["position"], w["state"], w["reason"]) for w in data["waiting"]]
    assert waiting == [(f"{queue}/w1", 1, "queued", "Quota"),
                       (f"{queue}/w2", 2, "queued", "Quota")]
    assert data["waiting"][0]["message"] == (
        "waiting: quota: tenant team-a would use 16000 of its 8000 milli-GPU and may not "
        "borrow; 0 gangs ahead")
    assert data["cluster"]["gpus"] == 32 and data["cluster"]["held"] == 8
    assert data["reservations"] == [] and data["reclaims"] == []

    table = _berth("status", "--berth-namespace", installed.home,
                   kubeconfig=cluster.kubeconfig)
    assert table.returncode == 0, table.stderr
    for text in ("Tenants (GPUs)", "team-a", "Waiting gangs (2)", f"{queue}/w1", "Quota",
                 "may not borrow; 1 gang ahead"):
        assert text in table.stdout, table.stdout
    assert "Reservations" not in table.stdout and "reclaims" not in table.stdout


def test_explain_says_why_the_waiting_pod_waits(
    cluster: E2ECluster, installed: Installed, queue: str
) -> None:
    data = _json(_berth("explain", "w2-1", "-n", queue, "-o", "json", "--berth-namespace",
                        installed.home, kubeconfig=cluster.kubeconfig))
    assert (data["state"], data["tenant"], data["gang"]) == ("waiting", "team-a", f"{queue}/w2")
    assert (data["position"], data["ahead"]) == (2, 1)
    assert data["condition"]["reason"] == "Quota"
    assert data["demand"] == "2 pods x 4 GPUs (NVIDIA-A100-SXM4-80GB/NVIDIA-H100-80GB-HBM3)"
    assert "tenant team-a at quota: it uses 8 of its 8 GPUs and this gang needs 8" in data["why"]
    assert data["needs"][0] == ("8 of team-a's GPUs must free up first: borrowing is disabled "
                                "for team-a in the policy")
    assert f"{queue}/run-0 (8 GPU on" in data["needs"][1]
    assert any(e["reason"] == "Quota" and e["from"] == "berth-controller"
               for e in data["events"])
    placed = _json(_berth("explain", f"{queue}/run-0", "-o", "json", "--berth-namespace",
                          installed.home, kubeconfig=cluster.kubeconfig))
    assert placed["state"] == "bound"
    assert placed["plan"][c.ANNOTATION_ASSIGNED_NODE] == \
        cluster.core.read_namespaced_pod("run-0", queue).spec.node_name


def test_kubectl_berth_plugin(cluster: E2ECluster, installed: Installed, queue: str,
                              tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    shim = plugins / "kubectl-berth"  # what the kubectl-berth console script does
    shim.write_text(f"#!/bin/sh\nexec {BERTH[0]} -c 'from admission.kubectl_berth import main; "
                    f"raise SystemExit(main())' \"$@\"\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{plugins}:{os.environ['PATH']}",
           "KUBECONFIG": str(cluster.kubeconfig),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    kubectl = str(binary("kubectl"))
    listed = subprocess.run([kubectl, "plugin", "list"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert str(shim) in listed.stdout, listed.stdout + listed.stderr
    done = subprocess.run([kubectl, "berth", "status", "-o", "json", "--berth-namespace",
                           installed.home], capture_output=True, text=True, env=env,
                          timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    assert [w["position"] for w in json.loads(done.stdout)["waiting"]] == [1, 2]
    done = subprocess.run([kubectl, "berth", "explain", "w1-0", "-n", queue,
                           "--berth-namespace", installed.home], capture_output=True,
                          text=True, env=env, timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    assert f"Pod {queue}/w1-0: waiting" in done.stdout
    assert "borrowing is disabled for team-a in the policy" in done.stdout


def _user(cluster: E2ECluster, ns: str, name: str, rules: list[dict[str, Any]],
          out: Path) -> Path:
    """A service account of ``ns`` allowed ``rules`` in ``ns`` only, and its kubeconfig."""
    assert cluster.local is not None
    core, rbac = cluster.core, client.RbacAuthorizationV1Api(cluster.api)
    core.create_namespaced_service_account(ns, {"metadata": {"name": name}})
    if rules:
        rbac.create_namespaced_role(ns, {"metadata": {"name": name}, "rules": rules})
        rbac.create_namespaced_role_binding(ns, {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]})
    return service_account_kubeconfig(cluster.api, server=cluster.local.server,
                                      ca_pem=cluster.ca_bundle_pem(), namespace=ns,
                                      account=name, out=out)


def test_a_user_with_less_rbac_sees_less_and_is_told_what_to_ask_for(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], installed: Installed, queue: str,
    tmp_path: Path
) -> None:
    viewer = _user(cluster, queue, "viewer", [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        tmp_path / "viewer.kubeconfig")
    data = _json(_berth("status", "-o", "json", "--policy", str(installed.hook.policy),
                        "--berth-namespace", installed.home, kubeconfig=viewer))
    team_b = tenant_namespaces["team-b"]
    assert data["namespaces"] == [queue]
    assert data["skipped"] == {team_b: "cannot list pods (403)"}
    assert [w["position"] for w in data["waiting"]] == [1, 2]
    assert next(t for t in data["tenants"] if t["tenant"] == "team-a")["used"] == 8
    assert any(n.startswith("nodes not read (your user cannot list nodes (cluster-scoped) "
                            "(403)") for n in data["notes"])
    assert data["controller"].startswith(f"unknown (your user cannot get leases in namespace "
                                         f"{installed.home} (403)")

    no_policy = _berth("status", "--berth-namespace", installed.home, kubeconfig=viewer)
    assert no_policy.returncode == 2 and no_policy.stdout == ""
    assert no_policy.stderr.startswith(
        f"berth status: your user cannot get configmaps in namespace {installed.home} (403)")
    assert "pass --policy FILE" in no_policy.stderr and "Traceback" not in no_policy.stderr

    explained = _json(_berth("explain", "w1-0", "-n", queue, "-o", "json", "--policy",
                             str(installed.hook.policy), kubeconfig=viewer))
    assert explained["pod"] == f"{queue}/w1-0"
    assert explained["condition"]["reason"] == "Quota"
    assert any(u.startswith("events: not read (your user cannot list events in namespace")
               for u in explained["unknown"])

    nobody = _user(cluster, queue, "nobody", [], tmp_path / "nobody.kubeconfig")
    refused = _berth("status", "--policy", str(installed.hook.policy), kubeconfig=nobody)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("berth status: your user cannot list pods in all "
                                     f"namespaces nor in namespace {queue}")
    assert "(403); ask your cluster admin for 'list' on pods" in refused.stderr
    denied = _berth("explain", "w1-0", "-n", queue, "--policy", str(installed.hook.policy),
                    kubeconfig=nobody)
    assert denied.returncode == 2
    assert denied.stderr == (f"berth explain: your user cannot get pods in namespace {queue} "
                             f"(403); ask your cluster admin for 'get' on pods through a Role "
                             f"or RoleBinding in namespace {queue}\n")
