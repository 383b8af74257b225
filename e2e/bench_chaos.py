"""Chaos benchmark on the real control plane: ``berth serve`` SIGKILLed at random moments (most
of them in the middle of a release) and kube-apiserver killed and restarted, while bursts of
gangs arrive in two tenants. Checks, from a watch of every pod, that no gang is ever half
released, that no pod is lost, and that at the end every pod is released or says why it waits.
A measurement, not a test: it prints figures, appends them to a markdown file, and exits
non-zero only when an invariant breaks.

    python3 e2e/bench_chaos.py                 # 100 kills, 3 apiserver restarts (~20 min)
    python3 e2e/bench_chaos.py --quick         # 10 kills, 1 apiserver restart (~4 min)

Needs the binaries of e2e/build.sh (core). ``berth serve`` runs as the ``berth`` service
account with the RBAC of config/base (e2e/berth.py's ``berth_serve_as_deployed``), with a
1 s batch window; after each SIGKILL it is started again at once, as a Deployment would.
Methods and figures: e2e/bench_chaos.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission import constants as c
from admission.controller import keys
from admission.devcluster import DevCluster, create_nodes, gpu_fleet, processes
from admission.kube import RawWatch
from e2e.berth import BerthWebhook, berth_serve_as_deployed
from e2e.conftest import E2ECluster, make_namespace
from e2e.helpers import pod_manifest

RUN_LABEL = "berth-chaos"  # every pod of the bench carries it (the watch selects on it)
GANG_LABEL = "berth-chaos/gang"
NODES_PER_RACK = 2  # 16 GPUs a rack: a gang of 3 x 8 GPUs that must stay in one never fits
READY_TIMEOUT = 300  # seconds for a restarted berth serve to answer /readyz
SELF_CHECK = "selfcheck"  # the gang the detector is proved on
MODES = ("placement", "gate", "burst", "random")  # when a kill lands (see Tracker.arm)
MODE_WEIGHTS = (0.35, 0.35, 0.15, 0.15)


# ---------------------------------------------------------------------------- what is created
@dataclass
class GangSpec:
    name: str
    namespace: str
    tenant: str
    size: int
    gpus: int  # per pod
    never_fits: bool  # required:rack beyond a rack's GPUs: it must wait, with its reason
    burst: int
    created: set[str] = field(default_factory=set)  # pod names the API server stored

    def pods(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.size)]

    def manifest(self, pod: str, run: str) -> dict[str, Any]:
        ann = {c.ANNOTATION_GANG: self.name, c.ANNOTATION_GANG_SIZE: str(self.size)}
        if self.never_fits:
            ann[c.ANNOTATION_TOPOLOGY] = "required:rack"
        return pod_manifest(pod, gpus=self.gpus, labels={RUN_LABEL: run, GANG_LABEL: self.name},
                            annotations=ann)


def make_gang(rng: random.Random, n: int, burst: int, namespaces: dict[str, str]) -> GangSpec:
    """team-a (quota lifted): 1-4 pods of 1-8 GPUs; team-b (quota 8, no borrowing): 1-2 pods,
    at most 8 GPUs in all, so it often waits for its quota; every 12th gang cannot ever fit."""
    if n % 12 == 11:
        return GangSpec(f"g{n:04d}", namespaces["team-a"], "team-a", 3, 8, True, burst)
    if rng.random() < 0.3:
        size = rng.choice((1, 2))
        gpus = rng.choice((1, 2, 4))
        return GangSpec(f"g{n:04d}", namespaces["team-b"], "team-b", size, gpus, False, burst)
    size = rng.choice((1, 2, 2, 3, 4))
    gpus = rng.choice((1, 2, 4, 8))
    return GangSpec(f"g{n:04d}", namespaces["team-a"], "team-a", size, gpus, False, burst)


# ---------------------------------------------------------------------------- what is watched
@dataclass
class PodView:
    gang: str
    gated: bool
    node_assigned: str | None
    plan: str | None
    bound: str | None
    phase: str
    waiting: str | None  # reason of a True berth.dev/Waiting condition
    deleting: bool

    @classmethod
    def of(cls, pod: dict[str, Any]) -> PodView:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        ann = meta.get("annotations") or {}
        gates = {g.get("name") for g in spec.get("schedulingGates") or []}
        waiting = next((cond.get("reason") or "?" for cond in status.get("conditions") or []
                        if cond.get("type") == keys.CONDITION_WAITING
                        and cond.get("status") == "True"), None)
        return cls(gang=(meta.get("labels") or {}).get(GANG_LABEL, "?"),
                   gated=c.SCHEDULING_GATE in gates,
                   node_assigned=ann.get(c.ANNOTATION_ASSIGNED_NODE),
                   plan=ann.get(c.ANNOTATION_PLAN), bound=spec.get("nodeName"),
                   phase=status.get("phase") or "?", waiting=waiting,
                   deleting=bool(meta.get("deletionTimestamp")))


@dataclass
class Episode:
    """A stretch of time in which a gang had pods past Berth's gate and pods still behind it."""

    gang: str
    start: float
    end: float | None = None
    kills: list[str] = field(default_factory=list)  # kills that landed inside it
    unplaced: bool = False  # some pod of the gang lacked its placement meanwhile


class Tracker:
    """Pods and gangs from one watch (relisting after a break); invariants on every event."""

    def __init__(self, core: client.CoreV1Api, run: str, t0: float) -> None:
        self.core, self.selector, self.t0 = core, f"{RUN_LABEL}={run}", t0
        self.lock = threading.RLock()
        self.pods: dict[str, PodView] = {}  # ns/name -> view
        self.gangs: dict[str, GangSpec] = {}  # gang name -> spec (registered before creates)
        self.deleted: set[str] = set()  # ns/name the bench deleted
        self.lost: list[tuple[str, float, str]] = []
        self.breaches: dict[tuple[str, str], list[float]] = {}  # (gang, what) -> first, last
        self.episodes: list[Episode] = []
        self.open: dict[str, Episode] = {}
        self.released: dict[str, float] = {}  # gang -> when all its pods were past the gate
        self.watch_breaks = 0
        self._trigger: tuple[str, Callable[[str], None]] | None = None

    def now(self) -> float:
        return time.monotonic() - self.t0

    # ---- kill triggers
    def arm(self, mode: str, fire: Callable[[str], None]) -> None:
        """``placement``: fire when a gated pod of a multi-pod gang gets its placement (the
        release's first step is under way); ``gate``: when the first pod of a multi-pod gang
        leaves the gate while others of it are still behind it."""
        with self.lock:
            self._trigger = (mode, fire)

    def disarm(self) -> None:
        with self.lock:
            self._trigger = None

    def _maybe_fire(self, mode: str, gang: str) -> None:
        if self._trigger is not None and self._trigger[0] == mode:
            fire = self._trigger[1]
            self._trigger = None
            fire(gang)

    # ---- the watch
    def run(self, stop: threading.Event) -> None:
        version: str | None = None
        while not stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                w = RawWatch()
                for ev in w.stream(self.core.list_pod_for_all_namespaces,
                                   label_selector=self.selector, resource_version=version,
                                   timeout_seconds=20, allow_watch_bookmarks=True,
                                   _request_timeout=30):
                    kind, obj = ev["type"], ev.get("raw_object") or ev["object"]
                    if kind == "ERROR":
                        version = None  # 410: too old, list again
                        break
                    version = obj["metadata"].get("resourceVersion") or version
                    if kind != "BOOKMARK":
                        self._event(kind, obj)
                    if stop.is_set():
                        w.stop()
            except ApiException as exc:
                self.watch_breaks += 1
                if exc.status == 410:
                    version = None
                else:
                    time.sleep(0.3)
            except Exception:  # the apiserver went away mid-stream: resume from `version`
                self.watch_breaks += 1
                time.sleep(0.3)

    def _relist(self) -> str:
        data = json.loads(self.core.list_pod_for_all_namespaces(
            label_selector=self.selector, _preload_content=False, _request_timeout=30).data)
        with self.lock:
            seen = set()
            for pod in data["items"]:
                key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
                seen.add(key)
                self._event("RELIST", pod)
            for key in list(self.pods):
                if key not in seen:
                    self._gone(key)
        return str(data["metadata"]["resourceVersion"])

    def _gone(self, key: str) -> None:
        view = self.pods.pop(key)
        if key not in self.deleted:
            self.lost.append((key, self.now(), f"phase {view.phase}, gated {view.gated}"))
        self._check(view.gang)

    def _event(self, kind: str, pod: dict[str, Any]) -> None:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        with self.lock:
            if kind == "DELETED":
                if key in self.pods:
                    self._gone(key)
                return
            view = PodView.of(pod)
            before = self.pods.get(key)
            self.pods[key] = view
            spec = self.gangs.get(view.gang)
            multi = spec is not None and spec.size > 1
            if multi and view.gated and view.plan and (before is None or before.plan != view.plan):
                self._maybe_fire("placement", view.gang)
            self._check(view.gang)
            if (multi and before is not None and before.gated and not view.gated
                    and view.gang in self.open):
                self._maybe_fire("gate", view.gang)

    def members(self, gang: str) -> list[PodView]:
        return [p for p in self.pods.values() if p.gang == gang and not p.deleting]

    def _check(self, gang: str) -> None:
        spec = self.gangs.get(gang)
        if spec is None:
            return
        pods = self.members(gang)
        ungated = [p for p in pods if not p.gated]
        gated = [p for p in pods if p.gated]
        now = self.now()
        if ungated:
            problems = []
            if len(pods) < spec.size:
                problems.append(f"pods past the gate while only {len(pods)} of "
                                f"{spec.size} exist")
            if any(not p.node_assigned for p in pods):
                problems.append("a pod past the gate while a pod of the gang has no placement")
            if len({p.plan for p in pods}) > 1:
                problems.append("pods of the gang carry different plans")
            for what in problems:
                first_last = self.breaches.setdefault((gang, what), [now, now])
                first_last[1] = now
            if not gated and len(pods) >= spec.size:
                self.released.setdefault(gang, now)
        mixed = bool(ungated and gated)
        ep = self.open.get(gang)
        if mixed and ep is None:
            ep = self.open[gang] = Episode(gang, now)
            self.episodes.append(ep)
        if ep is not None:
            ep.unplaced |= any(not p.node_assigned for p in pods)
            if not mixed:
                ep.end = now
                del self.open[gang]

    def note_kill(self, what: str) -> dict[str, int]:
        """Record a kill in every open episode; what the kill interrupted."""
        with self.lock:
            for ep in self.open.values():
                ep.kills.append(what)
            partly_placed = 0
            for gang, spec in self.gangs.items():
                pods = self.members(gang)
                if spec.size > 1 and all(p.gated for p in pods) and \
                        0 < sum(bool(p.plan) for p in pods) < spec.size:
                    partly_placed += 1
            return {"mixed": len(self.open), "partly_placed": partly_placed}


# ---------------------------------------------------------------------------- the run
def _edit_policy(window: float) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc["batch"]["windowSeconds"] = window
        doc["solver"]["timeLimitSeconds"] = max(1.0, window)
        for tenant in doc["tenants"]:
            tenant.pop("allowedModels", None)  # the fleet is H100 only
            if tenant["name"] == "team-a":
                tenant.pop("quota", None)
                tenant.pop("borrowing", None)
            # team-b keeps quota 8 without borrowing: its gangs often wait on it
    return edit


def _spread(values: list[float]) -> tuple[float, float, float]:
    return (round(_pct(values, 0.5), 3), round(_pct(values, 0.99), 3),
            round(max(values, default=float("nan")), 3))


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=100, help="SIGKILLs of berth serve")
    ap.add_argument("--apiserver-restarts", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=12, help="kwok nodes of 8 GPUs (2 a rack)")
    ap.add_argument("--gangs", type=int, default=None,
                    help="gangs created over the run (default 3 per kill)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--window", type=float, default=1.0, help="batch window, seconds")
    ap.add_argument("--settle", type=float, default=120,
                    help="seconds, after the last fault, for every pod to be released or say "
                         "why it waits")
    ap.add_argument("--log", type=Path, default=None,
                    help="copy berth serve's log (every incarnation) here")
    ap.add_argument("--quick", action="store_true",
                    help="10 kills, 1 apiserver restart, 8 nodes, 30 gangs")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("bench_chaos.md"),
                    help="append the figures here (default e2e/bench_chaos.md; '-' for none)")
    args = ap.parse_args()
    if args.quick:
        args.kills, args.apiserver_restarts, args.nodes = 10, 1, 8
        args.gangs = args.gangs or 30
    args.gangs = args.gangs if args.gangs is not None else 3 * args.kills
    args.argv = " ".join(sys.argv[1:])
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="berth-chaos-"))
    cluster = DevCluster(workdir=work)
    cluster.start()
    try:
        api = config.new_client_from_config(str(cluster.kubeconfig))
        core = client.CoreV1Api(api)
        fleet = gpu_fleet(blocks=1, racks_per_block=max(1, args.nodes // NODES_PER_RACK),
                          nodes_per_rack=NODES_PER_RACK, gpus_per_node=8)
        create_nodes(core, fleet)
        e2e = E2ECluster(api=api, kubeconfig=cluster.kubeconfig, nodes=fleet, local=cluster)
        namespaces = {"team-a": make_namespace(core, "chaos-a"),
                      "team-b": make_namespace(core, "chaos-b")}
        result: dict[str, Any] = {}
        try:
            with berth_serve_as_deployed(e2e, work / "berth", namespaces,
                                         edit_policy=_edit_policy(args.window)) as hook:
                try:
                    result = Chaos(args, cluster, core, hook, namespaces, started).run()
                finally:
                    if args.log:
                        shutil.copyfile(hook.log, args.log)
        except AssertionError:
            # berth_serve_as_deployed fails on any 'forbidden' in berth serve's log; the figures
            # already sort those lines (the ones right after an apiserver restart are expected).
            if "invariants_held" not in result:
                raise
        return report(result, args)
    finally:
        cluster.wipe()


class Chaos:
    def __init__(self, args: argparse.Namespace, cluster: DevCluster, core: client.CoreV1Api,
                 hook: BerthWebhook, namespaces: dict[str, str], started: float) -> None:
        self.args, self.cluster, self.core, self.hook = args, cluster, core, hook
        self.namespaces, self.started = namespaces, started
        self.rng = random.Random(args.seed)
        self.run_id = f"r{args.seed}"
        self.tracker = Tracker(core, self.run_id, started)
        self.kills: Counter[str] = Counter()  # mode -> berth serve kills
        self.api_restarts: Counter[str] = Counter()
        self.interrupted = Counter[str]()  # kills that found a gang mid-release
        self.restart_s: list[float] = []
        self.api_restart_s: list[float] = []
        self.exited_alone: list[str] = []  # berth serve exits the bench did not cause
        self.create_retries = 0
        self.create_failed: list[str] = []
        self.fired = threading.Event()
        self.fired_on: str | None = None
        self.deleted_gangs = 0
        self.findings: list[str] = []
        self.slow_starts: list[str] = []  # restarts that took over 30 s to be ready
        # (target, killed, ready again) in tracker time, for every fault
        self.down: list[tuple[str, float, float]] = []
        self.api_killed_at: list[float] = []  # wall clock (time.time) of apiserver kills

    # ---- faults
    def _target_pgid(self, target: str) -> int:
        if target == "berth":
            assert self.hook.record is not None
            return self.hook.record.pgid
        return next(r.pgid for r in self.cluster.records if r.name == "kube-apiserver")

    def _fire(self, target: str) -> Callable[[str], None]:
        def fire(gang: str) -> None:
            if self.fired.is_set():
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._target_pgid(target), signal.SIGKILL)
            self.fired_on = gang
            self.fired.set()
        return fire

    def fault(self, target: str, burst_end: float) -> None:
        mode = self.rng.choices(MODES, MODE_WEIGHTS)[0]
        fire = self._fire(target)
        self.fired.clear()
        self.fired_on = None
        wait = 3 * self.args.window + 6
        if mode in ("placement", "gate"):
            delay = self.rng.uniform(0, 0.15) if mode == "placement" else 0.0
            # A delayed kill runs on a timer: the watch goes on seeing events meanwhile.
            self.tracker.arm(mode, (lambda g: threading.Timer(delay, fire, (g,)).start())
                             if delay else fire)
            if not self.fired.wait(wait):
                self.tracker.disarm()
                mode = f"{mode}->timeout"
                fire("-")
        else:
            span = 2 * self.args.window + 1.5 if mode == "burst" else 6.0
            at = (burst_end if mode == "burst" else time.monotonic()) + self.rng.uniform(0, span)
            time.sleep(max(0.0, at - time.monotonic()))
            fire("-")
        killed = self.tracker.now()
        caught = self.tracker.note_kill(f"{target}:{mode}@{killed:.1f}")
        for k, v in caught.items():
            if v:
                self.interrupted[f"{target}:{k}"] += 1
        t = time.monotonic()
        if target == "berth":
            self.kills[mode] += 1
            assert self.hook.proc is not None
            self.hook.proc.wait(timeout=30)
            self.start_berth()  # at once, as a Deployment's ReplicaSet would
            self.restart_s.append(time.monotonic() - t)
        else:
            self.api_restarts[mode] += 1
            self.api_killed_at.append(time.time() - (time.monotonic() - t))
            self.cluster.restart("kube-apiserver")
            self.api_restart_s.append(time.monotonic() - t)
        self.down.append((target, killed, self.tracker.now()))

    def start_berth(self) -> None:
        """What BerthWebhook.start does, with a longer wait: on two shared cores at a load of
        50 and more, the interpreter alone can take over a minute to import Berth."""
        hook = self.hook
        ctx = processes.https_context(hook.ca)
        for attempt in range(3):
            hook.proc, hook.record = processes.start(
                "berth-serve", hook.argv, hook.workdir, preexec_fn=processes.die_with_parent)
            t = time.monotonic()
            try:
                processes.wait_until(
                    "berth-serve",
                    lambda: processes.http_ok(f"https://127.0.0.1:{hook.port}/readyz", ctx),
                    timeout=READY_TIMEOUT, proc=hook.proc, record=hook.record)
                if time.monotonic() - t > 30:
                    self.slow_starts.append(f"{time.monotonic() - t:.0f}s at load "
                                            f"{os.getloadavg()[0]:.0f}")
                return
            except processes.StartupError as exc:  # a finding, then try again
                text = str(exc)
                self.findings.append(f"berth serve did not become ready (try {attempt + 1}, "
                                     f"load {os.getloadavg()[0]:.0f}): "
                                     f"{text.splitlines()[0]} ... {text[-1500:]}")
                with contextlib.suppress(Exception):
                    hook.kill()
        raise RuntimeError("berth serve does not start; see the findings")

    def _after_api_restart(self, line: str) -> bool:
        """A log line (asctime, local time) within 30 s after an apiserver kill: the RBAC
        authorizer of a freshly started apiserver refuses requests until its caches sync."""
        try:
            when = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            return False
        return any(0 <= when - t <= 30 for t in self.api_killed_at)

    # ---- load
    def create_gang(self, gang: GangSpec) -> None:
        deadline = time.monotonic() + 90
        for pod in gang.pods():
            while True:
                try:
                    self.core.create_namespaced_pod(gang.namespace,
                                                    gang.manifest(pod, self.run_id))
                    break
                except ApiException as exc:
                    if exc.status == 409:  # an earlier try was stored after all
                        break
                    if time.monotonic() > deadline:
                        self.create_failed.append(f"{gang.namespace}/{pod}: {exc.status}")
                        return
                except Exception as exc:  # the apiserver is restarting
                    if time.monotonic() > deadline:
                        self.create_failed.append(f"{gang.namespace}/{pod}: {exc}")
                        return
                self.create_retries += 1
                time.sleep(0.3)
            gang.created.add(pod)

    def free_capacity(self, burst: int) -> None:
        """Delete the gangs released two bursts ago or earlier (their work is done), so that
        later bursts have room and team-b's quota frees up."""
        with self.tracker.lock:
            old = [g for name, g in self.tracker.gangs.items()
                   if name in self.tracker.released and g.burst <= burst - 2]
            keys_ = [f"{g.namespace}/{p}" for g in old for p in g.created]
            self.tracker.deleted.update(keys_)
            for g in old:
                del self.tracker.gangs[g.name]
        for key in keys_:
            ns, name = key.split("/")
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
        self.deleted_gangs += len(old)

    def self_check(self) -> str:
        """Prove the detector on this cluster: a gang that never fits waits gated; the bench
        (as admin) lifts Berth's gate from one of its pods, which must be reported as half
        released. The gang is then deleted and left out of every figure."""
        tr = self.tracker
        gang = GangSpec(SELF_CHECK, self.namespaces["team-a"], "team-a", 3, 8, True, -1)
        with tr.lock:
            tr.gangs[gang.name] = gang
        self.create_gang(gang)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with tr.lock:
                if len([p for p in tr.members(gang.name) if p.gated]) == 3:
                    break
            time.sleep(0.2)
        self.core.patch_namespaced_pod(f"{gang.name}-0", gang.namespace, [
            {"op": "test", "path": "/spec/schedulingGates/0/name", "value": c.SCHEDULING_GATE},
            {"op": "remove", "path": "/spec/schedulingGates/0"}])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                g == SELF_CHECK for g, _ in tr.breaches):
            time.sleep(0.1)
        with tr.lock:
            seen = [what for g, what in tr.breaches if g == SELF_CHECK]
            for key in [k for k in tr.breaches if k[0] == SELF_CHECK]:
                del tr.breaches[key]
            tr.episodes = [e for e in tr.episodes if e.gang != SELF_CHECK]
            tr.open.pop(SELF_CHECK, None)
            del tr.gangs[SELF_CHECK]
            tr.deleted.update(f"{gang.namespace}/{p}" for p in gang.created)
        for pod in gang.created:
            self.core.delete_namespaced_pod(pod, gang.namespace, grace_period_seconds=0)
        return f"detected ({seen[0]})" if seen else "MISSED"

    def run(self) -> dict[str, Any]:
        args, tr = self.args, self.tracker
        stop = threading.Event()
        watcher = threading.Thread(target=tr.run, args=(stop,), daemon=True)
        watcher.start()
        self.detector = self.self_check()
        print(f"detector self-check: {self.detector}", flush=True)
        faults = args.kills + args.apiserver_restarts
        api_at = {round((i + 0.5) * faults / args.apiserver_restarts)
                  for i in range(args.apiserver_restarts)} if args.apiserver_restarts else set()
        per_burst = math.ceil(args.gangs / max(1, faults))
        all_gangs: list[GangSpec] = []
        loads: list[float] = []
        t_loop = time.monotonic()
        with ThreadPoolExecutor(max_workers=4) as pool:
            for i in range(faults):
                if self.hook.proc is not None and self.hook.proc.poll() is not None:
                    self.exited_alone.append(f"before fault {i}: exit {self.hook.proc.returncode}")
                    self.start_berth()
                self.free_capacity(i)
                burst = [make_gang(self.rng, len(all_gangs) + j, i, self.namespaces)
                         for j in range(min(per_burst, args.gangs - len(all_gangs)))]
                with tr.lock:
                    for g in burst:
                        tr.gangs[g.name] = g
                all_gangs += burst
                list(pool.map(self.create_gang, burst))
                loads.append(os.getloadavg()[0])
                self.fault("apiserver" if i in api_at else "berth", time.monotonic())
                print(f"[{tr.now():6.0f}s] fault {i + 1}/{faults}: berth kills "
                      f"{sum(self.kills.values())}, apiserver {sum(self.api_restarts.values())}"
                      f", gangs {len(all_gangs)}, released {len(tr.released)}, "
                      f"half-released breaches {len(tr.breaches)}, lost {len(tr.lost)}",
                      flush=True)
        t_faults = time.monotonic() - t_loop
        settled_s, final = self.settle()
        stop.set()
        watcher.join(timeout=30)
        return self.figures(all_gangs, final, settled_s, t_faults, loads)

    def settle(self) -> tuple[float, dict[str, PodView]]:
        """After the last fault: until no gang is mixed and every gated pod says why it waits
        (or --settle runs out). Judged on a fresh list, not the watch."""
        t = time.monotonic()
        while True:
            data = json.loads(self.core.list_pod_for_all_namespaces(
                label_selector=self.tracker.selector, _preload_content=False).data)
            final = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": PodView.of(p)
                     for p in data["items"]}
            mixed = {v.gang for v in final.values() if not v.gated} & \
                {v.gang for v in final.values() if v.gated}
            silent = [k for k, v in final.items() if v.gated and not v.waiting]
            if (not mixed and not silent) or time.monotonic() - t > self.args.settle:
                return time.monotonic() - t, final
            time.sleep(2)

    def figures(self, gangs: list[GangSpec], final: dict[str, PodView], settled_s: float,
                t_faults: float, loads: list[float]) -> dict[str, Any]:
        tr = self.tracker
        by_gang: dict[str, list[PodView]] = {}
        final = {k: v for k, v in final.items() if v.gang != SELF_CHECK}
        for v in final.values():
            by_gang.setdefault(v.gang, []).append(v)
        released_now = [g for g, ps in by_gang.items() if all(not p.gated for p in ps)]
        waiting_now = [g for g, ps in by_gang.items() if all(p.gated for p in ps)]
        mixed_now = [g for g, ps in by_gang.items()
                     if g not in released_now and g not in waiting_now]
        no_reason = sorted(k for k, v in final.items() if v.gated and not v.waiting)
        reasons = Counter(v.waiting for v in final.values() if v.gated and v.waiting)
        elsewhere = sorted(k for k, v in final.items()
                           if v.bound and v.node_assigned and v.bound != v.node_assigned)
        # Pods the bench made that neither the final list nor its own deletions account for.
        made = {f"{g.namespace}/{p}" for g in gangs for p in g.created}
        missing = sorted(made - set(final) - tr.deleted)
        lost = sorted({k for k, _, _ in tr.lost} | set(missing))
        eps = tr.episodes
        closed = [e for e in eps if e.end is not None]

        def overlaps(e: Episode, target: str) -> list[tuple[str, float, float]]:
            # A fault whose down time (kill to ready again) meets the episode: writes the
            # killed process had sent may still land just after the kill.
            end = e.end if e.end is not None else math.inf
            return [d for d in self.down if d[0] == target and d[1] <= end and d[2] >= e.start]

        across_kill = [e for e in closed if overlaps(e, "berth")]
        across_api = [e for e in closed if overlaps(e, "apiserver")]
        calm = [e for e in closed if e not in across_kill and e not in across_api]
        # A release a kill really interrupted: the gang was still mixed when the next
        # berth serve was ready, so that one finished it (the finishing path).
        finished_later = [e for e in across_kill if any(
            e.end is not None and e.end > r for _, _, r in overlaps(e, "berth"))]
        log = self.hook.log.read_text(errors="replace")
        forbidden = [line for line in log.splitlines() if "forbidden" in line.lower()]
        after_restart = [line for line in forbidden if self._after_api_restart(line)]
        other_forbidden = [line for line in forbidden if line not in after_restart]
        if other_forbidden:
            self.findings.append(f"berth serve refused by RBAC ({len(other_forbidden)} lines "
                                 "not right after an apiserver restart): "
                                 + " | ".join(other_forbidden[:3]))
        fig: dict[str, Any] = {
            "seed": self.args.seed, "nodes": self.args.nodes, "gpus": self.args.nodes * 8,
            "berth_kills": sum(self.kills.values()),
            "kills_by_moment": dict(self.kills),
            "apiserver_restarts": sum(self.api_restarts.values()),
            "apiserver_by_moment": dict(self.api_restarts),
            "kills_that_found_a_gang_mid_release": dict(self.interrupted),
            "berth_restart_to_ready_s_p50_max": (round(_pct(self.restart_s, 0.5), 1),
                                                 round(max(self.restart_s, default=0), 1)),
            "berth_restarts_over_30s": self.slow_starts,
            "apiserver_restart_s_max": round(max(self.api_restart_s, default=0), 1),
            "gangs_created": len(gangs),
            "pods_created": sum(len(g.created) for g in gangs),
            "gangs_never_fit": sum(g.never_fits for g in gangs),
            "gangs_released": len(tr.released),
            "gangs_deleted_by_bench_after_release": self.deleted_gangs,
            "gangs_released_at_end": len(released_now),
            "gangs_waiting_at_end": len(waiting_now),
            "waiting_reasons_at_end": dict(reasons),
            "detector_self_check": self.detector,
            "gangs_half_released": len({g for g, _ in tr.breaches}),
            "gangs_mixed_episodes": len(eps),
            "mixed_episodes_meeting_a_berth_kill": len(across_kill),
            "mixed_episodes_meeting_an_apiserver_restart": len(across_api),
            "mixed_episodes_finished_by_the_next_berth": len(finished_later),
            "mixed_s_no_fault_p50_p99_max": _spread([e.end - e.start for e in calm
                                                     if e.end is not None]),
            "mixed_episodes_over_1s_without_a_fault": sum(
                e.end is not None and e.end - e.start > 1 for e in calm),
            "mixed_s_meeting_a_kill_p50_p99_max": _spread([e.end - e.start for e in across_kill
                                                           if e.end is not None]),
            "gangs_mixed_at_end": len(mixed_now),
            "pods_lost": len(lost),
            "pods_without_reason": len(no_reason),
            "pods_bound_elsewhere_than_assigned": len(elsewhere),
            "create_retries": self.create_retries,
            "create_failed": len(self.create_failed),
            "berth_exits_not_caused_by_bench": len(self.exited_alone),
            "berth_log_tracebacks": log.count("Traceback (most recent call last)"),
            "berth_403_lines_within_30s_of_apiserver_restart": len(after_restart),
            "berth_403_lines_otherwise": len(other_forbidden),
            "watch_breaks": tr.watch_breaks,
            "settle_s": round(settled_s, 1),
            "faults_phase_s": round(t_faults),
            "load_1m_median": round(statistics.median(loads), 1) if loads else "-",
            "wall_s": round(time.monotonic() - self.started),
        }
        fig["findings"] = self.findings
        fig["invariants_held"] = not (tr.breaches or lost or no_reason or mixed_now
                                      or self.detector == "MISSED")
        fig["detail"] = {
            "half_released": [f"{g}: {what} (first {a:.2f}s, last {b:.2f}s)"
                              for (g, what), (a, b) in sorted(tr.breaches.items())],
            "mixed_episodes": [f"{e.gang}: {e.start:.2f}s-"
                               + (f"{e.end:.2f}s ({e.end - e.start:.3f}s)" if e.end else "open")
                               + (f", kills inside: {', '.join(e.kills)}" if e.kills else "")
                               + "".join(f", meets {t} down {k:.2f}s-{r:.2f}s"
                                         for t, k, r in (overlaps(e, "berth")
                                                         + overlaps(e, "apiserver")))
                               + (", a pod without placement" if e.unplaced else "")
                               for e in eps],
            "mixed_at_end": mixed_now,
            "lost": [f"{k} at {t:.1f}s ({why})" for k, t, why in tr.lost] + missing,
            "without_reason": no_reason,
            "bound_elsewhere": elsewhere,
            "create_failed": self.create_failed,
            "exited_alone": self.exited_alone,
        }
        return fig


def report(fig: dict[str, Any], args: argparse.Namespace) -> int:
    detail = fig.pop("detail", {})
    findings = fig.pop("findings", [])
    for k, v in fig.items():
        print(f"{k:>40}: {v}")
    for what in ("half_released", "mixed_at_end", "lost", "without_reason", "bound_elsewhere",
                 "create_failed", "exited_alone"):
        for line in detail.get(what, [])[:20]:
            print(f"  {what}: {line}")
    for line in findings:
        print(f"  finding: {line}")
    if args.out and str(args.out) != "-":
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        lines = [f"\n### Run of {when}: `python3 e2e/bench_chaos.py {args.argv}`\n",
                 "| figure | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in fig.items()]
        for what, items in detail.items():
            if items:
                lines.append(f"\n<details><summary>{what} ({len(items)})</summary>\n")
                lines += [f"- {x}" for x in items]
                lines.append("\n</details>")
        lines += [f"- finding: {' / '.join(x.splitlines())}" for x in findings]
        with args.out.open("a") as f:
            f.write("\n".join(lines) + "\n")
    return 0 if fig.get("invariants_held") else 1


if __name__ == "__main__":
    raise SystemExit(main())
