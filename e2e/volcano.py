"""The real Volcano scheduler beside the cluster under test, for one test at a time; and
Volcano's admission webhook for the creation benchmark (e2e/bench_pace.py).

Starting the scheduler (its CRDs, the process, its health) lives in
:mod:`admission.devcluster.volcano`, shared with ``berth dev-cluster up --with-berth --backend
volcano``; here it is a context manager that stops it after the test.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from admission.certs import write_bundle
from admission.devcluster import binaries, processes
from admission.devcluster.volcano import install_crds, start_scheduler
from e2e.conftest import E2ECluster
from e2e.helpers import eventually, pod_manifest

__all__ = ["VOLCANO_SCHEDULER", "install_crds", "volcano_scheduler", "volcano_webhook"]

#: The scheduler name whose pods Volcano's pod webhooks look at (its default).
VOLCANO_SCHEDULER = "volcano"
#: Volcano's pod webhooks as its Helm chart (installer/helm/chart/volcano/templates/webhooks.yaml,
#: v1.14) declares them: (kind, configuration name, webhook name, path). vc-webhook-manager only
#: puts its CA into configurations that already exist under these names.
_POD_WEBHOOKS = (
    ("Mutating", "volcano-admission-service-pods-mutate", "mutatepod.volcano.sh", "/pods/mutate"),
    ("Validating", "volcano-admission-service-pods-validate", "validatepod.volcano.sh",
     "/pods/validate"),
)


@contextmanager
def volcano_scheduler(cluster: E2ECluster, workdir: Path) -> Iterator[processes.ProcessRecord]:
    proc, record = start_scheduler(cluster.api, processes.spawner(workdir),
                                   kubeconfig=cluster.kubeconfig, workdir=workdir)
    try:
        yield record
    finally:
        processes.stop(record, proc)


def _webhook_config(kind: str, name: str, hook: str, url: str, ca: bytes) -> dict[str, Any]:
    """One of Volcano's pod webhook configurations as its chart has it (every namespace but
    kube-system, pods CREATE, failurePolicy Fail, 10 s), reached by URL instead of a Service."""
    webhook: dict[str, Any] = {
        "name": hook, "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": url, "caBundle": base64.b64encode(ca).decode()},
        "failurePolicy": "Fail", "matchPolicy": "Equivalent", "sideEffects": "NoneOnDryRun",
        "timeoutSeconds": 10, "objectSelector": {},
        "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                                    "operator": "NotIn",
                                                    "values": ["kube-system"]}]},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": ["pods"], "scope": "*"}],
    }
    if kind == "Mutating":
        webhook["reinvocationPolicy"] = "Never"
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": f"{kind}WebhookConfiguration",
            "metadata": {"name": name}, "webhooks": [webhook]}


@contextmanager
def volcano_webhook(cluster: E2ECluster, workdir: Path, probe_namespace: str,
                    timeout: float = 60) -> Iterator[processes.ProcessRecord]:
    """Volcano's admission webhook (``vc-webhook-manager``, e2e/build.sh volcano-webhook) with
    its two pod webhooks (mutate and validate) registered as its chart registers them; ready
    once a dry-run pod of the Volcano scheduler with an invalid disruption budget is refused
    by it in ``probe_namespace``. Its other admissions (jobs, queues, podgroups) are off: the
    benchmark creates pods only."""
    exe = binaries.binary("vc-webhook-manager")
    install_crds(cluster.api)  # its queue informer needs the Queue CRD
    workdir.mkdir(parents=True, exist_ok=True)
    certs = write_bundle(workdir / "certs", "127.0.0.1")
    port = processes.free_port()
    adm = client.AdmissionregistrationV1Api(cluster.api)
    with ExitStack() as stack:
        for kind, name, hook, path in _POD_WEBHOOKS:
            body = _webhook_config(kind, name, hook, f"https://127.0.0.1:{port}{path}",
                                   certs.ca_cert.read_bytes())
            create = getattr(adm, f"create_{kind.lower()}_webhook_configuration")
            delete = getattr(adm, f"delete_{kind.lower()}_webhook_configuration")
            create(body)
            stack.callback(_delete_quietly, delete, name)
        proc, record = processes.spawner(workdir)("vc-webhook-manager", [
            str(exe), f"--kubeconfig={cluster.kubeconfig}",
            f"--tls-cert-file={certs.tls_cert}", f"--tls-private-key-file={certs.tls_key}",
            f"--ca-cert-file={certs.ca_cert}", "--listen-address=127.0.0.1", f"--port={port}",
            "--enabled-admission=/pods/mutate,/pods/validate",
            f"--webhook-url=https://127.0.0.1:{port}",
            f"--scheduler-name={VOLCANO_SCHEDULER}", "--logtostderr"], exe=str(exe))
        stack.callback(processes.stop, record, proc)
        core = client.CoreV1Api(cluster.api)
        probe = pod_manifest("volcano-probe", gpus=1,
                             annotations={"volcano.sh/jdb-min-available": "none"})
        probe["spec"]["schedulerName"] = VOLCANO_SCHEDULER

        def refused() -> str:
            if proc.poll() is not None:
                tail = Path(record.log).read_text(errors="replace").splitlines()[-15:]
                raise RuntimeError(f"vc-webhook-manager exited ({proc.returncode}); the end of "
                                   f"its log ({record.log}):\n" + "\n".join(tail))
            try:
                core.create_namespaced_pod(probe_namespace, probe, dry_run="All")
            except ApiException as exc:
                return str(exc.body)
            return "created"

        eventually(refused, lambda body: "jdb-min-available" in body, timeout=timeout,
                   what="Volcano's pod webhook to answer (a pod with an invalid budget refused)")
        yield record


def _delete_quietly(delete: Any, name: str) -> None:
    try:
        delete(name)
    except ApiException as exc:
        if exc.status != 404:
            raise
