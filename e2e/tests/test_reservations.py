"""Reservations on the real control plane (docs/reservations.md): a gang that cannot fit is
told when it should start, from the deadline of the pod it waits for, and the capacity it will
need is held: a pod with no deadline waits behind it, one whose deadline ends before the
reserved start backfills.

The test has an A100 node of its own (8 GPUs; the shared fleet is H100 and the policy allows
only A100), and a policy that reserves for a gang as soon as it cannot fit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from admission import constants as c
from e2e.berth import berth_webhook
from e2e.conftest import E2ECluster
from e2e.helpers import eventually, gpu_node, pod_manifest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="runs berth serve on this host; kind deploys it from config/"),
]

MODEL = "NVIDIA-A100-SXM4-80GB"


def _policy(doc: dict[str, Any]) -> None:
    doc["batch"]["windowSeconds"] = 1.5
    doc["solver"]["timeLimitSeconds"] = 1
    doc["solver"]["reservations"] = {"maxGangs": 1, "afterSeconds": 0}
    for tenant in doc["tenants"]:
        tenant["allowedModels"] = [MODEL]


@pytest.fixture
def a100_node(cluster: E2ECluster) -> Iterator[str]:
    with gpu_node(cluster.core, "resv", MODEL) as name:
        yield name


def _pod(name: str, gpus: int, deadline: int | None) -> dict[str, Any]:
    manifest = pod_manifest(name, gpus=gpus)
    if deadline is not None:
        manifest["spec"]["activeDeadlineSeconds"] = deadline
    return manifest


def _gated(pod: Any) -> bool:
    return any(g.name == c.SCHEDULING_GATE for g in pod.spec.scheduling_gates or [])


def _waiting(pod: Any) -> Any:
    for cond in pod.status.conditions or []:
        if cond.type == "berth.dev/Waiting":
            return cond
    return None


def test_a_gang_that_cannot_fit_is_reserved_and_only_a_short_pod_backfills(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], tmp_path: Path, a100_node: str,
) -> None:
    ns = tenant_namespaces["team-a"]
    core = cluster.core
    with berth_webhook(cluster, tmp_path / "berth", tenant_namespaces, serve=True,
                       edit_policy=_policy) as hook:
        # half the node, for at most an hour
        core.create_namespaced_pod(ns, _pod("holder", 4, 3600))
        eventually(lambda: core.read_namespaced_pod("holder", ns),
                   lambda p: p.status.phase == "Running", timeout=90, what="holder to run")
        core.create_namespaced_pod(ns, _pod("big", 8, None))
        try:
            big = eventually(lambda: core.read_namespaced_pod("big", ns),
                             lambda p: _waiting(p) is not None
                             and _waiting(p).reason == "Reserved",
                             timeout=60, what="big to be told of its reservation")
        except AssertionError as exc:
            log = "\n".join(hook.log.read_text(errors="replace").splitlines()[-30:])
            raise AssertionError(f"{exc}\n--- berth serve log:\n{log}") from None
        message = _waiting(big).message
        assert message.startswith("waiting: reserved: expected to start in "), message
        assert a100_node in message
        start = float(message.split("expected to start in ")[1].split(" s")[0])
        assert 3000 < start <= 3600, message  # the holder's deadline, less its time so far
        # the 4 free GPUs are held: a pod without a deadline waits, one that ends in time runs
        core.create_namespaced_pod(ns, _pod("no-deadline", 1, None))
        core.create_namespaced_pod(ns, _pod("short", 1, 600))
        eventually(lambda: core.read_namespaced_pod("short", ns), lambda p: not _gated(p),
                   timeout=60, what="the short pod to backfill")
        time.sleep(6)  # four more windows
        assert _gated(core.read_namespaced_pod("no-deadline", ns))
        assert _gated(core.read_namespaced_pod("big", ns))
