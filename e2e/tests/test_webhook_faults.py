"""Berth's webhook killed in the middle of a burst of pod creates. With failurePolicy Fail
(what ``berth certs`` renders and config/ deploys) every create either went through the webhook
(the pod is stored gated and labelled) or failed: no GPU pod is ever stored unscreened."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException

from admission import constants as c
from e2e.berth import BerthWebhook, berth_webhook
from e2e.conftest import E2ECluster
from e2e.helpers import pod_manifest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(os.environ.get("BERTH_E2E_KUBECONFIG")),
                       reason="kills berth webhook on this host"),
]

BURST = 40


@pytest.fixture
def webhook(cluster: E2ECluster, tenant_namespaces: dict[str, str],
            tmp_path: Path) -> Iterator[BerthWebhook]:
    with berth_webhook(cluster, tmp_path / "berth", tenant_namespaces) as hook:
        yield hook


def test_webhook_killed_mid_burst_fails_closed(
    cluster: E2ECluster, tenant_namespaces: dict[str, str], webhook: BerthWebhook
) -> None:
    ns = tenant_namespaces["team-a"]
    core = cluster.core
    accepted: list[str] = []
    refused: list[str] = []
    enough = threading.Event()

    def create(i: int) -> None:
        name = f"burst-{i}"
        try:
            core.create_namespaced_pod(ns, pod_manifest(name, gpus=1))
        except ApiException as exc:
            assert "webhook" in exc.body, exc.body  # refused for the webhook, nothing else
            refused.append(name)
            return
        accepted.append(name)
        if len(accepted) >= 8:
            enough.set()

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(create, i) for i in range(BURST)]
        assert enough.wait(timeout=60), "the webhook never admitted 8 pods"
        webhook.kill()
        for f in futures:
            f.result()

    assert len(accepted) + len(refused) == BURST
    assert refused, "the webhook died after the whole burst; nothing tested failurePolicy"
    stored = core.list_namespaced_pod(ns).items
    assert sorted(p.metadata.name for p in stored) == sorted(accepted)
    for pod in stored:
        assert [g.name for g in pod.spec.scheduling_gates or []] == [c.SCHEDULING_GATE], \
            f"{pod.metadata.name} was stored unscreened"
        assert pod.metadata.labels[c.LABEL_TENANT] == "team-a"
