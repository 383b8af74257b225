"""Kueue's own pod webhook as a third server for bench/webhook_load.py (``--kueue``).

Kueue's webhook needs a control plane: it reads namespaces through its informer cache and
refuses to start without its CRDs. This starts the local control plane of admission.devcluster
(etcd, kube-apiserver, controller-manager, scheduler; binaries from e2e/build.sh), installs
Kueue's CRDs from the Go module cache, and runs the Kueue binary built by e2e/build.sh with the
pod integration on, leader election and internal certificates off, its webhook on 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

KUEUE_VERSION = "v0.14.8"
KUEUE_BIN = Path.home() / ".cache" / "berth-e2e" / f"kueue-{KUEUE_VERSION}" / "bin" / "kueue"
KUEUE_CRDS = (Path.home() / "go" / "pkg" / "mod" / "sigs.k8s.io" / f"kueue@{KUEUE_VERSION}"
              / "config" / "components" / "crd" / "bases")
# Kueue 0.14 insists on metrics certificates at this fixed path even with metrics off.
METRICS_CERTS = Path("/etc/kueue/metrics/certs")
PATH = "/mutate--v1-pod"


def missing() -> str | None:
    """Why Kueue cannot run here, or None."""
    if not KUEUE_BIN.is_file():
        return f"no Kueue binary at {KUEUE_BIN}: build it with e2e/build.sh"
    if not KUEUE_CRDS.is_dir():
        return f"no Kueue CRDs at {KUEUE_CRDS}: e2e/build.sh downloads the module"
    return None


@contextmanager
def kueue_webhook(port: int, core: str,
                  namespace: str = "team-a") -> Iterator[tuple[Path, int]]:
    """Run Kueue's webhook on 127.0.0.1:``port`` pinned to ``core``; yields its CA file and
    the process id."""
    from kubernetes import client, config

    from admission.certs import write_bundle
    from admission.devcluster import DevCluster

    why = missing()
    if why:
        raise SystemExit(f"--kueue: {why}")
    work = Path(tempfile.mkdtemp(prefix="berth-kueue-"))
    cluster = DevCluster(workdir=work / "cluster", with_kwok=False)
    made_metrics_certs = False
    proc: subprocess.Popen[bytes] | None = None
    try:
        cluster.start()
        api = config.new_client_from_config(str(cluster.kubeconfig))
        ext = client.ApiextensionsV1Api(api)
        for crd in sorted(KUEUE_CRDS.glob("*.yaml")):
            ext.create_custom_resource_definition(yaml.safe_load(crd.read_text()))
        core_api = client.CoreV1Api(api)
        for ns in ("kueue-system", namespace):
            core_api.create_namespace({"metadata": {"name": ns}})
        certs = work / "certs"
        write_bundle(certs, "127.0.0.1")
        if not METRICS_CERTS.exists():
            METRICS_CERTS.mkdir(parents=True)
            shutil.copy(certs / "tls.crt", METRICS_CERTS / "tls.crt")
            shutil.copy(certs / "tls.key", METRICS_CERTS / "tls.key")
            made_metrics_certs = True
        cfg = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration",
            "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": "127.0.0.1:0"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "integrations": {"frameworks": ["batch/job", "pod"]},
        }
        (work / "kueue.yaml").write_text(yaml.safe_dump(cfg))
        log = (work / "kueue.log").open("wb")
        proc = subprocess.Popen(
            ["taskset", "-c", core, str(KUEUE_BIN), f"--config={work / 'kueue.yaml'}",
             "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=error"],
            env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"Kueue did not start; log in {work / 'kueue.log'}")
            time.sleep(0.5)
        yield certs / "ca.crt", proc.pid
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        cluster.stop()
        if made_metrics_certs:
            shutil.rmtree(METRICS_CERTS.parent.parent, ignore_errors=True)


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False
