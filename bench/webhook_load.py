"""Load test of `berth webhook` over TLS with keep-alive, next to a bare aiohttp TLS handler.

wrk (Debian's package) drives ~1 KB training-pod AdmissionReviews at both servers in the same
run: first at a fixed rate (default 2,000 reviews/s, paced by a Lua schedule since Debian's
wrk has no wrk2 -R option), then flat out for the saturation throughput. Each server is pinned
to one core and wrk to another with taskset. Repeated --rounds times, servers alternating; the
medians go into the table. Results: bench/webhook_load.md.

`berth webhook` serves on uvloop when it is installed; the bare handler runs on both asyncio's
default loop (how the issue's reference figure was taken) and uvloop, so the comparison on
the same loop stays in the table.

    python3 bench/webhook_load.py [--rate 2000 --rate 300] [--seconds 15] [--rounds 3] [--write]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.webhook_load_kueue import KUEUE_VERSION, PATH, kueue_webhook  # noqa: E402

POLICY = REPO / "config" / "policy" / "sample-policy.yaml"
# Reviews/s a bare aiohttp TLS handler answers on this two-core machine when it is otherwise
# idle (wrk on the other core), as measured when the targets were set.
REFERENCE = 9900
TARGET_RATE = 2000  # reviews/s at which the p99 target is set
MICRO_SECTION = "## review() alone"  # bench/review_micro.py's section of the results file
INSTRUCTIONS_SECTION = "## Instructions per review"  # bench/webhook_instructions.py's

# Pace requests on a fixed schedule per wrk thread (wrk2's idea; not coordinated-omission
# corrected: latency is measured from the actual send). ffi gives a monotonic clock in ms.
LUA = r"""
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clk, bench_timespec *tp);
]]
local ts = ffi.new("bench_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end
local f = assert(io.open("__BODY__", "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
local interval = __INTERVAL__
local next_t = nil
function delay()
  if interval <= 0 then return 0 end
  local n = now_ms()
  if next_t == nil or next_t < n - 50 then next_t = n end
  local d = next_t - n
  next_t = next_t + interval
  if d < 0 then d = 0 end
  return d
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests":%d,"duration_us":%d,"socket_errors":%d,"non2xx":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max))
end
"""

# The reference: parse the review, answer with a fixed patch. Same TLS setup, no access log.
# argv: port, certificate directory, event loop ("asyncio" or "uvloop").
BARE = r"""
import asyncio, base64, json, ssl, sys
from aiohttp import web
PATCH = base64.b64encode(json.dumps([{"op": "add", "path": "/metadata/labels/berth.dev~1tenant",
                                      "value": "team-a"}]).encode()).decode()
async def mutate(request):
    review = json.loads(await request.read())
    uid = review["request"]["uid"]
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": True, "patchType": "JSONPatch", "patch": PATCH}}
    return web.Response(body=json.dumps(body).encode(), content_type="application/json")
async def healthz(request):
    return web.Response(text="ok")
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.minimum_version = ssl.TLSVersion.TLSv1_2
ctx.load_cert_chain(sys.argv[2] + "/tls.crt", sys.argv[2] + "/tls.key")
app = web.Application()
app.router.add_post("/mutate-pods", mutate)
app.router.add_get("/healthz", healthz)
loop = None
if sys.argv[3] == "uvloop":
    import uvloop
    loop = uvloop.new_event_loop()
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), ssl_context=ctx, access_log=None,
            print=None, loop=loop)
"""



def _verdict(value: float, bound: float, *, below: bool) -> str:
    met = value <= bound if below else value >= bound
    return "met" if met else "not met"

def training_pod_review(kueue: bool = False) -> dict[str, object]:
    """A pod of an indexed training Job: ten env entries, GPU tolerations; about 1 KB.

    ``kueue``: the same pod as a plain pod in Kueue's vocabulary (queue-name label, no owner),
    which is what Kueue's pod webhook acts on; a Job's pods are the Job integration's."""
    env = [("NCCL_DEBUG", "WARN"), ("NCCL_IB_DISABLE", "0"), ("MASTER_ADDR", "llama-ft-0.llama-ft"),
           ("MASTER_PORT", "29500"), ("WORLD_SIZE", "16"), ("OMP_NUM_THREADS", "8"),
           ("PYTHONUNBUFFERED", "1"), ("HF_HOME", "/cache/hf"), ("WANDB_MODE", "offline"),
           ("CUDA_DEVICE_MAX_CONNECTIONS", "1")]
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": "llama-ft-3-", "namespace": "team-a",
            "labels": {"batch.kubernetes.io/job-name": "llama-ft",
                       "batch.kubernetes.io/job-completion-index": "3"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "llama-ft",
                                 "uid": "b2f1c7a0-41a6-4e3c-9c2a-1c9d5c1f7e21",
                                 "controller": True}],
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                "command": ["torchrun", "train.py"],
                "env": [{"name": k, "value": v} for k, v in env],
                "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi"}},
            }],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
    }
    if kueue:
        meta = pod["metadata"]
        assert isinstance(meta, dict)
        del meta["ownerReferences"]
        meta["labels"] = {"kueue.x-k8s.io/queue-name": "team-a-queue", "app": "llama-ft"}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "0a1e7c52-3b8e-4f7e-a7a5-2c51b8e3c901",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "team-a", "operation": "CREATE", "object": pod}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, ca: Path, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    ctx = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx,
                                        timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"server on port {port} not ready after {timeout}s")


def server_command(kind: str, port: int, certs: Path) -> list[str]:
    """The command line of server ``kind``: bare, bare-uvloop, berth or berth-asyncio."""
    if kind.startswith("berth"):
        loop = "asyncio" if kind == "berth-asyncio" else "auto"
        return [sys.executable, "-c", "from admission.cli import main; raise SystemExit(main())",
                "webhook", "--policy", str(POLICY), "--event-loop", loop,
                "--cert-dir", str(certs), "--port", str(port), "--log-level", "WARNING"]
    loop = "uvloop" if kind == "bare-uvloop" else "asyncio"
    return [sys.executable, "-c", BARE, str(port), str(certs), loop]


def start(kind: str, port: int, certs: Path, core: str) -> subprocess.Popen[bytes]:
    cmd = server_command(kind, port, certs)
    proc = subprocess.Popen(["taskset", "-c", core, *cmd], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_ready(port, certs / "ca.crt", proc)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wrk(port: int, script: Path, seconds: int, connections: int, core: str,
        path: str = "/mutate-pods") -> dict[str, float]:
    cmd = ["taskset", "-c", core, "wrk", "-t1", f"-c{connections}", f"-d{seconds}s",
           "-s", str(script), f"https://127.0.0.1:{port}{path}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60).stdout
    m = re.search(r"^BENCH (\{.*\})$", out, re.M)
    if not m:
        raise SystemExit(f"wrk printed no result:\n{out}")
    r: dict[str, float] = json.loads(m.group(1))
    r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
    return r


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc; immune to time waiting for a
    contended core, which is why per-request CPU is the steadier figure on a shared machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_review_mean_us(port: int, ca: Path) -> float | None:
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx) as r:
            text = r.read().decode()
    except OSError:
        return None
    s = re.search(r"^berth_webhook_review_seconds_sum (\S+)$", text, re.M)
    n = re.search(r"^berth_webhook_review_seconds_count (\S+)$", text, re.M)
    if not s or not n or float(n.group(1)) == 0:
        return None
    return float(s.group(1)) / float(n.group(1)) * 1e6


def kueue_note() -> str:
    found = sorted(Path.home().glob(".cache/berth-e2e/kueue-*/bin/kueue"))
    if not found:
        return "the e2e build cache (~/.cache/berth-e2e) held no Kueue binary when this ran"
    return (f"a Kueue binary exists ({found[-1]}), but its webhook needs a running control "
            "plane with Kueue's CRDs, which this benchmark does not start")


def conditions() -> str:
    load = os.getloadavg()
    cpus = os.cpu_count()
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout
    wrk_version = wrk_version.splitlines()[0] if wrk_version else "wrk"
    return (f"{cpus} CPUs ({model}); load average before the run {load[0]:.2f} "
            f"{load[1]:.2f} {load[2]:.2f}; Python {sys.version.split()[0]}; {wrk_version}")


NAMES = {"bare": "bare aiohttp TLS handler (asyncio loop)",
         "bare-uvloop": "bare aiohttp TLS handler (uvloop)",
         "berth": "`berth webhook` (uvloop)",
         "berth-asyncio": "`berth webhook --event-loop asyncio`",
         "kueue": f"Kueue {KUEUE_VERSION} pod webhook"}
SERVERS = ("bare", "bare-uvloop", "berth", "berth-asyncio")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, action="append",
                    help="fixed rate in reviews/s (repeatable; default 2000)")
    ap.add_argument("--seconds", type=int, default=15, help="length of each wrk run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=32, help="wrk connections (keep-alive)")
    ap.add_argument("--server-core", default="0")
    ap.add_argument("--wrk-core", default="1")
    ap.add_argument("--kueue", action="store_true",
                    help="also measure Kueue's pod webhook (needs e2e/build.sh's binaries); "
                    "all servers then get the plain-pod variant of the payload")
    ap.add_argument("--servers", default="bare,bare-uvloop,berth",
                    help=f"comma-separated, from {', '.join(SERVERS)} (default: %(default)s)")
    ap.add_argument("--write", action="store_true", help="write bench/webhook_load.md")
    args = ap.parse_args()
    args.rate = args.rate or [2000]
    servers = args.servers.split(",")
    unknown = [k for k in servers if k not in SERVERS]
    if unknown or "berth" not in servers or "bare" not in servers:
        raise SystemExit(f"--servers: must list bare and berth, from {', '.join(SERVERS)}; "
                         f"got {args.servers}")
    for tool in ("wrk", "taskset"):
        if shutil.which(tool) is None:
            hint = "apt-get update && apt-get install -y wrk" if tool == "wrk" else \
                "apt-get install -y util-linux"
            raise SystemExit(f"{tool} is missing: install it with `{hint}`")
    kinds = [*servers, *(["kueue"] if args.kueue else [])]
    started = conditions()
    with contextlib.ExitStack() as stack:
        kueue = None
        if args.kueue:
            kueue = stack.enter_context(kueue_webhook(args.server_core))
        results, body_bytes = measure(args, kinds, kueue)
    report = render(results, args, kinds, started, body_bytes)
    print(report)
    if args.write:
        out = REPO / "bench" / "webhook_load.md"
        # Keep the sections of bench/review_micro.py and bench/webhook_instructions.py
        # (measured separately), from the first of them on.
        old = out.read_text() if out.exists() else ""
        starts = [old.index(s) for s in (MICRO_SECTION, INSTRUCTIONS_SECTION) if s in old]
        kept = old[min(starts):] if starts else ""
        out.write_text(report.rstrip("\n") + "\n\n" + kept if kept else report)
    return 0


def measure(args: argparse.Namespace, kinds: list[str], kueue: tuple[int, Path, int] | None
            ) -> tuple[dict[str, dict[str, list[float]]], int]:
    """results[kind][key] -> one value per round; keys "p99_ms@2000", "sat_rps", ..."""
    from admission.certs import write_bundle

    results: dict[str, dict[str, list[float]]] = {k: {} for k in kinds}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        certs = tmp / "certs"
        write_bundle(certs, "127.0.0.1")
        body = tmp / "review.json"
        body.write_text(json.dumps(training_pod_review(kueue=args.kueue), separators=(",", ":")))
        body_bytes = body.stat().st_size
        scripts = {}
        for rate in [0, *args.rate]:
            scripts[rate] = tmp / f"rate-{rate}.lua"
            scripts[rate].write_text(LUA.replace("__BODY__", str(body)).replace(
                "__INTERVAL__", repr(1000 / rate) if rate else "0"))
        for rnd in range(args.rounds):
            for kind in kinds:
                row = results[kind]
                proc = None
                if kind == "kueue":
                    assert kueue is not None
                    port, ca, pid, path = *kueue, PATH
                else:
                    port, ca, path = free_port(), certs / "ca.crt", "/mutate-pods"
                    proc = start(kind, port, certs, args.server_core)
                    pid = proc.pid
                try:
                    wrk(port, scripts[0], 3, args.connections, args.wrk_core, path)  # warm-up
                    line = f"round {rnd + 1} {kind:13s}:"
                    for rate in args.rate:
                        fixed = wrk(port, scripts[rate], args.seconds, args.connections,
                                    args.wrk_core, path)
                        for key in ("p50", "p90", "p99", "p999"):
                            row.setdefault(f"{key}_ms@{rate}", []).append(fixed[f"{key}_us"] / 1e3)
                        row.setdefault(f"rps@{rate}", []).append(fixed["rps"])
                        row.setdefault("errors", []).append(fixed["socket_errors"]
                                                            + fixed["non2xx"])
                        line += (f" {rate}/s -> {fixed['rps']:.0f}/s p50 "
                                 f"{fixed['p50_us'] / 1e3:.2f} ms "
                                 f"p99 {fixed['p99_us'] / 1e3:.2f} ms;")
                    cpu0 = cpu_seconds(pid)
                    sat = wrk(port, scripts[0], args.seconds, args.connections, args.wrk_core,
                              path)
                    cpu_us = (cpu_seconds(pid) - cpu0) / max(sat["requests"], 1) * 1e6
                    review_us = (server_review_mean_us(port, ca) if kind.startswith("berth")
                                 else None)
                finally:
                    if proc is not None:
                        stop(proc)
                row.setdefault("sat_rps", []).append(sat["rps"])
                row.setdefault("sat_p99_ms", []).append(sat["p99_us"] / 1e3)
                row.setdefault("cpu_us", []).append(cpu_us)
                row["errors"].append(sat["socket_errors"] + sat["non2xx"])
                if review_us is not None:
                    row.setdefault("review_us", []).append(review_us)
                print(f"{line} saturation {sat['rps']:.0f}/s (p99 {sat['p99_us'] / 1e3:.2f} ms); "
                      f"server CPU {cpu_us:.0f} us/review"
                      + (f"; review() mean {review_us:.0f} us" if review_us else ""), flush=True)
    return results, body_bytes


def render(results: dict[str, dict[str, list[float]]], args: argparse.Namespace,
           kinds: list[str], started: str, body_bytes: int) -> str:
    def med(kind: str, key: str) -> float:
        values = results[kind].get(key) or [float("nan")]
        return statistics.median(values)

    others = [k for k in kinds if k != "berth"]
    head = "| | " + " | ".join(NAMES[k] for k in kinds) + " | " + " | ".join(
        f"berth/{k}" for k in others) + " |"
    sep = "|---|" + "---:|" * (len(kinds) + len(others))

    def row(label: str, key: str, unit: str, fmt: str, ratio: bool = True) -> str:
        cells = " | ".join(f"{med(k, key):{fmt}}{unit}" for k in kinds)
        ratios = " | ".join(f"{med('berth', key) / med(k, key):.2f}" if ratio else ""
                            for k in others)
        return f"| {label} | {cells} | {ratios} |"

    lines = [head, sep]
    for rate in args.rate:
        target = " (target <= 3 ms)" if rate == 2000 else ""
        lines += [
            row(f"achieved rate at {rate}/s offered", f"rps@{rate}", "/s", ".0f", False),
            row(f"p50 at {rate}/s", f"p50_ms@{rate}", " ms", ".2f"),
            row(f"**p99 at {rate}/s**{target}", f"p99_ms@{rate}", " ms", ".2f"),
            row(f"p99.9 at {rate}/s", f"p999_ms@{rate}", " ms", ".2f"),
        ]
    lines += [
        row("**saturation** (target >= 5,000/s)", "sat_rps", "/s", ".0f"),
        row("p99 at saturation", "sat_p99_ms", " ms", ".2f"),
        row("server CPU per review at saturation", "cpu_us", " us", ".0f"),
        "| 1 s / CPU per review (this machine, under this load) | " + " | ".join(
            f"{1e6 / med(k, 'cpu_us'):.0f}/s" for k in kinds) + " |" + " |" * len(others),
        "| errors (socket + non-2xx), all runs | " + " | ".join(
            f"{sum(results[k]['errors']):.0f}" for k in kinds) + " |" + " |" * len(others),
    ]
    per_round = []
    for kind in kinds:
        rates = "; ".join(
            f"p99 at {rate}/s " + ", ".join(f"{v:.2f}" for v in results[kind][f"p99_ms@{rate}"])
            + " ms" for rate in args.rate)
        per_round.append(
            f"- {kind}: {rates}; saturation "
            + ", ".join(f"{v:.0f}" for v in results[kind]["sat_rps"]) + "/s; CPU "
            + ", ".join(f"{v:.0f}" for v in results[kind]["cpu_us"]) + " us/review")
    flags = " ".join(f"--rate {r}" for r in args.rate) + (" --kueue" if args.kueue else "")
    if args.servers != "bare,bare-uvloop,berth":
        flags += f" --servers {args.servers}"
    cpu_ratio = med("berth", "cpu_us") / med("bare", "cpu_us")
    sat_ratio = med("berth", "sat_rps") / med("bare", "sat_rps")
    same_loop = ""
    if "bare-uvloop" in kinds:
        same_loop = (
            f" On the same loop (uvloop) the bare handler spends "
            f"{med('bare-uvloop', 'cpu_us'):.0f} us per review: Berth "
            f"{med('berth', 'cpu_us') / med('bare-uvloop', 'cpu_us'):.2f}x its CPU, "
            f"{med('berth', 'sat_rps') / med('bare-uvloop', 'sat_rps'):.2f}x its saturation "
            "throughput.")
    if args.kueue:
        kueue_line = (f"- Kueue's pod webhook (Go, controller-runtime) on the same payload: Berth "
                      f"reaches {med('berth', 'sat_rps') / med('kueue', 'sat_rps'):.2f}x its "
                      f"saturation throughput and spends "
                      f"{med('berth', 'cpu_us') / med('kueue', 'cpu_us'):.2f}x its CPU per "
                      "review. Kueue answers with its own patch (managed label, role hash, "
                      "finalizer, its two gates).")
    else:
        kueue_line = f"- Kueue's own pod webhook was not measured: {kueue_note()}."
    payload = ("a plain pod in Kueue's vocabulary (queue-name label, no owner: Kueue's pod "
               "webhook leaves a Job's pods to its Job integration), otherwise the same "
               "8-GPU training pod" if args.kueue else
               "an 8-GPU pod of an indexed Job (ten env entries, two tolerations)")
    p99_berth = med("berth", f"p99_ms@{TARGET_RATE}")
    sat_berth = med("berth", "sat_rps")
    reading = [
        "## Reading",
        "",
        f"- Targets: p99 <= 3 ms at 2,000/s ({_verdict(p99_berth, 3.0, below=True)}: "
        f"{p99_berth:.2f} ms) and >= 5,000/s at saturation "
        f"({_verdict(sat_berth, 5000.0, below=False)}: {sat_berth:.0f}/s). The bare handler "
        f"reached {med('bare', 'sat_rps'):.0f}/s in the same run; the issue quotes "
        f"~{REFERENCE:,}/s for such a handler on an idle machine of this kind. Read the "
        "load average above before comparing absolute figures across runs.",
        f"- Same run, same conditions: Berth spends {cpu_ratio:.2f}x the CPU per review of the "
        f"bare handler on asyncio's loop (the reference's setup) and reaches {sat_ratio:.2f}x "
        "its saturation throughput. The bar is that Berth's review costs at most half of the "
        f"bare handler's throughput (ratio >= 0.5).{same_loop}",
        f"- Estimate, not a measurement: scaled to the idle reference ({REFERENCE:,}/s) by the "
        f"CPU ratio to the bare handler on asyncio's loop, Berth would answer about "
        f"{REFERENCE / cpu_ratio:,.0f} reviews/s on a dedicated core.",
        kueue_line,
        "",
    ]
    return "\n".join([
        "# Webhook load: `berth webhook` next to a bare aiohttp TLS handler"
        + (" and Kueue's pod webhook" if args.kueue else ""),
        "",
        "Regenerate (writes this file):",
        "",
        "```",
        f"python3 bench/webhook_load.py {flags} --seconds {args.seconds} "
        f"--rounds {args.rounds} --connections {args.connections} --write",
        "```",
        "",
        f"Each server runs alone on core {args.server_core} (`taskset`), wrk on core "
        f"{args.wrk_core} with one thread and {args.connections} keep-alive TLS connections. "
        f"The body is a {body_bytes}-byte AdmissionReview of {payload}, in the managed "
        "namespace team-a, so Berth runs its whole review and answers with a JSON Patch "
        "(labels, annotations, env, gate). The bare handler parses the review (standard-library "
        "json, as the reference figure was taken) and returns a fixed patch, through an aiohttp "
        "web.Application route, on asyncio's default loop and, as a second server, on uvloop; "
        "Berth parses and serialises with orjson and serves on uvloop (its default when "
        "installed) through aiohttp's low-level server. "
        f"Medians of {args.rounds} rounds, servers alternating within "
        f"each round; each round is a 3 s warm-up, {args.seconds} s at each fixed rate, "
        f"{args.seconds} s flat out. Server CPU per review is the server process's user+system "
        "time (from /proc) over the flat-out run divided by the reviews answered: unlike "
        "latency and throughput it does not count time spent waiting for a core that other "
        "work holds."
        + (" Kueue runs against a local control plane (admission.devcluster) started for the "
           "run, which stays idle while the servers are measured." if args.kueue else ""),
        "",
        "Fixed rate: Debian's wrk 4.1 has no wrk2 `-R`, so a Lua `delay()` paces requests on a "
        "fixed schedule (monotonic clock through LuaJIT's ffi). Latency is measured from the "
        "actual send, not the scheduled one (no coordinated-omission correction), so a stalled "
        "server looks better here than it would in wrk2.",
        "",
        f"Conditions: {started}.",
        "",
        *lines,
        "",
        *reading,
        "Per round:",
        "",
        *per_round,
        "",
    ])


if __name__ == "__main__":
    raise SystemExit(main())
