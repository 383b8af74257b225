"""Run times learned from finished pods on the real control plane (docs/reservations.md,
policy ``solver.learnedRuntimes``): pods Berth released that ended Succeeded teach their kind's
run time from the status their node wrote, seen through the controller's pod watch, and the
next pod of the kind is released with it as its expected end (``berth.dev/runtime-source:
learned``). Learning off, the same pod has none (``unknown``).

The test has an A100 node of its own (the shared fleet is H100 and the policy allows only
A100). kwok plays the kubelet but never ends a plain pod, so the test ends each of the first two
pods as a kubelet would, through ``pods/status``: Succeeded, its container terminated now, its
start ten minutes ago (kwok's Job pods end at once, with no run time to learn from).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from admission import constants as c
from e2e.berth import berth_webhook
from e2e.conftest import E2ECluster
from e2e.helpers import berth_gated, eventually, gpu_node, pod_manifest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="runs berth serve on this host; kind deploys it from config/"),
]

MODEL = "NVIDIA-A100-SXM4-80GB"
RAN_S = 600


@pytest.fixture
def a100_node(cluster: E2ECluster) -> Iterator[str]:
    with gpu_node(cluster.core, "lrn", MODEL) as name:
        yield name


def _rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _released(core: client.CoreV1Api, ns: str, name: str) -> Any:
    return eventually(lambda: core.read_namespaced_pod(name, ns),
                      lambda p: not berth_gated(p) and p.status.phase == "Running",
                      timeout=90, what=f"pod {name} to be released and run")


def _end_as_a_kubelet_would(core: client.CoreV1Api, ns: str, name: str) -> None:
    now = datetime.now(UTC)
    core.patch_namespaced_pod_status(name, ns, {"status": {
        "phase": "Succeeded",
        "startTime": _rfc3339(now - timedelta(seconds=RAN_S)),
        "containerStatuses": [{
            "name": "main", "image": "registry.invalid/train:latest", "imageID": "",
            "ready": False, "restartCount": 0, "started": False,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                     "startedAt": _rfc3339(now - timedelta(seconds=RAN_S)),
                                     "finishedAt": _rfc3339(now)}}}]}})


@pytest.mark.parametrize("learning", [True, False], ids=["learning", "off"])
def test_finished_pods_teach_the_next_pod_of_their_kind_its_expected_end(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], tmp_path: Path, a100_node: str,
    learning: bool,
) -> None:
    ns = tenant_namespaces["team-a"]
    core = cluster.core

    def policy(doc: dict[str, Any]) -> None:
        doc["batch"]["windowSeconds"] = 1.5
        doc["solver"]["timeLimitSeconds"] = 1
        doc["solver"]["learnedRuntimes"] = {"enabled": learning, "minSamples": 2}
        for tenant in doc["tenants"]:
            tenant["allowedModels"] = [MODEL]

    names = ["done-0", "done-1", "next"]
    with berth_webhook(cluster, tmp_path / "berth", tenant_namespaces, serve=True,
                       edit_policy=policy) as hook:
        try:
            for name in names[:2]:
                core.create_namespaced_pod(ns, pod_manifest(name, gpus=1))
                first = _released(core, ns, name)
                assert first.metadata.annotations[c.ANNOTATION_RUNTIME_SOURCE] == "unknown"
                _end_as_a_kubelet_would(core, ns, name)
            core.create_namespaced_pod(ns, pod_manifest("next", gpus=1))
            ann = _released(core, ns, "next").metadata.annotations
            if learning:
                assert ann[c.ANNOTATION_RUNTIME_SOURCE] == "learned", ann
                end = datetime.fromisoformat(ann[c.ANNOTATION_EXPECTED_END].replace(
                    "Z", "+00:00"))
                # released now, expected to run as long as the two before it
                left = (end - datetime.now(UTC)).total_seconds()
                assert RAN_S - 60 < left <= RAN_S + 1, ann
            else:
                assert ann[c.ANNOTATION_RUNTIME_SOURCE] == "unknown", ann
                assert c.ANNOTATION_EXPECTED_END not in ann
        except AssertionError as exc:
            log = "\n".join(hook.log.read_text(errors="replace").splitlines()[-30:])
            raise AssertionError(f"{exc}\n--- berth serve log:\n{log}") from None
        finally:
            for name in names:
                with contextlib.suppress(client.ApiException):
                    core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
