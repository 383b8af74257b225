"""Pace of pod creation through each admission path, side by side on one control plane.

One local control plane (e2e/build.sh: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok), N kwok nodes with 8 GPUs each, and for each system in turn a burst of P
one-GPU pods created by T client threads into two fresh namespaces, then (where the system
releases pods) the wait until every pod that fits is Running. Systems:

- ``none``: no webhook; kube-scheduler places the pods.
- ``kueue``: Kueue's own pod webhooks (mutating and validating, its pod integration) and its
  manager, with one ClusterQueue per namespace holding half of the GPUs.
- ``berth-webhook``: ``berth webhook`` alone (pods are gated and stay so: creation only).
- ``volcano-webhook``: Volcano's admission webhook alone (``vc-webhook-manager``, built by
  ``e2e/build.sh volcano-webhook``) with its two pod webhooks as its Helm chart registers them
  (mutate and validate, every pod CREATE outside kube-system); the pods name the ``volcano``
  scheduler, whose pods those webhooks look at, and no Volcano scheduler runs: creation only,
  as ``berth-webhook``.
- ``berth-serve``: ``berth serve``, the webhook and, in a child process, the controller.
- ``berth-serve-nice0``: the same with ``--controller-nice 0``: the controller child at the
  webhook's CPU priority instead of 10 below it.
- ``berth-serve-short-solve`` (a diagnosis, not a configuration anyone ships): ``berth
  serve`` with the solver's time limit cut from 2 s to 0.25 s, to see what the solve's CPU
  costs the creates.
- ``berth-serve-unpaced`` (a diagnosis): ``berth serve`` with ``BERTH_WRITE_PACING=off``, its
  writes 8 in flight whatever the API server's load (as before admission/controller/pacing.py).
- ``berth-serve-floor1`` (the pacing before 2026-12-06): ``BERTH_WRITE_PACING_FLOOR=1``,
  never below one write in flight. ``berth serve`` itself goes below one during a creation
  burst (a pause after each write, one in flight a quarter of the time at the floor).
- ``berth-serve-floor8`` (an experiment): ``BERTH_WRITE_PACING_FLOOR=0.125``, an eighth.
- ``berth-serve-writers1`` (a diagnosis): ``BERTH_RELEASE_WRITERS=1``, one write at a time.
- ``berth-serve-nofeed`` (the pacing before the feed, 2026-12-06): ``BERTH_SCHEDULER_FEED=0``,
  a creation burst pauses the writes even while the scheduler has no released pod left to
  bind. ``berth serve`` itself keeps writing, one at a time or more, while fewer than 100
  released pods wait to be bound.
- ``berth-serve-feed50`` (an option, off by default): ``BERTH_SCHEDULER_FEED_RATE=50``, while
  the scheduler is short of released pods as many writes in flight as 50 a second take, where
  ``berth serve`` keeps one.
- ``berth-serve-nopolicy`` (a diagnosis): ``berth serve`` without the pod-keys
  ValidatingAdmissionPolicy that config/base ships beside it (every other Berth system has
  it, bound to the burst's namespaces), to see what the API server's CEL costs the burst.
- ``berth-serve-one-process``: ``berth serve --one-process``, both in one interpreter (how
  ``berth serve`` ran before the controller got its own process).

Between systems every pod is deleted and waited for, so each burst starts on empty nodes, and
kube-scheduler is waited for until it has made no API request for 5 s: the pods of the system
before that did not fit are tried again as the others are deleted, and each try queues a
status patch behind its client's limit (50 a second), which after a ``none`` run at 10,000 pods
took 15-20 s to drain, on pods long gone, holding the next system's first binds behind it.
Reported per system: create time and rate (and its ratio to ``none``'s), time to Running p50
and p99 from each pod's create call, when 99 % of the pods that fit run counted from the
burst's first create (a pod's own time to Running grows with the create pace when the
scheduler's binds are the limit), pods Running per second (first to last Running), the
kube-apiserver's CPU seconds from the burst's start to its end (``/proc``), the mean latency
of the webhook calls as the kube-apiserver saw them (``apiserver_admission_webhook_admission_
duration_seconds``), the CPU seconds of the system's own processes, and pods lost; each JSON
row also counts the pods released (no gate left) and Running every 10 s from the first create.

    python3 e2e/bench_pace.py --nodes 1000 --pods 10000 --out e2e/bench_pace.md   # the issue's
    python3 e2e/bench_pace.py --nodes 100 --pods 1000                              # a quick look

With ``--profile DIR`` py-spy (``pip install py-spy``) samples every Berth process during each
burst's creates, only the threads that hold the interpreter lock (``--gil``), and DIR gets the
folded stacks and a summary: where the lock was held, by which part of Berth.

With ``--scheduler DIR`` kube-scheduler's own /metrics are read every second through each
burst (its queue by kind, its attempts, its API requests and their wait in its client's rate
limiter, its event handling, its CPU) with a Go CPU profile of its first 30 s; DIR gets the
series (JSON), a table every 5 s and the profile's top functions.

A measurement, not a test: it asserts nothing about speed; it exits non-zero if a pod is lost.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission.devcluster import DevCluster, create_nodes, gpu_fleet
from admission.devcluster.processes import group_members, https_context
from e2e.bench_scale import Creates, Tracker, _lift_limits, _pct
from e2e.berth import BerthWebhook, berth_webhook
from e2e.conftest import E2ECluster, drop_namespace, make_namespace
from e2e.kueue import gpu_queues, kueue_manager
from e2e.policies import POD_KEYS_POLICY
from e2e.volcano import VOLCANO_SCHEDULER, volcano_webhook

SYSTEMS = ("none", "kueue", "berth-webhook", "volcano-webhook", "berth-serve",
           "berth-serve-nice0", "berth-serve-one-process", "berth-serve-short-solve",
           "berth-serve-unpaced", "berth-serve-floor1", "berth-serve-floor8",
           "berth-serve-writers1", "berth-serve-nofeed", "berth-serve-nopolicy",
           "berth-serve-feed50")
QUEUE = "pace"
_HZ = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (and their reaped children)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15]) / _HZ  # utime stime cutime cstime
    return total


_WEBHOOK_SUM = re.compile(
    r'^apiserver_admission_webhook_admission_duration_seconds_(sum|count)\{([^}]*)\} (\S+)$')
_REQUESTS = re.compile(r'^apiserver_request_total\{([^}]*)\} (\S+)$')
_LABEL = re.compile(r'(\w+)="([^"]*)"')
WRITE_VERBS = {"POST", "PATCH", "PUT", "DELETE"}


def apiserver_counters(api: client.ApiClient) -> tuple[float, float, dict[str, float]]:
    """From the kube-apiserver's /metrics: the sum and count of every webhook call on a
    CREATE, and the write requests so far by resource (``pods``, ``pods/status``, ...)."""
    method, url, headers, _, _ = api.param_serialize("GET", "/metrics",
                                                     auth_settings=["BearerToken"])
    resp = api.call_api(method, url, header_params=headers)
    resp.read()
    total = count = 0.0
    writes: dict[str, float] = {}
    for line in resp.data.decode().splitlines():
        m = _WEBHOOK_SUM.match(line)
        if m and 'operation="CREATE"' in m.group(2):
            if m.group(1) == "sum":
                total += float(m.group(3))
            else:
                count += float(m.group(3))
            continue
        r = _REQUESTS.match(line)
        if r:
            labels = dict(_LABEL.findall(r.group(1)))
            if labels.get("verb") in WRITE_VERBS:
                res = labels.get("resource", "?") + (
                    f"/{labels['subresource']}" if labels.get("subresource") else "")
                writes[res] = writes.get(res, 0.0) + float(r.group(2))
    return total, count, writes


def _writes_per_pod(before: dict[str, float], after: dict[str, float], pods: int) -> str:
    """Write requests per created pod, by resource, the largest first (leases left out)."""
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    kept = sorted(((k, v / max(pods, 1)) for k, v in delta.items()
                  if v > 0 and k != "leases"), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:.2f}" for k, v in kept if v >= 0.01)


PROFILE_RATE = 50  # py-spy samples per second
_PROCESS = re.compile(r'process \d+:"([^"]*)";')


def summarize_profile(folded: Path, seconds: float) -> str:
    """Per process, the share of the burst each part of Berth held the interpreter lock: the
    deepest frame of a stack inside admission/ names it (else aiohttp's, else the leaf)."""
    by_part: dict[tuple[str, str], int] = {}
    for line in folded.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        procs = _PROCESS.findall(stack)
        frames = _PROCESS.sub("", stack).split(";")
        proc = ("solver worker" if procs and "multiprocessing" in procs[-1]
                else "controller child" if procs and "--no-webhook" in procs[-1] else "main")
        part = next((f for f in reversed(frames) if "admission/" in f), None) or next(
            (f for f in reversed(frames) if "aiohttp/" in f), frames[-1])
        by_part[(proc, part)] = by_part.get((proc, part), 0) + int(n)
    total = seconds * PROFILE_RATE
    lines = [f"interpreter lock held, share of {seconds:.0f} s of creates "
             f"({PROFILE_RATE} samples/s):"]
    for proc in sorted({p for p, _ in by_part}):
        held = sum(n for (p, _), n in by_part.items() if p == proc)
        lines.append(f"  {proc}: {100 * held / total:.1f}%")
        for (p, part), n in sorted(by_part.items(), key=lambda kv: -kv[1]):
            if p == proc and n >= 0.005 * total:
                lines.append(f"    {100 * n / total:5.1f}%  {part}")
    return "\n".join(lines)


class Profiler:
    """py-spy on one process tree while a block runs."""

    def __init__(self, out: Path | None, name: str, pid: int | None) -> None:
        self.out, self.name, self.pid = out, name, pid
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    def __enter__(self) -> Profiler:
        if self.out is not None and self.pid is not None:
            exe = shutil.which("py-spy")
            if exe is None:
                raise SystemExit("--profile needs py-spy on PATH (pip install py-spy)")
            self.out.mkdir(parents=True, exist_ok=True)
            self.proc = subprocess.Popen(
                [exe, "record", "--pid", str(self.pid), "--subprocesses", "--nonblocking",
                 "--gil", "--rate", str(PROFILE_RATE), "--format", "raw",
                 "--output", str(self.out / f"{self.name}.folded")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.started = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None or self.out is None:
            return
        seconds = time.monotonic() - self.started
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        self.proc.wait(timeout=60)
        folded = self.out / f"{self.name}.folded"
        if folded.exists():
            summary = summarize_profile(folded, seconds)
            (self.out / f"{self.name}.txt").write_text(summary + "\n")
            print(f"{self.name}: {summary}", flush=True)


def _wait_first_cycle(hook: BerthWebhook, timeout: float = 180) -> None:
    """Until the controller has run a cycle: a burst should meet Berth running, not Berth
    importing its solver (which a live deployment did long before)."""
    ctx = https_context(hook.ca)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(
                f"https://127.0.0.1:{hook.port}/metrics", context=ctx, timeout=5) as r:
            m = re.search(r"^berth_cycles_total (\S+)$", r.read().decode(), re.M)
            if m and float(m.group(1)) >= 1:
                return
        time.sleep(1)
    raise RuntimeError(f"berth serve ran no cycle in {timeout:.0f} s; see {hook.log}")


class ApiserverProfile:
    """A Go CPU profile of the kube-apiserver (its /debug/pprof/profile) over the first
    ``seconds`` of a burst's creates, and its top functions (``go tool pprof -top``)."""

    def __init__(self, out: Path | None, name: str, api: client.ApiClient,
                 seconds: int = 30) -> None:
        self.out, self.name, self.api, self.seconds = out, name, api, seconds
        self.thread: threading.Thread | None = None

    def _fetch(self) -> None:
        assert self.out is not None
        method, url, headers, _, _ = self.api.param_serialize(
            "GET", "/debug/pprof/profile", query_params=[("seconds", str(self.seconds))],
            auth_settings=["BearerToken"])
        resp = self.api.call_api(method, url, header_params=headers,
                                 _request_timeout=self.seconds + 60)
        resp.read()
        (self.out / f"{self.name}.apiserver.pprof").write_bytes(resp.data)

    def __enter__(self) -> ApiserverProfile:
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            self.thread = threading.Thread(target=self._fetch, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.thread is None or self.out is None:
            return
        self.thread.join(self.seconds + 90)
        pprof_top(self.out / f"{self.name}.apiserver.pprof",
                  self.out / f"{self.name}.apiserver.txt")


def pprof_top(prof: Path, out: Path) -> None:
    """A Go CPU profile's top functions by cumulative time (``go tool pprof -top``) into
    ``out``, when the profile was taken and Go is here."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if prof.exists() and Path(go).exists():
        top = subprocess.run([go, "tool", "pprof", "-top", "-cum", "-nodecount=60", str(prof)],
                             capture_output=True, text=True, timeout=120)
        out.write_text(top.stdout + top.stderr)


_SCHED_SERIES = re.compile(
    r'^(scheduler_pending_pods|scheduler_schedule_attempts_total|rest_client_requests_total'
    r'|rest_client_rate_limiter_duration_seconds_(?:sum|count)'
    r'|scheduler_event_handling_duration_seconds_(?:sum|count)'
    r'|scheduler_queue_incoming_pods_total|process_cpu_seconds_total)(?:\{([^}]*)\})? (\S+)$')
#: the label that tells each series' values apart in the trace (others are summed over)
_SCHED_KEY = {"scheduler_pending_pods": "queue", "scheduler_schedule_attempts_total": "result",
              "rest_client_requests_total": "method",  # and its code, below
              "rest_client_rate_limiter_duration_seconds_sum": "verb",
              "rest_client_rate_limiter_duration_seconds_count": "verb",
              "scheduler_event_handling_duration_seconds_sum": "event",
              "scheduler_event_handling_duration_seconds_count": "event",
              "scheduler_queue_incoming_pods_total": "event"}


def scheduler_get(cluster: DevCluster, path: str, timeout: float) -> bytes:
    """GET ``path`` from the dev cluster's kube-scheduler, as its admin (/metrics, pprof)."""
    ctx = https_context(cert=cluster.pki.admin_cert, key=cluster.pki.admin_key)
    url = f"https://127.0.0.1:{cluster.ports.scheduler}{path}"
    with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:
        return bytes(r.read())


def scheduler_sample(text: str) -> dict[str, float]:
    """The kube-scheduler's queue, attempts, client requests and rate-limiter waits, event
    handling and CPU from one scrape of its /metrics, as flat ``name{key}`` -> value."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SCHED_SERIES.match(line)
        if not m:
            continue
        name, labels, value = m.groups()
        key = _SCHED_KEY.get(name)
        lab = dict(_LABEL.findall(labels or ""))
        tag = lab.get(key, "") if key else ""
        if name == "rest_client_requests_total":
            tag += f" {lab.get('code', '?')}"
        k = f"{name}{{{tag}}}" if tag else name
        out[k] = out.get(k, 0.0) + float(value)
    return out


class SchedulerTrace:
    """kube-scheduler's own view of a burst: its /metrics every second from the first create
    until every pod runs (pending pods by queue: active, backoff, unschedulable, gated; its
    scheduling attempts; its API requests and how long its client's rate limiter held them;
    how long it took to handle each kind of event; its CPU) and a Go CPU profile over the
    first ``seconds``, into DIR. The profile's and the scrapes' CPU fall on these 2 cores
    for every system alike."""

    def __init__(self, out: Path | None, name: str, cluster: DevCluster,
                 seconds: int = 30) -> None:
        self.out, self.name, self.seconds = out, name, seconds
        self.cluster = cluster
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.samples: list[dict[str, float]] = []
        self.t0 = 0.0

    def _get(self, path: str, timeout: float) -> bytes:
        return scheduler_get(self.cluster, path, timeout)

    def _scrape(self) -> None:
        while not self.stop.is_set():
            at = time.monotonic()
            with contextlib.suppress(OSError):
                sample = scheduler_sample(self._get("/metrics", 10).decode())
                sample["t"] = round(at - self.t0, 2)
                self.samples.append(sample)
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - at)))

    def _profile(self) -> None:
        assert self.out is not None
        with contextlib.suppress(OSError):
            data = self._get(f"/debug/pprof/profile?seconds={self.seconds}", self.seconds + 60)
            (self.out / f"{self.name}.scheduler.pprof").write_bytes(data)

    def __enter__(self) -> SchedulerTrace:
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            self.t0 = time.monotonic()
            self.threads = [threading.Thread(target=f, daemon=True)
                            for f in (self._scrape, self._profile)]
            for t in self.threads:
                t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.out is None:
            return
        self.stop.set()
        for t in self.threads:
            t.join(self.seconds + 90)
        (self.out / f"{self.name}.scheduler.json").write_text(json.dumps(self.samples) + "\n")
        summary = scheduler_summary(self.samples)
        pprof_top(self.out / f"{self.name}.scheduler.pprof",
                  self.out / f"{self.name}.scheduler-pprof.txt")
        (self.out / f"{self.name}.scheduler.txt").write_text("\n".join(summary) + "\n")
        print(f"{self.name}: kube-scheduler\n" + "\n".join(summary[:14]), flush=True)


def scheduler_summary(samples: list[dict[str, float]]) -> list[str]:
    """A table, every 5 s of a trace: the scheduler's queue by kind, its attempts, its API
    requests and its client's rate-limiter wait (mean over the interval) and its CPU."""
    rows = ["| t s | active | backoff | unschedulable | gated | scheduled | unschedulable tries"
            " | POST | PATCH | limiter wait ms (mean) | event handling ms (mean) | cpu s |",
            "|" + "---|" * 12]
    if not samples:
        return rows
    prev = samples[0]  # counters run from the scheduler's start: report their increase
    for s in samples[1:]:
        if int(s["t"] // 5) == int(prev["t"] // 5) and s is not samples[-1]:
            continue

        d = {k: v - prev.get(k, 0.0) for k, v in s.items()}

        def total(prefix: str, d: dict[str, float] = d) -> float:
            return sum(v for k, v in d.items() if k.startswith(prefix))

        lim_n = total("rest_client_rate_limiter_duration_seconds_count")
        lim_s = total("rest_client_rate_limiter_duration_seconds_sum")
        ev_n = total("scheduler_event_handling_duration_seconds_count")
        ev_s = total("scheduler_event_handling_duration_seconds_sum")
        q = {k: int(s.get(f"scheduler_pending_pods{{{k}}}", 0))
             for k in ("active", "backoff", "unschedulable", "gated")}
        rows.append(
            f"| {s['t']:.0f} | {q['active']} | {q['backoff']} | {q['unschedulable']} | "
            f"{q['gated']} | {int(d.get('scheduler_schedule_attempts_total{scheduled}', 0))} | "
            f"{int(d.get('scheduler_schedule_attempts_total{unschedulable}', 0))} | "
            f"{int(total('rest_client_requests_total{POST '))} | "
            f"{int(total('rest_client_requests_total{PATCH '))} | "
            f"{1000 * lim_s / lim_n if lim_n else 0:.0f} | "
            f"{1000 * ev_s / ev_n if ev_n else 0:.2f} | "
            f"{d.get('process_cpu_seconds_total', 0):.1f} |")
        prev = s
    return rows


class Bench:
    def __init__(self, args: argparse.Namespace, cluster: DevCluster, e2e: E2ECluster,
                 work: Path, fleet_gpus: int) -> None:
        self.args, self.cluster, self.e2e, self.work = args, cluster, e2e, work
        self.core = e2e.core
        self.fleet_gpus = fleet_gpus
        self.apiserver = next(r.pid for r in cluster.records if r.name == "kube-apiserver")
        self.berth_pid: int | None = None  # the running Berth process, for --profile
        self.scheduler_name: str | None = None  # the pods' schedulerName (None: the default)
        self.runs = 0
        self.stem = ""  # the files of this run: its number and system (a system may repeat)

    @contextlib.contextmanager
    def system(self, name: str, namespaces: dict[str, str]
               ) -> Iterator[tuple[Callable[[], list[int]], dict[str, str], bool]]:
        """Set ``name`` up; yield (its processes, labels for the pods, whether pods run)."""
        if name == "none":
            yield (lambda: []), {}, True
        elif name == "kueue":
            ns = list(namespaces.values())
            with kueue_manager(self.e2e, self.work / name, ns, frameworks=("pod",)) as rec, \
                    contextlib.ExitStack() as stack:
                for n in ns:
                    stack.enter_context(gpu_queues(self.e2e, n, QUEUE,
                                                   self.fleet_gpus // len(ns)))
                yield (lambda: group_members(rec.pgid)), \
                    {"kueue.x-k8s.io/queue-name": QUEUE}, True
        elif name == "volcano-webhook":
            with volcano_webhook(self.e2e, self.work / name,
                                 next(iter(namespaces.values()))) as rec:
                self.scheduler_name = VOLCANO_SCHEDULER
                try:
                    yield (lambda: group_members(rec.pgid)), {}, False
                finally:
                    self.scheduler_name = None
        else:
            serve = name != "berth-webhook"
            extra = {"berth-serve-one-process": ("--one-process",),
                     "berth-serve-nice0": ("--controller-nice", "0")}.get(name, ())
            def edit(doc: dict[str, Any]) -> None:
                _lift_limits(doc)
                if name == "berth-serve-short-solve":
                    doc["solver"]["timeLimitSeconds"] = 0.25

            env = {"berth-serve-unpaced": {"BERTH_WRITE_PACING": "off"},
                   "berth-serve-floor1": {"BERTH_WRITE_PACING_FLOOR": "1"},
                   "berth-serve-floor8": {"BERTH_WRITE_PACING_FLOOR": "0.125"},
                   "berth-serve-writers1": {"BERTH_RELEASE_WRITERS": "1"},
                   "berth-serve-nofeed": {"BERTH_SCHEDULER_FEED": "0"},
                   "berth-serve-feed50": {"BERTH_SCHEDULER_FEED_RATE": "50"}}.get(name)
            policies = () if name == "berth-serve-nopolicy" else (POD_KEYS_POLICY,)
            with berth_webhook(self.e2e, self.work / name, namespaces, serve=serve,
                               edit_policy=edit, serve_args=extra, env=env,
                               admission_policy_files=policies) as hook:
                assert hook.record is not None
                pgid = hook.record.pgid
                self.berth_pid = hook.record.pid
                if serve:
                    _wait_first_cycle(hook)
                try:
                    # the controller child and its solver worker stay in the group
                    yield (lambda: group_members(pgid)), {}, serve
                finally:
                    self.berth_pid = None
                    if self.args.logs is not None:
                        self.args.logs.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(hook.log, self.args.logs / f"{self.stem}.log")

    def scheduler_requests(self) -> float:
        """How many API requests kube-scheduler has made since it started (its /metrics)."""
        sample = scheduler_sample(scheduler_get(self.cluster, "/metrics", 10).decode())
        return sum(v for k, v in sample.items() if k.startswith("rest_client_requests_total"))

    def scheduler_quiet(self, quiet_s: float = 5.0, timeout: float = 900) -> None:
        """Wait until kube-scheduler has made no API request for ``quiet_s``. Its client
        sends at most 50 a second (``--kube-api-qps``); the pods of the system before that did
        not fit are tried again as the others are deleted, and each try queues a status patch
        behind that limit, which is still draining, on pods long gone, when the next burst
        starts (2026-12-06: 15-20 s of the next system's first binds, whichever it was)."""
        start = last_change = time.monotonic()
        first = last = self.scheduler_requests()
        while time.monotonic() - last_change < quiet_s:
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"kube-scheduler still busy after {timeout:.0f} s")
            time.sleep(1)
            now = self.scheduler_requests()
            if now != last:
                last, last_change = now, time.monotonic()
        print(f"kube-scheduler quiet after {time.monotonic() - start:.0f} s "
              f"({last - first:.0f} requests drained)", flush=True)

    def run(self, name: str) -> dict[str, Any]:
        self.stem = f"{self.runs:02d}-{name}"
        self.runs += 1
        self.scheduler_quiet()  # the previous system's clean-up must not delay this burst
        namespaces = {"team-a": make_namespace(self.core, f"pace-{name}-a"),
                      "team-b": make_namespace(self.core, f"pace-{name}-b")}
        try:
            with self.system(name, namespaces) as (procs, labels, runs):
                row = self._burst(name, namespaces, procs, labels, runs)
                print(json.dumps(row), flush=True)  # before the clean-up, which may fail
                # Emptied while the system still runs: Kueue lifts its finalizers as pods go.
                for ns in namespaces.values():
                    self._empty(ns)
                return row
        finally:
            for ns in namespaces.values():
                self._empty(ns)
                drop_namespace(self.e2e.api, ns, timeout=600)

    def _empty(self, ns: str, timeout: float = 900) -> None:
        """Delete every pod (lifting finalizers a stopped system left) and wait for them. A
        delete of 10,000 pods outlasts the API server's request timeout (504) and goes on
        server-side; it is asked again until the namespace is empty."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(client.ApiException):
                self.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0,
                                                           _request_timeout=120)
            with contextlib.suppress(client.ApiException):
                left = json.loads(self.core.list_namespaced_pod(
                    ns, limit=500, _preload_content=False).data)["items"]
                if not left:
                    return
                for p in left:
                    if p["metadata"].get("finalizers"):
                        with contextlib.suppress(client.ApiException):
                            self.core.patch_namespaced_pod(p["metadata"]["name"], ns,
                                                           {"metadata": {"finalizers": None}})
            time.sleep(5)
        raise RuntimeError(f"namespace {ns} still has pods after {timeout:.0f} s")

    def _burst(self, name: str, namespaces: dict[str, str], procs: Callable[[], list[int]],
               labels: dict[str, str], runs: bool) -> dict[str, Any]:
        args = self.args
        tracker, stop = Tracker(), threading.Event()
        for ns in namespaces.values():
            threading.Thread(target=tracker.run, args=(self.core, ns, stop), daemon=True).start()
        burst = Creates(self.core, list(namespaces.values()), labels=labels,
                        scheduler_name=self.scheduler_name)
        created, failed, ns_list = burst.created, burst.failed, burst.namespaces

        hook_sum0, hook_n0, writes0 = apiserver_counters(self.e2e.api)
        api0, own0 = cpu_seconds([self.apiserver]), cpu_seconds(procs())
        t0 = time.monotonic()
        with SchedulerTrace(args.scheduler, self.stem, self.cluster):
            with Profiler(args.profile, self.stem, self.berth_pid), \
                    ApiserverProfile(args.profile, self.stem, self.e2e.api), \
                    ThreadPoolExecutor(max_workers=args.threads) as pool:
                list(pool.map(burst.create, range(args.pods)))
                create_s = time.monotonic() - t0  # before the profilers finish
                api_create = cpu_seconds([self.apiserver]) - api0
                hook_sum, hook_n, writes_created = apiserver_counters(self.e2e.api)
            can_run = min(len(created), self.fleet_gpus)
            if runs:
                tracker.wait_running(can_run, args.timeout)
            settled = time.monotonic() - t0
        writes_all = apiserver_counters(self.e2e.api)[2]
        api_all = cpu_seconds([self.apiserver]) - api0
        own_all = cpu_seconds(procs()) - own0
        stop.set()
        pods = {f"{ns}/{p['metadata']['name']}" for ns in ns_list for p in json.loads(
            self.core.list_namespaced_pod(ns, _preload_content=False).data)["items"]}
        lost = [k for k in created if k not in pods]
        with tracker.lock:
            running = {k: t for k, t in tracker.running.items() if k in created}
            released = [t for k, t in tracker.released.items() if k in created]
        to_run = [t - created[k] for k, t in running.items()]
        # from the burst's first create: when its pods run whatever the create pace (a pod's
        # own time to Running grows with the pace when the scheduler's binds are the limit)
        from_start = [t - t0 for t in running.values()]
        times = sorted(running.values())
        span = times[-1] - times[0] if len(times) > 1 else float("nan")
        calls = hook_n - hook_n0
        return {
            "system": name, "pods": args.pods, "created": len(created),
            "create_failed": len(failed), "create_s": round(create_s, 1),
            "create_per_s": round(len(created) / create_s, 1),
            "running": len(running) if runs else "-",
            "running_p50_s": round(_pct(to_run, 0.5), 1) if runs else "-",
            "running_p99_s": round(_pct(to_run, 0.99), 1) if runs else "-",
            "running_per_s": (round(len(running) / span, 1) if runs and span == span and span
                              else "-"),
            "burst_running_p99_s": round(_pct(from_start, 0.99), 1) if runs else "-",
            # how many were released (no gate left) and Running every 10 s from the first
            # create: where in the burst each system's pods start moving
            "released_by_10s": _by_10s([t - t0 for t in released], settled),
            "running_by_10s": _by_10s(from_start, settled),
            "apiserver_cpu_s_create": round(api_create, 1),
            "apiserver_cpu_s_total": round(api_all, 1),
            "webhook_calls": int(calls),
            "webhook_mean_ms": round(1000 * (hook_sum - hook_sum0) / calls, 1) if calls else "-",
            "system_cpu_s": round(own_all, 1) if name != "none" else "-",
            "lost": len(lost), "settled_s": round(settled, 1),
            "writes_per_pod_during_creates": _writes_per_pod(writes0, writes_created,
                                                             len(created)),
            "writes_per_pod": _writes_per_pod(writes0, writes_all, len(created)),
            "load_1m": round(os.getloadavg()[0], 1),
            "first_failures": "; ".join(failed[:2]),
        }


def _by_10s(offsets: list[float], end: float) -> list[int]:
    """How many of ``offsets`` (seconds from the first create) are at most 10, 20, ... s,
    up to ``end``."""
    xs = sorted(offsets)
    return [bisect.bisect_right(xs, 10.0 * k) for k in range(1, int(end // 10) + 2)]


MEDIAN_COLUMNS = ("create_per_s", "running_p99_s", "burst_running_p99_s", "running_per_s",
                  "apiserver_cpu_s_create", "webhook_mean_ms")


def medians(rows: list[dict[str, Any]]) -> list[str]:
    """A markdown table: per system, the median of each column over its runs, and its create
    rate against the median of the ``none`` runs (a system may be listed several times,
    interleaved, which is what makes the medians comparable on a drifting machine)."""
    cols = MEDIAN_COLUMNS
    med = ["| system | runs | " + " | ".join(f"median {c}" for c in cols) + " | vs none |",
           "|" + "---|" * (len(cols) + 3)]
    nones = [float(r["create_per_s"]) for r in rows if r["system"] == "none"]
    none_med = statistics.median(nones) if nones else None
    for name in dict.fromkeys(r["system"] for r in rows):
        mine = [r for r in rows if r["system"] == name]
        vals: list[object] = []
        for c in cols:
            xs = [float(r[c]) for r in mine if isinstance(r[c], int | float)]
            vals.append(round(statistics.median(xs), 1) if xs else "-")
        first = vals[0]
        ratio = round(first / none_med, 2) if none_med and isinstance(first, float) else "-"
        med.append(f"| {name} | {len(mine)} | " + " | ".join(map(str, vals)) + f" | {ratio} |")
    return med


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help=f"comma-separated, in this order (default: {','.join(SYSTEMS)})")
    ap.add_argument("--timeout", type=float, default=900,
                    help="seconds to wait, after a burst, for every pod that fits to run")
    ap.add_argument("--out", type=Path, default=None, help="append markdown rows here")
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR",
                    help="py-spy Berth's processes during each burst's creates, and take a "
                    "CPU profile of the kube-apiserver over their first 30 s, into DIR")
    ap.add_argument("--scheduler", type=Path, default=None, metavar="DIR",
                    help="trace kube-scheduler through each burst into DIR: its /metrics "
                    "every second (queue by kind, attempts, API requests and rate-limiter "
                    "waits, event handling, CPU) and a Go CPU profile of its first 30 s")
    ap.add_argument("--logs", type=Path, default=None, metavar="DIR",
                    help="copy each Berth system's log here (its cycle lines time each phase)")
    ap.add_argument("--warmup", action="store_true",
                    help="one burst with no webhook before the systems, not counted: on a "
                    "fresh control plane the first burst reaches Running at half the pace of "
                    "later ones whoever admits it (bench_pace.md, 2026-12-06)")
    args = ap.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        ap.error(f"--systems: unknown {unknown}; choose from {', '.join(SYSTEMS)}")
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="berth-pace-"))
    cluster = DevCluster(workdir=work)
    cluster.start()
    rows = []
    try:
        api = config.new_client_from_config(str(cluster.kubeconfig))
        core = client.CoreV1Api(api)
        racks = max(1, args.nodes // 10)
        fleet = gpu_fleet(blocks=1, racks_per_block=racks, nodes_per_rack=args.nodes // racks,
                          gpus_per_node=8)
        create_nodes(core, fleet)
        e2e = E2ECluster(api=api, kubeconfig=cluster.kubeconfig, nodes=fleet, local=cluster)
        bench = Bench(args, cluster, e2e, work, fleet_gpus=len(fleet) * 8)
        if args.warmup:
            warm = bench.run("none")
            print(f"warm-up (not counted): {warm['create_per_s']} pods/s, "
                  f"{warm['running_per_s']} Running/s", flush=True)
        for name in systems:
            try:
                rows.append(bench.run(name))
            except Exception as exc:  # one system's failure must not lose the others' rows
                print(f"{name}: failed: {type(exc).__name__}: {exc}", flush=True)
    finally:
        cluster.wipe()
    base = next((r["create_per_s"] for r in rows if r["system"] == "none"), None)
    for r in rows:
        r["vs_none"] = round(r["create_per_s"] / base, 2) if base else "-"
    head = ["system", "pods", "created", "create_s", "create_per_s", "vs_none", "running",
            "running_p50_s", "running_p99_s", "burst_running_p99_s", "running_per_s",
            "apiserver_cpu_s_create", "apiserver_cpu_s_total", "webhook_calls",
            "webhook_mean_ms", "system_cpu_s", "lost", "load_1m"]
    table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    table += ["| " + " | ".join(str(r[h]) for h in head) + " |" for r in rows]
    stamp = (f"{time.strftime('%Y-%m-%d %H:%M')} UTC, {args.nodes} nodes x 8 GPUs, "
             f"{args.pods} pods, {args.threads} threads, {round(time.monotonic() - started)} s"
             f" wall, load median {statistics.median([float(r['load_1m']) for r in rows]):.1f}"
             if rows else "")
    med = medians(rows)
    table += ["", *med]
    print(stamp)
    print("\n".join(table))
    if args.out:
        with args.out.open("a") as f:
            f.write(f"\n### Run of {stamp}\n\n" + "\n".join(table) + "\n")
    return 0 if rows and not any(r["lost"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
