"""The real Volcano scheduler beside the local control plane.

Volcano's scheduler needs its CRDs (PodGroup and Queue, and the ones its cache waits for:
Numatopology, HyperNode, NodeShard, ColocationConfiguration) and a kubeconfig; it creates its
``default`` and ``root`` Queues itself and uses its built-in configuration (actions enqueue,
allocate, backfill; plugins priority, gang, conformance, overcommit, drf, predicates,
proportion, nodeorder) unless given a file. It schedules the pods whose ``schedulerName`` is
``volcano``, one PodGroup (``scheduling.k8s.io/group-name``) at a time, all of a group's
``minMember`` or none.

Since v1.14 (not in v1.10) the scheduler allocates only in a Queue whose ``status.state`` is
``Open``, which Volcano's controller manager writes: it runs beside the scheduler with its queue
controller alone (no Job, PodGroup or garbage controllers; the queue commands of ``vcctl`` off),
in the scheduler's process group, so one stop ends both.

Used by ``berth dev-cluster up --with-berth --backend volcano`` and by the e2e suite
(e2e/volcano.py).
"""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import subprocess
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
    actions and plugins from that file instead of the built-in ones), with Volcano's queue
    controller beside it (its log ``vc-controller-manager.log`` in ``workdir``); stop both with
    :func:`admission.devcluster.processes.stop` on the returned process."""
    exe = binaries.binary("vc-scheduler")
    controllers = binaries.binary("vc-controller-manager")
    if shutil.which("setpriv") is None:
        raise RuntimeError("Volcano's controller needs util-linux 'setpriv' (tied to the "
                           "scheduler's life)")
    install_crds(api)
    workdir.mkdir(parents=True, exist_ok=True)
    port, healthz = processes.free_port(), processes.free_port()
    ctl_metrics, ctl_healthz = processes.free_port(), processes.free_port()
    scheduler = [
        str(exe),
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--enable-healthz=true",
        f"--healthz-address=127.0.0.1:{healthz}",
        f"--listen-address=127.0.0.1:{port}",
        f"--cache-dump-dir={workdir}",
        "--logtostderr",
        *([f"--scheduler-conf={scheduler_conf}"] if scheduler_conf is not None else []),
    ]
    controller = [
        # killed with its parent, the scheduler (a parent-death signal is not inherited)
        "setpriv", "--pdeathsig", "KILL", "--",
        str(controllers),
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--controllers=queue-controller",
        "--feature-gates=QueueCommandSync=false",
        "--enable-healthz=true",
        f"--healthz-address=127.0.0.1:{ctl_healthz}",
        f"--listen-address=127.0.0.1:{ctl_metrics}",
        "--logtostderr",
    ]
    ctl_log = workdir / "vc-controller-manager.log"
    script = (f"{shlex.join(controller)} >>{shlex.quote(str(ctl_log))} 2>&1 & "
              f"exec {shlex.join(scheduler)}")
    proc, record = spawn("vc-scheduler", ["sh", "-c", script],
                         env={"KUBECONFIG": str(kubeconfig)},  # its HAMi plugin reads this
                         exe=str(exe))
    try:
        processes.wait_until(
            "vc-scheduler", lambda: processes.http_ok(f"http://127.0.0.1:{healthz}/healthz"),
            timeout=timeout, proc=proc, record=record)
        processes.wait_until(  # a failure shows the controller's own log
            "vc-controller-manager",
            lambda: processes.http_ok(f"http://127.0.0.1:{ctl_healthz}/healthz"),
            timeout=timeout, proc=proc, record=dataclasses.replace(record, log=str(ctl_log)))
    except BaseException:
        processes.stop(record, proc)
        raise
    return proc, record


def create_queue(api: client.ApiClient, name: str, *, weight: int = 1) -> bool:
    """A reclaimable Volcano Queue (cluster-scoped); an existing one is kept. True if created."""
    queues = kube.resource(api, VOLCANO_API, "Queue")
    return kube.create_once(queues.create, body={
        "apiVersion": VOLCANO_API, "kind": "Queue", "metadata": {"name": name},
        "spec": {"weight": weight, "reclaimable": True}})
