"""The controller's batch cycle at scale, against in-memory API objects (no API server).

Builds N nodes x G GPUs and P pending gated pods (gangs of 1-8, fractional and whole-GPU
demands, a quarter of the cluster already busy with pods Berth did not place) as the JSON the
API server would send, loads them into the inventory, runs one full cycle (snapshot, finish,
timeouts, solve in a worker process, check, release, requeue) and reports the time of each phase,
peak memory, and what was released. Writes go to an in-memory store that applies the JSON
patches, so the release phase measures the controller's own work per pod.

    python3 bench/controller_cycle.py --nodes 1000 --gpus 8 --pods 10000 --solver cpsat \
        --time-limit 20 --grace 10 --repeat 3
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pickle
import random
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from admission import jsonpatch  # noqa: E402
from admission.controller import Controller, Settings, WorkerSolver  # noqa: E402
from admission.jsonpatch import PatchOp  # noqa: E402
from admission.policy import Sharing  # noqa: E402
from solver.types import Tenant  # noqa: E402

RECORDED = REPO / "tests" / "admission" / "controller" / "recorded"
T0 = datetime(2026, 11, 29, 14, 0, 0, tzinfo=UTC)
Json = dict[str, Any]


class MemoryApi:
    """Stores objects and applies patches; no validation, no I/O."""

    def __init__(self) -> None:
        self.pods: dict[str, Json] = {}
        self.nodes: dict[str, Json] = {}
        self.objects: dict[tuple[str, str, str], Json] = {}
        self.writes = 0
        self.rv = 10_000

    def list_pods(self) -> tuple[list[Json], str]:
        return list(self.pods.values()), str(self.rv)

    def list_nodes(self) -> tuple[list[Json], str]:
        return list(self.nodes.values()), str(self.rv)

    def list_jobs(self) -> tuple[list[Json], str]:
        return [], str(self.rv)  # no Jobs: no pod has a Job's deadline

    def list_dra(self, kind: str) -> tuple[list[Json], str]:
        return [], str(self.rv)  # no DRA objects: device-plugin GPUs only

    def watch_pods(self, *a: Any) -> Any:
        return iter(())

    watch_nodes = watch_jobs = watch_dra = watch_pods

    def get_pod(self, namespace: str, name: str) -> Json | None:
        return self.pods.get(f"{namespace}/{name}")

    def patch_pod(self, namespace: str, name: str, ops: Sequence[PatchOp]) -> Json:
        key = f"{namespace}/{name}"
        self.rv += 1
        new = jsonpatch.apply(self.pods[key], ops)
        new["metadata"]["resourceVersion"] = str(self.rv)
        self.pods[key] = new
        self.writes += 1
        return new

    def set_pod_condition(self, namespace: str, name: str, condition: Json) -> Json:
        pod = self.pods[f"{namespace}/{name}"]
        pod.setdefault("status", {}).setdefault("conditions", []).append(condition)
        self.writes += 1
        return pod

    def create_event(self, namespace: str, event: Json) -> None:
        self.writes += 1

    def evict_pod(self, namespace: str, name: str, *, dry_run: bool = False) -> None:
        if not dry_run:
            self.writes += 1
            self.pods.pop(f"{namespace}/{name}", None)

    # leases and config maps (leader election, the leader's records): kept, not validated
    def get_lease(self, namespace: str, name: str) -> Json | None:
        return self.objects.get(("lease", namespace, name))

    def create_lease(self, namespace: str, lease: Json) -> Json:
        return self._put("lease", namespace, lease["metadata"]["name"], lease)

    def replace_lease(self, namespace: str, name: str, lease: Json) -> Json:
        return self._put("lease", namespace, name, lease)

    def get_config_map(self, namespace: str, name: str) -> Json | None:
        return self.objects.get(("configmap", namespace, name))

    def create_config_map(self, namespace: str, body: Json) -> Json:
        return self._put("configmap", namespace, body["metadata"]["name"], body)

    def replace_config_map(self, namespace: str, name: str, body: Json) -> Json:
        return self._put("configmap", namespace, name, body)

    def _put(self, kind: str, namespace: str, name: str, body: Json) -> Json:
        self.writes += 1
        self.rv += 1
        stored = copy.deepcopy(body)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.objects[(kind, namespace, name)] = stored
        return stored

    def apply_custom(self, *a: Any) -> Json:
        return {}

    def list_custom(self, *a: Any) -> list[Json]:
        return []


def make_cluster(api: MemoryApi, nodes: int, gpus: int, pods: int, seed: int) -> None:
    rng = random.Random(seed)
    node_t = json.loads((RECORDED / "node-gpu.json").read_text())
    pod_t = json.loads((RECORDED / "pod-gated.json").read_text())
    for i in range(nodes):
        n = copy.deepcopy(node_t)
        n["metadata"]["name"] = f"gpu-{i:04d}"
        n["metadata"]["uid"] = f"uid-node-{i}"
        n["metadata"]["labels"]["kubernetes.io/hostname"] = f"gpu-{i:04d}"
        n["metadata"]["labels"]["topology.kubernetes.io/rack"] = f"rack-{i // 16}"
        n["metadata"]["labels"]["topology.kubernetes.io/block"] = f"block-{i // 128}"
        for section in ("capacity", "allocatable"):
            n["status"][section]["nvidia.com/gpu"] = str(gpus)
        api.nodes[n["metadata"]["name"]] = n
    # A quarter of the nodes half full with pods Berth did not place.
    for i in range(0, nodes, 4):
        p = copy.deepcopy(pod_t)
        p["metadata"].update(name=f"legacy-{i}", namespace="ops", uid=f"legacy-{i}")
        p["metadata"]["labels"] = {"app": "legacy"}
        p["metadata"]["annotations"] = {}
        p["spec"].pop("schedulingGates")
        p["spec"]["nodeName"] = f"gpu-{i:04d}"
        p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(gpus // 2)
        p["status"] = {"phase": "Running"}
        api.pods[f"ops/legacy-{i}"] = p
    tenants = ["team-a", "team-b", "team-c", "team-d"]
    made = g = 0
    while made < pods:
        size = min(pods - made, rng.choice([1, 1, 1, 2, 4, 8]))
        per = rng.choice([250, 500, 1000, 1000]) if size == 1 else 1000
        count = 1 if per < 1000 else rng.choice([1, 2, 4, 8] if size == 1 else [4, 8])
        tenant = rng.choice(tenants)
        created = T0 - timedelta(seconds=rng.uniform(0, 3600))
        for k in range(size):
            p = copy.deepcopy(pod_t)
            name = f"g{g}-{k}"
            m = p["metadata"]
            m.update(name=name, namespace=tenant, uid=f"uid-{tenant}-{name}",
                     creationTimestamp=created.strftime("%Y-%m-%dT%H:%M:%SZ"))
            m["labels"]["berth.dev/tenant"] = tenant
            m["labels"]["berth.dev/gang"] = f"g{g}"
            a = m["annotations"]
            a["berth.dev/gang-name"] = f"g{g}"
            a["berth.dev/gang-size"] = str(size)
            a["berth.dev/gpu-count"] = str(count)
            a["berth.dev/gpu-milli"] = str(per)
            res = p["spec"]["containers"][0]["resources"]
            res["requests"].update(cpu="4", memory="32Gi")
            res["limits"].update(cpu="4", memory="32Gi")
            # The resources say what the annotations say, as the webhook translates them
            # (time-slicing: 4 slots per GPU); the controller releases nothing else.
            for section in ("requests", "limits"):
                if per < 1000:
                    res[section].pop("nvidia.com/gpu", None)
                    res[section]["nvidia.com/gpu.shared"] = str(per * 4 // 1000)
                else:
                    res[section]["nvidia.com/gpu"] = str(count)
            if per < 1000:
                a["berth.dev/sharing"] = "time-slicing"
            api.pods[f"{tenant}/{name}"] = p
        made += size
        g += 1


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--solver", default="cpsat")
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--grace", type=float, default=120.0,
                    help="seconds past the time limit before the worker is given up")
    ap.add_argument("--repeat", type=int, default=1, help="cycles on fresh copies (medians)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    load0 = os.getloadavg()

    teams = ("team-a", "team-b", "team-c", "team-d")
    settings = Settings(
        tenants=tuple(Tenant(t, quota_milli=args.nodes * args.gpus * 300) for t in teams),
        namespaces={t: t for t in teams}, sharing=Sharing(backend="time-slicing"),
        topology_labels={"rack": "topology.kubernetes.io/rack",
                         "block": "topology.kubernetes.io/block"},
        solver=args.solver, time_limit_seconds=args.time_limit, explain_budget=500)
    runs: list[dict[str, float]] = []
    worker = WorkerSolver(solver=args.solver, time_limit=args.time_limit, grace_seconds=args.grace)
    for r in range(args.repeat):
        api = MemoryApi()
        t = time.perf_counter()
        make_cluster(api, args.nodes, args.gpus, args.pods, args.seed + r)
        build_s = time.perf_counter() - t
        ctl = Controller(api=api, settings=settings, identity="bench",  # type: ignore[arg-type]
                         clock=lambda: T0, solve=worker)
        ctl.settings = ctl.cycle.settings = Settings(**{
            **{f: getattr(settings, f) for f in settings.__slots__},
            "fast_path_classes": frozenset({"inference"})})
        t = time.perf_counter()
        ctl.relist()
        load_s = time.perf_counter() - t
        report = ctl.run_cycle()
        from admission.controller.snapshot import build
        snap = build(ctl.inventory.view(), settings, T0).snapshot
        row = {"objects_build": build_s, "inventory_load": load_s, **report.phases,
               "total_cycle": sum(report.phases.values())}
        # The next window: the same pods minus those released, unchanged objects memoised.
        second = ctl.run_cycle()
        row.update({f"next_cycle.{k}": v for k, v in second.phases.items()})
        row["next_cycle.total"] = sum(second.phases.values())
        # A job finishes (its GPUs free up), then a latency-critical replica arrives: the fast
        # path places it without waiting for the window.
        done = api.pods.pop("ops/legacy-0")
        ctl.on_pod_event("DELETED", done)
        serve = copy.deepcopy(api.pods["team-a/g0-0"] if "team-a/g0-0" in api.pods
                              else next(iter(api.pods.values())))
        m = serve["metadata"]
        m.update(name="serve-0", namespace="team-a", uid="uid-serve-0", resourceVersion="1")
        m["labels"] = {**m.get("labels", {}), "berth.dev/qos-class": "inference",
                       "berth.dev/tenant": "team-a", "berth.dev/gang": "serve-0"}
        m["annotations"] = {"berth.dev/gang-name": "serve-0", "berth.dev/gang-size": "1",
                            "berth.dev/gpu-count": "1", "berth.dev/gpu-milli": "250",
                            "berth.dev/sharing": "time-slicing"}
        for section in serve["spec"]["containers"][0]["resources"].values():
            section.pop("nvidia.com/gpu", None)
            section["nvidia.com/gpu.shared"] = "1"  # a quarter: one of a GPU's 4 slots
        serve["spec"]["schedulingGates"] = [{"name": "berth.dev/admission"}]
        serve["spec"].pop("affinity", None)
        api.pods["team-a/serve-0"] = serve
        t = time.perf_counter()
        ctl.on_pod_event("ADDED", serve)
        fast = ctl.run_cycle(fast=True)
        row["fast_path.arrival_to_release"] = time.perf_counter() - t
        assert fast.released and fast.released[0].complete, (
            f"the fast-path pod was not placed: {fast.why.get('team-a/serve-0')}")
        row.update({f"fast_path.{k}": v for k, v in fast.phases.items()})
        runs.append(row)
        print(f"run {r}: {report.summary()}", file=sys.stderr)
        print(f"  load average {os.getloadavg()[0]:.2f}; "
              f"gangs {report.gangs}, admitted {report.admitted}, released pods "
              f"{sum(len(x.released_pods) for x in report.released)}, solver "
              f"{report.solver_status}, API writes {api.writes}, "
              f"snapshot pickle {len(pickle.dumps(snap)) / 2**20:.1f} MiB, "
              f"peak RSS {rss_mib():.0f} MiB", file=sys.stderr)
    worker.close(kill=True)
    print(f"\n{args.nodes} nodes x {args.gpus} GPUs, {args.pods} pending pods, solver "
          f"{args.solver} (time limit {args.time_limit:g}s), {args.repeat} run(s); medians:\n")
    print("| phase | seconds |\n|---|---:|")
    for key in runs[0]:
        print(f"| {key} | {statistics.median(r[key] for r in runs):.3f} |")
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"\npeak RSS: controller process {rss_mib():.0f} MiB, solver worker {child:.0f} MiB")
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    print(f"CPU seconds: controller {me.ru_utime + me.ru_stime:.1f}, solver worker "
          f"{kids.ru_utime + kids.ru_stime:.1f}; load average at start "
          f"{load0[0]:.2f}, at end {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
