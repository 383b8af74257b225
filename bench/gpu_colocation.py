"""Co-location on a real GPU: the interference model's prediction against measured slowdowns.

Needs an NVIDIA GPU, its driver, PyTorch with CUDA and ``nvidia-ml-py``; run it on such a
machine from the repository root:

    python3 bench/gpu_colocation.py --out DIR          # about 2 minutes on one GPU

Four kinds of work, each a separate process with its own CUDA context, so the GPU
time-slices them as it does pods that share a GPU without MPS:

- ``train``: bf16 8192x8192 matrix products back to back (compute-bound, like training);
- ``stream``: copies of a 2 GiB buffer back to back (memory-bound: an optimiser step, a
  data-parallel reduction);
- ``batch``: batch-inference requests (16 layers of a 4096-row bf16 product), 5 ms apart;
- ``serve``: latency-inference requests (16 layers of a 256-row bf16 product), 4 ms apart.

Each kind first runs alone; while it runs the agent's own reader
(:func:`admission.agent.inventory.read_inventory`, the code the node agent publishes from)
samples NVML's ``utilization.gpu`` / ``utilization.memory`` and power: that is the solo
profile the controller would learn (``sm``, ``membw``). Then every pair of kinds runs side by
side. A kind's measured slowdown is its median time per iteration (a product, a copy, a
request) beside the neighbour over the same alone; the prediction is
:func:`solver.interference.slowdown` with the measured solo profiles and the shipped
contention coefficient. The report also gives the contention coefficient that would fit the
pairs best (least squares), and the agent's cost per inventory read on a real driver.

``--fake`` runs the same orchestration with workers that only sleep (no GPU, no NVML): it
checks the script itself on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KINDS = ("train", "stream", "batch", "serve")

# The worker runs in its own process: it reads commands "RUN <start> <end>" on stdin and
# answers one JSON line per command with its per-iteration times in the window.
WORKER = r"""
import json, sys, time
kind, fake = sys.argv[1], sys.argv[2] == "1"
if not fake:
    import torch
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    if kind == "train":
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        def step():
            torch.mm(a, b)
        gap = 0.0
    elif kind == "stream":
        src = torch.empty(1 << 30, device=dev, dtype=torch.float16)
        dst = torch.empty_like(src)
        def step():
            dst.copy_(src)
        gap = 0.0
    else:
        rows = 4096 if kind == "batch" else 256
        x = torch.randn(rows, 8192, device=dev, dtype=torch.bfloat16)
        w = [torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16) * 0.01 for _ in range(16)]
        def step():
            h = x
            for layer in w:
                h = torch.relu(h @ layer)
        gap = 0.005 if kind == "batch" else 0.004
    sync = torch.cuda.synchronize
    for _ in range(20):
        step()
    sync()
else:
    cost = {"train": 0.0014, "stream": 0.0010, "batch": 0.011, "serve": 0.001}[kind]
    gap = {"train": 0.0, "stream": 0.0, "batch": 0.005, "serve": 0.004}[kind]
    def step():
        time.sleep(cost)
    def sync():
        pass
print(json.dumps({"ready": kind}), flush=True)
for line in sys.stdin:
    parts = line.split()
    if not parts or parts[0] != "RUN":
        break
    start, end = float(parts[1]), float(parts[2])
    while time.time() < start:
        time.sleep(0.001)
    times = []
    while True:
        t0 = time.perf_counter()
        step()
        sync()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        if time.time() >= end:
            break
        if gap:
            time.sleep(gap)
    print(json.dumps({"kind": kind, "times": times}), flush=True)
"""


class Worker:
    def __init__(self, kind: str, fake: bool) -> None:
        self.kind = kind
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, kind, "1" if fake else "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"worker {self.kind} failed to start (exit {self.proc.wait()})")

    def start(self, t0: float, t1: float) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"RUN {t0} {t1}\n")
        self.proc.stdin.flush()

    def result(self) -> list[float]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"worker {self.kind} died (exit {self.proc.wait()})")
        return list(json.loads(line)["times"])

    def stop(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write("STOP\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=30)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


class Sampler:
    """NVML through the agent's own reader; in --fake mode, nothing."""

    def __init__(self, fake: bool) -> None:
        self.fake = fake
        self.read_s: list[float] = []
        if not fake:
            import pynvml

            from admission.agent.inventory import read_inventory
            self.nvml = pynvml
            self.read = read_inventory
            pynvml.nvmlInit()

    def sample(self) -> dict[str, float] | None:
        if self.fake:
            return None
        t0 = time.perf_counter()
        inv = self.read(self.nvml)
        self.read_s.append(time.perf_counter() - t0)
        g = inv.gpus[0]
        if g.utilisation_sm_pct is None or g.utilisation_membw_pct is None:
            return None
        return {"sm": g.utilisation_sm_pct / 100, "membw": g.utilisation_membw_pct / 100,
                "power_w": float(g.power_draw_w or 0)}


def run_scenario(workers: list[Worker], sampler: Sampler, seconds: float) -> dict[str, Any]:
    t0 = time.time() + 0.3
    t1 = t0 + seconds
    for w in workers:
        w.start(t0, t1)
    samples = []
    # Sample the middle of the window only: clocks and NVML's own averaging settle first.
    while time.time() < t1 - 0.3:
        now = time.time()
        if now > t0 + 1.0:
            s = sampler.sample()
            if s is not None:
                samples.append(s)
        time.sleep(0.2)
    times = [w.result() for w in workers]
    out: dict[str, Any] = {"kinds": [w.kind for w in workers], "times": times}
    if samples:
        out["nvml"] = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
        out["nvml_samples"] = len(samples)
    return out


def analyse(raw: dict[str, Any]) -> dict[str, Any]:
    from solver.interference import DEFAULT_CONTENTION, slowdown
    from solver.types import QoSProfile

    solo = {r["kinds"][0]: r for r in raw["scenarios"] if len(r["kinds"]) == 1}
    base = {k: statistics.median(r["times"][0]) for k, r in solo.items()}
    profiles = {}
    for k, r in solo.items():
        n = r.get("nvml") or {"sm": 0.5, "membw": 0.5}
        profiles[k] = QoSProfile(name=k, sm=min(1.0, n["sm"]), membw=min(1.0, n["membw"]))
    rows = []
    for r in raw["scenarios"]:
        if len(r["kinds"]) != 2:
            continue
        for i, k in enumerate(r["kinds"]):
            other = r["kinds"][1 - i]
            measured = statistics.median(r["times"][i]) / base[k]
            p99 = _pct(r["times"][i], 0.99) / _pct(solo[k]["times"][0], 0.99)
            rows.append({"kind": k, "beside": other, "measured": measured, "p99_ratio": p99,
                         "predicted": slowdown(profiles[k], [profiles[other]]),
                         "power_w": (r.get("nvml") or {}).get("power_w")})

    def error(c: float) -> float:
        return sum((slowdown(profiles[x["kind"]], [profiles[x["beside"]]], contention=c)
                    - x["measured"]) ** 2 for x in rows)

    grid = [i / 100 for i in range(0, 301)]
    best = min(grid, key=error)
    for x in rows:
        x["predicted_fit"] = slowdown(profiles[x["kind"]], [profiles[x["beside"]]],
                                      contention=best)
    return {
        "solo": {k: {"median_ms": base[k] * 1e3, "p99_ms": _pct(solo[k]["times"][0], .99) * 1e3,
                     "iterations": len(solo[k]["times"][0]), **(solo[k].get("nvml") or {})}
                 for k in solo},
        "pairs": rows,
        "contention_shipped": DEFAULT_CONTENTION,
        "contention_fit": best,
        "rms_shipped": (error(DEFAULT_CONTENTION) / max(1, len(rows))) ** 0.5,
        "rms_fit": (error(best) / max(1, len(rows))) ** 0.5,
    }


def busy_sum_fit(analysis: dict[str, Any]) -> dict[str, float]:
    """An alternative form, fitted to the same pairs: ``1 + c * busy(neighbour)``, where busy is
    NVML's kernel-active share (``utilization.gpu``) alone. Under time-slicing only one context's
    kernels run at a time, so what a neighbour costs is how long its kernels hold the GPU,
    whichever unit they keep busy."""
    busy = {k: min(1.0, v.get("sm", 0.5)) for k, v in analysis["solo"].items()}
    pairs = analysis["pairs"]

    def error(c: float) -> float:
        return sum((1 + c * busy[x["beside"]] - x["measured"]) ** 2 for x in pairs)

    best = min((i / 100 for i in range(0, 301)), key=error)
    return {"c": best, "rms": (error(best) / max(1, len(pairs))) ** 0.5,
            "rms_c1": (error(1.0) / max(1, len(pairs))) ** 0.5}


def compact(result: dict[str, Any]) -> dict[str, Any]:
    """The record kept: each worker's times summarised (count, mean and percentiles in ms)."""
    def summary(times: list[float]) -> dict[str, float]:
        return {"n": len(times), "mean_ms": statistics.fmean(times) * 1e3,
                **{f"p{q}_ms": _pct(times, q / 100) * 1e3 for q in (10, 50, 90, 99)}}

    scenarios = [{**{k: v for k, v in r.items() if k != "times"},
                  "time_per_iteration": [summary(t) for t in r["times"]]}
                 if "times" in r else r for r in result["scenarios"]]
    return {**result, "scenarios": scenarios}


def report(a: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [f"GPU: {meta.get('gpu')}  driver {meta.get('driver')}  "
             f"sharing {meta.get('sharing', 'time-slicing')}  "
             f"seconds per scenario {meta['seconds']}", "",
             "| kind | median ms/iter | p99 ms | NVML sm | NVML membw | power W |",
             "|---|---|---|---|---|---|"]
    for k, s in a["solo"].items():
        lines.append(f"| {k} | {s['median_ms']:.2f} | {s['p99_ms']:.2f} | "
                     f"{s.get('sm', float('nan')):.2f} | {s.get('membw', float('nan')):.2f} | "
                     f"{s.get('power_w', float('nan')):.0f} |")
    lines += ["", "| kind | beside | measured slowdown | p99 ratio | predicted (shipped "
              f"{a['contention_shipped']}) | predicted (fit {a['contention_fit']}) |",
              "|---|---|---|---|---|---|"]
    for x in a["pairs"]:
        lines.append(f"| {x['kind']} | {x['beside']} | {x['measured']:.2f} | "
                     f"{x['p99_ratio']:.2f} | {x['predicted']:.2f} | {x['predicted_fit']:.2f} |")
    lines += ["", f"RMS error of the prediction: shipped coefficient {a['rms_shipped']:.3f}, "
              f"fitted {a['rms_fit']:.3f}"]
    alt = busy_sum_fit(a)
    lines.append(f"alternative 1 + c * busy(neighbour): fitted c {alt['c']}, RMS {alt['rms']:.3f} "
                 f"(c = 1: {alt['rms_c1']:.3f})")
    if meta.get("read_inventory_ms"):
        lines.append(f"agent inventory read (read_inventory, one GPU): median "
                     f"{meta['read_inventory_ms']:.2f} ms over {meta['reads']} reads")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("out"))
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each scenario")
    ap.add_argument("--fake", action="store_true", help="sleeping workers, no GPU (self-check)")
    ap.add_argument("--label", default="time-slicing",
                    help="how the GPU is shared in this run, for the record (e.g. mps)")
    ap.add_argument("--report-from", type=Path, metavar="JSON",
                    help="print the report of a saved colocation.json, run nothing")
    args = ap.parse_args()
    if args.report_from:
        saved = json.loads(args.report_from.read_text())
        print(report(saved["analysis"], saved["meta"]))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    sampler = Sampler(args.fake)
    meta: dict[str, Any] = {"seconds": args.seconds, "fake": args.fake, "sharing": args.label}
    if not args.fake:
        from admission.agent.inventory import read_inventory
        inv = read_inventory(sampler.nvml)
        meta.update(gpu=inv.gpus[0].model, driver=inv.driver_version)
    # Two workers of each kind, started once (CUDA start-up is paid once, not per scenario).
    workers = {(k, i): Worker(k, args.fake) for k in KINDS for i in range(2)}
    try:
        for w in workers.values():
            w.wait_ready()
        scenarios = []
        plan = [(k,) for k in KINDS] + list(itertools.combinations_with_replacement(KINDS, 2))
        for kinds in plan:
            used = [workers[(k, i)] for i, k in enumerate(kinds)] if len(kinds) == 2 and \
                kinds[0] == kinds[1] else [workers[(k, 0)] for k in kinds]
            r = run_scenario(used, sampler, args.seconds)
            scenarios.append(r)
            print(f"{'+'.join(kinds)}: " + ", ".join(
                f"{k} {statistics.median(t) * 1e3:.2f} ms" for k, t in zip(r["kinds"], r["times"],
                                                                          strict=True))
                  + (f"  nvml {r['nvml']}" if "nvml" in r else ""), flush=True)
    finally:
        for w in workers.values():
            w.stop()
    if sampler.read_s:
        meta["read_inventory_ms"] = statistics.median(sampler.read_s) * 1e3
        meta["reads"] = len(sampler.read_s)
    raw = {"meta": meta, "scenarios": scenarios}
    analysis = analyse(raw)
    (args.out / "colocation.json").write_text(
        json.dumps(compact({**raw, "analysis": analysis}), indent=1))
    text = report(analysis, meta)
    (args.out / "colocation.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
