"""The real Kueue manager beside the local control plane.

Kueue runs as a process with its own webhooks: their configurations (shipped in the module,
copied next to the binary by e2e/build.sh) are rewritten from the in-cluster Service to a
127.0.0.1 URL with the cluster CA as caBundle, and scoped to the given namespaces so that a
stopped Kueue can never block pods elsewhere. With its internal certificate management off,
Kueue (v0.14 to v0.19 at least) reads its metrics certificate from the fixed path
/etc/kueue/metrics/certs; it is started in a private mount namespace whose /etc is an overlay
holding that certificate, so the host's /etc is never written (needs root, as CI and the
development machines have).

Since v0.15 Kueue stores its objects as ``kueue.x-k8s.io/v1beta2`` and still serves v1beta1,
converted by its own webhook (``/convert`` on the manager's webhook port): the CRDs whose
versions differ are pointed at it as Kueue's own manifests do, so an object written as v1beta1
(``spec.cohort``) reads back right as v1beta2 (``spec.cohortName``). Berth writes v1beta2.

Used by ``berth dev-cluster up --with-berth --backend kueue`` and by the e2e suite
(e2e/kueue.py).
"""

from __future__ import annotations

import base64
import copy
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from admission.devcluster import binaries, kube, processes
from admission.devcluster.pki import ClusterPki, write_serving_pair

KUEUE_NAMESPACE = "kueue-system"
#: The API group/version of Kueue's queue objects.
KUEUE_API = "kueue.x-k8s.io/v1beta2"
# Webhooks of the API groups used here; the rest serve frameworks not installed.
_GROUPS = {"", "batch", "kueue.x-k8s.io"}
# The CRDs Kueue's own manifests (config/components/crd, v0.19) convert through the manager's
# webhook; the others' versions differ in descriptions only.
_CONVERTED = ("clusterqueues", "cohorts", "localqueues", "workloads", "multikueueclusters")
#: Kueue's gates for its plain-pod integration in front of which Berth runs. From v0.19
#: ``SkipReassignmentForPodOwnedWorkloads`` (on by default) never requeues a Workload owned by
#: one pod once it is evicted, expecting the pod to go; but a pod Kueue preempted before it
#: lifted its own gate is not stopped (Kueue reads a gated pod as suspended), so it stays gated
#: with a Workload that says ``Requeued=False`` and never runs. Behind Berth's gate the
#: window between Kueue's quota reservation and its ungating is wide enough for its fair
#: sharing to preempt there: 8 of 140 gangs of the embedded default were left so in one
#: e2e/bench_compare.py run (none with the gate off; e2e/bench_compare.md, runs 19-24). The
#: gate only guards Kueue's own topology-aware placement, which Berth's placement replaces.
POD_INTEGRATION_GATES = {"SkipReassignmentForPodOwnedWorkloads": False}
#: From which Kueue minor version each of those gates is set: where it is on by default (an
#: older Kueue lacks it, or has it off: v0.17.x and v0.18.x, and an unknown gate stops Kueue).
_GATE_SINCE = {"SkipReassignmentForPodOwnedWorkloads": (0, 19)}

#: The fair sharing preemption strategies: Kueue's defaults (v1beta1 filled them in; v1beta2
#: requires them when fair sharing is on).
FAIR_SHARING_STRATEGIES = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")


def pod_integration_gates(version: str) -> dict[str, bool]:
    """:data:`POD_INTEGRATION_GATES` that Kueue ``version`` ("v0.19.2") knows."""
    try:
        minor = tuple(int(x) for x in version.lstrip("v").split(".")[:2])
    except ValueError:
        raise ValueError(f"Kueue version {version!r} is not vMAJOR.MINOR[.PATCH]") from None
    return {k: v for k, v in POD_INTEGRATION_GATES.items() if minor >= _GATE_SINCE[k]}


def install_crds(api: client.ApiClient) -> list[str]:
    return kube.install_crds(
        api, (binaries.component("kueue").share_dir / "crd").glob("*.yaml"), timeout=60)


def point_conversion(api: client.ApiClient, ca_pem: bytes, port: int) -> None:
    """Point the conversion of Kueue's multi-version CRDs at a manager's webhook on
    127.0.0.1:port (the last manager started wins; with none running, only reads in a version
    other than the stored one fail, naming the webhook)."""
    crds = kube.resource(api, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
    conversion = {"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"],
        "clientConfig": {"url": f"https://127.0.0.1:{port}/convert",
                         "caBundle": base64.b64encode(ca_pem).decode()}}}
    for plural in _CONVERTED:
        crds.patch(name=f"{plural}.kueue.x-k8s.io", body={"spec": {"conversion": conversion}},
                   content_type="application/merge-patch+json")


def only(namespace: str | Sequence[str]) -> dict[str, Any]:
    """A namespace selector matching exactly the given namespace(s)."""
    names = [namespace] if isinstance(namespace, str) else list(namespace)
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                  "values": names}]}


def webhook_configs(ca_pem: bytes, port: int, namespace: str | Sequence[str], suffix: str
                    ) -> list[dict[str, Any]]:
    """Kueue's webhook configurations pointed at 127.0.0.1:port and scoped to ``namespace``
    (one name or several), their names ending in ``suffix``."""
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
            hook["namespaceSelector"] = only(namespace)
            hook["timeoutSeconds"] = 10
            hooks.append(hook)
        doc["webhooks"] = hooks
        if hooks:
            out.append(doc)
    return out


@dataclass(frozen=True)
class Manager:
    """A started Kueue manager: its process and the webhook configurations registered for it."""

    proc: subprocess.Popen[bytes]
    record: processes.ProcessRecord
    webhooks: tuple[tuple[str, str], ...]  # (kind, name)
    webhook_port: int = 0  # its webhook server on 127.0.0.1 (serving the cluster CA's pair)


def start_manager(api: client.ApiClient, spawn: processes.Spawn, *, pki: ClusterPki,
                  kubeconfig: Path, workdir: Path, namespace: str | Sequence[str],
                  frameworks: Sequence[str] = ("batch/job",), timeout: float = 90,
                  fair_sharing: bool = False,
                  feature_gates: Mapping[str, bool] | None = None) -> Manager:
    """Install Kueue's CRDs, run its manager for ``frameworks`` (its integrations:
    "batch/job", "pod") in ``namespace`` (one or several) and register its webhooks once it
    is ready; ``fair_sharing`` turns on its fair sharing (ClusterQueues of a cohort share
    by their ``fairSharing.weight``, preempting by :data:`FAIR_SHARING_STRATEGIES`);
    ``feature_gates`` are passed on (VisibilityOnDemand is off unless named: its API server
    would need an aggregated APIService). Undo with :func:`stop_manager`."""
    exe = binaries.binary("kueue")
    if shutil.which("unshare") is None:
        raise RuntimeError("Kueue needs util-linux 'unshare' (for its /etc/kueue overlay)")
    install_crds(api)
    kube.create_once(client.CoreV1Api(api).create_namespace,
                     {"metadata": {"name": KUEUE_NAMESPACE}})
    workdir.mkdir(parents=True, exist_ok=True)
    write_serving_pair(pki, workdir / "webhook-certs", cn="kueue-webhook")
    upper, work = workdir / "etc-upper", workdir / "etc-work"
    write_serving_pair(pki, upper / "kueue" / "metrics" / "certs", cn="kueue-metrics")
    work.mkdir(exist_ok=True)
    ports = {k: processes.free_port() for k in ("webhook", "health", "metrics")}
    conf = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}"},
        "webhook": {"port": ports["webhook"], "host": "127.0.0.1",
                    "certDir": str(workdir / "webhook-certs")},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(frameworks)},
        "managedJobsNamespaceSelector": only(namespace),
    }
    if fair_sharing:
        conf["fairSharing"] = {"preemptionStrategies": list(FAIR_SHARING_STRATEGIES)}
    conf_file = workdir / "kueue-config.yaml"
    conf_file.write_text(yaml.safe_dump(conf))
    gates = {"VisibilityOnDemand": False,
             **(pod_integration_gates(binaries.component("kueue").version)
                if "pod" in frameworks else {}),
             **(feature_gates or {})}
    gate_arg = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(gates.items()))
    # before the manager starts: a changed conversion restarts the CRD's watches
    point_conversion(api, pki.ca_cert.read_bytes(), ports["webhook"])
    script = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc"
              f" && exec {exe} --config={conf_file} --feature-gates={gate_arg}"
              f" --zap-log-level=info")
    proc, record = spawn(
        "kueue", ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script],
        env={"KUBECONFIG": str(kubeconfig)}, exe=str(exe))
    adm: Any = client.AdmissionregistrationV1Api(api)  # takes the manifests as dicts
    made: list[tuple[str, str]] = []
    try:
        processes.wait_until(
            "kueue", lambda: processes.http_ok(f"http://127.0.0.1:{ports['health']}/readyz"),
            timeout=timeout, proc=proc, record=record)
        suffix = namespace if isinstance(namespace, str) else namespace[0]
        for doc in webhook_configs(pki.ca_cert.read_bytes(), ports["webhook"], namespace,
                                   suffix=suffix):
            if doc["kind"] == "MutatingWebhookConfiguration":
                adm.create_mutating_webhook_configuration(doc)
            else:
                adm.create_validating_webhook_configuration(doc)
            made.append((doc["kind"], doc["metadata"]["name"]))
        _wait_until_admitting(api, namespace, frameworks, timeout=timeout)
    except BaseException:
        stop_manager(api, Manager(proc, record, tuple(made)))
        raise
    return Manager(proc, record, tuple(made), ports["webhook"])


def _wait_until_admitting(api: client.ApiClient, namespace: str | Sequence[str],
                          frameworks: Sequence[str], *, timeout: float) -> None:
    """Dry-run create what Kueue manages until its webhooks act on it (a plain pod comes back
    with Kueue's gate, a Job suspended): a new webhook configuration takes a moment to reach
    the apiserver's admission chain, and a pod created before that is never Kueue's."""
    ns = namespace if isinstance(namespace, str) else namespace[0]
    labels = {"kueue.x-k8s.io/queue-name": "probe"}
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "kueue-probe", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/probe:1"}]}}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "kueue-probe", "labels": labels},
           "spec": {"template": {"spec": {**pod["spec"], "restartPolicy": "Never"}}}}
    core: Any = client.CoreV1Api(api)
    batch: Any = client.BatchV1Api(api)
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            ok = True
            if "pod" in frameworks:
                got = core.create_namespaced_pod(ns, pod, dry_run="All")
                ok = any(g.name == "kueue.x-k8s.io/admission"
                         for g in got.spec.scheduling_gates or [])
                last = "a dry-run pod came back without Kueue's gate"
            if ok and "batch/job" in frameworks:
                got = batch.create_namespaced_job(ns, job, dry_run="All")
                ok = bool(got.spec.suspend)
                last = "a dry-run Job came back not suspended"
            if ok:
                return
        except client.ApiException as exc:
            last = f"dry-run create answered {exc.status}: {exc.body}"
        if time.monotonic() > deadline:
            raise processes.StartupError(f"Kueue's webhooks did not act on a dry-run object in "
                                         f"{ns} within {timeout:.0f}s; last: {last}")
        time.sleep(0.25)


def stop_manager(api: client.ApiClient, manager: Manager) -> None:
    """Remove its webhook configurations, then stop the process."""
    adm = client.AdmissionregistrationV1Api(api)
    for kind, name in manager.webhooks:
        if kind == "MutatingWebhookConfiguration":
            adm.delete_mutating_webhook_configuration(name)
        else:
            adm.delete_validating_webhook_configuration(name)
    processes.stop(manager.record, manager.proc)


@dataclass(frozen=True)
class GpuQueue:
    """A ClusterQueue holding ``gpus`` GPUs (and ``shared`` time-slicing slots, when fractions
    reach the nodes that way) behind one ResourceFlavor, and a LocalQueue ``local`` in each of
    ``namespaces`` pointing at it."""

    cluster_queue: str
    flavor: str
    gpus: int
    local: str
    namespaces: tuple[str, ...]
    shared: int = 0
    shared_resource: str = "nvidia.com/gpu.shared"
    # Kueue's own knobs, for tests of how it treats pods behind Berth: its ClusterQueue's
    # ``preemption`` and the AdmissionChecks (by name) a Workload must pass after its quota
    # is reserved.
    preemption: Mapping[str, str] | None = None
    admission_checks: tuple[str, ...] = ()


def create_gpu_queue(api: client.ApiClient, queue: GpuQueue) -> list[tuple[str, str, str]]:
    """Create the queue's objects (after Kueue's CRDs are installed); existing ones are kept.
    Returns (kind, namespace, name) of each, for :func:`delete_gpu_queue`."""
    flavors = kube.resource(api, KUEUE_API, "ResourceFlavor")
    cqs = kube.resource(api, KUEUE_API, "ClusterQueue")
    lqs = kube.resource(api, KUEUE_API, "LocalQueue")
    resources = [{"name": "cpu", "nominalQuota": "1000"},
                 {"name": "memory", "nominalQuota": "10000Gi"},
                 {"name": "nvidia.com/gpu", "nominalQuota": str(queue.gpus)}]
    if queue.shared:
        resources.append({"name": queue.shared_resource, "nominalQuota": str(queue.shared)})
    kube.create_once(flavors.create, body={"apiVersion": KUEUE_API, "kind": "ResourceFlavor",
                                           "metadata": {"name": queue.flavor}})
    kube.create_once(cqs.create, body={
        "apiVersion": KUEUE_API, "kind": "ClusterQueue",
        "metadata": {"name": queue.cluster_queue},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": [r["name"] for r in resources],
            "flavors": [{"name": queue.flavor, "resources": resources}]}],
            **({"preemption": dict(queue.preemption)} if queue.preemption else {}),
            **({"admissionChecksStrategy": {"admissionChecks": [
                {"name": n} for n in queue.admission_checks]}}
               if queue.admission_checks else {})}})
    made = [("ResourceFlavor", "", queue.flavor), ("ClusterQueue", "", queue.cluster_queue)]
    for ns in queue.namespaces:
        kube.create_once(lqs.create, namespace=ns, body={
            "apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": {"name": queue.local},
            "spec": {"clusterQueue": queue.cluster_queue}})
        made.append(("LocalQueue", ns, queue.local))
    return made


def delete_gpu_queue(api: client.ApiClient, made: list[tuple[str, str, str]]) -> None:
    for kind, ns, name in reversed(made):
        res = kube.resource(api, KUEUE_API, kind)
        if ns:
            res.delete(name=name, namespace=ns)
        else:
            res.delete(name=name)
