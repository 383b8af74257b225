"""The real Kueue manager beside the local control plane.

Kueue runs as a process with its own webhooks: their configurations (shipped in the module,
copied next to the binary by e2e/build.sh) are rewritten from the in-cluster Service to a
127.0.0.1 URL with the cluster CA as caBundle, and scoped to the test's namespace so that a
stopped Kueue can never block pods elsewhere. With its internal certificate management off,
Kueue v0.14 reads its metrics certificate from the fixed path /etc/kueue/metrics/certs; it is
started in a private mount namespace whose /etc is an overlay holding that certificate, so the
host's /etc is never written (needs root, as CI and this machine have).
"""

from __future__ import annotations

import copy
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from admission.devcluster import binaries, processes
from admission.devcluster.pki import write_serving_pair
from e2e.conftest import E2ECluster

KUEUE_NAMESPACE = "kueue-system"
# Webhooks of the API groups the suite uses; the rest serve frameworks not installed here.
_GROUPS = {"", "batch", "kueue.x-k8s.io"}


#: The API group/version of Kueue's queue objects.
KUEUE_API = "kueue.x-k8s.io/v1beta1"

def _resource(api: client.ApiClient, api_version: str, kind: str) -> Any:
    return dynamic.DynamicClient(api).resources.get(api_version=api_version, kind=kind)


def install_crds(api: client.ApiClient) -> None:
    crds = _resource(api, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
    names = []
    for path in sorted((binaries.component("kueue").share_dir / "crd").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        try:
            crds.create(body=doc)
        except ApiException as exc:
            if exc.status != 409:
                raise
        names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + 60
    for name in names:
        while True:
            status = crds.get(name=name).to_dict().get("status") or {}
            if any(c["type"] == "Established" and c["status"] == "True"
                   for c in status.get("conditions") or []):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after 60s")
            time.sleep(0.2)


def webhook_configs(ca_pem: bytes, port: int, namespace: str | Sequence[str], suffix: str
                    ) -> list[dict[str, Any]]:
    """Kueue's webhook configurations pointed at 127.0.0.1:port and scoped to ``namespace``
    (one name or several)."""
    import base64

    src = binaries.component("kueue").share_dir / "webhook-manifests.yaml"
    out = []
    for doc in yaml.safe_load_all(src.read_text()):
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        # Truncated to a valid name: at most 63 characters, ending alphanumeric.
        doc["metadata"]["name"] = f"kueue-{doc['metadata']['name']}-{suffix}"[:63].rstrip("-.")
        hooks = []
        for hook in doc["webhooks"]:
            groups = {g for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])}
            if not groups <= _GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                    "caBundle": base64.b64encode(ca_pem).decode()}
            hook["namespaceSelector"] = _only(namespace)
            hook["timeoutSeconds"] = 10
            hooks.append(hook)
        doc["webhooks"] = hooks
        if hooks:
            out.append(doc)
    return out


def _only(namespace: str | Sequence[str]) -> dict[str, Any]:
    """A namespace selector matching exactly the given namespace(s)."""
    names = [namespace] if isinstance(namespace, str) else list(namespace)
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                  "values": names}]}


def _config(workdir: Path, *, webhook_port: int, health_port: int, metrics_port: int,
            namespace: str | Sequence[str], frameworks: Sequence[str]) -> Path:
    conf = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1",
                    "certDir": str(workdir / "webhook-certs")},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(frameworks)},
        "managedJobsNamespaceSelector": _only(namespace),
    }
    path = workdir / "kueue-config.yaml"
    path.write_text(yaml.safe_dump(conf))
    return path


@contextmanager
def kueue_manager(cluster: E2ECluster, workdir: Path, namespace: str | Sequence[str], *,
                  frameworks: Sequence[str] = ("batch/job",)
                  ) -> Iterator[processes.ProcessRecord]:
    """Run Kueue's manager for ``frameworks`` (its integrations: "batch/job", "pod") in
    ``namespace`` (one or several) until the block ends."""
    assert cluster.local is not None
    exe = binaries.binary("kueue")
    if shutil.which("unshare") is None:
        raise RuntimeError("Kueue needs util-linux 'unshare' (for its /etc/kueue overlay)")
    install_crds(cluster.api)
    core = cluster.core
    try:
        core.create_namespace({"metadata": {"name": KUEUE_NAMESPACE}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    workdir.mkdir(parents=True, exist_ok=True)
    pki = cluster.local.pki
    write_serving_pair(pki, workdir / "webhook-certs", cn="kueue-webhook")
    upper, work = workdir / "etc-upper", workdir / "etc-work"
    write_serving_pair(pki, upper / "kueue" / "metrics" / "certs", cn="kueue-metrics")
    work.mkdir(exist_ok=True)
    ports = {k: processes.free_port() for k in ("webhook", "health", "metrics")}
    conf = _config(workdir, webhook_port=ports["webhook"], health_port=ports["health"],
                   metrics_port=ports["metrics"], namespace=namespace,
                   frameworks=frameworks)
    script = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc"
              f" && exec {exe} --config={conf} --feature-gates=VisibilityOnDemand=false"
              f" --zap-log-level=info")
    proc, record = processes.start(
        "kueue", ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script],
        workdir, env={"KUBECONFIG": str(cluster.kubeconfig)},
        preexec_fn=processes.die_with_parent)
    adm = client.AdmissionregistrationV1Api(cluster.api)
    made: list[tuple[str, str]] = []
    try:
        processes.wait_until(
            "kueue", lambda: processes.http_ok(f"http://127.0.0.1:{ports['health']}/readyz"),
            timeout=90, proc=proc, record=record)
        suffix = namespace if isinstance(namespace, str) else namespace[0]
        for doc in webhook_configs(pki.ca_cert.read_bytes(), ports["webhook"], namespace,
                                   suffix=suffix):
            if doc["kind"] == "MutatingWebhookConfiguration":
                adm.create_mutating_webhook_configuration(doc)
            else:
                adm.create_validating_webhook_configuration(doc)
            made.append((doc["kind"], doc["metadata"]["name"]))
        yield record
    finally:
        for kind, name in made:
            if kind == "MutatingWebhookConfiguration":
                adm.delete_mutating_webhook_configuration(name)
            else:
                adm.delete_validating_webhook_configuration(name)
        processes.stop(record, proc)


@contextmanager
def gpu_queues(cluster: E2ECluster, namespace: str, queue: str, gpus: int) -> Iterator[None]:
    """A ResourceFlavor, a ClusterQueue with ``gpus`` GPUs (and room in CPU and memory) and the
    LocalQueue ``queue`` in ``namespace`` pointing at it, for the block; removed afterwards.
    Names carry the namespace's suffix so tests side by side do not collide."""
    dyn = dynamic.DynamicClient(cluster.api)  # after Kueue's CRDs are installed
    flavors = dyn.resources.get(api_version=KUEUE_API, kind="ResourceFlavor")
    cqs = dyn.resources.get(api_version=KUEUE_API, kind="ClusterQueue")
    lqs = dyn.resources.get(api_version=KUEUE_API, kind="LocalQueue")
    suffix = namespace[-5:]
    flavor, cq = f"gpu-{suffix}", f"cq-{suffix}"
    flavors.create(body={"apiVersion": KUEUE_API, "kind": "ResourceFlavor",
                         "metadata": {"name": flavor}})
    cqs.create(body={"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": cq},
                     "spec": {"namespaceSelector": {}, "resourceGroups": [{
                         "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                         "flavors": [{"name": flavor, "resources": [
                             {"name": "cpu", "nominalQuota": "100"},
                             {"name": "memory", "nominalQuota": "100Gi"},
                             {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}]}]}]}})
    lqs.create(namespace=namespace, body={"apiVersion": KUEUE_API, "kind": "LocalQueue",
                                          "metadata": {"name": queue},
                                          "spec": {"clusterQueue": cq}})
    try:
        yield
    finally:
        lqs.delete(name=queue, namespace=namespace)
        cqs.delete(name=cq)
        flavors.delete(name=flavor)
