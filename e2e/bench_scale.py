"""Scale benchmark on the real control plane: N kwok GPU nodes, a burst of P GPU pods through
``berth serve``. Reports what became of every pod (released, waiting with a reason, waiting
without one, lost), release throughput and time-to-release / time-to-Running percentiles.
A measurement, not a test: it asserts nothing about speed.

    python3 e2e/bench_scale.py --nodes 1000 --pods 10000     # the issue's scale
    python3 e2e/bench_scale.py --nodes 40 --pods 400 --out e2e/bench_scale.md

Needs the binaries of e2e/build.sh (core). Tenants come from config/policy/sample-policy.yaml
with quotas and model restrictions lifted, so capacity, not quota, is what limits releases.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.controller import keys, release_writers
from admission.devcluster import DevCluster, create_nodes, gpu_fleet
from admission.kube import RawWatch
from e2e.berth import berth_webhook
from e2e.conftest import E2ECluster, make_namespace
from e2e.helpers import pod_manifest


def _lift_limits(doc: dict[str, Any]) -> None:
    """Capacity, not quota or GPU model, should limit what the burst can release."""
    for tenant in doc["tenants"]:
        for key in ("quota", "allowedModels", "borrowing"):
            tenant.pop(key, None)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


class Tracker:
    """First time each pod was seen ungated (released) and Running, from watch events."""

    def __init__(self) -> None:
        self.released: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.lock = threading.Lock()

    def run(self, core: client.CoreV1Api, ns: str, stop: threading.Event) -> None:
        # Resume each 5 s watch from the last version seen: starting afresh would make the API
        # server send every pod of the namespace again (10,000 at the scale).
        version: str | None = None
        while not stop.is_set():
            w = RawWatch()  # plain JSON: the client's models would cost this harness CPU
            kwargs: dict[str, Any] = {"timeout_seconds": 5, "allow_watch_bookmarks": True}
            if version:
                kwargs["resource_version"] = version
            try:
                for ev in w.stream(core.list_namespaced_pod, ns, **kwargs):
                    pod, now = ev["object"], time.monotonic()
                    version = pod["metadata"].get("resourceVersion") or version
                    if ev["type"] not in ("ADDED", "MODIFIED"):
                        continue
                    self._see(f"{ns}/{pod['metadata']['name']}", pod, now)
                    if stop.is_set():
                        w.stop()
            except client.ApiException as exc:
                if exc.status != 410:
                    raise
                version = None  # too old: list again

    def wait_running(self, pods: int, timeout: float) -> None:
        """Until ``pods`` pods have been seen Running, or ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.running) >= pods:
                    return
            time.sleep(1)

    def _see(self, key: str, pod: dict[str, Any], now: float) -> None:
        with self.lock:
            if not pod["spec"].get("schedulingGates") and key not in self.released:
                self.released[key] = now
            if (pod.get("status") or {}).get("phase") == "Running" and key not in self.running:
                self.running[key] = now


class Creates:
    """Pod ``i`` of a burst, created in turn into each namespace; when each create call
    returned (by ``ns/name``) and which failed. Called from many threads at once."""

    def __init__(self, core: client.CoreV1Api, namespaces: list[str], *, gpus: int = 1,
                 labels: dict[str, str] | None = None,
                 scheduler_name: str | None = None) -> None:
        self.core, self.namespaces, self.gpus, self.labels = core, namespaces, gpus, labels
        self.scheduler_name = scheduler_name
        self.created: dict[str, float] = {}
        self.failed: list[str] = []
        self._lock = threading.Lock()

    def create(self, i: int) -> None:
        ns = self.namespaces[i % len(self.namespaces)]
        name = f"p{i:05d}"
        pod = pod_manifest(name, gpus=self.gpus, labels=self.labels)
        if self.scheduler_name:
            pod["spec"]["schedulerName"] = self.scheduler_name
        try:
            self.core.create_namespaced_pod(ns, pod)
        except client.ApiException as exc:
            with self._lock:
                self.failed.append(f"{ns}/{name}: {exc.status} {exc.reason}")
            return
        with self._lock:
            self.created[f"{ns}/{name}"] = time.monotonic()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=40)
    ap.add_argument("--pods", type=int, default=400)
    ap.add_argument("--gpus-per-pod", type=int, default=1)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--settle", type=float, default=120,
                    help="seconds to wait for every waiting pod to carry its reason")
    ap.add_argument("--out", type=Path, default=None, help="append a markdown row here")
    ap.add_argument("--log", type=Path, default=None,
                    help="copy berth serve's log here (its cycle lines time each phase)")
    ap.add_argument("--capacity-after-burst", action="store_true",
                    help="create the GPU nodes only once every pod exists, so that the whole "
                         "queue is released from a standing start: release throughput without "
                         "the pace of pod creation (the webhook) in it")
    args = ap.parse_args()

    args.started = time.monotonic()  # wall time, cluster start-up included
    work = Path(tempfile.mkdtemp(prefix="berth-bench-"))
    cluster = DevCluster(workdir=work)
    cluster.start()
    try:
        api = config.new_client_from_config(str(cluster.kubeconfig))
        core = client.CoreV1Api(api)
        racks = max(1, args.nodes // 10)
        fleet = gpu_fleet(blocks=1, racks_per_block=racks, nodes_per_rack=args.nodes // racks,
                          gpus_per_node=8)
        if not args.capacity_after_burst:
            create_nodes(core, fleet)
        e2e = E2ECluster(api=api, kubeconfig=cluster.kubeconfig, nodes=fleet, local=cluster)
        namespaces = {"team-a": make_namespace(core, "bench-a"),
                      "team-b": make_namespace(core, "bench-b")}
        with berth_webhook(e2e, work / "berth", namespaces, serve=True,
                           edit_policy=_lift_limits) as hook:
            try:
                return _burst(core, namespaces, fleet_gpus=len(fleet) * 8, args=args,
                              add_capacity=lambda: create_nodes(core, fleet))
            finally:
                if args.log:
                    shutil.copyfile(hook.log, args.log)
    finally:
        cluster.wipe()  # stops every process and removes the work directory


def _burst(core: client.CoreV1Api, namespaces: dict[str, str], *, fleet_gpus: int,
           args: argparse.Namespace, add_capacity: Callable[[], object]) -> int:
    tracker, stop = Tracker(), threading.Event()
    watchers = [threading.Thread(target=tracker.run, args=(core, ns, stop), daemon=True)
                for ns in namespaces.values()]
    for t in watchers:
        t.start()
    burst = Creates(core, list(namespaces.values()), gpus=args.gpus_per_pod)
    created, failed, ns_list = burst.created, burst.failed, burst.namespaces

    loads: list[float] = []  # the machine's 1-minute load average, every 5 s of the burst

    def sample_load() -> None:
        while not stop.wait(5):
            loads.append(os.getloadavg()[0])

    threading.Thread(target=sample_load, daemon=True).start()
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.threads) as pool:
        list(pool.map(burst.create, range(args.pods)))
    t_created = time.monotonic() - t0
    # From when a pod could first be placed: its creation, or the nodes' arrival.
    t_capacity = time.monotonic() if args.capacity_after_burst else float("-inf")
    if args.capacity_after_burst:
        add_capacity()  # the nodes appear now: every pod is already waiting
    can_run = min(len(created), fleet_gpus // args.gpus_per_pod)
    tracker.wait_running(can_run, args.timeout)
    t_settled = time.monotonic()

    # Reasons are written at a bounded rate per cycle: give the waiting pods up to
    # --settle seconds to all carry one, and report how long that took.
    def snapshot() -> tuple[dict[str, Any], list[Any], list[Any]]:
        pods = {f"{ns}/{p['metadata']['name']}": p for ns in ns_list for p in json.loads(
            core.list_namespaced_pod(ns, _preload_content=False).data)["items"]}
        waiting = [p for p in pods.values() if p["spec"].get("schedulingGates")]
        with_reason = [p for p in waiting if any(
            c["type"] == keys.CONDITION_WAITING
            for c in (p.get("status") or {}).get("conditions") or [])]
        return pods, waiting, with_reason

    pods, waiting, with_reason = snapshot()
    while len(with_reason) < len(waiting) and time.monotonic() < t_settled + args.settle:
        time.sleep(2)
        pods, waiting, with_reason = snapshot()
    reasons_s = time.monotonic() - t_settled
    stop.set()
    lost = [k for k in created if k not in pods]
    rel = [tracker.released[k] - created[k] for k in created if k in tracker.released]
    run = [tracker.running[k] - created[k] for k in created if k in tracker.running]
    from_cap = [tracker.released[k] - max(created[k], t_capacity) for k in created
                if k in tracker.released]
    rel_times = sorted(tracker.released[k] for k in created if k in tracker.released)
    span = (rel_times[-1] - rel_times[0]) if len(rel_times) > 1 else float("nan")
    row = {
        "nodes": args.nodes, "gpus": fleet_gpus, "pods": args.pods,
        "created": len(created), "create_failed": len(failed),
        "create_s": round(t_created, 1),
        "released": len(rel), "running": len(run),
        "waiting_with_reason": len(with_reason),
        "waiting_without_reason": len(waiting) - len(with_reason), "lost": len(lost),
        "all_reasons_after_s": round(reasons_s, 1),
        "release_per_s": round(len(rel) / span, 1) if span == span and span > 0 else "-",
        "release_p50_s": round(_pct(rel, 0.5), 2), "release_p90_s": round(_pct(rel, 0.9), 2),
        "release_p99_s": round(_pct(rel, 0.99), 2),
        "running_p50_s": round(_pct(run, 0.5), 2),
        "running_p99_s": round(_pct(run, 0.99), 2),
        "mean_release_s": round(statistics.fmean(rel), 2) if rel else "-",
        "capacity": "after burst" if args.capacity_after_burst else "before",
        "from_capacity_p50_s": round(_pct(from_cap, 0.5), 2),
        "from_capacity_p99_s": round(_pct(from_cap, 0.99), 2),
        "writers": release_writers(),
        "load_1m_median": round(statistics.median(loads), 1) if loads else "-",
        "wall_s": round(time.monotonic() - args.started),
    }
    for k, v in row.items():
        print(f"{k:>24}: {v}")
    if args.out:
        new = not args.out.exists()
        with args.out.open("a") as f:
            if new:
                f.write("| " + " | ".join(row) + " |\n|" + "---|" * len(row) + "\n")
            f.write("| " + " | ".join(str(v) for v in row.values()) + " |\n")
    return 0 if not lost else 1


if __name__ == "__main__":
    raise SystemExit(main())
