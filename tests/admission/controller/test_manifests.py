"""Every kustomize overlay renders, and what it renders keeps the deployment's promises."""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.devcluster.binaries import MissingBinary, built_binary
from admission.policy import check_text

CONFIG = Path(__file__).resolve().parents[3] / "config"
OVERLAYS = sorted(p.parent for p in (CONFIG / "overlays").glob("*/kustomization.yaml"))


def render(path: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        try:  # the e2e build's kubectl, built here (minutes, once) when it is not yet
            kubectl = str(built_binary("kubectl"))
        except MissingBinary as exc:
            pytest.fail(f"kubectl is needed: the manifests are rendered with `kubectl "
                        f"kustomize`; put one (>= 1.27) on PATH, or: {exc}", pytrace=False)
    proc = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, f"kubectl kustomize {path} failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def assert_no_opt_out(hook: dict[str, Any]) -> None:
    """Only the system namespaces (and, in the review, namespaces no tenant owns) are exempt:
    no label of a pod or a namespace takes a pod out of screening."""
    assert "objectSelector" not in hook, "a pod label must not opt out of Berth's webhook"
    (expression,) = hook["namespaceSelector"]["matchExpressions"]
    assert expression["key"] == "kubernetes.io/metadata.name"
    assert expression["operator"] == "NotIn"
    assert {"berth-system", "kube-system"} <= set(expression["values"])
    (cond,) = hook["matchConditions"]
    cel = "".join(cond["expression"].split())
    for container_list in ("containers", "initContainers", "ephemeralContainers"):
        assert f"object.spec.{container_list}.exists(c," in cel, container_list
    assert cel.count("startsWith('nvidia.com/')") == 6  # limits and requests of each list
    for key in ("berth.dev/", "gpu-fraction", "gpu-memory", "berth.dev/admission"):
        assert f"'{key}'" in cel, key


def assert_pod_keys_protected(docs: list[dict[str, Any]]) -> None:
    """The pod-keys ValidatingAdmissionPolicy is bound, Deny, and exempts only the holders of
    berth.dev podkeys update: Berth's controller service account."""
    policy = one(docs, "ValidatingAdmissionPolicy", "berth-pod-keys")["spec"]
    binding = one(docs, "ValidatingAdmissionPolicyBinding", "berth-pod-keys")["spec"]
    assert binding["policyName"] == "berth-pod-keys" and binding["validationActions"] == ["Deny"]
    assert "paramRef" not in binding and "matchResources" not in binding  # every namespace
    assert policy["failurePolicy"] == "Fail"
    (rule,) = policy["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["pods", "pods/status"] and rule["operations"] == ["UPDATE"]
    exempt = [m["expression"] for m in policy["matchConditions"] if "authorizer" in m["expression"]]
    assert exempt == ["!authorizer.group('berth.dev').resource('podkeys').check('update')"
                      ".allowed()"]
    holders = {(b["metadata"]["name"], s["kind"], s["name"]) for b in docs
               if b["kind"] == "ClusterRoleBinding"
               and podkeys_rule(one(docs, "ClusterRole", b["roleRef"]["name"]))
               for s in b["subjects"]}
    assert holders == {("berth-controller", "ServiceAccount", "berth")}, holders


def podkeys_rule(role: dict[str, Any]) -> bool:
    return any("berth.dev" in r.get("apiGroups", []) and "podkeys" in r.get("resources", [])
               for r in role.get("rules") or [])


def test_there_are_overlays() -> None:
    assert {p.name for p in OVERLAYS} >= {"standalone", "cert-manager", "kueue", "volcano"}


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_overlay_renders_a_sound_installation(overlay: Path) -> None:
    docs = render(overlay)
    deploy = one(docs, "Deployment", "berth")
    assert deploy["spec"]["replicas"] == 2
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    ctr = pod["containers"][0]
    assert ctr["args"][0] == "serve" and ctr["securityContext"]["readOnlyRootFilesystem"]
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1

    hook = one(docs, "MutatingWebhookConfiguration", "berth")["webhooks"][0]
    assert hook["failurePolicy"] == "Fail" and hook["timeoutSeconds"] <= 5
    assert hook["rules"][0]["operations"] == ["CREATE"]
    assert_no_opt_out(hook)
    assert_pod_keys_protected(docs)

    policy_text = one(docs, "ConfigMap", "berth-policy")["data"]["policy.yaml"]
    policy, issues = check_text(policy_text)
    assert policy is not None, f"{overlay.name}: policy invalid: {issues}"
    if overlay.name in ("kueue", "volcano"):
        assert policy.release.backend == overlay.name


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_rbac_is_least_privilege(overlay: Path) -> None:
    for doc in render(overlay):
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in doc.get("rules") or []:
            where = f"{overlay.name}: {doc['kind']} {doc['metadata']['name']}"
            assert "*" not in rule.get("verbs", []) and "*" not in rule.get("resources", []), where
            if "secrets" in rule.get("resources", []):
                assert not {"list", "watch"} & set(rule["verbs"]), f"{where} may list secrets"
                assert "get" not in rule["verbs"] or rule.get("resourceNames"), where
            if doc["kind"] == "ClusterRole" and "pods" in rule.get("resources", []):
                assert not {"delete", "create", "update"} & set(rule["verbs"]), where


def test_cert_manager_mounts_its_secret_as_the_certs_volume() -> None:
    pod = one(render(CONFIG / "overlays" / "cert-manager"), "Deployment", "berth")["spec"][
        "template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert set(volumes) == {"policy", "certs", "tmp"}
    assert volumes["certs"] == {"name": "certs", "secret": {"secretName": "berth-webhook-tls"}}
    assert volumes["policy"]["configMap"]["name"] == "berth-policy"


def test_component_patches_find_volumes_by_name_not_by_place() -> None:
    # A JSON patch on volumes/<n> silently patches another volume once the base's list changes.
    for kustomization in sorted((CONFIG / "components").glob("*/kustomization.yaml")):
        for entry in yaml.safe_load(kustomization.read_text()).get("patches") or []:
            ops = yaml.safe_load(entry.get("patch") or "")
            for op in ops if isinstance(ops, list) else []:
                parts = op["path"].split("/")
                assert not any(a == "volumes" and b.isdigit()
                               for a, b in itertools.pairwise(parts)), (
                    f"{kustomization}: {op['path']} names a volume by its index")


def subjects_of(docs: list[dict[str, Any]], account: str) -> list[dict[str, Any]]:
    """The roles (ClusterRole or Role documents) bound to the service account ``account``."""
    roles = []
    for b in docs:
        if b["kind"] in ("RoleBinding", "ClusterRoleBinding") and any(
                s["kind"] == "ServiceAccount" and s["name"] == account
                for s in b.get("subjects") or []):
            roles.append(one(docs, b["roleRef"]["kind"], b["roleRef"]["name"]))
    return roles


def verbs_on(roles: list[dict[str, Any]], resource: str) -> set[str]:
    return {v for role in roles for rule in role.get("rules") or []
            if resource in rule.get("resources", []) for v in rule["verbs"]}


def test_split_overlay_separates_the_webhook_from_the_controller() -> None:
    from admission.cli import build_parser

    docs = render(CONFIG / "overlays" / "split")
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert set(deployments) == {"berth", "berth-webhook"}
    pods = {name: d["spec"]["template"]["spec"] for name, d in deployments.items()}
    accounts = {name: pod["serviceAccountName"] for name, pod in pods.items()}
    assert accounts == {"berth": "berth", "berth-webhook": "berth-webhook"}
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"} == {
        "berth", "berth-webhook", "berth-agent"}

    # The commands are what berth parses: the controller alone, the webhook alone.
    controller = build_parser().parse_args(pods["berth"]["containers"][0]["args"])
    webhook = build_parser().parse_args(pods["berth-webhook"]["containers"][0]["args"])
    assert controller.command == "serve" and controller.no_webhook
    assert webhook.command == "webhook"
    assert controller.metrics_port == webhook.metrics_port == 9090

    # The internet-facing webhook holds one credential: get of ResourceClaims and templates
    # (the DRA demand of a GPU pod), nothing else: no pod, no Secret, no list, no write.
    assert webhook.read_claims
    webhook_roles = subjects_of(docs, "berth-webhook")
    rules = [(tuple(r.get("apiGroups", [])), tuple(sorted(r["resources"])), tuple(r["verbs"]))
             for role in webhook_roles for r in role.get("rules") or []]
    assert rules == [(("resource.k8s.io",), ("resourceclaims", "resourceclaimtemplates"),
                      ("get",))]
    # The controller keeps what the release needs.
    controller_roles = subjects_of(docs, "berth")
    assert {"patch", "watch"} <= verbs_on(controller_roles, "pods")
    assert "patch" not in verbs_on(subjects_of(docs, "berth-webhook"), "pods")

    # The Service and the disruption budget are the webhook's; the controller is not behind
    # the webhook Service.
    selector = one(docs, "Service", "berth-webhook")["spec"]["selector"]
    assert selector.items() <= deployments["berth-webhook"]["spec"]["template"]["metadata"][
        "labels"].items()
    assert not selector.items() <= deployments["berth"]["spec"]["template"]["metadata"][
        "labels"].items()
    assert one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == selector

    # Scoping and the two policies; the pod-keys exemption names the controller's account.
    hook = one(docs, "MutatingWebhookConfiguration", "berth")["webhooks"][0]
    assert_no_opt_out(hook)
    assert_pod_keys_protected(docs)
    binding = one(docs, "ValidatingAdmissionPolicyBinding", "berth-agent-node")["spec"]
    assert binding["paramRef"]["name"] == "berth-agent"
    assert binding["paramRef"]["namespace"] == "berth-system"


def test_network_policies_open_the_webhook_port_and_keep_metrics_to_monitoring() -> None:
    docs = render(CONFIG / "overlays" / "split")
    policies = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    deny = policies["berth-default-deny"]
    assert deny["podSelector"] == {} and set(deny["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny and "egress" not in deny
    ingress = {(p["port"], str(rule.get("from"))) for spec in policies.values()
               for rule in spec.get("ingress") or [] for p in rule["ports"]}
    assert ingress == {
        ("https", "None"),  # from anywhere
        ("metrics", str([{"namespaceSelector": {"matchLabels": {
            "berth.dev/metrics-scraper": "true"}}}])),
    }
    # Containers name their ports as the policies do.
    for d in docs:
        if d["kind"] == "Deployment":
            names = {p["name"] for p in d["spec"]["template"]["spec"]["containers"][0]["ports"]}
            assert names <= {"https", "metrics"} and "metrics" in names
    egress = policies["berth-to-apiserver-and-dns"]
    assert egress["podSelector"]["matchExpressions"] == [
        {"key": "app.kubernetes.io/name", "operator": "NotIn", "values": ["berth-webhook"]}]
    ports = {(p["protocol"], p["port"]) for rule in egress["egress"] for p in rule["ports"]}
    assert ports == {("TCP", 443), ("TCP", 6443), ("UDP", 53), ("TCP", 53)}


# Kinds whose objects have no namespace; every other object an overlay renders must name one,
# or `kubectl apply -k` puts it in whatever namespace the admin's kubeconfig is on.
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                  "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding", "CustomResourceDefinition",
                  "ResourceFlavor", "ClusterQueue", "Queue"}


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_every_namespaced_object_names_its_namespace(overlay: Path) -> None:
    docs = render(overlay)
    nameless = [f"{d['kind']}/{d['metadata']['name']}" for d in docs
                if d["kind"] not in CLUSTER_SCOPED and not d["metadata"].get("namespace")]
    assert not nameless, f"{overlay.name}: no namespace on {nameless}"
    berths = {d["metadata"]["namespace"] for d in docs
              if d["kind"] not in CLUSTER_SCOPED and d["kind"] != "LocalQueue"}
    assert berths == {"berth-system"}, berths
