"""When a batch runs, on the real control plane (docs/controller.md, "When a batch runs"): with a
one-minute window, a pod created on a quiet cluster is released about a settle after it
arrives, and a gang that waits for capacity is released about a settle after a pod on its node
is deleted, not when the window ends.

The test has an A100 node of its own (8 GPUs; the policy allows only A100).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.berth import BerthWebhook, berth_webhook
from e2e.conftest import E2ECluster
from e2e.helpers import berth_gated, eventually, gpu_node, pod_manifest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="runs berth serve on this host; kind deploys it from config/"),
]

MODEL = "NVIDIA-A100-SXM4-80GB"
WINDOW_S = 60.0
SETTLE_S = 0.5
# Well inside the window: a release this soon after its trigger came from the settle. Generous
# for a loaded two-core machine (a batch's snapshot, solve and writes take a second or two).
SOON_S = 25.0


def _policy(doc: dict[str, Any]) -> None:
    doc["batch"]["windowSeconds"] = WINDOW_S
    doc["batch"]["settleSeconds"] = SETTLE_S
    doc["solver"]["timeLimitSeconds"] = 1
    for tenant in doc["tenants"]:
        tenant["allowedModels"] = [MODEL]


@pytest.fixture
def a100_node(cluster: E2ECluster) -> Iterator[str]:
    with gpu_node(cluster.core, "settle", MODEL) as name:
        yield name


def _batches_leaving_one_waiting(hook: BerthWebhook) -> int:
    """Batch cycles the controller logged with one pending gang and nothing admitted."""
    return len(re.findall(r"\(batch\): gangs \{'pending': 1\} admitted=0",
                          hook.log.read_text(errors="replace")))


def test_a_batch_runs_once_arrivals_settle_and_once_capacity_frees(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], tmp_path: Path, a100_node: str,
) -> None:
    ns = tenant_namespaces["team-a"]
    core = cluster.core
    with berth_webhook(cluster, tmp_path / "berth", tenant_namespaces, serve=True,
                       edit_policy=_policy) as hook:
        eventually(lambda: hook.metric("berth_leader"), lambda v: v == 1.0, timeout=60,
                   what="berth serve to lead")
        time.sleep(2.0)  # its watches have listed: what is created from here on is an event
        # A quiet cluster: the pod goes a settle after it arrives, not at the window's end.
        t0 = time.monotonic()
        core.create_namespaced_pod(ns, pod_manifest("first", gpus=2))
        eventually(lambda: core.read_namespaced_pod("first", ns),
                   lambda p: p.status.phase == "Running", timeout=WINDOW_S,
                   what="the first pod to run")
        assert time.monotonic() - t0 < SOON_S, "released at the window, not once it settled"
        # A pod that needs the whole node arrives on a quiet queue: a batch runs a settle
        # later, finds no room, and it waits...
        seen = _batches_leaving_one_waiting(hook)
        core.create_namespaced_pod(ns, pod_manifest("whole", gpus=8))
        eventually(lambda: _batches_leaving_one_waiting(hook), lambda n: n > seen,
                   timeout=SOON_S, what="a batch to pass the whole-node pod over")
        assert berth_gated(core.read_namespaced_pod("whole", ns))
        # ...until the first pod's deletion frees its GPUs: then a settle, not the window.
        t1 = time.monotonic()
        core.delete_namespaced_pod("first", ns, grace_period_seconds=0)
        eventually(lambda: core.read_namespaced_pod("whole", ns), lambda p: not berth_gated(p),
                   timeout=WINDOW_S, what="the whole-node pod to be released")
        assert time.monotonic() - t1 < SOON_S, "released at the window, not once capacity freed"
