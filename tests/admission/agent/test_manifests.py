"""config/agent/ agrees with the command it runs and asks for no more rights than it needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

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
