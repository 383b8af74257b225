"""Head-to-head on the real control plane: one replayed workload through kube-scheduler alone,
the real Kueue, the real Volcano, Berth in front of kube-scheduler and Berth in front of Kueue.

For each workload and each system in turn a fresh local control plane (e2e/build.sh: etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, kwok) gets the same kwok GPU nodes, the
same tenants (one namespace each) and the same gangs at the same (compressed) arrival times. A
gang is a batch/v1 Job of ``pods`` pods (parallelism = completions), each pod asking for whole
GPUs; kwok runs a pod for its run time and then completes it (its ``pod-complete`` stage with
the delay in the pod's ``pod-complete.stage.kwok.x-k8s.io/delay`` annotation), so queues drain
and capacity frees as in a real cluster; a pod being deleted (evicted, preempted, its Job
suspended) ends Failed at once, as the kubelet stops it (:data:`POD_TERMINATE_STAGE`), and its
Job counts it or, with ``--ignore-disruptions`` (podFailurePolicy Ignore on DisruptionTarget),
makes it again without counting it. Each system gets the gangs in its own vocabulary:

- ``kube-scheduler``: the Jobs as they are.
- ``kueue``: Kueue (batch/job integration) with one ResourceFlavor per GPU model (node label
  ``nvidia.com/gpu.product``) and one ClusterQueue per tenant in one cohort, nominal quota of
  each flavor split by weight (the tenant's quota in all), borrowing without limit, preemption
  ``reclaimWithinCohort: Any``, ``BestEffortFIFO``, fair sharing by the tenants' weights; the
  Jobs carry ``kueue.x-k8s.io/queue-name``.
- ``volcano``: the Volcano scheduler with gang, proportion, DRF, predicates, binpack and the
  enqueue/allocate/backfill/reclaim actions; one Queue per tenant with its weight (capability:
  the whole cluster), one PodGroup per gang (``minMember`` = its pods); the pods carry
  ``schedulerName: volcano`` and the group annotation.
- ``berth``: ``berth serve`` (standalone release) with the same tenants, weights and quotas
  (borrowing on, reclaim on as Kueue's and Volcano's); the pods state their gang size
  (``berth.dev/gang-size``).
- ``berth-kueue``: ``berth serve`` with ``release.backend: kueue`` in front of Kueue (its pod
  integration) with the same ClusterQueues and ResourceFlavors as ``kueue``: Kueue admits a
  gang by quota and writes its flavor's node labels on the pods, then Berth places it within
  them (admission/backends/kueue.py; see :meth:`Berth.running`).

Every pod carries its allowed GPU models as required node affinity (every system honours it;
Berth also reads ``berth.dev/gpu-models``) and ``activeDeadlineSeconds`` of ``--deadline-factor``
x its run time (kwok enforces none; Berth reads it as an expected end, the others ignore it).

Workloads (``--workloads``):

- ``default``: the embedded default of ``berth simulate`` (solver.simulate.generate, seed
  ``--seed``): 8 nodes / 46 GPUs of four models, three tenants (weights 2:1:1), training gangs,
  inference and notebooks.
- ``openb``: ``--openb-pods`` consecutive GPU pods from the middle of
  ``openb_pod_list_default.csv`` on ``--openb-nodes`` nodes taken at even steps through the
  openb GPU node list (its mix of models and sizes), four tenants by CRC-32 of the pod
  name (as ``berth simulate --mode timed`` assigns them), arrivals sped up so the offered
  load is ``--openb-load`` x the slice's GPUs.

Shares of a GPU are rounded up to one whole GPU for every system: kube-scheduler, Kueue and
Volcano count ``nvidia.com/gpu`` per node, and advertising time-slicing slots beside it would
let them put more on a node than it holds, so a comparison of shares needs per-node sharing
pools (not built). All times (arrivals, run times) are divided by ``--compress``
(``--openb-compress``).

Metrics per system, from watch events (e2e time, seconds after the first arrival): a gang's
wait is from its Job's create call to the moment all its pods were Running; p50/p90/p99
overall and by gang size, and a p99 that counts each gang never started as waiting until the
run ended; per gang, how long each scheduling gate held it (Kueue's admission, Berth's
release); GPU allocation over time and its mean over the arrival period;
each tenant's GPU time against its weighted max-min fair share while backlogged
(:func:`solver.simulate.metrics.span_figures`, the timed simulator's definitions); gangs ever
partly bound for more than ``--partial-s`` seconds (some pods bound, others not: a deadlock
risk); gangs never started; pods lost (a pod that vanished unfinished with nothing to replace
it); pods disrupted after they ran (ended without succeeding: reclaimed, preempted, evicted,
their Job suspended), their gangs and the most in one gang; CPU seconds of the system's own
processes and of kube-scheduler.

The same workload through the timed simulator (``simulate_timed``, Berth's engine with the
policy Berth served, the same window and time limit): its prediction of Berth's waits and
utilisation against the real run.

    python3 e2e/bench_compare.py --out e2e/bench_compare.md     # the comparison (~40 min)
    python3 e2e/bench_compare.py --small                        # a few minutes, correctness
    python3 e2e/bench_compare.py --json run.json ...            # keep every row of a run
    python3 e2e/bench_compare.py --report-from a.json b.json --medians-from a.json b.json ...
                                   # the report of saved runs, with each system's medians
    python3 e2e/bench_compare.py --simulate-only --workloads default --report-from run.json
                                   # the simulator's prediction alone, against a saved run

A measurement: it asserts nothing about speed or quality. It exits non-zero if a system could
not run, a create failed, a pod was lost, a gang waits with no reason the cluster gives, or a
gang of Berth's (``berth``, ``berth-kueue``) was partly bound; the other systems' partly bound
gangs are what they do, and are reported.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from admission import constants as c  # noqa: E402
from admission.backends.kueue import KUEUE_GATE_PREFIX  # noqa: E402
from admission.devcluster import (  # noqa: E402
    DevCluster,
    create_nodes,
    kube,
    processes,
)
from admission.devcluster import kueue as dk  # noqa: E402
from admission.devcluster import volcano as dv  # noqa: E402
from admission.devcluster.berth import SAMPLE_POLICY  # noqa: E402
from admission.devcluster.binaries import read_versions  # noqa: E402
from admission.devcluster.nodes import FakeGpuNode  # noqa: E402
from admission.devcluster.processes import group_members  # noqa: E402
from admission.kube import RawWatch  # noqa: E402
from admission.policy import load_policy, to_solver  # noqa: E402
from e2e.bench_pace import cpu_seconds  # noqa: E402
from e2e.berth import berth_webhook  # noqa: E402
from e2e.conftest import E2ECluster  # noqa: E402
from solver.simulate.metrics import PodSpan, percentiles, span_figures  # noqa: E402
from solver.simulate.timed import TimedConfig, simulate_timed  # noqa: E402
from solver.simulate.timed_scenario import Scenario, TimedGang  # noqa: E402
from solver.types import MILLI, Gang, Node, PodRequest  # noqa: E402

SYSTEMS = ("kube-scheduler", "kueue", "volcano", "berth", "berth-kueue")
# the systems under test: a gang of theirs partly bound fails the run; the others' are reported
BERTH_SYSTEMS = frozenset({"berth", "berth-kueue"})
WORKLOADS = ("default", "openb")
KWOK_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
KWOK_JITTER = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"
KWOK_AT_ONCE = ("pod-create", "pod-ready", "pod-init-container-running",
                "pod-init-container-completed", "pod-delete")
GANG_LABEL = "bench.berth.dev/gang"
QUEUE = "bench"  # the LocalQueue in every tenant namespace (Kueue)
WINDOW_S = 2.0  # Berth's batch window here, and the simulator's
# ...and its settle (batch.settleSeconds): both a fifth of the policy's defaults (10 s, 1 s),
# the pods' times being compressed
SETTLE_S = 0.2
TIME_LIMIT_S = 1.0  # Berth's solver time limit here, and the simulator's


# ------------------------------------------------------------------------------------------
# Workloads
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayGang:
    """One gang as every system receives it: ``pods`` pods of ``gpus`` whole GPUs each."""

    name: str  # the Job's name, a DNS label
    tenant: str
    pods: int
    gpus: int
    cpu_milli: int
    memory_mib: int
    models: tuple[str, ...]
    arrival_s: float
    duration_s: float

    @property
    def gpu_total(self) -> int:
        return self.pods * self.gpus


@dataclass(frozen=True)
class Workload:
    name: str
    nodes: tuple[Node, ...]
    weights: Mapping[str, float]
    gangs: tuple[ReplayGang, ...]
    note: str
    compress: float  # every time was divided by this

    @property
    def capacity_gpus(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)

    @property
    def last_arrival_s(self) -> float:
        return max(g.arrival_s for g in self.gangs)

    def quotas(self) -> dict[str, int]:
        """Each tenant's nominal quota: its weight's part of the cluster's GPUs, by largest
        remainder (the sum is the cluster's GPUs; with Kueue's per-model split, each tenant's
        GPUs over all flavors, see :func:`kueue_cluster_queues`)."""
        return split_by_weight(self.capacity_gpus, self.weights)


_DNS = re.compile(r"[^a-z0-9-]+")


def dns_name(name: str) -> str:
    out = _DNS.sub("-", name.lower()).strip("-")[:50].strip("-")
    # a name that had to change gets a checksum of the original, so two never meet
    return out if out == name else f"{out}-{zlib.crc32(name.encode()) % 10**6:06d}"


def from_scenario(name: str, scenario: Scenario, *, compress: float, note: str,
                  max_gangs: int | None = None) -> Workload:
    """The scenario's gangs with shares rounded up to whole GPUs and every time divided by
    ``compress`` (run times at least 2 s)."""
    gangs = []
    for a in scenario.arrivals[:max_gangs]:
        first = a.gang.pods[0]
        if any((p.gpu_count, p.gpu_milli, p.models) != (first.gpu_count, first.gpu_milli,
                                                         first.models) for p in a.gang.pods):
            raise ValueError(f"gang {a.gang.name}: pods of different shapes are not replayed")
        gangs.append(ReplayGang(
            name=dns_name(a.gang.name), tenant=a.gang.tenant, pods=len(a.gang.pods),
            gpus=max(1, first.gpu_count), cpu_milli=first.cpu_milli,
            memory_mib=first.memory_mib, models=tuple(sorted(first.models)),
            arrival_s=round(a.arrival_s / compress, 3),
            duration_s=max(2.0, round(a.duration_s / compress, 3))))
    return Workload(name=name, nodes=scenario.nodes,
                    weights={t.name: t.weight for t in scenario.tenants},
                    gangs=tuple(gangs), note=note, compress=compress)


def default_workload(seed: int, compress: float, max_gangs: int | None = None) -> Workload:
    from solver.simulate.generate import generate

    sc = generate(seed=seed)
    return from_scenario(
        "default", sc, compress=compress, max_gangs=max_gangs,
        note=(f"embedded default, seed {seed}: {len(sc.nodes)} nodes / "
              f"{sum(len(n.gpus) for n in sc.nodes)} GPUs, "
              f"{len(sc.arrivals[:max_gangs])} gangs of {len(sc.tenants)} tenants; "
              f"times / {compress:g}"))


def openb_workload(nodes_n: int, pods_n: int, load: float, compress: float) -> Workload:
    """GPU pods of openb_pod_list_default.csv from the middle of the trace, shares rounded up
    to whole GPUs, arrivals sped up (run times kept) until the GPU time offered within the
    arrival period is ``load`` x the slice's GPUs, then everything divided by ``compress``."""
    from admission.simulate import read_nodes, read_pods
    from solver.simulate.timed_scenario import middle_slice, scenario_from_trace, speedup_for_load

    data = Path(os.environ.get("BERTH_DATA_DIR", REPO.parent / "shared" / "data"))
    d = data / "alibaba-gpu-v2023"
    if not d.is_dir():
        raise SystemExit(f"openb workload: {d} is missing (set BERTH_DATA_DIR to the folder "
                         "holding alibaba-gpu-v2023/)")
    every = read_nodes(d / "openb_node_list_gpu_node.csv")
    nodes = every[:: max(1, len(every) // nodes_n)][:nodes_n]  # a sample of the whole mix
    pods = [replace(p, gpu_milli=MILLI) for p in middle_slice(
        [p for p in read_pods(d / "openb_pod_list_default.csv") if p.num_gpu > 0], pods_n)]
    capacity = sum(len(n.gpus) for n in nodes)
    largest = max(len(n.gpus) for n in nodes)
    pods = [p for p in pods if p.num_gpu <= largest]
    span = max(1, pods[-1].creation_time - pods[0].creation_time)
    lo = speedup_for_load(pods, capacity, load)
    sc = scenario_from_trace(nodes, pods, tenants=4, speedup=lo)
    # the trace's run times are long-tailed (some pods ran for weeks): cut at the arrival span
    cut = span / lo
    sc = replace(sc, arrivals=tuple(replace(a, duration_s=min(a.duration_s, cut))
                                    for a in sc.arrivals))
    return from_scenario(
        "openb", sc, compress=compress,
        note=(f"openb_pod_list_default.csv: {len(pods)} GPU pods from the middle of the trace "
              f"on {nodes_n} GPU nodes ({capacity} GPUs, every "
              f"{max(1, len(every) // nodes_n)}th of the list), 4 tenants by CRC-32 of the "
              f"pod name, arrivals x{lo:.0f} faster for an offered load of {load:g}, run times "
              f"cut at the arrival span; times / {compress:g}"))


# ------------------------------------------------------------------------------------------
# The cluster: nodes, kwok stages, the tenants' namespaces
# ------------------------------------------------------------------------------------------


#: What the kubelet does to a pod being deleted that something still holds by a finalizer (a
#: Job's ``batch.kubernetes.io/job-tracking``): it stops the containers within the grace period
#: and the pod ends Failed; the owner then counts it (a Job's podFailurePolicy sees it), removes
#: its finalizer, and kwok's pod-delete stage deletes it. kwok's general stages have no such
#: step (their pod-delete waits for the finalizers to go, which the Job controller removes only
#: from a pod that ended), so without it an evicted or preempted Job pod kept running until its
#: pod-complete delay and then counted as Succeeded (found 2026-12-05; every run before, 1-14,
#: had that: an eviction freed nothing until the victim's run ended).
POD_TERMINATE_STAGE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: bench-pod-terminate
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
    - key: '.metadata.finalizers'
      operator: 'Exists'
    - key: '.status.phase'
      operator: 'In'
      values: ['Pending', 'Running']
  delay:
    durationMilliseconds: 0
    jitterDurationFrom:
      expressionFrom: '.metadata.deletionTimestamp'
  next:
    statusTemplate: |
      {{ $now := Now }}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 137
            finishedAt: {{ $now | Quote }}
            reason: Error
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Failed
"""


def kwok_pod_stages() -> tuple[str, ...]:
    """kwok's own "general" pod stages (pod-complete after the delay its annotation gives),
    read from the kwok module at the pinned version in the Go module cache, and
    :data:`POD_TERMINATE_STAGE`."""
    version = read_versions()["KWOK_VERSION"]
    out = subprocess.run(["go", "mod", "download", "-json", f"sigs.k8s.io/kwok@{version}"],
                         capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir(),
                         env={**os.environ, "GOFLAGS": "-mod=mod"})
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 or "Dir" not in info:
        raise SystemExit(f"kwok {version}'s stages: go mod download failed: "
                         f"{info.get('Error') or out.stderr.strip()}")
    stages = Path(info["Dir"]) / "kustomize" / "stage" / "pod" / "general"
    docs = tuple(p.read_text() for p in sorted(stages.glob("pod-*.yaml")))
    if not any("pod-complete" in d for d in docs):
        raise SystemExit(f"no pod-complete stage in {stages}")
    return (*docs, POD_TERMINATE_STAGE)


def fake_node(n: Node) -> FakeGpuNode:
    model = n.gpus[0].model if n.gpus else "none"
    domains = {g.nvlink_domain for g in n.gpus}
    return FakeGpuNode(
        name=dns_name(n.name), gpus=len(n.gpus), gpu_product=model,
        gpu_memory_mib=n.gpus[0].memory_mib if n.gpus else 0,
        nvlink_domains=max(1, len(domains)) if None not in domains else max(1, len(n.gpus)),
        topology={k: v for k, v in n.topology.items() if k in ("rack", "block")},
        cpu=f"{n.cpu_milli}m", memory=f"{n.memory_mib}Mi", pods="110")


# ------------------------------------------------------------------------------------------
# Objects in each system's vocabulary
# ------------------------------------------------------------------------------------------


def job_manifest(g: ReplayGang, *, deadline_factor: float, labels: Mapping[str, str] = {},
                 pod_annotations: Mapping[str, str] = {}, scheduler: str | None = None,
                 ignore_disruptions: bool = False) -> dict[str, Any]:
    ms = int(g.duration_s * 1000)
    # kwok's stages start a bound pod at once and end it after its run time
    annotations = {f"{stage}.stage.kwok.x-k8s.io/{key}": "0ms" for stage in KWOK_AT_ONCE
                   for key in ("delay", "jitter-delay")}
    annotations.update({KWOK_DELAY: f"{ms}ms", KWOK_JITTER: f"{ms}ms", **pod_annotations})
    limits = {"nvidia.com/gpu": str(g.gpus)}
    requests = {"cpu": f"{g.cpu_milli}m", "memory": f"{g.memory_mib}Mi", **limits}
    spec: dict[str, Any] = {
        "containers": [{"name": "work", "image": "registry.invalid/bench:1",
                        "resources": {"requests": requests, "limits": limits}}],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "activeDeadlineSeconds": max(1, math.ceil(g.duration_s * deadline_factor)),
    }
    if g.models:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{
                "key": "nvidia.com/gpu.product", "operator": "In", "values": list(g.models)}]}]}}}
    if scheduler:
        spec["schedulerName"] = scheduler
    job: dict[str, Any] = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": g.name, "labels": {GANG_LABEL: g.name, **labels}},
        "spec": {
            "parallelism": g.pods, "completions": g.pods, "backoffLimit": 6,
            "template": {
                "metadata": {"labels": {GANG_LABEL: g.name}, "annotations": annotations},
                "spec": spec}},
    }
    # Without a podFailurePolicy (every run but 16) an evicted pod counts as failed towards
    # backoffLimit; with --ignore-disruptions every Job has the rule docs/reclaim.md recommends
    # and Kubernetes does for preemptible Jobs: a pod with DisruptionTarget is not counted.
    # Either way the Job makes it again after its back-off (10 s, 20 s, 40 s...).
    if ignore_disruptions:
        job["spec"]["podFailurePolicy"] = {"rules": [{
            "action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    return job


class System:
    """One system under test: set up on a fresh cluster, then each gang created its way."""

    name = ""

    def __init__(self, e2e: E2ECluster, workload: Workload, namespaces: Mapping[str, str],
                 work: Path, args: argparse.Namespace) -> None:
        self.e2e, self.workload, self.namespaces = e2e, workload, namespaces
        self.work, self.args = work, args
        self.batch = client.BatchV1Api(e2e.api)
        self.pgids: list[int] = []
        self.policy_file: Path | None = None

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        yield

    def manifest(self, g: ReplayGang, **kw: Any) -> dict[str, Any]:
        """``g``'s Job as every system makes it (``kw``: its own labels, annotations...)."""
        return job_manifest(g, deadline_factor=self.args.deadline_factor,
                            ignore_disruptions=self.args.ignore_disruptions, **kw)

    def job(self, g: ReplayGang) -> dict[str, Any]:
        return self.manifest(g)

    def submit(self, g: ReplayGang) -> None:
        self.batch.create_namespaced_job(self.namespaces[g.tenant], self.job(g))

    def processes(self) -> list[int]:
        return [pid for pgid in self.pgids for pid in group_members(pgid)]

    @contextlib.contextmanager
    def kueue(self, frameworks: tuple[str, ...], *, one_flavor: bool) -> Iterator[None]:
        """Kueue's manager for ``frameworks`` with fair sharing, and the tenants' queues
        (:func:`kueue_cluster_queues`)."""
        assert self.e2e.local is not None
        manager = dk.start_manager(
            self.e2e.api, processes.spawner(self.work / "kueue"), pki=self.e2e.local.pki,
            kubeconfig=self.e2e.kubeconfig, workdir=self.work / "kueue",
            namespace=list(self.namespaces.values()), frameworks=frameworks,
            fair_sharing=True)
        self.pgids.append(manager.record.pgid)
        try:
            kueue_cluster_queues(self.e2e.api, self.workload, self.namespaces,
                                 one_flavor=one_flavor)
            yield
        finally:
            dk.stop_manager(self.e2e.api, manager)


class KubeScheduler(System):
    name = "kube-scheduler"


def kueue_api_version() -> str:
    return dk.KUEUE_API.rsplit("/", 1)[1]


def split_by_weight(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """``total`` split between the tenants by weight, rounded by largest remainder (ties: the
    tenants' order): the parts sum to ``total`` exactly."""
    w = sum(weights.values())
    exact = {t: total * x / w for t, x in weights.items()}
    out = {t: math.floor(v) for t, v in exact.items()}
    order = sorted(weights, key=lambda t: (-(exact[t] - out[t]), list(weights).index(t)))
    for t in order[:total - sum(out.values())]:
        out[t] += 1
    return out


def kueue_flavors(workload: Workload, *, one_flavor: bool = False
                  ) -> list[tuple[str, str | None, list[Node]]]:
    """One ResourceFlavor per GPU model, ``(flavor, model, its nodes)``, in the order a
    ClusterQueue tries them: smallest GPU memory first, then fewest GPUs. ``one_flavor``: one
    flavor ``gpu`` for every node, no node labels (this harness's setup before 2026-12-04)."""
    if one_flavor:
        return [("gpu", None, [n for n in workload.nodes if n.gpus])]
    by_model: dict[str, list[Node]] = {}
    for n in workload.nodes:
        if n.gpus:
            by_model.setdefault(n.gpus[0].model, []).append(n)
    order = sorted(by_model, key=lambda m: (by_model[m][0].gpus[0].memory_mib,
                                            sum(len(n.gpus) for n in by_model[m]), m))
    return [(f"gpu-{dns_name(m)}", m, by_model[m]) for m in order]


def kueue_cluster_queues(api: client.ApiClient, workload: Workload,
                         namespaces: Mapping[str, str], *, one_flavor: bool = False) -> None:
    """One ResourceFlavor per GPU model (``nodeLabels``: the model's
    ``nvidia.com/gpu.product``, as Kueue's docs set up heterogeneous GPUs), one ClusterQueue
    per tenant in one cohort (each flavor's GPUs, CPU and memory split between the tenants by
    weight, borrowing unlimited, reclaimWithinCohort Any, BestEffortFIFO, fair-sharing weight),
    and the LocalQueue ``bench`` in each tenant's namespace.

    One flavor for every GPU (as this harness had until 2026-12-04) makes Kueue's quota blind
    to models: it admitted gangs that need A100/H100 while those nodes were full of pods that
    could run anywhere, their pods waited Unschedulable holding 16 of the 45 GPUs of quota, and
    Kueue then had no quota left for the pods the idle L4 and T4 GPUs could run."""
    flavors = kube.resource(api, dk.KUEUE_API, "ResourceFlavor")
    cqs = kube.resource(api, dk.KUEUE_API, "ClusterQueue")
    lqs = kube.resource(api, dk.KUEUE_API, "LocalQueue")
    cohort_key = "cohort" if kueue_api_version() == "v1beta1" else "cohortName"
    per_flavor = []
    for flavor, model, nodes in kueue_flavors(workload, one_flavor=one_flavor):
        kube.create_once(flavors.create, body={
            "apiVersion": dk.KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": flavor},
            "spec": {"nodeLabels": {"nvidia.com/gpu.product": model}} if model else {}})
        per_flavor.append((flavor, {
            "nvidia.com/gpu": split_by_weight(sum(len(n.gpus) for n in nodes),
                                              workload.weights),
            "cpu": split_by_weight(sum(n.cpu_milli for n in nodes), workload.weights),
            "memory": split_by_weight(sum(n.memory_mib for n in nodes), workload.weights)}))
    for tenant in workload.weights:
        kube.create_once(cqs.create, body={
            "apiVersion": dk.KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": tenant},
            "spec": {
                cohort_key: "bench",
                "namespaceSelector": {},
                "queueingStrategy": "BestEffortFIFO",
                "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"},
                "fairSharing": {"weight": str(workload.weights[tenant])},
                "resourceGroups": [{
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [{"name": flavor, "resources": [
                        {"name": "cpu", "nominalQuota": f"{q['cpu'][tenant]}m"},
                        {"name": "memory", "nominalQuota": f"{q['memory'][tenant]}Mi"},
                        {"name": "nvidia.com/gpu",
                         "nominalQuota": str(q["nvidia.com/gpu"][tenant])}]}
                        for flavor, q in per_flavor]}]}})
        kube.create_once(lqs.create, namespace=namespaces[tenant], body={
            "apiVersion": dk.KUEUE_API, "kind": "LocalQueue", "metadata": {"name": QUEUE},
            "spec": {"clusterQueue": tenant}})


class Kueue(System):
    name = "kueue"

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        with self.kueue(("batch/job",),
                        one_flavor=getattr(self.args, "kueue_one_flavor", False)):
            yield

    def job(self, g: ReplayGang) -> dict[str, Any]:
        return self.manifest(g, labels={c.KUEUE_QUEUE_LABEL: QUEUE})


VOLCANO_CONF = """\
actions: "enqueue, allocate, backfill, reclaim"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


class Volcano(System):
    name = "volcano"

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        conf = self.work / "volcano-scheduler.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(VOLCANO_CONF)
        proc, record = dv.start_scheduler(
            self.e2e.api, processes.spawner(self.work / "volcano"),
            kubeconfig=self.e2e.kubeconfig, workdir=self.work / "volcano", scheduler_conf=conf)
        self.pgids.append(record.pgid)
        queues = kube.resource(self.e2e.api, dv.VOLCANO_API, "Queue")
        self.groups = kube.resource(self.e2e.api, dv.VOLCANO_API, "PodGroup")
        try:
            for tenant, weight in self.workload.weights.items():
                kube.create_once(queues.create, body={
                    "apiVersion": dv.VOLCANO_API, "kind": "Queue", "metadata": {"name": tenant},
                    "spec": {"weight": max(1, round(weight)), "reclaimable": True,
                             "capability": {
                                 "nvidia.com/gpu": str(self.workload.capacity_gpus)}}})
            yield
        finally:
            processes.stop(record, proc)

    def submit(self, g: ReplayGang) -> None:
        ns = self.namespaces[g.tenant]
        self.groups.create(namespace=ns, body={
            "apiVersion": dv.VOLCANO_API, "kind": "PodGroup",
            "metadata": {"name": g.name},
            "spec": {"minMember": g.pods, "queue": g.tenant,
                     "minResources": {"nvidia.com/gpu": str(g.gpu_total)}}})
        self.batch.create_namespaced_job(ns, self.manifest(
            g, scheduler="volcano", pod_annotations={c.VOLCANO_GROUP_ANNOTATION: g.name}))


def berth_policy(workload: Workload, namespaces: Mapping[str, str], *, backend: str,
                 compress: float) -> dict[str, Any]:
    """The sample policy with the workload's tenants (namespace, weight, quota, borrowing
    without limit), its GPU models, whole GPUs only, a 2 s window settling after 0.2 s, a 1 s
    solver limit, and every duration in it (aging, reservations) divided by ``compress`` like
    the workload's."""
    doc: dict[str, Any] = yaml.safe_load(SAMPLE_POLICY.read_text())
    largest = max(len(n.gpus) for n in workload.nodes)
    biggest_gang = max(g.pods for g in workload.gangs)
    doc["tenants"] = [{
        "name": t, "namespaces": [namespaces[t]], "quota": {"gpus": q},
        "weight": workload.weights[t], "borrowing": {"enabled": True},
        "limits": {"maxGpusPerPod": largest, "maxGangSize": max(biggest_gang, 2)},
        "queues": {"kueue": QUEUE, "volcano": t}} for t, q in workload.quotas().items()]
    models = {g.model: g.memory_mib for n in workload.nodes for g in n.gpus}
    # the openb node list gives no GPU memory: such a model is left out (no pod of the replay
    # asks for memory, and allowed models are read from the node labels)
    doc["gpuModels"] = [{"name": m, "memoryMiB": mem} for m, mem in sorted(models.items())
                        if mem > 0]
    doc["sharing"] = {"backend": "none"}
    doc["batch"] = {**doc.get("batch", {}), "windowSeconds": WINDOW_S,
                    "settleSeconds": SETTLE_S, "fastPathClasses": []}
    solver = doc.setdefault("solver", {})
    solver["timeLimitSeconds"] = TIME_LIMIT_S
    weights = solver.setdefault("weights", {})
    weights["agingPerHour"] = weights.get("agingPerHour", 0.5) * compress
    rsv = solver.setdefault("reservations", {})
    rsv["afterSeconds"] = rsv.get("afterSeconds", 300) / compress
    rsv["horizonSeconds"] = rsv.get("horizonSeconds", 21600) / compress
    rsv["holdAheadSeconds"] = rsv.get("holdAheadSeconds", 600) / compress
    queueing = solver.setdefault("queueing", {})
    queueing["shortRunSeconds"] = queueing.get("shortRunSeconds", 3600) / compress
    if queueing.get("keepOrderAfterSeconds", 30) is not None:
        queueing["keepOrderAfterSeconds"] = queueing.get("keepOrderAfterSeconds", 30) / compress
    # Kueue (reclaimWithinCohort: Any) and Volcano (the reclaim action) take lent quota back
    # for a tenant waiting within its quota; so does standalone Berth here (off by default).
    # Without it a tenant that asks for less than its share waits for borrowers to end (openb,
    # 2026-12-04: team-a 0.78 of its fair share against Kueue's 0.97). In front of Kueue,
    # Kueue's own ClusterQueues reclaim (the same as the kueue row's).
    rc = solver.setdefault("reclaim", {})
    rc["enabled"] = backend == "standalone"
    rc["minRuntimeSeconds"] = rc.get("minRuntimeSeconds", 300) / compress
    doc["release"] = {"backend": backend}
    return doc


class Berth(System):
    name = "berth"
    backend = "standalone"

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        doc = berth_policy(self.workload, self.namespaces, backend=self.backend,
                           compress=self.workload.compress)
        with contextlib.ExitStack() as stack:
            if self.backend == "kueue":
                # Kueue's flavors as the kueue system has them: Kueue admits first and
                # writes the flavor's node labels, Berth places within them. (When Berth
                # placed first, a flavor per model sent pods to other nodes than Berth's pin,
                # Unschedulable: openb 15 of 200 never started, default 35 of 140.)
                stack.enter_context(self.kueue(
                    ("pod",), one_flavor=getattr(self.args, "kueue_one_flavor", False)))
            hook = stack.enter_context(berth_webhook(
                self.e2e, self.work / "berth", self.namespaces, serve=True, policy_doc=doc))
            assert hook.record is not None
            self.pgids.append(hook.record.pgid)
            self.policy_file = hook.policy
            self.log = hook.log
            yield

    def job(self, g: ReplayGang) -> dict[str, Any]:
        annotations = {c.ANNOTATION_GANG_SIZE: str(g.pods)}
        if g.models:
            annotations[c.ANNOTATION_GPU_MODELS] = ",".join(g.models)
        return self.manifest(g, pod_annotations=annotations)


class BerthKueue(Berth):
    name = "berth-kueue"
    backend = "kueue"


SYSTEM_CLASSES: dict[str, type[System]] = {
    s.name: s for s in (KubeScheduler, Kueue, Volcano, Berth, BerthKueue)}


# ------------------------------------------------------------------------------------------
# Watching: every pod's bound, Running and end times
# ------------------------------------------------------------------------------------------


@dataclass
class PodSeen:
    gang: str
    bound: float | None = None
    running: float | None = None
    ended: float | None = None
    succeeded: bool = False
    deleted: bool = False
    # each scheduling gate the pod was seen with, and when it was first seen without it
    gates: set[str] = field(default_factory=set)
    ungated: dict[str, float] = field(default_factory=dict)


@dataclass
class Watcher:
    """Pods of the tenants' namespaces as watch events show them, timed from ``t0``."""

    core: client.CoreV1Api
    t0: float
    pods: dict[str, PodSeen] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, ns: str) -> None:
        version: str | None = None
        while not self.stop.is_set():
            w = RawWatch()
            kwargs: dict[str, Any] = {"timeout_seconds": 5, "allow_watch_bookmarks": True}
            if version:
                kwargs["resource_version"] = version
            try:
                for ev in w.stream(self.core.list_namespaced_pod, ns, **kwargs):
                    pod, now = ev["object"], time.monotonic() - self.t0
                    version = pod["metadata"].get("resourceVersion") or version
                    if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._see(ns, pod, now, deleted=ev["type"] == "DELETED")
                    if self.stop.is_set():
                        w.stop()
            except client.ApiException as exc:
                if exc.status != 410:
                    raise
                version = None
            except Exception:  # a dropped connection: watch again from the last version
                time.sleep(0.5)

    def _see(self, ns: str, pod: dict[str, Any], now: float, *, deleted: bool) -> None:
        meta = pod["metadata"]
        gang = (meta.get("labels") or {}).get(GANG_LABEL)
        if not gang:
            return
        key = f"{ns}/{meta['name']}"
        status = pod.get("status") or {}
        phase = status.get("phase")
        with self.lock:
            seen = self.pods.setdefault(key, PodSeen(gang=f"{ns}/{gang}"))
            gates = {g.get("name", "") for g in pod["spec"].get("schedulingGates") or []}
            seen.gates |= gates
            for gone in seen.gates - gates - seen.ungated.keys():
                seen.ungated[gone] = now
            if pod["spec"].get("nodeName") and seen.bound is None:
                seen.bound = now
            if phase == "Running" and seen.running is None:
                seen.running = now
            if phase in ("Succeeded", "Failed") and seen.ended is None:
                seen.ended = now
                seen.succeeded = phase == "Succeeded"
                if seen.running is None:  # ran and ended between two events
                    seen.running = now
            if deleted:
                seen.deleted = True
                if seen.ended is None:
                    seen.ended = now


# ------------------------------------------------------------------------------------------
# One run
# ------------------------------------------------------------------------------------------


@dataclass
class GangResult:
    key: str
    tenant: str
    pods: int
    gpus: int
    arrival_s: float
    start_s: float | None
    partial_s: float  # longest stretch with some but not all of its live pods bound
    ran_apart: bool = False  # every pod ran, never all of them at once

    @property
    def settled(self) -> bool:
        """Nothing more will happen to it: started whole, or its pods ran apart."""
        return self.start_s is not None or self.ran_apart


def pods_by_gang(seen: Mapping[str, PodSeen]) -> dict[str, list[PodSeen]]:
    """The pods seen, by ``namespace/gang``."""
    by_gang: dict[str, list[PodSeen]] = {}
    for p in seen.values():
        by_gang.setdefault(p.gang, []).append(p)
    return by_gang


def gang_results(workload: Workload, namespaces: Mapping[str, str], created: Mapping[str, float],
                 seen: Mapping[str, PodSeen], end: float) -> list[GangResult]:
    by_gang = pods_by_gang(seen)
    out = []
    for g in workload.gangs:
        key = f"{namespaces[g.tenant]}/{g.name}"
        pods = by_gang.get(key, [])
        arrival = created.get(key)
        if arrival is None:
            continue
        # the first moment g.pods of its pods were Running together
        events = sorted([(p.running, 1) for p in pods if p.running is not None]
                        + [(p.ended, -1) for p in pods if p.ended is not None
                           and p.running is not None], key=lambda e: (e[0], -e[1]))
        live, start = 0, None
        for t, d in events:
            live += d
            if live >= g.pods:
                start = t
                break
        # partly bound: between the first and the last of its pods' binds (each attempt)
        bound = sorted(p.bound for p in pods if p.bound is not None)
        partial = 0.0
        if g.pods > 1 and bound:
            partial = (bound[g.pods - 1] if len(bound) >= g.pods else end) - bound[0]
        ran = sum(1 for p in pods if p.running is not None)
        out.append(GangResult(key, g.tenant, g.pods, g.gpus, arrival, start, partial,
                              ran_apart=start is None and ran >= g.pods))
    return out


def p99_to_end(results: Sequence[GangResult], end: float) -> float | None:
    """The p99 wait with each gang that never started counted as waiting until the run ended
    (``end``, a lower bound of its wait): over started gangs alone, a system that leaves its
    hardest gangs unstarted would show a shorter p99 for it."""
    waits = [(r.start_s if r.start_s is not None else end) - r.arrival_s for r in results]
    return percentiles(waits)["p99"] if waits else None


def gate_waits(workload: Workload, namespaces: Mapping[str, str], created: Mapping[str, float],
               seen: Mapping[str, PodSeen]) -> dict[str, dict[str, float]]:
    """For each gang, each scheduling gate its pods carried: seconds from its arrival until as
    many of its pods as it has were seen without that gate (Kueue's admission, Berth's
    release...), so a wait can be split between the gates that held it. A gang with pods still
    gated has no entry for that gate."""
    by_gang = pods_by_gang(seen)
    out: dict[str, dict[str, float]] = {}
    for g in workload.gangs:
        key = f"{namespaces[g.tenant]}/{g.name}"
        arrival = created.get(key)
        if arrival is None:
            continue
        pods = by_gang.get(key, [])
        gates: dict[str, float] = {}
        for gate in sorted({x for p in pods for x in p.gates}):
            times = sorted(p.ungated[gate] for p in pods if gate in p.ungated)
            if len(times) >= g.pods:
                gates[gate] = round(times[g.pods - 1] - arrival, 3)
        if gates:
            out[g.name] = gates
    return out


def disruptions(seen: Mapping[str, PodSeen]) -> dict[str, int]:
    """Pods that ran and ended without succeeding (reclaimed, preempted, evicted, their Job
    suspended: kwok ends a pod only by completing it or, once it is deleted, by failing it),
    the gangs they belonged to, and the most pods any one gang lost that way. (Runs 15-16
    counted only pods that carried ``DisruptionTarget``, which a suspended Job's pods do not.)"""
    per_gang: dict[str, int] = {}
    for p in seen.values():
        if p.running is not None and p.ended is not None and not p.succeeded:
            per_gang[p.gang] = per_gang.get(p.gang, 0) + 1
    return {"pods_disrupted": sum(per_gang.values()), "gangs_disrupted": len(per_gang),
            "most_pods_disrupted_in_a_gang": max(per_gang.values(), default=0)}


def spans_of(workload: Workload, namespaces: Mapping[str, str], created: Mapping[str, float],
             seen: Mapping[str, PodSeen]) -> list[PodSpan]:
    """Per pod of every gang: waiting from its gang's create call, holding from Running to
    its end; pods never seen wait until the cut-off."""
    spans: list[PodSpan] = []
    by_gang = pods_by_gang(seen)
    for g in workload.gangs:
        key = f"{namespaces[g.tenant]}/{g.name}"
        arrival = created.get(key)
        if arrival is None:
            continue
        ran = sorted((p for p in by_gang.get(key, []) if p.running is not None),
                     key=lambda p: p.running or 0)
        milli = g.gpus * MILLI
        for i in range(g.pods):
            if i < len(ran):
                spans.append(PodSpan(g.tenant, milli, arrival, ran[i].running, ran[i].ended))
            else:
                spans.append(PodSpan(g.tenant, milli, arrival, None, None))
        for p in ran[g.pods:]:  # replacements of preempted pods: held, not waited for
            spans.append(PodSpan(g.tenant, milli, p.running or arrival, p.running, p.ended))
    return spans


def run_system(workload: Workload, system_name: str, args: argparse.Namespace,
               stages: tuple[str, ...]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"berth-compare-{system_name}-"))
    cluster = DevCluster(workdir=work / "cluster", kwok_stages=stages)
    cluster.start()
    try:
        api = config.new_client_from_config(str(cluster.kubeconfig))
        core = client.CoreV1Api(api)
        fleet = [fake_node(n) for n in workload.nodes]
        create_nodes(core, fleet)
        e2e = E2ECluster(api=api, kubeconfig=cluster.kubeconfig, nodes=fleet, local=cluster)
        namespaces = {t: kube.ensure_namespace(core, t) for t in workload.weights}
        system = SYSTEM_CLASSES[system_name](e2e, workload, namespaces, work, args)
        scheduler_pid = next(r.pid for r in cluster.records if r.name == "kube-scheduler")
        with system.running():
            return _replay(workload, system, core, namespaces, args, scheduler_pid)
    finally:
        if args.keep:
            cluster.stop()
            print(f"  kept {work}", flush=True)
        else:
            cluster.wipe()


def _replay(workload: Workload, system: System, core: client.CoreV1Api,
            namespaces: Mapping[str, str], args: argparse.Namespace,
            scheduler_pid: int) -> dict[str, Any]:
    own0 = cpu_seconds(system.processes())
    sched0 = cpu_seconds([scheduler_pid])
    t0 = time.monotonic()
    watcher = Watcher(core, t0)
    threads = [threading.Thread(target=watcher.run, args=(ns,), daemon=True)
               for ns in namespaces.values()]
    for t in threads:
        t.start()
    created: dict[str, float] = {}
    failed: list[str] = []
    lock = threading.Lock()

    def submit(g: ReplayGang) -> None:
        delay = g.arrival_s - (time.monotonic() - t0)
        if delay > 0:
            time.sleep(delay)
        now = time.monotonic() - t0
        try:
            system.submit(g)
        except client.ApiException as exc:
            with lock:
                failed.append(f"{g.name}: {exc.status} {exc.reason}: {str(exc.body)[:300]}")
            return
        with lock:
            created[f"{namespaces[g.tenant]}/{g.name}"] = now

    with ThreadPoolExecutor(max_workers=8) as pool:
        # submitted in arrival order: each worker sleeps until its gang's time
        list(pool.map(submit, sorted(workload.gangs, key=lambda g: g.arrival_s)))
    deadline = time.monotonic() + args.drain_s
    while time.monotonic() < deadline:
        with watcher.lock:
            seen = dict(watcher.pods)
        results = gang_results(workload, namespaces, created, seen, time.monotonic() - t0)
        if len(results) == len(created) and all(r.settled for r in results):
            break
        time.sleep(1)
    end = time.monotonic() - t0
    own = cpu_seconds(system.processes()) - own0
    sched = cpu_seconds([scheduler_pid]) - sched0
    watcher.stop.set()
    with watcher.lock:
        seen = dict(watcher.pods)
    results = gang_results(workload, namespaces, created, seen, end)
    spans = spans_of(workload, namespaces, created, seen)
    # lost: a gang whose pods all vanished unfinished and whose Job will not run it again
    lost, lost_gangs = _lost_pods(core, system.batch, namespaces, seen)
    unstarted = {r.key for r in results if not r.settled}
    reasons = waiting_reasons(core, system.batch, namespaces, unstarted)
    waits = [r.start_s - r.arrival_s for r in results if r.start_s is not None]
    figures = span_figures(spans, capacity_milli=workload.capacity_gpus * MILLI,
                           weights=workload.weights, cutoff_s=workload.last_arrival_s)
    by_size: dict[str, list[float]] = {}
    for r in results:
        if r.start_s is not None:
            size = "1 GPU" if r.pods * r.gpus == 1 else (
                "2-8 GPUs" if r.pods * r.gpus <= 8 else ">8 GPUs")
            by_size.setdefault(size, []).append(r.start_s - r.arrival_s)
    series = _allocation_series(spans, workload.capacity_gpus * MILLI, end)
    return {
        "system": system.name, "workload": workload.name, "gangs": len(workload.gangs),
        "created": len(created), "create_failed": len(failed),
        "first_failures": failed[:3],
        "started": len(waits), "never_started": len(results) - len(waits),
        "ran_apart": sum(1 for r in results if r.ran_apart),
        "wait_s": percentiles(waits) if waits else {},
        "wait_mean_s": statistics.fmean(waits) if waits else None,
        "wait_p99_to_end_s": p99_to_end(results, end),
        "wait_by_size_p99_s": {k: percentiles(v)["p99"] for k, v in sorted(by_size.items())},
        # each started gang's wait (its name without the namespace), for the simulator's
        "gang_waits_s": {r.key.split("/", 1)[1]: round(r.start_s - r.arrival_s, 3)
                         for r in results if r.start_s is not None},
        # and how long each gate held it (Kueue's admission, Berth's release)
        "gang_gates_s": gate_waits(workload, namespaces, created, seen),
        "gpu_allocated": figures.mean_utilisation,
        "tenants": {t: {"fair_ratio": figures.fair_ratio(t),
                        "gpu_hours": figures.held_milli_s[t] / MILLI / 3600}
                    for t in workload.weights},
        "worst_fair_ratio": min(figures.fair_ratio(t) for t in workload.weights),
        "jain": figures.jain,
        "partly_bound": sum(1 for r in results if r.partial_s > args.partial_s),
        "partly_bound_max_s": max((r.partial_s for r in results), default=0.0),
        "pods_lost": lost,
        **disruptions(seen),
        "lost_gangs": lost_gangs,
        "waiting_reasons": reasons,
        "waiting_without_reason": sorted(k for k, v in reasons.items() if not v),
        "system_cpu_s": round(own, 1),
        "kube_scheduler_cpu_s": round(sched, 1),
        "end_s": round(end, 1),
        "series": series,
        "load_1m": round(os.getloadavg()[0], 1),
        "policy": str(system.policy_file) if system.policy_file else None,
    }


def waiting_reasons(core: client.CoreV1Api, batch: client.BatchV1Api,
                    namespaces: Mapping[str, str], gangs: set[str]) -> dict[str, str]:
    """For each gang that never started (and whose pods did not all run apart), why it waits
    as the cluster says it: its pods'
    scheduling conditions (kube-scheduler's Unschedulable, Berth's ``berth.dev/Waiting``, a
    scheduling gate), or its Job held suspended (Kueue); empty when nothing says why."""
    out: dict[str, str] = {}
    workloads: dict[str, list[dict[str, Any]]] = {}  # Kueue's, read once per namespace
    for key in sorted(gangs):
        ns, name = key.split("/", 1)
        why: list[str] = []
        with contextlib.suppress(client.ApiException):
            job = batch.read_namespaced_job(name, ns)
            if job.spec.suspend:
                why.append("Job suspended (queued)")
        for pod in core.list_namespaced_pod(ns, label_selector=f"{GANG_LABEL}={name}").items:
            gates = [g.name for g in pod.spec.scheduling_gates or []]
            if gates:
                why.append("gated by " + ",".join(gates))
            for cond in pod.status.conditions or []:
                if cond.status != "True" and (cond.reason or cond.message):
                    why.append(f"{cond.type}: {cond.reason}: {(cond.message or '')[:120]}")
            if any(g.startswith(KUEUE_GATE_PREFIX) for g in gates):
                if ns not in workloads:
                    workloads[ns] = kueue_workloads(core.api_client, ns)
                why.extend(kueue_workload_says(workloads[ns], pod.metadata.uid))
        out[key] = "; ".join(dict.fromkeys(why))
    return out


def kueue_workloads(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    """Kueue's Workloads in ``namespace``; none when Kueue's API is absent."""
    group, version = dk.KUEUE_API.split("/", 1)
    try:
        return client.CustomObjectsApi(api).list_namespaced_custom_object(
            group, version, namespace, "workloads")["items"]
    except client.ApiException:
        return []


def kueue_workload_says(workloads: Sequence[Mapping[str, Any]], pod_uid: str) -> list[str]:
    """What the Kueue Workload that owns a gated pod says of itself (a pod group's Workload
    lists every pod as an owner): ``Workload <name>: <type>=<status>: <reason>: <message>``
    for its QuotaReserved condition and every condition that is not True; empty when no
    Workload owns the pod yet."""
    says = []
    for wl in workloads:
        if not any(o.get("uid") == pod_uid for o in wl["metadata"].get("ownerReferences", [])):
            continue
        for cond in wl.get("status", {}).get("conditions", []):
            if cond.get("status") != "True" or cond.get("type") == "QuotaReserved":
                says.append(f"Workload {wl['metadata']['name']}: {cond.get('type')}="
                            f"{cond.get('status')}: {cond.get('reason')}: "
                            f"{(cond.get('message') or '')[:200]}")
    return says


def _lost_pods(core: client.CoreV1Api, batch: client.BatchV1Api,
               namespaces: Mapping[str, str], seen: Mapping[str, PodSeen]
               ) -> tuple[int, dict[str, str]]:
    """Pods that were deleted unfinished while their Job shows no pod to replace them, nor
    completion, and has given up: work nobody will run; and their gangs, each with what its
    Job says of itself. A Job's replacement (same gang) makes up for a deletion."""
    lost = 0
    alive: dict[str, int] = {}
    for ns in namespaces.values():
        for p in core.list_namespaced_pod(ns).items:
            gang = (p.metadata.labels or {}).get(GANG_LABEL)
            if gang:
                alive[f"{ns}/{gang}"] = alive.get(f"{ns}/{gang}", 0) + 1
    gone: dict[str, int] = {}
    done: dict[str, int] = {}
    for p in seen.values():
        if p.deleted and not p.succeeded:
            gone[p.gang] = gone.get(p.gang, 0) + 1
        if p.succeeded:
            done[p.gang] = done.get(p.gang, 0) + 1
    gangs: dict[str, str] = {}
    for gang, n in sorted(gone.items()):
        if alive.get(gang) or done.get(gang):
            continue
        ns, name = gang.split("/", 1)
        try:
            job = batch.read_namespaced_job(name, ns)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            job = None
        if job is None or _job_gave_up(job):
            lost += n
            gangs[gang] = _job_state(job)
    return lost, gangs


def _job_gave_up(job: client.V1Job) -> bool:
    """Whether a Job will not run its gang again: finished (Failed, or Complete without a pod
    seen to succeed). A Job that is neither still makes its pods, maybe after its back-off
    delay, so its work is not lost."""
    return any(c.type in ("Failed", "Complete") and c.status == "True"
               for c in job.status.conditions or [])


def _job_state(job: client.V1Job | None) -> str:
    """What a lost gang's Job says of itself (its counts and conditions), for the report."""
    if job is None:
        return "Job gone"
    st = job.status
    conds = "; ".join(f"{c.type}={c.status} {c.reason or ''}: {(c.message or '')[:100]}"
                      for c in st.conditions or [])
    return (f"active={st.active or 0} succeeded={st.succeeded or 0} failed={st.failed or 0}"
            + (f"; {conds}" if conds else ""))


def _allocation_series(spans: Sequence[PodSpan], capacity_milli: int, end: float
                       ) -> list[tuple[float, float]]:
    """Allocated GPU share, sampled every second from 0 to ``end``."""
    steps = max(1, int(end))
    held = [0.0] * (steps + 1)
    for s in spans:
        if s.start_s is None:
            continue
        a = math.ceil(s.start_s)
        b = int(min(steps, math.floor(s.end_s if s.end_s is not None else end)))
        for i in range(a, b + 1):
            held[i] += s.milli
    return [(float(i), round(h / capacity_milli, 4)) for i, h in enumerate(held)]


# ------------------------------------------------------------------------------------------
# The simulator's prediction of the same workload
# ------------------------------------------------------------------------------------------


def simulated(workload: Workload, policy_file: Path, args: argparse.Namespace
              ) -> dict[str, Any]:
    """The workload through ``simulate_timed`` with Berth's engine, under the policy Berth
    served (its tenants, quotas and weights as ``to_solver`` gives them to the controller)."""
    policy, tenants = to_solver(load_policy(policy_file))
    by_name = {t.name: t for t in tenants}
    arrivals = []
    for g in sorted(workload.gangs, key=lambda g: (g.arrival_s, g.name)):
        pods = tuple(PodRequest(name=f"{g.name}-{i}", cpu_milli=g.cpu_milli,
                                memory_mib=g.memory_mib, gpu_count=g.gpus, gpu_milli=MILLI,
                                models=frozenset(g.models)) for i in range(g.pods))
        arrivals.append(TimedGang(Gang(name=g.name, tenant=g.tenant, pods=pods),
                                  g.arrival_s, g.duration_s))
    sc = Scenario(nodes=workload.nodes, tenants=tuple(by_name[t] for t in workload.weights),
                  arrivals=tuple(arrivals), policy=policy)
    r = simulate_timed(sc, TimedConfig(policy="cpsat", window_s=WINDOW_S, settle_s=SETTLE_S,
                                       time_limit_s=TIME_LIMIT_S, seed=args.seed,
                                       deadline_factor=args.deadline_factor,
                                       interference_aware=True, label="simulated berth"))
    waits = list(r.waits_s)
    return {"system": "simulated berth", "workload": workload.name,
            "gang_waits_s": {o.gang: round(o.wait_s, 3) for o in r.outcomes
                             if o.wait_s is not None},
            "started": len(waits), "never_started": len(r.outcomes) - len(waits),
            "wait_s": r.wait_percentiles_s, "wait_mean_s": statistics.fmean(waits) if waits
            else None, "gpu_allocated": r.mean_utilisation,
            "worst_fair_ratio": min(t.fair_ratio for t in r.tenants), "jain": r.jain}


# ------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------


def simulate_only(workload: Workload, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`simulated` under the policy the ``berth`` system serves this workload, with no
    cluster (``--simulate-only``)."""
    doc = berth_policy(workload, {t: t for t in workload.weights}, backend="standalone",
                       compress=workload.compress)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "policy.yaml"
        path.write_text(yaml.safe_dump(doc))
        return simulated(workload, path, args)


def _f(x: object, fmt: str = ".0f") -> str:
    return "-" if x is None else format(x, fmt) if isinstance(x, int | float) else str(x)


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    head = ("| system | started | wait p50 s | p90 s | p99 s | p99 s, unstarted to the end "
            "| mean s | GPU allocated % "
            "| worst tenant / fair share | Jain | partly bound / ran apart | pods lost "
            "| system CPU s "
            "| kube-scheduler CPU s |")
    out = [head, "|" + "---|" * 14]
    for r in rows:
        w = r.get("wait_s") or {}
        out.append(
            f"| {r['system']} | {r['started']}/{r['started'] + r['never_started']} "
            f"| {_f(w.get('p50'))} | {_f(w.get('p90'))} | {_f(w.get('p99'))} "
            f"| {_f(r.get('wait_p99_to_end_s'))} | {_f(r.get('wait_mean_s'))} "
            f"| {_f(100 * r['gpu_allocated'], '.1f')} "
            f"| {_f(r['worst_fair_ratio'], '.2f')} | {_f(r['jain'], '.3f')} "
            f"| {_f(r.get('partly_bound'))} / {_f(r.get('ran_apart'))} "
            f"| {_f(r.get('pods_lost'))} "
            f"| {_f(r.get('system_cpu_s'), '.1f')} | {_f(r.get('kube_scheduler_cpu_s'), '.1f')} |")
    return out


#: The columns of :func:`medians_table`: (heading, how a row gives it, format).
MEDIAN_COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], float | None], str], ...] = (
    ("p99 wait s", lambda r: (r.get("wait_s") or {}).get("p99"), ".0f"),
    ("p99 wait s, unstarted to the end", lambda r: r.get("wait_p99_to_end_s"), ".0f"),
    ("mean wait s", lambda r: r.get("wait_mean_s"), ".0f"),
    ("GPU allocated %", lambda r: 100 * r["gpu_allocated"], ".1f"),
    ("worst tenant / fair share", lambda r: r["worst_fair_ratio"], ".2f"),
)


def saved_run(spec: str) -> list[dict[str, Any]]:
    """The rows one run saved with ``--json``: ``PATH``, or ``PATH:SYSTEM,...`` for only those
    systems' rows (``--medians-from``)."""
    path, _, systems = spec.partition(":")
    keep = {s for s in systems.split(",") if s}
    return [r for r in saved_rows(Path(path), "--medians-from")
            if not keep or r["system"] in keep]


def saved_rows(path: Path, flag: str) -> list[dict[str, Any]]:
    """Every row of a file written by ``--json``; a file that is not one exits with a message
    naming ``flag`` and the file."""
    try:
        rows = json.loads(path.read_text())
    except OSError as exc:
        raise SystemExit(f"{flag}: cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise SystemExit(f"{flag}: {path} is not JSON ({exc}); give a file written by "
                         "--json") from None
    if not isinstance(rows, list) or not all(_is_row(r) for r in rows):
        raise SystemExit(f"{flag}: {path} is not a list of rows with a system, a workload and "
                         f"the figures {', '.join(ROW_FIGURES)}; give a file written by --json")
    return rows


#: What every saved row (a system's, or the simulator's) holds as a number.
ROW_FIGURES = ("started", "never_started", "gpu_allocated", "worst_fair_ratio", "jain")


def _is_row(r: object) -> bool:
    return (isinstance(r, dict) and isinstance(r.get("system"), str)
            and isinstance(r.get("workload"), str)
            and all(isinstance(r.get(k), int | float) and not isinstance(r.get(k), bool)
                    for k in ROW_FIGURES))


def medians_table(runs: Sequence[Sequence[dict[str, Any]]], workload: str) -> list[str]:
    """One row per system of ``workload`` over several runs (each a list of rows saved with
    ``--json``): the median of each headline figure with its range, gangs never started and
    pods lost summed. One run is not a distribution; this is what to compare systems by."""
    by_system: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        for r in run:
            if r.get("workload") == workload and r["system"] != "simulated berth":
                by_system.setdefault(r["system"], []).append(r)
    if not by_system:
        return []
    out = ["| system | runs | " + " | ".join(f"{h} (median, range)" for h, _, _ in
                                               MEDIAN_COLUMNS)
           + " | never started (all runs) | pods lost (all runs) |",
           "|" + "---|" * (4 + len(MEDIAN_COLUMNS))]
    for system, rows in by_system.items():
        cells = []
        for _, get, fmt in MEDIAN_COLUMNS:
            vals = [v for v in (get(r) for r in rows) if v is not None]
            some = "" if len(vals) == len(rows) else f" [{len(vals)} of {len(rows)} runs]"
            cells.append("-" if not vals else f"{_f(statistics.median(vals), fmt)} "
                         f"({_f(min(vals), fmt)}-{_f(max(vals), fmt)}){some}")
        out.append(f"| {system} | {len(rows)} | " + " | ".join(cells)
                   + f" | {sum(r['never_started'] for r in rows)} "
                   f"| {sum(r.get('pods_lost') or 0 for r in rows)} |")
    return out


def detail_tables(rows: Sequence[dict[str, Any]], tenants: Sequence[str]) -> list[str]:
    """Each tenant's GPU time over its fair share, the p99 wait by gang size, and the pods
    disrupted (reclaimed or preempted) after they ran (rows saved before it was counted: -)."""
    real = [r for r in rows if "tenants" in r]
    sizes = sorted({k for r in real for k in r["wait_by_size_p99_s"]})
    out = ["| system | " + " | ".join(f"{t} / fair" for t in tenants) + " | "
           + " | ".join(f"p99 wait {k} s" for k in sizes)
           + " | pods disrupted (gangs, most in one gang) |",
           "|" + "---|" * (2 + len(tenants) + len(sizes))]
    for r in real:
        hit = "-" if "pods_disrupted" not in r else (
            f"{r['pods_disrupted']} ({r['gangs_disrupted']}, "
            f"{r['most_pods_disrupted_in_a_gang']})")
        out.append(f"| {r['system']} | "
                   + " | ".join(_f(r["tenants"][t]["fair_ratio"], ".2f") for t in tenants)
                   + " | " + " | ".join(_f(r["wait_by_size_p99_s"].get(k)) for k in sizes)
                   + f" | {hit} |")
    return out


def prediction(rows: Sequence[dict[str, Any]]) -> list[str]:
    """How far the simulator's prediction of Berth is from Berth's real run."""
    real = next((r for r in rows if r["system"] == "berth"), None)
    sim = next((r for r in rows if r["system"] == "simulated berth"), None)
    if real is None or sim is None or not real.get("wait_s") or not sim.get("wait_s"):
        return []
    parts = [f"{q} wait {sim['wait_s'][q]:.0f} s simulated against {real['wait_s'][q]:.0f} s "
             f"real" for q in ("p50", "p90", "p99")]
    parts.append(f"GPU allocated {100 * sim['gpu_allocated']:.1f} % against "
                 f"{100 * real['gpu_allocated']:.1f} %")
    parts.append(f"worst tenant {sim['worst_fair_ratio']:.2f} against "
                 f"{real['worst_fair_ratio']:.2f}")
    return ["Simulator against the real run (Berth): " + "; ".join(parts) + "."]


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for r in rows:
        if r.get("series"):
            xs, ys = zip(*r["series"], strict=True)
            ax.plot(xs, [100 * y for y in ys], label=r["system"], linewidth=1)
    ax.set_xlabel("seconds (compressed time)")
    ax.set_ylabel("GPUs allocated %")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compress", type=float, default=30.0,
                    help="default workload: divide every arrival and run time by this")
    ap.add_argument("--openb-compress", type=float, default=40.0,
                    help="openb workload: divide every arrival and run time by this")
    ap.add_argument("--max-gangs", type=int, default=None,
                    help="replay only the first N gangs of the default workload")
    ap.add_argument("--openb-nodes", type=int, default=12)
    ap.add_argument("--openb-pods", type=int, default=200)
    ap.add_argument("--openb-load", type=float, default=1.3)
    ap.add_argument("--deadline-factor", type=float, default=1.5)
    ap.add_argument("--ignore-disruptions", action="store_true",
                    help="every Job's podFailurePolicy ignores a pod with DisruptionTarget "
                    "(not counted towards backoffLimit, as docs/reclaim.md recommends); "
                    "default: the Jobs of every run but 16, which count it")
    ap.add_argument("--drain-s", type=float, default=300,
                    help="after the last arrival, wait at most this long for every gang to "
                    "start")
    ap.add_argument("--partial-s", type=float, default=5.0,
                    help="a gang partly bound for longer than this counts as partly bound")
    ap.add_argument("--small", action="store_true",
                    help="a few minutes: the first 16 gangs of the default workload, "
                    "compressed 40x, every system")
    ap.add_argument("--no-simulate", action="store_true")
    ap.add_argument("--simulate-only", action="store_true",
                    help="no cluster: only the simulator's prediction of Berth for each "
                    "workload (under the policy the berth system would serve), against the "
                    "berth row of --report-from where one is given")
    ap.add_argument("--kueue-one-flavor", action="store_true",
                    help="the kueue system's ClusterQueues with one ResourceFlavor for every "
                    "GPU (the setup before 2026-12-04; its rows are named 'kueue (one "
                    "flavor)'); berth-kueue too")
    ap.add_argument("--keep", action="store_true", help="keep each run's cluster directory")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown report here")
    ap.add_argument("--json", type=Path, default=None, help="write every row here")
    ap.add_argument("--report-from", type=Path, nargs="+", default=None, metavar="JSON",
                    help="run nothing: write the report of rows saved with --json (later "
                    "files' rows replace earlier ones of the same workload and system)")
    ap.add_argument("--medians-from", nargs="+", default=None, metavar="JSON[:SYSTEMS]",
                    help="with --report-from: add to each workload a table of each system's "
                    "medians over these files, one run each; JSON:berth,kueue takes only "
                    "those systems' rows of that file (a run whose other rows are of an "
                    "older setup)")
    args = ap.parse_args(argv)
    if args.medians_from and args.report_from is None:
        ap.error("--medians-from renders saved runs: give --report-from too")
    if args.small:
        args.workloads, args.max_gangs, args.compress = "default", 16, 40.0
        args.drain_s = min(args.drain_s, 120)
    systems = [s for s in args.systems.split(",") if s]
    workloads = [w for w in args.workloads.split(",") if w]
    for flag, got, known in (("--systems", systems, SYSTEMS), ("--workloads", workloads,
                                                                WORKLOADS)):
        bad = sorted(set(got) - set(known))
        if bad:
            ap.error(f"{flag}: unknown {', '.join(bad)}; choose from {', '.join(known)}")
    if not (args.compress > 0 and args.openb_compress > 0):
        ap.error("--compress and --openb-compress must be > 0")
    started = time.monotonic()
    saved: dict[tuple[str, str], dict[str, Any]] = {}
    for path in args.report_from or ():
        for row in saved_rows(path, "--report-from"):
            saved[(row["workload"], row["system"])] = row
    if args.simulate_only:
        for wname in workloads:
            wl = (default_workload(args.seed, args.compress, args.max_gangs)
                  if wname == "default" else
                  openb_workload(args.openb_nodes, args.openb_pods, args.openb_load,
                                 args.openb_compress))
            sim = simulate_only(wl, args)
            print(f"== {wl.name}: {wl.note}\n{json.dumps(sim)}")
            real = saved.get((wl.name, "berth"))
            print("\n".join(prediction([real, sim]) if real else []), flush=True)
        return 0
    stages = kwok_pod_stages() if args.report_from is None else ()
    command = f"`python3 e2e/bench_compare.py {' '.join(argv or sys.argv[1:])}`"
    report = [f"Generated by {command} on {time.strftime('%Y-%m-%d %H:%M')} UTC."
              if args.report_from is None else
              f"Rendered by {command} on {time.strftime('%Y-%m-%d %H:%M')} UTC from the rows "
              "those runs saved (`--json`)."]
    all_rows: list[dict[str, Any]] = []
    failures = 0
    for wname in workloads:
        wl = (default_workload(args.seed, args.compress, args.max_gangs) if wname == "default"
              else openb_workload(args.openb_nodes, args.openb_pods, args.openb_load,
                                  args.openb_compress))
        print(f"== {wl.name}: {wl.note}", flush=True)
        rows: list[dict[str, Any]] = [r for (w, _), r in saved.items() if w == wl.name]
        for name in systems if args.report_from is None else ():
            t = time.monotonic()
            try:
                row = run_system(wl, name, args, stages)
                if args.kueue_one_flavor and name == "kueue":
                    row["system"] += " (one flavor)"
            except Exception as exc:  # one system's failure must not lose the others' rows
                failures += 1
                print(f"  {name}: FAILED: {type(exc).__name__}: {exc}", flush=True)
                continue
            row["wall_s"] = round(time.monotonic() - t, 1)
            rows.append(row)
            brief = {k: row[k] for k in ("started", "never_started", "wait_s", "gpu_allocated",
                                         "worst_fair_ratio", "partly_bound", "pods_lost",
                                         "pods_disrupted", "gangs_disrupted",
                                         "system_cpu_s", "wall_s")}
            print(f"  {name}: {json.dumps(brief)}", flush=True)
            if row["pods_lost"] or (name in BERTH_SYSTEMS and row["partly_bound"]) or \
                    row["create_failed"] or row["waiting_without_reason"]:
                failures += 1
                for gang, why in row.get("lost_gangs", {}).items():
                    print(f"  {name}: lost {gang}: {why}", flush=True)
                print(f"  {name}: lost {row['pods_lost']} pods, {row['partly_bound']} gangs "
                      f"partly bound, {row['create_failed']} creates failed "
                      f"{row['first_failures']}, waiting without a reason: "
                      f"{row['waiting_without_reason']}", flush=True)
        berth_rows = [r for r in rows if r["system"] == "berth" and r.get("policy")]
        if berth_rows and not args.no_simulate and args.report_from is None:
            sim = simulated(wl, Path(berth_rows[0]["policy"]), args)
            rows.append(sim)
            print(f"  simulated: {json.dumps({k: sim[k] for k in ('wait_s', 'gpu_allocated')})}",
                  flush=True)
        all_rows.extend(rows)
        report += ["", f"## {wl.name}", "", wl.note + ".", "", *table(rows), "",
                   *detail_tables(rows, list(wl.weights)), "", *prediction(rows)]
        if args.medians_from:
            runs = [saved_run(spec) for spec in args.medians_from]
            lines = medians_table(runs, wl.name)
            if lines:
                used = [spec for spec, run in zip(args.medians_from, runs, strict=True)
                        if any(r.get("workload") == wl.name for r in run)]
                report += ["", "Each system's medians over the runs saved in "
                           + ", ".join(f"`{spec}`" for spec in used)
                           + " (`file:systems` takes only those systems' rows):", "", *lines]
        if args.out is not None and rows:
            png = args.out.with_name(f"{args.out.stem}_{wl.name}.png")
            plot([r for r in rows if "series" in r], png, f"{wl.name}: GPUs allocated")
            report += ["", f"![{wl.name}]({png.name})"]
    if args.report_from is None:
        report += ["", f"{round(time.monotonic() - started)} s wall in all, load average "
                   f"{os.getloadavg()[0]:.1f} at the end."]
    print("\n".join(report))
    if args.out is not None:
        args.out.write_text("\n".join(report) + "\n")
    if args.json is not None:
        args.json.write_text(json.dumps(all_rows, indent=1) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
