"""config/agent/ agrees with the command it runs and asks for no more rights than it needs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from admission.agent import schema
from admission.cli import build_parser

CONFIG = Path(__file__).resolve().parents[3] / "config" / "agent"


def _docs() -> dict[str, dict[str, Any]]:
    kustomization = yaml.safe_load((CONFIG / "kustomization.yaml").read_text())
    out: dict[str, dict[str, Any]] = {}
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((CONFIG / name).read_text()):
            out[doc["kind"]] = doc
    return out


def test_daemonset_runs_a_valid_agent_command() -> None:
    ds = _docs()["DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["berth"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # Kubelet expands $(NODE_NAME); the rest must parse as berth's own arguments.
    argv = [a.replace("$(NODE_NAME)", "node-1") for a in container["args"]]
    args = build_parser().parse_args(argv)
    assert args.command == "agent" and args.node == "node-1" and not args.print_
    selector = ds["spec"]["selector"]["matchLabels"].items()
    assert selector <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert pod["serviceAccountName"] == _docs()["ServiceAccount"]["metadata"]["name"]


def test_rbac_is_get_and_patch_nodes_only() -> None:
    docs = _docs()
    assert docs["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    binding = docs["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == docs["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"][0]["name"] == docs["ServiceAccount"]["metadata"]["name"]


def test_daemonset_runs_unprivileged() -> None:
    pod = _docs()["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID")
    assert not [v for v in pod.get("volumes") or [] if "hostPath" in v]
    (container,) = pod["containers"]
    ctx = container["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False and ctx["readOnlyRootFilesystem"] is True
    assert ctx["capabilities"] == {"drop": ["ALL"]} and not ctx.get("privileged")


def _cel_strings(expression: str) -> set[str]:
    return set(re.findall(r"'([^']*)'", expression))


def test_node_policy_allows_exactly_the_agents_keys() -> None:
    """node-policy.yaml spells out the keys the agent writes; they are schema.py's."""
    docs = _docs()
    policy = docs["ValidatingAdmissionPolicy"]["spec"]
    variables = {v["name"]: v["expression"] for v in policy["variables"]}
    assert _cel_strings(variables["labelKeys"]) == {*schema.AGENT_LABELS, *schema.GFD_LABELS}
    assert _cel_strings(variables["annotationKeys"]) == set(schema.AGENT_ANNOTATIONS)
    assert f"r'{schema._GFD_MIG_LABEL.pattern}'" in variables["foreignLabels"]
    # Only the agent's own service account is held, to its own node.
    binding = docs["ValidatingAdmissionPolicyBinding"]["spec"]
    assert binding["policyName"] == docs["ValidatingAdmissionPolicy"]["metadata"]["name"]
    assert binding["paramRef"]["name"] == docs["ServiceAccount"]["metadata"]["name"]
    assert binding["paramRef"]["parameterNotFoundAction"] == "Allow"
    assert policy["paramKind"] == {"apiVersion": "v1", "kind": "ServiceAccount"}
    (match,) = policy["matchConditions"]
    assert "params.metadata.namespace" in match["expression"]
    assert "params.metadata.name" in match["expression"]
    own_node, spec, *_keys = (v["expression"] for v in policy["validations"])
    assert own_node == "object.metadata.name in variables.ownNode"
    assert "authentication.kubernetes.io/node-name" in variables["ownNode"]
    assert spec == "object.spec == oldObject.spec"
