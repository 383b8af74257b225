"""The real Volcano scheduler beside the local control plane.

Volcano's scheduler needs only its CRDs (PodGroup, Queue) and a kubeconfig; it creates its
``default`` Queue itself and uses its built-in configuration (enqueue, allocate, backfill with
the gang plugin). It schedules the pods whose ``schedulerName`` is ``volcano``, one PodGroup
(``scheduling.k8s.io/group-name``) at a time, all of a group's ``minMember`` or none.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from admission.devcluster import binaries, processes
from e2e.conftest import E2ECluster


def _crds(api: client.ApiClient) -> Any:
    return dynamic.DynamicClient(api).resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")


def install_crds(api: client.ApiClient) -> list[str]:
    """Create Volcano's scheduling CRDs (shipped beside the binary) and wait until served."""
    crds, names = _crds(api), []
    share = binaries.component("volcano").share_dir / "crd"
    for path in sorted(share.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        try:
            crds.create(body=doc)
        except ApiException as exc:
            if exc.status != 409:  # already there from an earlier test
                raise
        names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + 30
    for name in names:
        while True:
            status = crds.get(name=name).to_dict().get("status") or {}
            conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
            if conds.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after 30s")
            time.sleep(0.2)
    return names


@contextmanager
def volcano_scheduler(cluster: E2ECluster, workdir: Path) -> Iterator[processes.ProcessRecord]:
    exe = binaries.binary("vc-scheduler")
    install_crds(cluster.api)
    workdir.mkdir(parents=True, exist_ok=True)
    port, healthz = processes.free_port(), processes.free_port()
    proc, record = processes.start("vc-scheduler", [
        str(exe),
        f"--kubeconfig={cluster.kubeconfig}",
        "--leader-elect=false",
        "--enable-healthz=true",
        f"--healthz-address=127.0.0.1:{healthz}",
        f"--listen-address=127.0.0.1:{port}",
        f"--cache-dump-dir={workdir}",
        "--logtostderr",
    ], workdir, env={"KUBECONFIG": str(cluster.kubeconfig)},  # its HAMi plugin reads this
        preexec_fn=processes.die_with_parent)
    try:
        processes.wait_until(
            "vc-scheduler", lambda: processes.http_ok(f"http://127.0.0.1:{healthz}/healthz"),
            timeout=60, proc=proc, record=record)
        yield record
    finally:
        processes.stop(record, proc)
