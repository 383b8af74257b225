"""The real Volcano scheduler beside the local control plane.

Volcano's scheduler needs only its CRDs (PodGroup, Queue, Numatopology, HyperNode, ...) and a
kubeconfig; it creates its ``default`` Queue itself and uses its built-in configuration
(enqueue, allocate, backfill with the gang plugin) or the one given. A thread here marks new
Queues Open, the one part of Volcano's controller manager (not run here) that the scheduler
needs. It schedules the pods whose ``schedulerName`` is ``volcano``,
one PodGroup (``scheduling.k8s.io/group-name``) at a time, all of a group's ``minMember`` or
none.

Used by ``berth dev-cluster up --with-berth --backend volcano`` and by the e2e suite
(e2e/volcano.py).
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from pathlib import Path

from kubernetes import client

from admission.devcluster import binaries, kube, processes

VOLCANO_API = "scheduling.volcano.sh/v1beta1"


def install_crds(api: client.ApiClient) -> list[str]:
    """Create Volcano's scheduling CRDs (shipped beside the binary) and wait until served."""
    return kube.install_crds(
        api, (binaries.component("volcano").share_dir / "crd").glob("*.yaml"), timeout=30)


def start_scheduler(api: client.ApiClient, spawn: processes.Spawn, *, kubeconfig: Path,
                    workdir: Path, timeout: float = 60, scheduler_conf: Path | None = None
                    ) -> tuple[subprocess.Popen[bytes], processes.ProcessRecord]:
    """Install the CRDs and run ``vc-scheduler`` until healthy (with ``scheduler_conf``, its
    actions and plugins from that file instead of the built-in ones); stop it with
    :func:`admission.devcluster.processes.stop`."""
    exe = binaries.binary("vc-scheduler")
    install_crds(api)
    workdir.mkdir(parents=True, exist_ok=True)
    port, healthz = processes.free_port(), processes.free_port()
    proc, record = spawn("vc-scheduler", [
        str(exe),
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--enable-healthz=true",
        f"--healthz-address=127.0.0.1:{healthz}",
        f"--listen-address=127.0.0.1:{port}",
        f"--cache-dump-dir={workdir}",
        "--logtostderr",
        *([f"--scheduler-conf={scheduler_conf}"] if scheduler_conf is not None else []),
    ], env={"KUBECONFIG": str(kubeconfig)})  # its HAMi plugin reads this
    try:
        processes.wait_until(
            "vc-scheduler", lambda: processes.http_ok(f"http://127.0.0.1:{healthz}/healthz"),
            timeout=timeout, proc=proc, record=record)
    except BaseException:
        processes.stop(record, proc)
        raise
    threading.Thread(target=_open_queues, args=(api, proc), daemon=True,
                     name="volcano-queues").start()
    return proc, record


def _open_queues(api: client.ApiClient, proc: subprocess.Popen[bytes]) -> None:
    """Mark every Queue without a state Open while the scheduler runs. Volcano's controller
    manager does this in a real installation, and the scheduler (since v1.11) enqueues nothing
    from a queue that is not Open; only the scheduler runs here."""
    objects = client.CustomObjectsApi(api)
    group, version = VOLCANO_API.split("/")
    while proc.poll() is None:
        with contextlib.suppress(Exception):  # the cluster may be going away under it
            for q in objects.list_cluster_custom_object(group, version, "queues")["items"]:
                if not (q.get("status") or {}).get("state"):
                    objects.patch_cluster_custom_object_status(
                        group, version, "queues", q["metadata"]["name"],
                        {"status": {"state": "Open"}})
        time.sleep(0.5)


def create_queue(api: client.ApiClient, name: str, *, weight: int = 1) -> bool:
    """A reclaimable Volcano Queue (cluster-scoped); an existing one is kept. True if created."""
    queues = kube.resource(api, VOLCANO_API, "Queue")
    return kube.create_once(queues.create, body={
        "apiVersion": VOLCANO_API, "kind": "Queue", "metadata": {"name": name},
        "spec": {"weight": weight, "reclaimable": True}})
