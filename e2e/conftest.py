"""Fixtures of the e2e suite: one real control plane per test session, one namespace per test.

The cluster is the one ``berth dev-cluster up`` starts (admission/devcluster), with its
processes tied to this pytest process so that nothing outlives the run even when pytest is
killed. If the upstream binaries were not built, every test fails with the command that builds
them: the suite never silently skips.

Against an existing cluster (kind, see e2e/kind/), set ``BERTH_E2E_KUBECONFIG``: no local
control plane is started and the fake nodes are created through that kubeconfig.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from admission.devcluster import DevCluster, MissingBinary, StartupError, create_nodes, gpu_fleet
from admission.devcluster.kube import ensure_namespace
from admission.devcluster.nodes import FakeGpuNode

# The fleet every test sees: 1 block, 2 racks, 2 nodes per rack, 8 H100 each in one NVLink
# domain (32 GPUs), each GPU also advertised as 4 time-slicing slots (the sample policy's
# sharing). Tests needing more create their own nodes under their own names.
FLEET: list[FakeGpuNode] = gpu_fleet(blocks=1, racks_per_block=2, nodes_per_rack=2,
                                     gpus_per_node=8, nvlink_domains_per_node=1,
                                     shared_slots_per_gpu=4)


@dataclass
class E2ECluster:
    """What a test needs to talk to the cluster under test."""

    api: client.ApiClient
    kubeconfig: Path
    nodes: list[FakeGpuNode]
    local: DevCluster | None  # None when running against an external cluster (kind)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def ca_bundle_pem(self) -> bytes:
        """PEM of the CA that signed the apiserver cert (local cluster) - to issue webhook
        serving certs from the same CA."""
        if self.local is None:
            raise RuntimeError("only a local dev cluster exposes its CA")
        return self.local.pki.ca_cert.read_bytes()


def _start_local(workdir: Path) -> DevCluster:
    cluster = DevCluster(workdir=workdir, die_with_parent=True)
    try:
        cluster.start()
    except MissingBinary as exc:
        pytest.fail(f"e2e: {exc}", pytrace=False)
    except StartupError as exc:
        pytest.fail(f"e2e: the local control plane did not start: {exc}\n"
                    f"(logs in {cluster.log_dir})", pytrace=False)
    return cluster


def _wait_nodes_ready(core: client.CoreV1Api, names: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending and time.monotonic() < deadline:
        for node in core.list_node().items:
            conds = {c.type: c.status for c in (node.status.conditions or [])}
            if conds.get("Ready") == "True":
                pending.discard(node.metadata.name)
        if pending:
            time.sleep(0.5)
    if pending:
        pytest.fail(f"e2e: kwok did not make nodes Ready within {timeout}s: {sorted(pending)}",
                    pytrace=False)


@pytest.fixture(scope="session")
def cluster() -> Iterator[E2ECluster]:
    external = os.environ.get("BERTH_E2E_KUBECONFIG")
    local: DevCluster | None = None
    workdir: Path | None = None
    if external:
        kubeconfig = Path(external)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="berth-e2e-"))
        local = _start_local(workdir)
        kubeconfig = local.kubeconfig
    try:
        api = config.new_client_from_config(str(kubeconfig))
        core = client.CoreV1Api(api)
        create_nodes(core, FLEET)
        _wait_nodes_ready(core, [n.name for n in FLEET])
        yield E2ECluster(api=api, kubeconfig=kubeconfig, nodes=FLEET, local=local)
    finally:
        if local is not None:
            local.stop()
        if external:
            core = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
            for node in FLEET:
                with contextlib.suppress(ApiException):
                    core.delete_node(node.name)
        if workdir is not None and not os.environ.get("BERTH_E2E_KEEP"):
            shutil.rmtree(workdir, ignore_errors=True)
        elif workdir is not None:
            print(f"\ne2e: cluster files kept in {workdir}")


def make_namespace(core: client.CoreV1Api, base: str) -> str:
    """Create a uniquely named namespace and wait for its default service account, which the
    ServiceAccount admission plugin requires before any pod can be created in it."""
    name = f"e2e-{base.lower().replace('_', '-')[:40].strip('-')}-{uuid.uuid4().hex[:5]}"
    return ensure_namespace(core, name, {"berth-e2e": "true"})


def drop_namespace(api: client.ApiClient, name: str, timeout: float = 30) -> None:
    """Delete a test namespace. Its Jobs (which would recreate pods) and pods are deleted first
    and waited for, so the shared GPU fleet is free again when the next test starts (namespace
    deletion alone is lazy)."""
    core = client.CoreV1Api(api)
    client.BatchV1Api(api).delete_collection_namespaced_job(
        name, propagation_policy="Background")
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    deadline = time.monotonic() + timeout
    while core.list_namespaced_pod(name).items and time.monotonic() < deadline:
        time.sleep(0.2)
    core.delete_namespace(name, grace_period_seconds=0)


@pytest.fixture
def namespace(cluster: E2ECluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    name = make_namespace(cluster.core, request.node.name)
    yield name
    drop_namespace(cluster.api, name)


@pytest.fixture
def tenant_namespaces(cluster: E2ECluster, request: pytest.FixtureRequest
                      ) -> Iterator[dict[str, str]]:
    """Fresh namespaces for the sample policy's tenants, per test: tenant -> namespace."""
    made = {t: make_namespace(cluster.core, f"{t}-{request.node.name}"[:30])
            for t in ("team-a", "team-b")}
    yield made
    for name in made.values():
        drop_namespace(cluster.api, name)
