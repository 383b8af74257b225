"""Berth itself on the local control plane: ``berth dev-cluster up --with-berth``.

What a person gets after ``up --with-berth``, in the order it is set up:

1. the sample policy (config/policy/sample-policy.yaml) with ``release.backend`` set and the
   fake nodes' GPU product among the models every tenant may use, written to
   ``<workdir>/berth/policy.yaml``;
2. Berth's namespace and identity as config/base gives them (namespace.yaml, the ``berth``
   service account and exactly the RBAC of config/base/rbac.yaml, plus the backend
   component's own RBAC, and the pod-keys ValidatingAdmissionPolicy), and ``berth serve``
   talking to the apiserver with a token of that account, so the real authorizer checks the
   least-privilege rules; the policy also as the ConfigMap berth-system/berth-policy that
   config/base deploys (``berth status`` and ``berth explain`` read it);
3. the tenants' namespaces (every namespace the policy names);
4. for ``kueue`` the real Kueue manager (plain-pod integration for the tenants' namespaces)
   with one ClusterQueue per tenant and the LocalQueue the policy names in each of its
   namespaces; for ``volcano`` the real Volcano scheduler with the Queue each tenant names;
5. the webhook's certificates (what ``berth certs`` writes), ``berth serve`` on a free
   127.0.0.1 port, its MutatingWebhookConfiguration registered, and a dry-run GPU pod coming
   back gated before ``up`` returns.

Every process is started through :meth:`DevCluster.spawn`: logged under ``logs/``, recorded in
the state file, stopped by ``berth dev-cluster down`` with the rest. The e2e suite's Berth
fixtures (e2e/berth.py) use the same pieces: the CLI as a child process, the readiness and
webhook probes, the RBAC install (:mod:`admission.devcluster.rbac`).
"""

from __future__ import annotations

import json
import math
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from admission import constants as c
from admission.certs import render_webhook_config, write_bundle
from admission.devcluster import kube, processes
from admission.devcluster import kueue as dk
from admission.devcluster import volcano as dv
from admission.devcluster.binaries import REPO_ROOT
from admission.devcluster.cluster import DevCluster
from admission.devcluster.nodes import FakeGpuNode
from admission.devcluster.policies import POD_KEYS_POLICY, install_policies, policy_docs
from admission.devcluster.processes import StartupError
from admission.devcluster.rbac import (
    ACCOUNT,
    NAMESPACE_FILE,
    install_rbac,
    rbac_files,
    service_account_kubeconfig,
)

SAMPLE_POLICY = REPO_ROOT / "config" / "policy" / "sample-policy.yaml"
BACKENDS = ("standalone", "kueue", "volcano")
PROCESS_NAME = "berth-serve"
INFO_FILE = "berth.json"
WEBHOOK_CONFIG = "berth"  # config/base/webhook.yaml's name
# The berth CLI as a child process. Not "python -m admission.cli": that runs cli.py as
# __main__, a second copy of the module whose UsageError the commands do not raise.
BERTH_CLI: tuple[str, ...] = (sys.executable, "-c",
                              "from admission.cli import main; raise SystemExit(main())")
# The service-account token outlives the cluster's own certificates (7 days, pki.py).
TOKEN_SECONDS = 7 * 24 * 3600


# --------------------------------------------------------------------------------------------
# The policy
# --------------------------------------------------------------------------------------------


def dev_policy(backend: str, *, gpu_product: str, gpu_memory_mib: int,
               source: Path = SAMPLE_POLICY) -> dict[str, Any]:
    """The sample policy for a dev cluster: ``release.backend`` set, and ``gpu_product`` (the
    fake nodes' ``nvidia.com/gpu.product``) a known model that every tenant with an allow-list
    may use, so each tenant's pods can run on the fake nodes. Quotas are left as they are."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    doc: dict[str, Any] = yaml.safe_load(source.read_text())
    doc.setdefault("release", {})["backend"] = backend
    models = doc.setdefault("gpuModels", [])
    if not any(m.get("name") == gpu_product for m in models):
        models.append({"name": gpu_product, "memoryMiB": gpu_memory_mib})
    for tenant in doc.get("tenants", []):
        allowed = tenant.get("allowedModels")
        if allowed and gpu_product not in allowed:
            allowed.append(gpu_product)
    return doc


def write_policy(doc: Mapping[str, Any], out: Path, *, note: str = "") -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    header = "".join(f"# {line}\n" for line in note.splitlines())
    out.write_text(header + yaml.safe_dump(dict(doc), sort_keys=False))
    return out


# --------------------------------------------------------------------------------------------
# Probes shared with the e2e suite
# --------------------------------------------------------------------------------------------


def probe_pod(name: str = "berth-probe", gpus: int = 1) -> dict[str, Any]:
    """A minimal GPU pod for dry-run creates (the webhook sees it; nothing is stored)."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/probe:latest",
                                 "resources": {"limits": {c.RESOURCE_GPU: str(gpus)}}}]},
    }


def gated(pod: Any) -> bool:
    """True when a pod (a client model) carries Berth's scheduling gate."""
    return any(g.name == c.SCHEDULING_GATE for g in pod.spec.scheduling_gates or [])


def wait_until_gating(core: client.CoreV1Api, namespace: str, *, timeout: float = 30,
                      probe: Mapping[str, Any] | None = None) -> Any:
    """Dry-run create a GPU pod in ``namespace`` until it comes back with Berth's gate: a new
    MutatingWebhookConfiguration takes a moment to reach the apiserver's admission chain, and
    this is the only reliable sign that it has. Returns the gated pod; on timeout raises
    :class:`StartupError` with the apiserver's last answer."""
    body = dict(probe or probe_pod())
    pods: Any = core  # takes the manifest as a dict
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            last = pods.create_namespaced_pod(namespace, body, dry_run="All")
            if gated(last):
                return last
            last = "a dry-run GPU pod came back without Berth's gate"
        except ApiException as exc:
            last = f"dry-run create answered {exc.status}: {exc.body}"
        if time.monotonic() > deadline:
            raise StartupError(f"Berth's webhook did not gate a GPU pod in {namespace} within "
                               f"{timeout:.0f}s; last: {last}")
        time.sleep(0.25)


def wait_serving(name: str, port: int, ca: Path, *, proc: subprocess.Popen[bytes],
                 record: processes.ProcessRecord, timeout: float = 60) -> None:
    """Wait until a ``berth webhook``/``berth serve`` answers /readyz over TLS (its CA)."""
    ctx = processes.https_context(ca)
    processes.wait_until(
        name, lambda: processes.http_ok(f"https://127.0.0.1:{port}/readyz", ctx),
        timeout=timeout, proc=proc, record=record)


# --------------------------------------------------------------------------------------------
# Installing Berth on a dev cluster
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BerthInfo:
    """What ``up`` set up, kept in ``<workdir>/berth/berth.json`` for ``status``."""

    backend: str
    policy: str
    port: int
    ca: str
    namespace: str
    tenants: dict[str, list[str]]  # tenant -> namespaces
    queues: dict[str, str]  # tenant -> its queue in the backend (none for standalone)
    webhook_config: str = WEBHOOK_CONFIG

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @classmethod
    def load(cls, workdir: Path) -> BerthInfo | None:
        path = workdir / "berth" / INFO_FILE
        if not path.is_file():
            return None
        return cls(**json.loads(path.read_text()))

    def save(self, workdir: Path) -> None:
        (workdir / "berth" / INFO_FILE).write_text(json.dumps(asdict(self), indent=2))

    def serving(self) -> bool:
        """True when ``berth serve`` answers /readyz over TLS (False if its CA is gone)."""
        try:
            ctx = processes.https_context(Path(self.ca))
        except (OSError, ssl.SSLError):
            return False
        return processes.http_ok(f"{self.url}/readyz", ctx)


def _fleet_gpus(nodes: Iterable[FakeGpuNode]) -> int:
    return sum(n.gpus for n in nodes)


def _kueue_queues(policy: Any, nodes: Sequence[FakeGpuNode]) -> list[dk.GpuQueue]:
    """One ClusterQueue per tenant whose nominal GPU quota is Berth's ceiling for it (quota
    plus borrowing limit; the whole fleet when uncapped), so Kueue never holds back what Berth
    placed (admission/backends/kueue.py), with the time-slicing slots fractions take."""
    fleet = _fleet_gpus(nodes)
    slots = policy.sharing.time_slicing.replicas if policy.sharing.backend == "time-slicing" \
        else 0
    out = []
    for tenant in policy.tenants:
        local = policy.queue_for(tenant)
        if not local:
            continue
        ceiling = tenant.ceiling_milli
        gpus = fleet if ceiling is None else min(fleet, math.ceil(ceiling / 1000))
        out.append(dk.GpuQueue(cluster_queue=tenant.name, flavor="gpu", gpus=gpus,
                               local=local, namespaces=tuple(tenant.namespaces),
                               shared=gpus * slots,
                               shared_resource=policy.sharing.time_slicing.resource_name))
    return out


def install(cluster: DevCluster, *, backend: str, nodes: Sequence[FakeGpuNode],
            say: Callable[[str], None] = lambda _: None, timeout: float = 120) -> BerthInfo:
    """Set Berth up on a running dev cluster (see the module docstring); ``say`` hears one
    line per step. Raises :class:`StartupError` when a component does not come up."""
    from admission.policy import load_policy

    api = cluster_api(cluster)
    core = client.CoreV1Api(api)
    home = cluster.workdir / "berth"
    home.mkdir(parents=True, exist_ok=True)
    product = nodes[0].gpu_product if nodes else "NVIDIA-H100-80GB-HBM3"
    memory = nodes[0].gpu_memory_mib if nodes else 81559
    policy_file = write_policy(
        dev_policy(backend, gpu_product=product, gpu_memory_mib=memory), home / "policy.yaml",
        note=(f"Written by `berth dev-cluster up --with-berth --backend {backend}` from\n"
              f"{SAMPLE_POLICY.relative_to(REPO_ROOT)}: release.backend set, {product}\n"
              "(the fake nodes' GPU) allowed to every tenant. Berth reloads this file when "
              "it changes."))
    policy = load_policy(policy_file)
    say(f"policy: {policy_file} (release.backend: {backend})")

    # Berth's own namespace and identity, as config/base gives them.
    ns_doc = yaml.safe_load(NAMESPACE_FILE.read_text())
    namespace = ns_doc["metadata"]["name"]
    kube.ensure_namespace(core, namespace, ns_doc["metadata"].get("labels"))
    install_rbac(api, namespace, files=rbac_files([backend]))
    kubeconfig = service_account_kubeconfig(
        api, server=cluster.server, ca_pem=cluster.pki.ca_cert.read_bytes(),
        namespace=namespace, account=ACCOUNT, out=home / "berth-sa.kubeconfig",
        expiration_seconds=TOKEN_SECONDS)
    # config/base's ValidatingAdmissionPolicy: after CREATE only Berth changes its pod keys.
    install_policies(api, policy_docs([POD_KEYS_POLICY]))
    say(f"identity: service account {namespace}/{ACCOUNT} with config/base RBAC and "
        "pod-keys policy")

    # The policy also as config/base deploys it (its configMapGenerator): `berth status` and
    # `berth explain` read it from there. berth serve here reads the file.
    from admission.status.keys import POLICY_CONFIG_MAP, POLICY_KEY

    configmaps: Any = core  # takes the object as a dict
    kube.create_once(configmaps.create_namespaced_config_map, namespace, {
        "metadata": {"name": POLICY_CONFIG_MAP, "labels": {"app.kubernetes.io/part-of": "berth"}},
        "data": {POLICY_KEY: policy_file.read_text()}})

    tenants = {t.name: list(t.namespaces) for t in policy.tenants}
    namespaces = sorted(policy.managed_namespaces)
    for ns in namespaces:
        kube.ensure_namespace(core, ns)
    say(f"tenant namespaces: {', '.join(namespaces)}")

    queues: dict[str, str] = {}
    if backend == "kueue":
        dk.start_manager(api, cluster.spawn, pki=cluster.pki, kubeconfig=cluster.kubeconfig,
                         workdir=home / "kueue", namespace=namespaces, frameworks=("pod",),
                         timeout=timeout)
        for queue in _kueue_queues(policy, nodes):
            dk.create_gpu_queue(api, queue)
            queues[queue.cluster_queue] = queue.local
        say("kueue: manager ready; " + ", ".join(
            f"LocalQueue {lq} -> ClusterQueue {cq}" for cq, lq in queues.items()))
    elif backend == "volcano":
        dv.start_scheduler(api, cluster.spawn, kubeconfig=cluster.kubeconfig,
                           workdir=home / "volcano", timeout=timeout)
        for tenant in policy.tenants:
            name = policy.queue_for(tenant)
            if name:
                dv.create_queue(api, name, weight=max(1, round(tenant.weight)))
                queues[tenant.name] = name
        say("volcano: scheduler ready; Queues " + ", ".join(queues.values()))

    # The webhook's certificates (what `berth certs --out DIR --host 127.0.0.1` writes).
    bundle = write_bundle(home / "certs", "127.0.0.1", days=7)
    port = processes.free_port()
    proc, record = cluster.spawn(PROCESS_NAME, [
        *BERTH_CLI, "serve", "--policy", str(policy_file), "--cert-dir", str(home / "certs"),
        "--port", str(port), "--kubeconfig", str(kubeconfig), "--namespace", namespace,
        "--identity", "berth-dev"])
    wait_serving(PROCESS_NAME, port, bundle.ca_cert, proc=proc, record=record, timeout=timeout)
    rendered = yaml.safe_load(render_webhook_config(
        bundle.ca_cert.read_bytes(), url=f"https://127.0.0.1:{port}/mutate-pods",
        namespaces=namespaces))
    rendered["metadata"]["name"] = WEBHOOK_CONFIG
    adm: Any = client.AdmissionregistrationV1Api(api)
    kube.create_once(adm.create_mutating_webhook_configuration, rendered)
    wait_until_gating(core, namespaces[0], timeout=60)
    info = BerthInfo(backend=backend, policy=str(policy_file), port=port,
                     ca=str(bundle.ca_cert), namespace=namespace, tenants=tenants,
                     queues=queues)
    info.save(cluster.workdir)
    say(f"berth serve: {info.url} (log {record.log}); webhook '{WEBHOOK_CONFIG}' gating "
        "GPU pods")
    return info


def cluster_api(cluster: DevCluster) -> client.ApiClient:
    from kubernetes import config

    new_client: Any = config.new_client_from_config  # untyped
    api: client.ApiClient = new_client(str(cluster.kubeconfig))
    return api


def shared_slots(source: Path = SAMPLE_POLICY) -> int:
    """Time-slicing slots per GPU the fake nodes advertise so that the policy's fractions can
    run (``sharing.timeSlicing.replicas`` when the sharing backend is time-slicing, else 0)."""
    from admission.policy import load_policy

    sharing = load_policy(source).sharing
    return sharing.time_slicing.replicas if sharing.backend == "time-slicing" else 0


def check_binaries(backend: str) -> None:
    """Fail before anything starts when the backend's program was not built
    (:class:`~admission.devcluster.binaries.MissingBinary` names the build command)."""
    from admission.devcluster import binaries

    if backend == "kueue":
        binaries.binary("kueue")
    elif backend == "volcano":
        binaries.binary("vc-scheduler")


def next_steps(backend: str) -> str:
    """What to try once ``up --with-berth`` returns (docs/quickstart.md walks through it)."""
    lines = [
        "then try (docs/quickstart.md):",
        "  kubectl apply -f config/examples/training-job-gang.yaml  # 2 x 8 GPUs in one rack",
        "  kubectl get pods -n team-a -o wide -w                   # SchedulingGated -> Running",
        "  kubectl apply -f config/examples/notebook.yaml           # half a GPU for team-b",
        "  kubectl apply -f config/examples/nightly-eval-job.yaml   # waits: team-b's quota",
        "  kubectl get events -n team-b --field-selector reason=Quota",
    ]
    if backend == "kueue":
        lines.append("  kubectl apply -f config/examples/kueue-job.yaml          # Kueue "
                     "admits, Berth places")
    elif backend == "volcano":
        lines.append("  kubectl apply -f config/examples/volcano-job.yaml        # Volcano "
                     "binds where Berth placed")
    lines.append("  berth dev-cluster down                                  # stop everything")
    return "\n".join(lines)
