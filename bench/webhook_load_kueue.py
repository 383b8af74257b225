"""Kueue's own pod webhook as a third server for bench/webhook_load.py (``--kueue``).

Kueue's webhook needs a control plane: it reads namespaces through its informer cache and
refuses to start without its CRDs. This starts the local control plane of admission.devcluster
(etcd, kube-apiserver, controller-manager, scheduler; binaries from e2e/build.sh) and runs
Kueue's manager there exactly as the e2e suite and ``berth dev-cluster`` do
(:func:`admission.devcluster.kueue.start_manager`: the version e2e/versions.env pins, its CRDs,
the pod and Job integrations, its webhook on 127.0.0.1), pinned to one core with taskset.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from admission.devcluster import binaries

KUEUE_VERSION = binaries.read_versions()["KUEUE_VERSION"]
PATH = "/mutate--v1-pod"


def missing() -> str | None:
    """Why Kueue cannot run here, or None."""
    if not binaries.component("kueue").built:
        return f"no Kueue {KUEUE_VERSION} binary: build it with `e2e/build.sh kueue`"
    return None


@contextmanager
def kueue_webhook(core: str, namespace: str = "team-a") -> Iterator[tuple[int, Path, int]]:
    """Run Kueue's manager pinned to ``core``; yields its webhook port on 127.0.0.1, the CA
    file its serving certificate chains to, and the process id."""
    from kubernetes import client, config

    from admission.devcluster import DevCluster, kube, processes
    from admission.devcluster.kueue import start_manager, stop_manager

    why = missing()
    if why:
        raise SystemExit(f"--kueue: {why}")
    work = Path(tempfile.mkdtemp(prefix="berth-kueue-"))
    cluster = DevCluster(workdir=work / "cluster", with_kwok=False)
    base = processes.spawner(work / "logs")

    def pinned(name: str, argv: Sequence[str], **kw: object):  # type: ignore[no-untyped-def]
        return base(name, ["taskset", "-c", core, *argv], **kw)  # type: ignore[arg-type]

    try:
        cluster.start()
        api = config.new_client_from_config(str(cluster.kubeconfig))
        kube.create_once(client.CoreV1Api(api).create_namespace,
                         {"metadata": {"name": namespace}})
        manager = start_manager(api, pinned, pki=cluster.pki, kubeconfig=cluster.kubeconfig,
                                workdir=work / "kueue", namespace=namespace,
                                frameworks=("batch/job", "pod"))
        try:
            yield manager.webhook_port, cluster.pki.ca_cert, manager.proc.pid
        finally:
            stop_manager(api, manager)
    finally:
        cluster.stop()
